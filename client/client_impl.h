// ClientImpl: the implementation behind shelf::Client (client.h). Internal.
//
// Split by concern, one file each:
//   client.cc          Open, options, deadlines, master calls, metadata calls
//   client_write.cc    puts: placement, replica writes, commit/abort
//   client_read.cc     gets: lookup, replica reads, checksums, failover
//   client_buffers.cc  registered buffers, zero-copy forms, GPU staging
//   client_async.cc    BatchFuture and the *Async calls
#ifndef SHELF_CLIENT_CLIENT_IMPL_H_
#define SHELF_CLIENT_CLIENT_IMPL_H_

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "client/absl_status.h"
#include "client/batch_state.h"
#include "client/buffer_registry.h"
#include "client/call_coalescer.h"
#include "client/call_streams.h"
#include "client/gpu_staging.h"
#include "client/location_cache.h"
#include "common/mutex.h"
#include "common/prom.h"
#include "common/thread_pool.h"
#include "coord/master_locator.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "transport/engine.h"
#include "transport/shm_engine.h"
#include "transport/tcp_engine.h"

namespace shelf {

// INVALID_ARGUMENT for an empty key or one over kKeyBytesMax bytes.
absl::Status ValidateKey(const std::string& key);
// INVALID_ARGUMENT for a batch of 0 or over kBatchItemsMax `what`.
absl::Status ValidateBatchSize(size_t n, const char* what);
// PutOptions.block: its limits; batch puts refuse a non-empty one.
absl::Status CheckBlockInfo(const BlockEventInfo& b);
extern const char* const kBatchBlockInfoError;
// The key the stores hold a block under: in a tenant namespace the master
// keeps (and stores hold) another form than the one this client names.
const std::string& StoreKey(const v1::ObjectLocation& loc);

class ClientImpl final : public Client {
 public:
  // REQUIRES: options checked by Client::Open.
  // `token`: what calls to the master carry (client.cc, MasterToken).
  ClientImpl(const ClientOptions& options, std::string token);
  // Close(), then waits for every asynchronous call.
  ~ClientImpl() override;
  absl::Status Connect();

  Status Put(const std::string& key, const void* data, size_t size,
             const PutOptions& options) override;
  Status Get(const std::string& key, std::string* out, Deadline deadline) override;
  Status GetInto(const std::string& key, void* buffer, size_t capacity, size_t* size,
                 Deadline deadline) override;
  Status BatchPut(const std::vector<PutItem>& items, std::vector<Status>* statuses,
                  const PutOptions& options) override;
  Status BatchGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                  std::vector<Status>* statuses, Deadline deadline) override;
  Status BatchGetAtMost(const std::vector<std::string>& keys, uint64_t bytes_max,
                        std::vector<std::string>* values, std::vector<Status>* statuses,
                        Deadline deadline) override;
  Status Exists(const std::vector<std::string>& keys, std::vector<bool>* present,
                Deadline deadline) override;
  Status Remove(const std::string& key, Deadline deadline, bool force) override;
  Status BatchRemove(const std::vector<std::string>& keys, std::vector<Status>* statuses,
                     Deadline deadline, bool force) override;
  Status ListKeys(const std::string& cursor, const std::string& pattern, size_t count,
                  std::vector<std::string>* keys, std::string* next_cursor, bool regex,
                  Deadline deadline) override;
  Status RemoveMatching(const std::string& pattern, uint64_t* removed, bool regex, bool force,
                        Deadline deadline) override;
  Status MatchPrefix(const std::vector<std::string>& keys, size_t* matched,
                     Deadline deadline) override;
  Status Locate(const std::vector<std::string>& keys, std::vector<NodeRun>* nodes,
                size_t* cluster_blocks, Deadline deadline) override;

  Status RegisterBuffer(void* base, size_t size, BufferHandle* handle, bool gpu) override;
  Status UnregisterBuffer(BufferHandle handle) override;
  Status PutFrom(const std::string& key, BufferHandle buffer, size_t offset, size_t size,
                 const PutOptions& options) override;
  Status GetInto(const std::string& key, BufferHandle buffer, size_t offset, size_t capacity,
                 size_t* size, Deadline deadline, const GpuSync& gpu) override;
  Status BatchGetInto(const std::vector<GetIntoItem>& items, std::vector<Status>* statuses,
                      std::vector<size_t>* sizes, Deadline deadline, const GpuSync& gpu) override;
  Status BatchPutFrom(const std::vector<PutFromItem>& items, std::vector<Status>* statuses,
                      const PutOptions& options) override;
  Status BatchGetIntoPieces(const std::vector<PiecesItem>& items, std::vector<Status>* statuses,
                            std::vector<size_t>* sizes, Deadline deadline) override;
  Status BatchGetViewsCached(const std::vector<std::string>& keys, const ViewsFn& use,
                             uint64_t bytes_max, uint64_t block_bytes_max) override;
  Status BatchGetViews(const std::vector<std::string>& keys, const ViewsFn& use, Deadline deadline,
                       uint64_t bytes_max) override;

  BatchFuture BatchGetAsync(std::vector<std::string> keys, Deadline deadline) override;
  BatchFuture BatchPutAsync(std::vector<PutItem> items, const PutOptions& options) override;
  BatchFuture BatchGetIntoAsync(std::vector<GetIntoItem> items, Deadline deadline,
                                const GpuSync& gpu) override;
  BatchFuture BatchPutFromAsync(std::vector<PutFromItem> items, const PutOptions& options) override;

  ClientStats stats() const override;
  std::string MetricsText() const override;
  void Close() override;

 private:
  // One block of a put, in host memory.
  struct HostPut {
    const std::string* key;
    const char* data;
    size_t size;
    const BlockEventInfo* block = nullptr;  // a batch item's; null: the options'
  };
  // Where a read's bytes go: host memory, or device memory through a bounce
  // buffer, ordered with the caller's CUDA work by `sync`.
  struct ReadTarget {
    char* data = nullptr;
    size_t capacity = 0;
    bool gpu = false;
    int device = 0;
    GpuSync sync;
    bool rdma_registered = false;  // the RDMA device holds the buffer (GPUDirect)
  };
  using PinOr = absl::StatusOr<BufferRegistry::Pin>;

  // ---- client.cc
  // The call's absolute deadline (MonoMs), after checking that the client
  // is open and the deadline has not passed.
  absl::Status Begin(const Deadline& deadline, uint64_t* deadline_ms) const;
  static Deadline PutDeadline(const PutOptions& options);
  // The deadline as an absolute time, fixed now (for calls that run later).
  Deadline Absolute(const Deadline& deadline) const;
  absl::Status CheckOpen() const;
  // With locator_: the leader's address and its stub (made on first use).
  absl::Status LeaderStub(std::string* address, std::shared_ptr<v1::MasterService::Stub>* stub)
      ABSL_LOCKS_EXCLUDED(leader_stubs_mu_);
  // Runs one master RPC against the current master, moving on to the next
  // configured master (or, with etcd, the next leader) when one is
  // unreachable.
  template <typename Req, typename Resp>
  absl::Status CallMaster(grpc::Status (v1::MasterService::Stub::*method)(grpc::ClientContext*,
                                                                          const Req&, Resp*),
                          const Req& req, Resp* resp, uint64_t deadline_ms);
  // One attempt of CallMaster's against the master at `address`: on a
  // call stream for the hot calls (call_streams_), unary otherwise or
  // when no stream takes it.
  template <typename Req, typename Resp>
  absl::Status CallMasterOnce(grpc::Status (v1::MasterService::Stub::*method)(grpc::ClientContext*,
                                                                              const Req&, Resp*),
                              const std::string& address, v1::MasterService::Stub* stub,
                              const Req& req, Resp* resp, uint64_t deadline_ms);
  // Runs fn(i), i in [0, n), in parallel on the transfer threads.
  void Parallel(size_t n, const std::function<void(size_t)>& fn);

  // ---- client_write.cc
  v1::PutStartRequest MakePutStart(const HostPut& item, const PutOptions& options) const;
  // Writes one replica's range.
  absl::Status WriteReplica(const v1::Replica& replica, const v1::WriteGrant& grant,
                            const char* data, uint64_t size, uint64_t deadline_ms);
  // Writes the bytes of a started put to all its replicas.
  absl::Status WriteReplicas(const v1::PutStartResponse& started, const char* data, uint64_t size,
                             uint64_t deadline_ms);
  // Commits puts whose bytes are written, of keys `keys` (parallel); one
  // status per id. A put the master reclaimed meanwhile answers ABORTED
  // (retryable). The location cache then holds each committed block's
  // location, as the commit answered it, and nothing older of the others.
  absl::Status Commit(const std::vector<uint64_t>& put_ids,
                      const std::vector<const std::string*>& keys, uint64_t deadline_ms,
                      std::vector<absl::Status>* statuses);
  void Abort(const std::vector<uint64_t>& put_ids);
  // One put from PutStart (`req`, MakePutStart's) to commit, waiting for
  // another writer's put of the same key; PutWithRetry retries once when the
  // put was reclaimed.
  absl::Status PutOnce(const HostPut& item, const v1::PutStartRequest& req, uint64_t deadline_ms);
  // A single put's PutStart and its commit; several threads' at once go to
  // the master as one BatchPutStart (put_starts_) and one PutCommit
  // (commits_). A call alone goes as it is.
  absl::Status CoalescedPutStart(const v1::PutStartRequest& req, v1::PutStartResponse* resp,
                                 uint64_t deadline_ms);
  absl::Status CoalescedCommit(uint64_t put_id, const std::string& key, uint64_t deadline_ms,
                               absl::Status* committed);
  absl::Status PutWithRetry(const HostPut& item, const v1::PutStartRequest& req,
                            uint64_t deadline_ms);
  // A single put, whole: the single puts other threads make while one is
  // out go together in the next, as one batch (whole_puts_), which costs
  // the master two calls for all of them and the stores one request each
  // per batch. A put alone goes as PutWithRetry.
  absl::Status CoalescedPut(const HostPut& item, const PutOptions& options, uint64_t deadline_ms);
  // Puts host blocks with one BatchPutStart, parallel writes and one commit.
  // The return is the batch's status; (*statuses)[i] each block's. A batch
  // of one block is a single put (CoalescedPut).
  absl::Status PutHostBlocks(const std::vector<HostPut>& items, const PutOptions& options,
                             uint64_t deadline_ms, std::vector<absl::Status>* statuses);
  // PutHostBlocks for a batch without repeated keys.
  absl::Status PutUniqueBlocks(const std::vector<HostPut>& items, const PutOptions& options,
                               uint64_t deadline_ms, std::vector<absl::Status>* statuses);
  // PutUniqueBlocks of blocks whose PutStart requests are built:
  // `requests[i]` is items[i]'s. A block whose key another writer is
  // putting (a repeated key included: the second waits for the first's
  // commit), or whose put the master reclaimed before its commit, is put
  // again on its own once the rest are committed; with `again`, it is not:
  // its index goes to *again, for the caller to put, as does a block the
  // master refused as UNAVAILABLE (a leader recovering).
  absl::Status PutStartedBlocks(const std::vector<HostPut>& items,
                                const std::vector<const v1::PutStartRequest*>& requests,
                                uint64_t deadline_ms, std::vector<absl::Status>* statuses,
                                std::vector<size_t>* again);

  // ---- client_read.cc
  // Counts a block read: bytes loaded, by tier and by transport.
  void CountLoaded(uint64_t bytes, v1::Tier tier, const char* transport);
  // Reads `loc` across `pieces` (BatchGetIntoPieces): a fresh location's
  // DRAM replica on this host straight out of the store's mapped segment,
  // checked as ReadObject checks it; anything else through ReadObject into
  // `scratch`, then copied out.
  absl::Status ReadToPieces(const v1::ObjectLocation& loc,
                            const std::vector<std::pair<void*, size_t>>& pieces,
                            std::string* scratch, uint64_t deadline_ms, bool cached);
  // Transport negotiation: what the store advertises (an empty list, from a
  // store older than the list, means TCP, plus shared memory when it names
  // a socket) and what this client allows. Best shared: shm, then tcp.
  static bool Offers(const v1::StoreEndpoint& store, v1::TransportKind kind);
  // The store as the transport engines see it: a route for each transport
  // it offers and this client allows.
  transport::Peer PeerOf(const v1::StoreEndpoint& store) const;
  // Moves [replica.offset(), +size) of the replica's segment to or from
  // `local` over the best transport both ends share (shm, then rdma for
  // reads, then tcp; a failed shm or rdma op falls back to the next).
  // `grant`: writes only. Reads send the replica's read grant for `key`.
  // `*transport` names the transport of the last attempt.
  absl::Status MoveReplica(transport::OpKind kind, const v1::Replica& replica,
                           const v1::WriteGrant* grant, char* local, uint64_t size,
                           uint64_t deadline_ms, const char** transport,
                           absl::string_view key = {});
  // Tells the master that `replica` of `key` (the commit of `generation`)
  // answered with bytes that do not match the checksum, so it leaves the
  // index (best effort; needs the replica's read grant).
  void ReportDataLoss(const std::string& key, uint64_t generation, const v1::Replica& replica,
                      uint64_t deadline_ms);
  // Reads one object from the best replica that answers with the right
  // bytes. `dst` holds at least loc.size() bytes.
  // `cached`: `loc` comes from the location cache (no lease protects its
  // range): the store checks the generation, the client always the
  // checksum, and any failure is the caller's cue to ask the master.
  absl::Status ReadObject(const v1::ObjectLocation& loc, char* dst, uint64_t deadline_ms,
                          bool cached = false);
  // An SSD-tier block of a store on this host, through its shared segment
  // (transport::ShmEngine::ReadSsd); UNIMPLEMENTED when the store is not
  // reachable that way; DEADLINE_EXCEEDED once `deadline_ms` (MonoMs)
  // passes. Sets *transport when it tries. `read_grant`: the replica's,
  // which the store checks as for READ_KEY.
  absl::Status ReadSsdShm(const v1::StoreEndpoint& store, const std::string& key, char* dst,
                          uint64_t size, const std::string& read_grant, uint64_t deadline_ms,
                          const char** transport);
  absl::Status ReadReplica(const v1::Replica& replica, const std::string& key, char* dst,
                           uint64_t size, uint64_t deadline_ms, const char** transport);
  // A cached location's replica: a copy from the shared mapping that the
  // store's key board vouches for (transport/shm_board.h); where the store
  // keeps no board, a copy the store then confirms is still the key's
  // current block (READ_KEY's check-only form); READ_KEY (generation
  // checked) over TCP otherwise.
  absl::Status ReadCachedReplica(const v1::ObjectLocation& loc, char* dst, uint64_t deadline_ms,
                                 const char** transport);
  // Whether reading cached location `loc` asks its store over a round
  // trip though its bytes are in this host's shared memory: a same-host
  // DRAM block of a store without a key board mapped here.
  bool AskedCached(const v1::ObjectLocation& loc);
  // Whether cached location `loc` is in the DRAM of a store on this host.
  bool SameHostDram(const v1::ObjectLocation& loc);
  // Reads into a target: OUT_OF_RANGE when the block does not fit.
  // Registers a RegisterBuffer buffer with the RDMA device; its handle, or
  // 0 without a device or when the device refuses (GPU: logged once,
  // counted in gpu_rdma_registration_failures).
  uint64_t RegisterWithRdma(void* base, size_t size, bool gpu);
  // GPUDirect: reads `loc` over rdma straight into the GPU buffer of
  // `target`, from the first DRAM replica whose store offers rdma. NOT_FOUND
  // when no replica offers it (the caller stages instead).
  absl::Status ReadGpuDirect(const v1::ObjectLocation& loc, const ReadTarget& target,
                             uint64_t deadline_ms);
  absl::Status ReadToTarget(const v1::ObjectLocation& loc, const ReadTarget& target,
                            uint64_t deadline_ms, bool cached = false);
  // read(i, location, cached) for each key the location cache holds, then
  // one Lookup for the others and those whose cached read failed, and
  // read(i, location, false) for each hit, in parallel. (*statuses)[i]:
  // NOT_FOUND for a miss, else read's status. `before_release` (optional)
  // runs once every read is done, while the lookup's leases are still held
  // (not when the batch fails). `in_place` (BatchGetViews): a cached
  // same-host DRAM block of kInPlaceMinBytes or more is asked for anew, so
  // that its lease lets the caller use it where it lies.
  // `kept` (BatchGetViews; may be null): (*kept)[i] set by `read` or
  // `before_release` keeps key i's lease from being given back.
  using ReadFn = std::function<absl::Status(size_t, const v1::ObjectLocation&, bool)>;
  absl::Status LookupAndRead(const std::vector<const std::string*>& keys, uint64_t deadline_ms,
                             const ReadFn& read, std::vector<absl::Status>* statuses,
                             const std::function<void()>& before_release = nullptr,
                             bool in_place = false, std::vector<char>* kept = nullptr);
  // Hot blocks in place (docs/client.md): the lease of a block BatchGetViews
  // viewed in place is kept when the same key was viewed in place less than
  // kKeepRecentMs before, and later calls view it under that lease, with no
  // lookup, until the lease's first half ends, while the store's key board
  // still marks its commit. KeepLease returns whether it kept the lease;
  // ViewsOnKeptLeases serves the whole call from kept leases or returns
  // false (nothing called). DropKeptLease: this client put or removed the
  // key (DropKeptLeases: keys); KeptLeaseDrops counts those, and KeepLease
  // keeps nothing of a key dropped since `drops_before`, taken before the
  // call's lookup (what the call read may be what the put changed).
  bool KeepLease(const std::string& key, const v1::ObjectLocation& loc,
                 std::shared_ptr<const void> mapping, const char* data, uint64_t drops_before);
  uint64_t KeptLeaseDrops();
  bool ViewsOnKeptLeases(const std::vector<std::string>& keys, const ViewsFn& use,
                         uint64_t bytes_max);
  void DropKeptLease(const std::string& key);
  void DropKeptLeases();
  // A Lookup that takes read leases, with `store_table` answers put back
  // inline (InlineStores); several threads' lookups at once go to the
  // master as one (lookups_).
  absl::Status CoalescedLookup(const v1::LookupRequest& req, v1::LookupResponse* resp,
                               uint64_t deadline_ms);
  // Gives back the leases of `resp` (a Lookup answered at
  // `leased_at_unix_ms`) once their reads are done. Best effort and off the
  // caller's path: the keys are queued for the releaser thread, which sends
  // them in batches (ReleaseLoop).
  // `kept[j]` (may be null): resp.objects(j)'s lease is kept by the caller
  // (KeepLease), not given back now.
  void ReleaseLeases(const v1::LookupResponse& resp, uint64_t leased_at_unix_ms,
                     const std::vector<char>* kept = nullptr) ABSL_LOCKS_EXCLUDED(release_mu_);
  void ReleaseLoop() ABSL_LOCKS_EXCLUDED(release_mu_);

  // ---- client_buffers.cc
  // Puts a registered range; device memory is staged into a bounce buffer
  // first, after options.gpu.
  absl::Status PutFromPin(const std::string& key, const BufferRegistry::Pin& pin,
                          const PutOptions& options, uint64_t deadline_ms);
  absl::Status BatchGetIntoPinned(const std::vector<GetIntoItem>& items, std::vector<PinOr>* pins,
                                  uint64_t deadline_ms, const GpuSync& gpu,
                                  std::vector<Status>* statuses, std::vector<size_t>* sizes);
  absl::Status BatchPutFromPinned(const std::vector<PutFromItem>& items, std::vector<PinOr>* pins,
                                  const PutOptions& options, uint64_t deadline_ms,
                                  std::vector<Status>* statuses);
  std::vector<PinOr> PinForGet(const std::vector<GetIntoItem>& items);
  std::vector<PinOr> PinForPut(const std::vector<PutFromItem>& items);

  // ---- client_async.cc
  // Runs work(state) on an async thread; the future is done when it
  // returns. A closed client, a deadline already passed or a full queue
  // give a future that is done at once with that status.
  BatchFuture Submit(const Deadline& deadline, std::function<void(internal::BatchState*)> work);

  // Constant after construction.
  const ClientOptions options_;
  const std::string token_;
  std::vector<std::unique_ptr<v1::MasterService::Stub>> masters_;  // fixed after Connect
  // Set by Connect when options_.masters is one "etcd://" spec: the leader
  // is whichever master etcd names (coord/master_locator.h), and masters_
  // stays empty.
  std::unique_ptr<coord::MasterLocator> locator_;

  // Thread-safe members.
  transport::TcpEngine tcp_;
  transport::ShmEngine shm_;
  // Set by Connect when options_.rdma_device names one: the device (a
  // VerbsApi) and the RDMA engine on it. Fixed after Connect.
  std::shared_ptr<void> rdma_verbs_;  // destroyed after rdma_
  std::unique_ptr<transport::Engine> rdma_;
  BufferRegistry buffers_;
  GpuStaging gpu_;
  // Null when ClientOptions.location_cache_entries is 0.
  const std::unique_ptr<LocationCache> cache_;
  std::atomic<size_t> current_master_{0};
  // With locator_: a stub per leader address seen, kept for the client's
  // life (a cluster has a handful of masters).
  Mutex leader_stubs_mu_;
  std::map<std::string, std::shared_ptr<v1::MasterService::Stub>> leader_stubs_
      ABSL_GUARDED_BY(leader_stubs_mu_);
  std::atomic<bool> closed_{false};

  struct AtomicStats {
    std::atomic<uint64_t> bytes_stored{0}, bytes_stored_shm{0}, bytes_stored_tcp{0},
        bytes_loaded{0}, bytes_loaded_shm{0}, bytes_loaded_tcp{0}, bytes_loaded_rdma{0},
        bytes_loaded_ssd{0}, blocks_loaded_dram{0}, blocks_loaded_ssd{0}, checksum_mismatches{0},
        replica_failovers{0}, bytes_staged_gpu{0}, cache_hits{0}, cache_misses{0},
        cache_fallbacks{0}, bytes_stored_rdma{0}, bytes_loaded_gpu_direct{0},
        bytes_gpu_direct_checked{0}, gpu_rdma_registration_failures{0}, read_lookups{0},
        read_lookups_joined{0}, put_calls{0}, put_calls_joined{0}, cache_board_reads{0},
        views_on_kept_leases{0};
  };
  mutable AtomicStats stats_;

  // The operations RecordOp counts (the `op` label).
  enum class Op { kGet = 0, kPut = 1, kMatchPrefix = 2 };
  static constexpr size_t kOps = 3;
  // Results by StatusCode (0 "ok" .. 16; kNotFound is "miss").
  static constexpr size_t kResults = 17;
  // Counts an operation by result and times it (shelf_client_ops_total,
  // shelf_client_op_seconds).
  void RecordOp(Op op, const Status& s, uint64_t start_us) const;
  struct ClientMetrics {
    explicit ClientMetrics(prom::Exposition& e);
    prom::Family<prom::Counter>& ops;
    prom::Family<prom::Histogram>& op_seconds;
    prom::Family<prom::Counter>& bytes;
    prom::Counter& bytes_load_shm;
    prom::Counter& bytes_load_tcp;
    prom::Counter& bytes_load_rdma;
    prom::Counter& bytes_store;
    prom::Counter& bytes_load_gpu_direct;
    prom::Counter& gpu_direct_checked;
    prom::Counter& gpu_rdma_registration_failures;
    prom::Gauge& rdma_registered_buffers;
    prom::Counter& prefix_hits;
    prom::Counter& prefix_lookups;
    prom::Counter& checksum_mismatches;
    prom::Counter& failovers;
    prom::Counter& shm_refusals;
    prom::Counter& bytes_staged_shm;
    prom::Counter& bytes_warmed_shm;
    prom::Family<prom::Counter>& cache;
    prom::Counter& cache_hits;
    prom::Counter& cache_misses;
    prom::Counter& cache_fallbacks;
    prom::Gauge& cache_entries;
  };
  // The client's own metrics (one per Client, rendered by MetricsText()).
  std::unique_ptr<prom::Exposition> exposition_ = std::make_unique<prom::Exposition>();
  ClientMetrics metrics_{*exposition_};
  // Children of ops and op_seconds, resolved on first use per op and result.
  struct OpChildren {
    std::array<prom::LazyChild<prom::Counter>, kResults> ops;
    prom::LazyChild<prom::Histogram> seconds;
  };
  mutable std::array<OpChildren, kOps> op_children_;

  // Leases to give back (ReleaseLeases): each key with the wall time after
  // which its release is no longer sent (half its lease: a late release
  // could end a newer reader's lease, and the lease runs out anyway).
  struct PendingRelease {
    std::string key;
    uint64_t generation;  // the commit leased
    uint64_t send_by_unix_ms;
  };
  void QueueReleases(std::vector<PendingRelease> add) ABSL_LOCKS_EXCLUDED(release_mu_);
  // A lease BatchGetViews keeps for later calls (KeepLease).
  struct KeptLease {
    v1::ObjectLocation loc;  // the lookup's answer: replica 0 is the block
    std::shared_ptr<const void> mapping;
    const char* data = nullptr;
    uint64_t lease_until_unix_ms = 0;
    uint64_t reuse_until_unix_ms = 0;  // the lease's first half
  };
  Mutex kept_mu_;
  absl::flat_hash_map<std::string, KeptLease> kept_ ABSL_GUARDED_BY(kept_mu_);
  // Keys viewed in place lately, to tell a hot block: when last (unix ms),
  // and the number of this client's last put or remove of the key
  // (kept_drops_ then), if it came since.
  struct Viewed {
    uint64_t at_unix_ms = 0;
    uint64_t dropped = 0;
  };
  absl::flat_hash_map<std::string, Viewed> viewed_ ABSL_GUARDED_BY(kept_mu_);
  uint64_t kept_drops_ ABSL_GUARDED_BY(kept_mu_) = 0;  // puts and removes counted
  // kept_drops_ when viewed_ was last forgotten, or every key dropped.
  uint64_t all_dropped_ ABSL_GUARDED_BY(kept_mu_) = 0;
  void ForgetViewedIfFull() ABSL_EXCLUSIVE_LOCKS_REQUIRED(kept_mu_);
  // Gives a kept lease back (queued as ReleaseLeases queues), while its
  // first half lasts.
  void GiveBack(const KeptLease& k) ABSL_LOCKS_EXCLUDED(release_mu_);
  Mutex release_mu_;
  CondVar release_cv_;  // signalled when releases_ grows or release_stop_ is set
  std::vector<PendingRelease> releases_ ABSL_GUARDED_BY(release_mu_);
  bool release_stop_ ABSL_GUARDED_BY(release_mu_) = false;
  std::thread releaser_;  // joined in the destructor, before the pools

  // A request of one caller to the master, to go with other callers' in
  // one call (CallByDeadline), and that caller's answer.
  template <typename Request>
  struct MasterJob {
    const Request* request = nullptr;
    uint64_t deadline_ms = 0;
  };
  template <typename Response>
  struct MasterResult {
    absl::Status status;
    Response response;
  };
  // The reads' lookups in flight to the master, one call at a time.
  using LookupJob = MasterJob<v1::LookupRequest>;
  using LookupResult = MasterResult<v1::LookupResponse>;
  CallCoalescer<LookupJob, LookupResult> lookups_;

  // Single puts' starts and commits in flight to the master, one call of
  // each at a time.
  using PutStartJob = MasterJob<v1::PutStartRequest>;
  using PutStartResult = MasterResult<v1::PutStartResponse>;
  CallCoalescer<PutStartJob, PutStartResult> put_starts_;
  struct CommitJob {
    uint64_t put_id = 0;
    const std::string* key = nullptr;
    uint64_t deadline_ms = 0;
  };
  struct CommitResult {
    absl::Status call;       // the PutCommit call's own status
    absl::Status committed;  // this put's, when the call succeeded
  };
  CallCoalescer<CommitJob, CommitResult> commits_;
  // Single puts in flight, whole (CoalescedPut), one batch at a time.
  struct WholePutJob {
    const HostPut* item = nullptr;
    const v1::PutStartRequest* request = nullptr;
    uint64_t deadline_ms = 0;
  };
  struct WholePutResult {
    absl::Status status;
    bool again = false;  // to be put again by its caller (PutStartedBlocks)
  };
  // A leader alone after a batch of several waits this long for the
  // others to come back (CallCoalescer's linger): threads that put one
  // block after another return from a batch together but call again one
  // by one, and going at once would split them into a batch of one and a
  // batch of the rest.
  static constexpr std::chrono::microseconds kWholePutLinger{300};
  CallCoalescer<WholePutJob, WholePutResult> whole_puts_{kWholePutLinger};

  // The hot master calls' streams (CallMaster).
  CallStreams call_streams_;

  // Last: destroyed (joined) first, while everything their tasks use lives.
  // Async tasks use the transfer pool, so it outlives the async pool.
  std::unique_ptr<ThreadPool> transfer_pool_;
  std::unique_ptr<ThreadPool> async_pool_;
};

}  // namespace shelf

#endif  // SHELF_CLIENT_CLIENT_IMPL_H_
