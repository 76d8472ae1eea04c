// Store: the shelf-store daemon's core. Hosts one DRAM segment (memfd,
// hugepages when it can) and an optional SSD tier (RocksDB), serves them on
// the TCP data plane and to same-host clients through shared memory,
// registers with the master and heartbeats, and carries out the master's
// tier moves (demote DRAM -> SSD, drop from SSD).
//
// The store never decides placement: it accepts a write only inside a range
// granted by the master (verified by HMAC, no call to the master), and it
// reports its SSD inventory at every registration so a master restart or
// failover loses nothing the store still holds.
//
// Thread-safe.
#ifndef SHELF_SERVER_STORE_STORE_H_
#define SHELF_SERVER_STORE_STORE_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/prom.h"
#include "common/rpc.h"
#include "coord/master_locator.h"
#include "proto/shelf.grpc.pb.h"
#include "server/store/range_owners.h"
#include "storage/allocator.h"
#include "storage/dram_segment.h"
#include "storage/ssd_tier.h"
#include "transport/data_server.h"
#include "transport/shm.h"
#include "transport/shm_board.h"

namespace shelf::store {

struct StoreOptions {
  std::string master;                     // HOST:PORT[,...] or etcd://HOST:PORT[,...]/CLUSTER
  std::string listen = "127.0.0.1:7100";  // data plane
  uint64_t dram_size = 1ull << 30;
  std::string ssd_dir;    // empty: no SSD tier
  uint64_t ssd_size = 0;  // 0 with --ssd-dir: 64 GiB
  std::string node_id;    // empty: persisted in ssd_dir, else host:port
  // Where the shared-memory socket lives: a directory owned by the store's
  // uid that neither group nor others may write (else no shm). Empty:
  // $RUNTIME_DIRECTORY, else /run/shelf (socket shm-<port>.sock); set: the
  // socket is <run_dir>/shm.sock. Made 0700 when missing.
  std::string run_dir;
  std::map<std::string, std::string> labels;
  std::string secret;
  // The token the store calls the master with, when it is a principal of
  // the master's --credentials (common/credentials.h); empty: the cluster
  // secret's token.
  std::string master_token;
  TlsFiles tls;             // for the channel to the master
  coord::EtcdOptions etcd;  // TLS and user for an etcd:// master
  bool hugepages = true;
  bool mlock = false;
  // Populate the DRAM segment in the background from start
  // (storage::DramSegment::Options::populate).
  bool populate_dram = true;
  bool shm = true;  // offer same-host shared memory
  // With shm and one segment: keep a key board (transport/shm_board.h), so
  // same-host clients check cached locations without asking.
  bool shm_key_board = true;
  // The uids whose processes may map the segment (SO_PEERCRED on the
  // socket); empty: the store's own effective uid and root.
  std::vector<uint32_t> shm_allow_uids;
  // RDMA device to offer one-sided reads of the DRAM segment on (e.g.
  // "mlx5_0"); empty: no RDMA. A device that cannot be opened is logged and
  // the store serves without RDMA.
  std::string rdma_device;
  int rdma_port = 1;
  int rdma_gid_index = -1;  // -1: auto (RdmaEngine::Options::gid_index)
  int rdma_traffic_class = 0;
  int rdma_service_level = 0;
  int rdma_pkey_index = 0;
  // Client queue pairs at once (one per client connection that asks);
  // past it a client reads over tcp.
  int rdma_queue_pairs_max = 1024;
  // The verbs implementation (a transport::rdma::VerbsApi): null, the real
  // libibverbs; tests pass a simulated device. Not owned; must outlive the
  // store.
  void* rdma_verbs = nullptr;
  bool promote_on_hit = false;  // copy SSD blocks that are read back into DRAM
  // How demotions reach the SSD tier: "never" copied (written straight
  // from the segment), "always" copied into a buffer first (and runs
  // gathered), or "auto": where the segment is on 4 KiB pages
  // (DramSegment::large_pages), from which a write goes to the disk in
  // requests of about 1 MiB, blocks of 2 MiB and more are copied and runs
  // of smaller ones gathered (SsdTier::Options::stage_runs) into hugepage
  // buffers (docs/storage.md, "Hugepage buffers").
  std::string demote_copy = "auto";
  // With a secret: every READ and READ_KEY needs a read grant the master
  // minted for this store incarnation (docs/security.md, "Read grants").
  // Without a secret anyone may connect, so reads stay open.
  bool read_grants = true;
  // With shm and an SSD tier: the segment grows by this much (rounded up to
  // 2 MiB), a window the master never allocates, into which same-host
  // clients' SSD hits are read for them to copy. 0: such hits go over TCP.
  uint64_t shm_ssd_window = 64ull << 20;
  // Non-zero: the DRAM segment is made of arenas of this many bytes, each
  // a data-plane segment of its own (ids 0, 1, ...), its own memfd and RDMA
  // region; a master with tenants places each tenant's blocks only in
  // arenas it gave that tenant, and a same-host client is handed an arena's
  // descriptor only for a read grant into it (docs/security.md, "Tenant
  // arenas"). No SSD window then: same-host SSD hits go over TCP. 0: one
  // segment. shelf-store's default: DefaultArenaBytes when it runs as a
  // principal, 0 otherwise.
  uint64_t shm_arena_bytes = 0;
  int max_connections = 1024;
  // Data-plane denial of service (DataServer::Options): the handshake's
  // absolute deadline and the caps on connections still in it.
  uint64_t handshake_timeout_ms = 5000;
  // An authenticated data connection idle this long is closed (0: never).
  uint64_t idle_timeout_ms = 600000;
  // TLS 1.3 on the data plane (--data-tls): the store's certificate and
  // key; a CA makes it demand client certificates signed by it.
  bool data_tls = false;
  // Session tags over payloads too, for every client (--session-tag-payload).
  bool session_tag_payload = false;
  TlsFiles data_tls_files;
  int max_connections_per_source = 0;  // 0: half of max_connections
  int max_unauthenticated = 128;
  int max_unauthenticated_per_source = 32;
  uint64_t rpc_timeout_ms = 3000;
  // Time for the heartbeat loop (intervals, backoff), the mover's waits and
  // grant expiry checks. Must outlive the store.
  Clock* clock = Clock::Real();
};

// The arena size a store of `dram_size` bytes takes unless told otherwise,
// when it runs in a cluster of principals, whose tenants must not map each
// other's blocks: the most (up to 16) equal arenas of at least 1 MiB that
// divide the segment into whole 4 KiB pages, a multiple of 2 MiB where one
// fits. So up to 16 tenants have blocks on one store, and a block is at
// most an arena. 0 when not even 2 fit (one segment).
uint64_t DefaultArenaBytes(uint64_t dram_size);

class Store : public transport::DataHandler {
 public:
  // The RDMA device, its engine and the acceptor of client queue pairs
  // (defined in store_start.cc).
  struct Rdma;
  static absl::StatusOr<std::unique_ptr<Store>> Start(const StoreOptions& options);
  ~Store() override;

  // Registers and heartbeats until Stop(). Returns when stopped.
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends Run, and same-host clients' trust in the key board at once.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& node_id() const { return node_id_; }
  const std::string& data_address() const { return data_address_; }
  bool registered() const { return registered_.load(); }
  // The term this store last registered under (0: none yet).
  uint64_t MaxTerm() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return max_term_;
  }

  // DataHandler.
  absl::StatusOr<Region> Segment(uint32_t id) override;
  absl::Status CheckWrite(const transport::wire::Grant& grant, uint32_t segment_id, uint64_t offset,
                          uint64_t length) override ABSL_LOCKS_EXCLUDED(mu_);
  void EndWrite(const transport::wire::Grant& grant) override;
  uint64_t WriteMsLeft(const transport::wire::Grant& grant) override;
  absl::Status CheckRead(absl::string_view credential, absl::string_view key, bool range,
                         uint32_t segment_id, uint64_t offset, uint64_t length) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ReadKey(absl::string_view key, std::string* out) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ReadKeyInto(absl::string_view key, char* buf, uint64_t capacity,
                           uint64_t* size) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Region> DramKey(absl::string_view key, uint64_t generation) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND when a DROP_SSD of `key` waits among the moves
  // (ssd_drops_pending_); reads of the SSD tier check before and after.
  absl::Status CheckNotDropping(absl::string_view key) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<int> ShmArena(absl::string_view credential, uint32_t segment_id, uint64_t offset,
                               uint64_t length) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<int> ShmKeyBoard() override;
  absl::StatusOr<transport::RdmaExposure> RdmaExposes(absl::string_view credential,
                                                      uint32_t segment_id) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Pinned> PinSsdKey(absl::string_view key, uint64_t size) override
      ABSL_LOCKS_EXCLUDED(mu_, pin_mu_);
  void Unpin(uint64_t pin) override ABSL_LOCKS_EXCLUDED(pin_mu_);
  void OnRead(uint64_t bytes) override { metrics_.read_dram_tcp.Increment(bytes); }
  void OnWrite(uint64_t bytes) override { metrics_.written_dram_tcp.Increment(bytes); }
  void OnShmWrite(uint64_t bytes) override { metrics_.written_dram_shm.Increment(bytes); }
  void OnPull(uint64_t bytes) override { metrics_.written_dram_rdma.Increment(bytes); }
  void OnClosedByRule(absl::string_view rule) override {
    prom::Child(metrics_.data_closed, {{"rule", std::string(rule)}}).Increment();
  }
  storage::SsdTier* ssd() const { return ssd_.get(); }

 private:
  explicit Store(const StoreOptions& options);

  // The DRAM segment's id on the data plane; with arenas, arena i is
  // segment i and covers [i * SegmentBytes(), +SegmentBytes()) of
  // segment_. Internally (records, moves) offsets are into segment_.
  static constexpr uint32_t kSegmentId = 0;
  uint32_t SegmentCount() const { return arenas_ > 0 ? arenas_ : 1; }
  uint64_t SegmentBytes() const { return arenas_ > 0 ? options_.shm_arena_bytes : dram_bytes_; }
  // Where [offset, +length) of data-plane segment `id` lies in segment_;
  // false when outside it.
  bool ToGlobal(uint32_t id, uint64_t offset, uint64_t length, uint64_t* global) const {
    if (id >= SegmentCount() || offset > SegmentBytes() || length > SegmentBytes() - offset) {
      return false;
    }
    *global = id * SegmentBytes() + offset;
    return true;
  }
  uint32_t SegmentOf(uint64_t global) const {
    return static_cast<uint32_t>(global / SegmentBytes());
  }
  uint64_t OffsetOf(uint64_t global) const { return global % SegmentBytes(); }
  // Same-host SSD reads (store_shm_ssd.cc): the window's size (0: none),
  // and the alignment of its ranges (O_DIRECT reads straight into them).
  uint64_t WindowBytes() const;
  static constexpr uint64_t kWindowAlign = 4096;
  // Whether [offset, +length) lies in the part the master allocates.
  bool InDram(uint64_t offset, uint64_t length) const {
    return offset <= dram_bytes_ && length <= dram_bytes_ - offset;
  }

  // Start's steps (store_start.cc).
  // Opens options_.ssd_dir into ssd_; an unreadable or broken tier is
  // logged and leaves ssd_ null (DRAM only), never fails the start.
  void OpenSsdTier();
  // Starts data_server_ (and rdma_ when asked) on options_.listen.
  absl::Status ServeData();
  // Sets data_address_, node_id_ and run_dir_ from what the data server
  // bound and the options.
  void ChooseIdentity();
  // Offers the segment over shared memory in run_dir_ (logged when not,
  // with the reason: an unsafe or uncreatable run_dir_ among them).
  void OfferShm();
  // Registers the capacity, usage and connection gauges.
  void AddGauges();

  // Promotions wait in a bounded queue; past it, reads are served without one.
  static constexpr size_t kPromotionsMax = 64;
  struct Promotion {
    std::string key;
    std::string data;
    uint64_t checksum;
  };

  // docs/metrics.md: shelf_store_*.
  struct Metrics {
    explicit Metrics(prom::Exposition& e);
    prom::Family<prom::Counter>& read_bytes;
    prom::Counter& read_dram_tcp;
    prom::Counter& read_ssd_tcp;
    prom::Counter& read_ssd_shm;
    prom::Family<prom::Counter>& written_bytes;
    prom::Counter& written_dram_tcp;
    prom::Counter& written_dram_shm;
    prom::Counter& written_dram_rdma;
    prom::Counter& written_ssd_local;
    prom::Family<prom::Counter>& demotions;
    prom::Counter& demotions_ok;
    prom::Counter& demotions_failed;
    prom::Counter& demotion_copies;
    prom::Counter& checksum_failures;
    prom::Counter& read_grant_refusals;
    prom::Counter& write_grant_refusals;  // stale: a newer put has the range
    prom::Family<prom::Histogram>& ssd_seconds;
    prom::Counter& promotions;
    prom::Histogram& ssd_read_seconds;
    prom::Histogram& ssd_write_seconds;
    prom::Family<prom::Counter>& data_closed;
  };
  absl::Status Register() ABSL_LOCKS_EXCLUDED(mu_);
  // When a registration is in flight, waits for it to end (2 s at most) and
  // gives the grant key and term it left; false at once when none is.
  bool AwaitRegistration(std::shared_ptr<const HmacKey>* key, uint64_t* term)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HeartbeatOnce(bool* more_work) ABSL_LOCKS_EXCLUDED(mu_);
  // After the master answered a registration or heartbeat sent at
  // `heard_after_mono_ms` (MonoMs): same-host clients trust the key board
  // until a node TTL after it (transport/shm_board.h).
  void TrustBoard(uint64_t heard_after_mono_ms) ABSL_LOCKS_EXCLUDED(mu_);
  v1::TierMoveResult Execute(const v1::TierMove& move) ABSL_LOCKS_EXCLUDED(mu_);
  // A VERIFY order: OK when the replica's bytes match the order's checksum;
  // DATA_LOSS "corrupt: ..." when they do not, or the replica is not here.
  absl::Status VerifyReplica(const v1::TierMove& move) ABSL_LOCKS_EXCLUDED(mu_);
  // Executes DROP_SSD orders together (SsdTier::DeleteMany); a result each.
  std::vector<v1::TierMoveResult> ExecuteDrops(const std::vector<v1::TierMove>& drops)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The most SSD drops the mover executes together.
  static constexpr size_t kDropBatchMax = 256;
  // Starts making the SSD writes of `run` (the demotions executed since the
  // last call) durable, and takes it: once they are, its results reach
  // results_ (on failure, its successful demotions turned into failures),
  // in the order the runs were cut. Resets `unsynced`. Waits while
  // kSyncsAhead runs are syncing. `demoted` (key, record offset) names the
  // run's demoted blocks: their DRAM records go once the run is durable,
  // not before, so that until the master frees a range on the report a
  // re-registration still reports it held (a demotion's writes read the
  // segment in place).
  using Demoted = std::vector<std::pair<std::string, uint64_t>>;
  void SyncRun(std::vector<v1::TierMoveResult>* run, Demoted* demoted, uint64_t* unsynced)
      ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr uint64_t kSyncBytes = 64ull << 20;
  // A run is cut at this many results too (a long run of drops writes few
  // bytes), so that reports keep flowing and each stays small.
  static constexpr size_t kRunResultsMax = 4096;
  // A heartbeat carries reports up to this size (the master takes 16 MiB);
  // the rest wait for the next, which follows at once.
  static constexpr size_t kReportBytesMax = 4 << 20;
  static constexpr int kSyncsAhead = 4;
  int syncs_running_ ABSL_GUARDED_BY(mu_) = 0;  // runs cut, not yet durable and reported
  CondVar syncs_cv_;                            // signalled when syncs_running_ falls
  uint64_t demotions_unsynced_ = 0;             // mover thread only: executed since the last Sync
  // Applies a RECORD/FORGET notice to dram_records_.
  void NoteLocked(const v1::TierMove& notice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Carries out queued tier moves off the heartbeat thread, so a long
  // batch of demotions never delays liveness.
  void MoverLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void Promote(const Promotion& p) ABSL_LOCKS_EXCLUDED(mu_);
  // One wait on `cv` for a signal or until clock_ reaches `deadline_ms`;
  // false, without waiting, once it has. Callers loop on their condition:
  //   while (!ready && WaitBefore(&cv, deadline)) {}
  // Deadlines are clock_ times; the wait itself is on the real clock, as
  // Clock has no timed wait for shelf::Mutex.
  bool WaitBefore(CondVar* cv, uint64_t deadline_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StoreOptions options_;
  Clock* const clock_;
  std::string node_id_;
  std::string data_address_;
  std::string run_dir_;
  std::string shm_socket_;  // in run_dir_
  const uint64_t incarnation_;
  std::unique_ptr<storage::DramSegment> segment_;
  // The part of segment_ the master allocates, [0, dram_bytes_); past it,
  // the window of same-host SSD reads (store_shm_ssd.cc).
  uint64_t dram_bytes_ = 0;
  uint32_t arenas_ = 0;  // 0: one segment (options_.shm_arena_bytes == 0)
  Mutex pin_mu_;         // never held together with mu_
  std::unique_ptr<storage::RangeAllocator> window_
      ABSL_GUARDED_BY(pin_mu_);  // offsets in the window
  struct PinnedRange {
    uint64_t offset;  // in the window
    uint64_t bytes;
  };
  std::map<uint64_t, PinnedRange> pinned_ ABSL_GUARDED_BY(pin_mu_);  // by pin
  uint64_t next_pin_ ABSL_GUARDED_BY(pin_mu_) = 0;
  std::unique_ptr<storage::SsdTier> ssd_;
  // Demotions of at least this many bytes are copied (Put), smaller ones
  // written from the segment (PutInPlace): options_.demote_copy, resolved.
  uint64_t demote_copy_min_ = ~0ull;
  std::unique_ptr<transport::DataServer> data_server_;
  std::unique_ptr<transport::ShmServer> shm_server_;
  // One segment's board of the blocks its records name (transport/
  // shm_board.h), kept by owners_ and the records; null with arenas or
  // without shared memory.
  std::unique_ptr<transport::KeyBoard> board_;
  // Null without RDMA. Outlives data_server_.
  std::unique_ptr<Rdma> rdma_;
  // The leading master: its address and a stub for it (stubs are cached
  // per address). A failure moves the locator on.
  v1::MasterService::Stub* Master(std::string* address) ABSL_LOCKS_EXCLUDED(stubs_mu_);
  void MasterFailed(const std::string& address, const absl::Status& status);
  std::unique_ptr<coord::MasterLocator> locator_;
  Mutex stubs_mu_;  // never held together with mu_
  std::map<std::string, std::unique_ptr<v1::MasterService::Stub>> stubs_ ABSL_GUARDED_BY(stubs_mu_);
  std::string token_;

  mutable Mutex mu_;
  std::string grant_key_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const HmacKey> grant_mac_ ABSL_GUARDED_BY(mu_);  // grant_key_, prepared
  uint64_t grant_term_ ABSL_GUARDED_BY(mu_) = 0;                   // the term grant_key_ came with
  // A registration is in flight; registered_cv_ is signalled when it ends.
  bool registering_ ABSL_GUARDED_BY(mu_) = false;
  CondVar registered_cv_;
  uint64_t heartbeat_interval_ms_ ABSL_GUARDED_BY(mu_) = 500;
  // The master's node TTL, from the registration: how far ahead of an
  // answered heartbeat's start the key board is trusted (TrustBoard).
  uint64_t node_ttl_ms_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::TierMoveResult> results_ ABSL_GUARDED_BY(mu_);  // to report
  std::deque<v1::TierMove> moves_ ABSL_GUARDED_BY(mu_);           // to carry out
  // The highest TierMove.seq taken since this store registered: each
  // heartbeat acknowledges it, and orders at or below it that come again
  // (an answer the master sent twice) are not taken twice.
  uint64_t orders_taken_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t registration_id_ ABSL_GUARDED_BY(mu_) = 0;  // the master's, echoed
  // Keys with a DROP_SSD among moves_ (how many): the master no longer
  // lists their SSD copy, which may be a removed or replaced commit's, so
  // reads by key refuse it from the moment the order arrives, not only
  // once the mover gets to it.
  absl::flat_hash_map<std::string, int> ssd_drops_pending_ ABSL_GUARDED_BY(mu_);
  // Committed blocks in the DRAM segment, from the master's RECORD/FORGET
  // notices: offset -> {key, size, checksum}. Reported (after a checksum
  // check of the bytes) when registering, so a new master learns them.
  struct Record {
    std::string key;
    uint64_t size;
    uint64_t checksum;
    uint64_t generation;  // 0: unknown (a promotion's record)
  };
  std::map<uint64_t, Record> dram_records_ ABSL_GUARDED_BY(mu_);
  // Which allocation and key each range of the segment was last written
  // for: writes and reads by range are checked against it (range_owners.h).
  RangeOwners owners_;
  // With arenas: each arena's tenant, from the first block recorded in it
  // (empty optional: none yet); kept for the life of the process and
  // reported at every registration (SegmentInfo.tenant).
  std::vector<std::optional<std::string>> arena_tenants_ ABSL_GUARDED_BY(mu_);
  // dram_records_ by key (views into its nodes), for READ_KEY of DRAM
  // blocks. Updated with it: only through NoteLocked and EraseRecordLocked.
  absl::flat_hash_map<absl::string_view, uint64_t> dram_by_key_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Record>::iterator EraseRecordLocked(std::map<uint64_t, Record>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t max_term_ ABSL_GUARDED_BY(mu_) = 0;             // orders from older terms are refused
  std::deque<Promotion> promotions_ ABSL_GUARDED_BY(mu_);  // bounded by kPromotionsMax
  bool moving_ ABSL_GUARDED_BY(mu_) = false;               // a move is running
  CondVar moves_cv_;  // signalled when moves_ or promotions_ grow, and when stopping
  // Signalled (under mu_) when stopping_ is set, results_ grow or a new
  // leader is named.
  CondVar stop_cv_;
  uint64_t leader_changes_ ABSL_GUARDED_BY(mu_) = 0;  // new leaders etcd named (MasterLocator)
  std::atomic<bool> registered_{false};
  std::atomic<bool> stopping_{false};
  Metrics metrics_;
  std::vector<prom::CallbackHandle> gauges_;
};

}  // namespace shelf::store

#endif  // SHELF_SERVER_STORE_STORE_H_
