// DataServer: the store's TCP data plane (docs/wire.md).
//
// One thread accepts; each connection gets a thread that reads frames and
// moves payloads straight between the socket and segment memory (readv /
// sendmsg, no intermediate copy). Every offset and length is bounds-checked
// against its segment, every write against its grant; a malformed frame
// closes the connection. Connections beyond `max_connections` are refused.
//
// Thread-safe. Stop() (or the destructor) closes every connection and joins.
#ifndef SHELF_TRANSPORT_DATA_SERVER_H_
#define SHELF_TRANSPORT_DATA_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "common/net.h"
#include "transport/wire.h"

namespace shelf {

// What the server serves. Implemented by the store.
class DataHandler {
 public:
  virtual ~DataHandler() = default;
  struct Region {
    char* base = nullptr;
    uint64_t size = 0;
  };
  // The memory of DRAM segment `id`; NOT_FOUND if there is none.
  virtual absl::StatusOr<Region> Segment(uint32_t id) = 0;
  // OK iff `grant` allows writing [offset, offset+length) of `segment_id`.
  virtual absl::Status CheckWrite(const wire::Grant& grant, uint32_t segment_id, uint64_t offset,
                                  uint64_t length) = 0;
  // Reads a block of the SSD tier. NOT_FOUND if absent, DATA_LOSS if corrupt.
  virtual absl::Status ReadKey(absl::string_view key, std::string* out) = 0;
  // Where the DRAM segment holds the committed block `key`, as the store's
  // records say (they follow the master's notices, which may lag a commit
  // or a remove by up to a heartbeat). NOT_FOUND without a record;
  // FAILED_PRECONDITION when `generation` and the record's are both
  // non-zero and differ (the key was replaced). The bytes are not checked:
  // the reader verifies them against its checksum.
  virtual absl::StatusOr<Region> DramKey(absl::string_view key, uint64_t generation) {
    return absl::NotFoundError("no DRAM records");
  }
  // ReadKey into `buf` (4 KiB aligned, `capacity` bytes), the block's size
  // in *size: the tier can read straight into it, with no copy.
  // OUT_OF_RANGE when the block does not fit; UNIMPLEMENTED where the
  // handler has no such read (callers then use ReadKey).
  virtual absl::Status ReadKeyInto(absl::string_view key, char* buf, uint64_t capacity,
                                   uint64_t* size) {
    return absl::UnimplementedError("no ReadKeyInto");
  }
  // Same-host reads of the SSD tier (transport/shm_write.h): reads block
  // `key` into a range of the shared segment that nothing else uses and
  // that stays as it is until Unpin(pin), so a client can copy it from its
  // read-only mapping. `size`: the size the reader expects (0: any).
  // NOT_FOUND if the tier lacks the block, DATA_LOSS if it is corrupt,
  // RESOURCE_EXHAUSTED when no range is free, FAILED_PRECONDITION when the
  // store offers no such reads.
  struct Pinned {
    uint32_t segment_id = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
    uint64_t pin = 0;
  };
  virtual absl::StatusOr<Pinned> PinSsdKey(absl::string_view key, uint64_t size) {
    return absl::FailedPreconditionError("this store offers no shared-memory SSD reads");
  }
  // Releases a range PinSsdKey returned; each pin is released once.
  virtual void Unpin(uint64_t pin) {}
  // Accounting hooks for DRAM-segment reads and writes (ReadKey accounts
  // for its own).
  virtual void OnRead(uint64_t bytes) {}
  virtual void OnWrite(uint64_t bytes) {}
};

// The store side of the RDMA backend (transport/rdma/rdma_transport.h),
// when the store offers RDMA: one queue pair per TCP connection that asks,
// exposing a DRAM segment for one-sided READs by that client.
class RdmaAcceptor {
 public:
  virtual ~RdmaAcceptor() = default;
  // Connects a new queue pair to the client described by `client_info`
  // (its connection info bytes) and fills `store_info` with this end's.
  // The result holds the queue pair; releasing it tears the pair down.
  // INVALID_ARGUMENT for malformed info, NOT_FOUND for an unknown segment,
  // otherwise the device's error.
  virtual absl::StatusOr<std::shared_ptr<void>> Accept(uint32_t segment_id,
                                                       absl::string_view client_info,
                                                       std::string* store_info) = 0;
};

class DataServer {
 public:
  struct Options {
    HostPort listen;
    std::string secret;            // empty: open cluster
    RdmaAcceptor* rdma = nullptr;  // null: RDMA_CONNECT is refused
    int max_connections = 1024;
    uint64_t io_timeout_ms = 30000;  // a peer stalled mid-frame this long is dropped
  };
  static absl::StatusOr<std::unique_ptr<DataServer>> Start(const Options& options,
                                                           DataHandler* handler);
  ~DataServer();
  const HostPort& bound() const { return bound_; }
  void Stop();
  int connections() const { return live_.load(); }

 private:
  DataServer(const Options& options, DataHandler* handler, int listen_fd, HostPort bound);
  void AcceptLoop();
  // A connection's thread: ServeConnection, then the socket is released
  // and Stop() told.
  void Serve(int fd);
  void ServeConnection(int fd);
  absl::Status Handshake(int fd);
  // What one connection holds beyond its socket.
  struct Connection {
    std::shared_ptr<void> rdma;  // its queue pair, after RDMA_CONNECT
  };
  // Returns false when the connection must close.
  bool HandleFrame(int fd, const wire::Header& h, Connection* conn);

  const Options options_;
  DataHandler* const handler_;
  const int listen_fd_;
  const HostPort bound_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> live_{0};
  Mutex mu_;
  CondVar cv_;  // signalled when fds_ shrinks
  std::set<int> fds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf

#endif  // SHELF_TRANSPORT_DATA_SERVER_H_
