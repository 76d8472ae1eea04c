// DataServer: the store's TCP data plane (docs/wire.md).
//
// One thread accepts; each connection gets a thread that reads frames and
// moves payloads straight between the socket and segment memory (readv /
// sendmsg, no intermediate copy). Every offset and length is bounds-checked
// against its segment, every write against its grant; a malformed frame
// closes the connection. Connections beyond `max_connections` are refused,
// and so are those beyond `max_connections_per_source` from one source
// address: one host holding its share leaves the rest to the others.
//
// Denial of service: a connection must finish its handshake by an absolute
// deadline (`handshake_timeout_ms` from accept, however slowly its bytes
// trickle in); at most `max_unauthenticated` connections, and
// `max_unauthenticated_per_source` from one source address, may be in
// their handshake at once: a new one past either cap closes the oldest
// still-unauthenticated one (of that source, or of all), so a flood of
// half-open connections cannot keep a real client from its one round trip.
// A connection holds a thread, its socket and at most kExtraBytesMax of
// frame metadata (plus, for a READ_KEY of the SSD tier, that one block).
// Each connection closed by one of these rules is counted (Closed()) and
// reported to DataHandler::OnClosedByRule.
//
// Thread-safe. Stop() (or the destructor) closes every connection and joins.
#ifndef SHELF_TRANSPORT_DATA_SERVER_H_
#define SHELF_TRANSPORT_DATA_SERVER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "common/net.h"
#include "transport/data_tls.h"
#include "transport/session.h"
#include "transport/wire.h"

namespace shelf::transport {

// What the queue pair of an RDMA_CONNECT exposes (DataHandler::RdmaExposes).
struct RdmaExposure {
  // The segment: its address, length and rkey go to the client, which may
  // READ it through the queue pair. False: nothing is told or readable.
  bool expose = true;
  // Wall-clock Unix ms at which the exposure ends (the expiry of the read
  // grant it was made with): the queue pair is torn down then. 0: it lasts
  // as long as the connection.
  uint64_t until_unix_ms = 0;
};

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
  // OK iff `grant` allows writing [offset, offset+length) of `segment_id`:
  // the write is then admitted, and ended with EndWrite (AdmittedWrite) once
  // its bytes have landed or failed to.
  virtual absl::Status CheckWrite(const wire::Grant& grant, uint32_t segment_id, uint64_t offset,
                                  uint64_t length) = 0;
  // Ends a write CheckWrite admitted under `grant`. Default: nothing.
  virtual void EndWrite(const wire::Grant& grant) {}
  // How long (ms) bytes written under `grant`, which CheckWrite accepted,
  // may still land: until it expires by the handler's clock, after which
  // the master may give the range to another put. Default: no bound.
  virtual uint64_t WriteMsLeft(const wire::Grant& grant) { return UINT64_MAX; }
  // OK iff a READ (`range`: [offset, offset+length) of `segment_id`) or a
  // READ_KEY of `key` may be served under `credential`, the frame's read
  // credential (wire::DecodeReadCredential: grant, then key; empty when the
  // frame carries none). For a READ, `key` is empty: the credential names
  // it. Default: reads need no grant.
  virtual absl::Status CheckRead(absl::string_view credential, absl::string_view key, bool range,
                                 uint32_t segment_id, uint64_t offset, uint64_t length) {
    return absl::OkStatus();
  }
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
  // Shared memory with arenas: the descriptor of arena `segment_id` for a
  // same-host client holding `credential`, a read grant (wire::ReadGrant
  // then its key) for [offset, +length) of it. Not owned by the caller.
  virtual absl::StatusOr<int> ShmArena(absl::string_view credential, uint32_t segment_id,
                                       uint64_t offset, uint64_t length) {
    return absl::FailedPreconditionError("this store's segment has no arenas");
  }
  // Shared memory: the descriptor of the store's key board
  // (transport/shm_board.h), sealed as ShmArena's are. Not owned by the
  // caller. FAILED_PRECONDITION where the store keeps none.
  virtual absl::StatusOr<int> ShmKeyBoard() {
    return absl::FailedPreconditionError("this store keeps no key board");
  }
  // RDMA_CONNECT for segment `segment_id` with `credential` (a read grant
  // then its key, or empty): whether the new queue pair exposes the
  // segment to the client (it learns the segment's rkey) or nothing
  // (enough for pulled puts), and until when. PERMISSION_DENIED refuses
  // the connection. Default: every segment is exposed to every peer, for
  // as long as the connection lives.
  virtual absl::StatusOr<RdmaExposure> RdmaExposes(absl::string_view credential,
                                                   uint32_t segment_id) {
    return RdmaExposure{};
  }
  // Releases a range PinSsdKey returned; each pin is released once.
  virtual void Unpin(uint64_t pin) {}
  // Accounting hooks for DRAM-segment reads and writes (ReadKey accounts
  // for its own).
  virtual void OnRead(uint64_t bytes) {}
  virtual void OnWrite(uint64_t bytes) {}
  // A put copied in from a same-host client's shared memory (ShmServer);
  // by default counted as a write.
  virtual void OnShmWrite(uint64_t bytes) { OnWrite(bytes); }
  // A put pulled over rdma (RDMA_PULL); by default counted as a write.
  virtual void OnPull(uint64_t bytes) { OnWrite(bytes); }
  // A connection was refused or closed by one of the server's rules
  // (DataServer::RuleName).
  virtual void OnClosedByRule(absl::string_view rule) {}
};

// The store side of the RDMA backend (transport/rdma/rdma_transport.h),
// when the store offers RDMA: one queue pair per TCP connection that asks,
// exposing a DRAM segment for one-sided READs by that client.
class RdmaAcceptor {
 public:
  virtual ~RdmaAcceptor() = default;
  // Connects a new queue pair to the client described by `client_info`
  // (its connection info bytes) and fills `store_info` with this end's:
  // with exposure.expose, the segment's address, length and rkey; without,
  // none (the client can READ nothing, and the store can still pull its
  // puts). An exposure with an end is torn down at exposure.until_unix_ms.
  // The result holds the queue pair; releasing it tears the pair down.
  // INVALID_ARGUMENT for malformed info, NOT_FOUND for an unknown segment,
  // otherwise the device's error.
  virtual absl::StatusOr<std::shared_ptr<void>> Accept(uint32_t segment_id,
                                                       absl::string_view client_info,
                                                       const RdmaExposure& exposure,
                                                       std::string* store_info) = 0;
  // A put the store pulls (RDMA_PULL): READs `length` bytes from the
  // client's `source` into [dst, dst + length) through `queue_pair` (what
  // Accept returned for this connection). The caller has checked the
  // segment bounds and the grant; `dst` lies inside the segment Accept made
  // the queue pair for (a queue pair reaches no other segment's memory
  // where segments are isolated: the pull then fails FAILED_PRECONDITION).
  // By `deadline_ms` (MonoMs) the device no longer touches `dst`.
  // UNAVAILABLE or PERMISSION_DENIED (the client's rkey or range refused)
  // when the queue pair failed: it is then unusable until the next
  // RDMA_CONNECT.
  virtual absl::Status Pull(void* queue_pair, char* dst, uint64_t length,
                            const wire::RdmaSource& source, uint64_t deadline_ms) {
    return absl::UnimplementedError("this store does not pull puts over rdma");
  }
};

// Ends an admitted write (DataHandler::EndWrite) when it goes out of scope,
// however the write ends.
class AdmittedWrite {
 public:
  AdmittedWrite() = default;
  AdmittedWrite(DataHandler* handler, const wire::Grant& grant)
      : handler_(handler), grant_(grant) {}
  AdmittedWrite(const AdmittedWrite&) = delete;
  AdmittedWrite& operator=(const AdmittedWrite&) = delete;
  ~AdmittedWrite() {
    if (handler_ != nullptr) handler_->EndWrite(grant_);
  }

 private:
  DataHandler* handler_ = nullptr;
  wire::Grant grant_;
};
class DataServer {
 public:
  struct Options {
    HostPort listen;
    std::string secret;            // empty: open cluster
    RdmaAcceptor* rdma = nullptr;  // null: RDMA_CONNECT is refused
    int max_connections = 1024;
    // Connections from one source address (authenticated or not), at
    // most; 0: half of max_connections.
    int max_connections_per_source = 0;
    uint64_t io_timeout_ms = 30000;  // a peer stalled mid-frame this long is dropped
    // An authenticated connection that sends no frame this long is closed
    // (a client reconnects when it needs one): held connections cannot keep
    // max_connections taken for ever. 0: no limit.
    uint64_t idle_timeout_ms = 600000;
    // From accept to the end of the handshake, however the bytes trickle.
    uint64_t handshake_timeout_ms = 5000;
    // Connections still in their handshake: at most this many (and never
    // more than half of max_connections), and this many per source address.
    int max_unauthenticated = 128;
    int max_unauthenticated_per_source = 32;
    // Who the store proves it is in the handshake (SetIdentity may set it
    // later, before clients come).
    std::string node_id;
    uint64_t incarnation = 0;
    // TLS 1.3 on every connection (--data-tls); null: none.
    std::shared_ptr<wire::DataTls> tls;
    // Session tags cover payloads on every connection
    // (--session-tag-payload); otherwise only on those whose client asks.
    bool session_tag_payload = false;
  };
  // Why the server closed (or refused) a connection.
  enum class Rule : int {
    kMaxConnections = 0,  // refused at accept: max_connections reached
    kUnauthenticatedCap,  // evicted: too many connections in their handshake
    kPerSourceCap,        // evicted: too many from its source in their handshake
    kHandshakeDeadline,   // handshake not done by handshake_timeout_ms
    kBadHandshake,        // malformed or wrongly sized HELLO/AUTH exchange
    kUnauthenticated,     // wrong or missing cluster secret
    kBadTag,              // a frame's session tag did not verify
    kIdle,                // authenticated, but no frame for idle_timeout_ms
    kSourceShare,         // refused at accept: its source holds its share already
    kCount,
  };
  static const char* RuleName(Rule rule);
  static absl::StatusOr<std::unique_ptr<DataServer>> Start(const Options& options,
                                                           DataHandler* handler);
  ~DataServer();
  const HostPort& bound() const { return bound_; }
  void Stop();
  // The node id and incarnation the handshake proves from now on.
  void SetIdentity(const std::string& node_id, uint64_t incarnation);
  int connections() const { return live_.load(); }
  // Connections closed or refused by `rule` so far.
  uint64_t Closed(Rule rule) const { return closed_[static_cast<int>(rule)].load(); }

 private:
  DataServer(const Options& options, DataHandler* handler, int listen_fd, HostPort bound);
  void AcceptLoop();
  // A connection's thread: ServeConnection, then the socket is released
  // and Stop() told.
  void Serve(int fd, uint64_t handshake_deadline_ms);
  void ServeConnection(int fd, uint64_t handshake_deadline_ms);
  // The store's side of the handshake (transport/session.h); fills
  // `session` on success.
  absl::Status Handshake(int fd, uint64_t deadline_ms, wire::Session* session);
  // Counts a connection closed by `rule` and tells the handler.
  void CountClosed(Rule rule);
  // Admits a new connection from `source` to the handshake set, closing
  // the oldest one of its source or of all past the caps.
  void AdmitLocked(int fd, const std::string& source) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the oldest connection still in its handshake (of `source` only,
  // unless null), counted under `rule`.
  void EvictOldestLocked(const std::string* source, Rule rule) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets fd's source (its connection is gone).
  void ReleaseSourceLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes fd from the handshake set; false if it was evicted meanwhile.
  bool Authenticated(int fd);
  // What one connection holds beyond its socket.
  struct Connection {
    std::shared_ptr<void> rdma;  // its queue pair, after RDMA_CONNECT
    wire::Session session;       // the frame tags of both directions
  };
  // Returns false when the connection must close.
  // `head`: the header's bytes, as they came (the tag covers them).
  bool HandleFrame(int fd, const char* head, const wire::Header& h, Connection* conn);
  bool HandlePull(int fd, const wire::Header& h, const std::string& extra, Connection* conn);
  // When bytes under `grant` stop being taken (MonoMs; 0: no bound).
  uint64_t WriteDeadline(const wire::Grant& grant);

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
  // Each connection's source address, and the connections of each.
  std::map<int, std::string> source_of_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> per_source_ ABSL_GUARDED_BY(mu_);
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  // Connections in their handshake: fd -> source address and admission
  // order (oldest first to go).
  struct Pending {
    std::string source;
    uint64_t order = 0;
  };
  std::map<int, Pending> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int> evicted_ ABSL_GUARDED_BY(mu_);  // shut down, thread not yet done
  std::atomic<uint64_t> closed_[static_cast<int>(Rule::kCount)] = {};
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_DATA_SERVER_H_
