// The RDMA backend of transport::Engine, and the store side of its
// connections.
//
// A client's RdmaTransport reaches a store that offers rdma (its route is
// the store's data port). Per store segment it keeps one control connection
// (the data plane's authenticated TCP connection) and one RC queue pair: the
// two ends swap connection info with an RDMA_CONNECT frame on that
// connection (docs/wire.md), and the store's RdmaStoreAcceptor makes a queue
// pair exposing the segment for as long as the TCP connection lives. Reads
// are one-sided RDMA READs into registered memory (host memory, or GPU
// memory through GPUDirect): the store's CPU takes no part.
//
// Writes are not one-sided. A store exposes its segment for READ only, so
// that no client can write outside a range the master granted to its put;
// an RDMA write op fails with FAILED_PRECONDITION and callers write over tcp
// or shm, under the grant (docs/rdma.md has the reasoning and the way to
// one-sided writes with per-put memory windows).
//
// A queue pair in error is torn down; the next batch makes a new one over
// the same control connection. A control connection that fails drops the
// store's state; the next batch dials again.
//
//   IbVerbs verbs;
//   RdmaTransport::Options options;
//   options.secret = secret;
//   auto rdma = *RdmaTransport::Open(&verbs, options);
//   rdma->Execute(read_ops, MonoMs() + 100);
//
// Thread-safe. Batches run in the submitting thread.
#ifndef SHELF_TRANSPORT_RDMA_RDMA_TRANSPORT_H_
#define SHELF_TRANSPORT_RDMA_RDMA_TRANSPORT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "transport/data_server.h"
#include "transport/engine.h"
#include "transport/rdma/rdma_engine.h"
#include "transport/tcp_client.h"

namespace shelf::rdma {

// The store side: answers RDMA_CONNECT for the segments it was given.
class RdmaStoreAcceptor final : public RdmaAcceptor {
 public:
  // REQUIRES: `engine` outlives the acceptor and every queue pair it made.
  explicit RdmaStoreAcceptor(RdmaEngine* engine) : engine_(engine) {}
  // Deregisters the segments. REQUIRES: every queue pair released (the data
  // server stopped).
  ~RdmaStoreAcceptor() override;

  // Registers [base, base + size) for remote READ as segment `id`.
  absl::Status AddSegment(uint32_t id, void* base, uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::shared_ptr<void>> Accept(uint32_t segment_id, absl::string_view client_info,
                                               std::string* store_info) override
      ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t accepted() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  RdmaEngine* const engine_;
  mutable absl::Mutex mu_;
  std::map<uint32_t, MemoryRegion> segments_ ABSL_GUARDED_BY(mu_);
  uint64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
};

class RdmaTransport final : public transport::Engine {
 public:
  struct Options {
    std::string secret;  // cluster secret, for the control connection
    uint64_t connect_timeout_ms = 2000;
    RdmaEngine::Options device;
    RdmaEndpoint::Options endpoint;  // `expose` and `reconnect` are set here
  };
  struct Stats {
    uint64_t connections = 0;  // control connections + queue pairs made
    uint64_t dropped = 0;      // dropped after a failure
    uint64_t ops = 0;          // READs that completed OK
  };

  // Opens the device (RdmaEngine::Open's errors).
  static absl::StatusOr<std::unique_ptr<RdmaTransport>> Open(VerbsApi* verbs, Options options);
  // Tears down every queue pair, then closes the device.
  ~RdmaTransport() override;

  transport::Kind kind() const override { return transport::Kind::kRdma; }
  bool Reaches(const transport::Peer& peer) const override {
    return !peer.route(transport::Kind::kRdma).empty();
  }
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 protected:
  bool MovesDeviceMemory() const override { return true; }
  absl::Status OnRegister(transport::MemoryHandle handle, const Region& region) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnUnregister(transport::MemoryHandle handle, const Region& region) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void Start(std::shared_ptr<transport::Batch> batch, std::vector<Work> work,
             uint64_t deadline_ms) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One store segment's control connection and queue pair.
  struct Connection {
    ~Connection();
    int fd = -1;
    std::unique_ptr<RdmaEndpoint> endpoint;  // reset before fd closes
  };
  // (route, segment, incarnation).
  using ConnectionKey = std::tuple<std::string, uint32_t, uint64_t>;

  RdmaTransport(Options options, std::unique_ptr<RdmaEngine> engine);
  // The connection for `key`, made (outside the lock) if there is none.
  absl::StatusOr<std::shared_ptr<Connection>> Get(const ConnectionKey& key, uint64_t deadline_ms)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<Connection>> Dial(const ConnectionKey& key, uint64_t deadline_ms);
  void Drop(const ConnectionKey& key, const std::shared_ptr<Connection>& conn)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  TcpDataClient control_;
  std::unique_ptr<RdmaEngine> engine_;  // destroyed last

  mutable absl::Mutex mu_;
  absl::flat_hash_map<transport::MemoryHandle, MemoryRegion> regions_ ABSL_GUARDED_BY(mu_);
  std::map<ConnectionKey, std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::rdma

#endif  // SHELF_TRANSPORT_RDMA_RDMA_TRANSPORT_H_
