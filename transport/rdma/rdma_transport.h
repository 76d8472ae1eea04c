// The RDMA backend of transport::Engine, and the store side of its
// connections.
//
// A client's RdmaTransport reaches a store that offers rdma (its route is
// the store's data port). Per store segment it keeps one control connection
// (the data plane's authenticated TCP connection) and one RC queue pair: the
// two ends swap connection info with an RDMA_CONNECT frame on that
// connection (docs/wire.md), and the store's RdmaStoreAcceptor makes a queue
// pair exposing the segment for as long as the TCP connection lives, or,
// where the exposure came with a read grant (tenant arenas), until that
// grant expires: the client makes its connection again, with the newest
// grant it holds, before then. Reads are one-sided RDMA READs into
// registered memory (host memory, or GPU memory through GPUDirect): the
// store's CPU takes no part.
//
// Writes are not one-sided. A store exposes its segment for READ only, so
// that no client can write outside a range the master granted to its put.
// With Options::store_pull_writes the store pulls instead: the client sends
// the put's grant and its source (address, rkey) on the control connection
// (RDMA_PULL), the store checks the grant as it checks a TCP WRITE and
// RDMA READs the bytes into the granted range. Without it an RDMA write op
// fails with FAILED_PRECONDITION and callers write over tcp or shm
// (docs/rdma.md has the reasoning).
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
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "transport/data_server.h"
#include "transport/engine.h"
#include "transport/rdma/rdma_engine.h"
#include "transport/tcp_client.h"

namespace shelf::transport::rdma {

// The store side: answers RDMA_CONNECT for the segments it was given.
//
// A segment added with Domain::kOwn (a tenant arena) is registered in a
// protection domain of its own, and every queue pair made for it is created
// there: through it the device reaches that segment alone, whatever rkey a
// client presents. A queue pair exposed until a time (RdmaExposure::
// until_unix_ms: the read grant's expiry) is torn down then by the
// acceptor's expiry thread; the client's reads through it fail from then on.
class RdmaStoreAcceptor final : public RdmaAcceptor {
 public:
  struct Stats {
    uint64_t accepted = 0;     // queue pairs made
    uint64_t refused = 0;      // RDMA_CONNECTs refused at queue_pairs_max
    uint64_t live = 0;         // queue pairs alive now (an expired one is not)
    uint64_t unexposed = 0;    // queue pairs made exposing nothing (no read grant)
    uint64_t expired = 0;      // exposed queue pairs torn down as their read grant expired
    uint64_t pulls = 0;        // puts pulled (RDMA_PULL) that completed OK
    uint64_t pull_bytes = 0;   // bytes they moved
    uint64_t pull_errors = 0;  // pulls the device failed
  };

  // The protection domain AddSegment registers a segment in.
  enum class Domain {
    kShared,  // the engine's default one, with every other kShared segment
    kOwn,     // one of its own: only the queue pairs made for it reach it
  };

  // At most `queue_pairs_max` queue pairs at once (one per client
  // connection that asked); beyond it RDMA_CONNECT is RESOURCE_EXHAUSTED
  // and that client reads over tcp. `clock`: what exposure ends are
  // measured and waited for in (its UnixMs). REQUIRES: `engine` and `clock`
  // outlive the acceptor, and `engine` every queue pair it made.
  explicit RdmaStoreAcceptor(RdmaEngine* engine, uint64_t queue_pairs_max = 1024,
                             Clock* clock = Clock::Real())
      : engine_(engine), queue_pairs_max_(queue_pairs_max), clock_(clock) {}
  // Stops the expiry thread and deregisters the segments. REQUIRES: every
  // queue pair released (the data server stopped).
  ~RdmaStoreAcceptor() override;

  // Registers [base, base + size) for remote READ as segment `id`, in the
  // default protection domain or in a new one. The engine's errors
  // (RESOURCE_EXHAUSTED past its domains_max); ALREADY_EXISTS for a known id.
  absl::Status AddSegment(uint32_t id, void* base, uint64_t size, Domain domain = Domain::kShared)
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::shared_ptr<void>> Accept(uint32_t segment_id, absl::string_view client_info,
                                               const RdmaExposure& exposure,
                                               std::string* store_info) override
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Pull(void* queue_pair, char* dst, uint64_t length, const wire::RdmaSource& source,
                    uint64_t deadline_ms) override ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t accepted() const ABSL_LOCKS_EXCLUDED(mu_);
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A queue pair some connection holds.
  struct QueuePair {
    RdmaEndpoint* endpoint = nullptr;  // owned by the connection's shared_ptr
    uint64_t until_unix_ms = 0;        // RdmaExposure::until_unix_ms; 0: no end
    bool expired = false;              // torn down at until_unix_ms
  };

  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> MakeQueuePair(const RdmaEndpoint::Options& options,
                                                              absl::string_view client_info,
                                                              std::string* store_info);
  // The expiry thread: tears exposures down as they end, until stopping_.
  void ExpiryLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Tears down every queue pair whose exposure ended by `now_unix_ms`;
  // returns the earliest end still ahead, 0 when there is none.
  uint64_t ExpireLocked(uint64_t now_unix_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RdmaEngine* const engine_;
  const uint64_t queue_pairs_max_;
  Clock* const clock_;
  mutable Mutex mu_;
  std::map<uint32_t, MemoryRegion> segments_ ABSL_GUARDED_BY(mu_);
  // Lock order: mu_, then an endpoint's lock (the expiry thread tears
  // endpoints down under mu_; a connection's deleter takes its queue pair
  // out of here before destroying it).
  std::map<uint64_t, QueuePair> queue_pairs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_queue_pair_ ABSL_GUARDED_BY(mu_) = 1;
  // Bumped by each exposure with an end: the expiry thread plans its next
  // wake-up again.
  uint64_t timed_exposures_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar replan_cv_;  // timed_exposures_ or stopping_ changed
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Started by the first exposure with an end (a store of one segment, or
  // without read grants, never has one).
  std::thread expiry_thread_ ABSL_GUARDED_BY(mu_);
};

class RdmaTransport final : public transport::Engine {
 public:
  struct Options {
    std::string secret;  // cluster secret, for the control connection
    uint64_t connect_timeout_ms = 2000;
    RdmaEngine::Options device;
    RdmaEndpoint::Options endpoint;  // `expose` and `reconnect` are set here
    // Writes: the store pulls each put's bytes (RDMA_PULL) after checking
    // its grant. Registered memory is then registered for remote READ and
    // the queue pairs accept READs from the stores they connect to
    // (docs/security.md says what that exposes). Off: writes fail with
    // FAILED_PRECONDITION and go over tcp or shm.
    bool store_pull_writes = false;
    // Stores (segment, incarnation) with a control connection and queue
    // pair at once; past it the least recently used idle one is closed, and
    // when none is idle the op fails RESOURCE_EXHAUSTED (libshelf then moves
    // it over tcp).
    size_t connections_max = 256;
    // GPU regions registered at once (each pins GPU memory through the
    // device); past it RegisterMemory(kGpu) is RESOURCE_EXHAUSTED.
    size_t gpu_regions_max = 64;
    // A connection whose store exposes the segment only until the read
    // grant it presented expires is made again, with a batch's later
    // grant, once less than this remains: its reads never race the
    // store's teardown. Covers a batch's time on the wire and the skew
    // between this host's clock and the store's.
    uint64_t exposure_renew_ms = 2000;
  };
  struct Stats {
    uint64_t connections = 0;  // control connections + queue pairs made
    uint64_t dropped = 0;      // dropped after a failure
    uint64_t evicted = 0;      // closed at connections_max
    uint64_t renewed = 0;      // made again as their read grant was about to expire
    uint64_t ops = 0;          // READs that completed OK
    uint64_t pulls = 0;        // writes the store pulled OK
    uint64_t pull_bytes = 0;
    uint64_t pull_errors = 0;  // pulls refused or failed
    uint64_t live_connections = 0;
    uint64_t live_regions = 0;      // registered handles
    uint64_t live_gpu_regions = 0;  // of which GPU memory
    // The device's registration cache: Register calls answered by a live
    // region, calls that registered a new one, and the regions alive.
    uint64_t registration_hits = 0;
    uint64_t registration_misses = 0;
    uint64_t registered_regions = 0;
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
    // Whether the store's queue pair exposes the segment to this end.
    bool Exposed() const;
    int fd = -1;
    std::unique_ptr<RdmaEndpoint> endpoint;  // reset before fd closes
    // The read credential RDMA_CONNECT presents (the latest read's; empty
    // for a connection made by a put): a store of tenant arenas exposes
    // the arena, and tells its rkey, only against one, and until its grant
    // expires. Guarded by control_mu.
    std::string credential;
    // The expiry of the grant the store's queue pair was made with (0:
    // none presented). Guarded by control_mu.
    uint64_t grant_expires_unix_ms = 0;
    // Serializes the control connection's frames (pulls, and the
    // endpoint's reconnect, which runs under the endpoint's lock: take
    // this one inside it, never the other way round).
    Mutex control_mu;
    uint64_t last_used = 0;  // RdmaTransport::mu_'s clock, for eviction
  };
  // (route, segment, incarnation).
  using ConnectionKey = std::tuple<std::string, uint32_t, uint64_t>;

  RdmaTransport(Options options, std::unique_ptr<RdmaEngine> engine);
  // The connection for `key`, made (outside the lock) if there is none.
  // `credential`: what a new connection presents (Connection::credential).
  absl::StatusOr<std::shared_ptr<Connection>> Get(const ConnectionKey& key,
                                                  const std::string& credential,
                                                  uint64_t deadline_ms) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<Connection>> Dial(const ConnectionKey& key,
                                                   const std::string& credential,
                                                   uint64_t deadline_ms);
  void Drop(const ConnectionKey& key, const std::shared_ptr<Connection>& conn)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `conn` must be made again before a batch uses it: its store's
  // exposure ends within exposure_renew_ms, and the batch is a write (it
  // presents no grant) or has a grant that expires later
  // (`grant_expires_unix_ms`).
  bool ExposureEnding(Connection* conn, bool write, uint64_t grant_expires_unix_ms) const;
  // The reads of one store segment, as one batch of one-sided READs;
  // `credential` is the batch's (Start chose it).
  void Read(const ConnectionKey& key, const std::shared_ptr<Connection>& conn,
            const std::string& credential, const std::vector<const Work*>& items,
            transport::Batch* batch, uint64_t deadline_ms) ABSL_LOCKS_EXCLUDED(mu_);
  // The writes of one store segment, each pulled by the store.
  void Pull(const ConnectionKey& key, const std::shared_ptr<Connection>& conn,
            const std::vector<const Work*>& items, transport::Batch* batch, uint64_t deadline_ms)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  TcpDataClient control_;
  std::unique_ptr<RdmaEngine> engine_;  // destroyed last

  mutable Mutex mu_;
  absl::flat_hash_map<transport::MemoryHandle, MemoryRegion> regions_ ABSL_GUARDED_BY(mu_);
  std::map<ConnectionKey, std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  uint64_t use_clock_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_RDMA_TRANSPORT_H_
