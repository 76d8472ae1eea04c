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
  struct Stats {
    uint64_t accepted = 0;     // queue pairs made
    uint64_t refused = 0;      // RDMA_CONNECTs refused at queue_pairs_max
    uint64_t live = 0;         // queue pairs alive now
    uint64_t unexposed = 0;    // queue pairs made exposing nothing (no read grant)
    uint64_t pulls = 0;        // puts pulled (RDMA_PULL) that completed OK
    uint64_t pull_bytes = 0;   // bytes they moved
    uint64_t pull_errors = 0;  // pulls the device failed
  };

  // At most `queue_pairs_max` queue pairs at once (one per client
  // connection that asked); beyond it RDMA_CONNECT is RESOURCE_EXHAUSTED
  // and that client reads over tcp. REQUIRES: `engine` outlives the
  // acceptor and every queue pair it made.
  explicit RdmaStoreAcceptor(RdmaEngine* engine, uint64_t queue_pairs_max = 1024)
      : engine_(engine), queue_pairs_max_(queue_pairs_max) {}
  // Deregisters the segments. REQUIRES: every queue pair released (the data
  // server stopped).
  ~RdmaStoreAcceptor() override;

  // Registers [base, base + size) for remote READ as segment `id`.
  absl::Status AddSegment(uint32_t id, void* base, uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::shared_ptr<void>> Accept(uint32_t segment_id, absl::string_view client_info,
                                               bool expose, std::string* store_info) override
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Pull(void* queue_pair, char* dst, uint64_t length, const wire::RdmaSource& source,
                    uint64_t deadline_ms) override ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t accepted() const ABSL_LOCKS_EXCLUDED(mu_);
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::StatusOr<std::shared_ptr<void>> MakeQueuePair(const RdmaEndpoint::Options& options,
                                                      absl::string_view client_info,
                                                      std::string* store_info);

  RdmaEngine* const engine_;
  const uint64_t queue_pairs_max_;
  mutable absl::Mutex mu_;
  std::map<uint32_t, MemoryRegion> segments_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
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
  };
  struct Stats {
    uint64_t connections = 0;  // control connections + queue pairs made
    uint64_t dropped = 0;      // dropped after a failure
    uint64_t evicted = 0;      // closed at connections_max
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
    // the arena, and tells its rkey, only against one. Guarded by
    // control_mu.
    std::string credential;
    // Serializes the control connection's frames (pulls, and the
    // endpoint's reconnect, which runs under the endpoint's lock: take
    // this one inside it, never the other way round).
    absl::Mutex control_mu;
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
  // The reads of one store segment, as one batch of one-sided READs.
  void Read(const ConnectionKey& key, const std::shared_ptr<Connection>& conn,
            const std::vector<const Work*>& items, transport::Batch* batch, uint64_t deadline_ms)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The writes of one store segment, each pulled by the store.
  void Pull(const ConnectionKey& key, const std::shared_ptr<Connection>& conn,
            const std::vector<const Work*>& items, transport::Batch* batch, uint64_t deadline_ms)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  TcpDataClient control_;
  std::unique_ptr<RdmaEngine> engine_;  // destroyed last

  mutable absl::Mutex mu_;
  absl::flat_hash_map<transport::MemoryHandle, MemoryRegion> regions_ ABSL_GUARDED_BY(mu_);
  std::map<ConnectionKey, std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  uint64_t use_clock_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::rdma

#endif  // SHELF_TRANSPORT_RDMA_RDMA_TRANSPORT_H_
