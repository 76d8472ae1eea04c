// Master: the metadata master's state machine, without the RPC layer.
//
// Owns the node registry and liveness, one RangeAllocator per DRAM segment,
// the object index, two-phase puts, read leases, pins and eviction. It never
// touches block bytes. The gRPC services (service.h) are thin adapters over
// these methods, and benchmarks and tests call them in-process.
//
// Invariants (checked by CheckInvariants in tests):
//   - every committed object has >= 1 replica, each on a known node;
//   - every DRAM replica and every pending put range is allocated exactly
//     once in its segment's allocator, and nothing else is;
//   - a replica whose object holds a lease (lease_until_ms > now) is never
//     freed, moved or reused: Remove and eviction defer or skip it.
//
// Thread-safe. Locking: `mu_` guards nodes, allocators, LRU lists, puts and
// leadership; the object index is split into kShards shards by key hash,
// each with its own mutex, always taken after `mu_`. Lookups (Lookup,
// MatchPrefix, Stat) hold `mu_` shared and one shard at a time, so they run
// in parallel with each other; everything that changes nodes, ranges or
// LRU order holds `mu_` exclusively, so it never sees a lookup half done.
// A lookup changes only its object's lease and access time, and moves its
// replicas to the back of their LRU lists under `lru_mu_` (one lock per
// batch), so the lists hold exact LRU order.
// Critical sections do no I/O and no allocation proportional to more than
// one request.
#ifndef SHELF_SERVER_MASTER_MASTER_H_
#define SHELF_SERVER_MASTER_MASTER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/mutex.h"
#include "common/prom.h"
#include "proto/shelf.pb.h"
#include "server/master/key_filter.h"
#include "server/master/kv_events.h"
#include "server/master/lru_pool.h"
#include "server/master/master_metrics.h"
#include "server/master/master_options.h"
#include "server/master/quotas.h"
#include "shelf/limits.h"
#include "storage/allocator.h"

namespace shelf::master {

class KeyMatcher;  // key_matcher.h

class Master {
 public:
  // Metrics go to `exposition` (the process-wide default when null), which
  // must outlive the master.
  explicit Master(MasterOptions options, prom::Exposition* exposition = nullptr);
  ~Master();

  // Stores.
  absl::Status RegisterStore(const v1::RegisterStoreRequest& req, v1::RegisterStoreResponse* resp);
  absl::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp);

  // Puts. PutStart answers OK with state PUT_STARTED, PUT_ALREADY_EXISTS or
  // PUT_IN_FLIGHT; RESOURCE_EXHAUSTED when nothing can be evicted to make
  // room; UNAVAILABLE when no live store exists.
  // `owner` names the principal that starts the put: only it may commit
  // or abort it. Put ids are random and never reused while live.
  absl::Status PutStart(const v1::PutStartRequest& req, const std::string& client_host,
                        const std::string& owner, v1::PutStartResponse* resp);
  // Per-id statuses: NOT_FOUND for an unknown (or reclaimed) put id;
  // PERMISSION_DENIED for a put another owner started (nothing changes).
  // `pinned` (may be null) gets the keys a commit soft-pinned
  // (PutOptions.soft_pin_ttl_ms), for the caller's quotas.
  struct CommitPin {
    std::string key;
    uint64_t size = 0;
    uint64_t ttl_ms = 0;
  };
  void PutCommit(const v1::PutCommitRequest& req, const std::string& owner,
                 v1::PutCommitResponse* resp, std::vector<CommitPin>* pinned = nullptr);
  void PutAbort(const v1::PutAbortRequest& req, const std::string& owner,
                v1::PutAbortResponse* resp);
  // A reader reports a replica whose bytes did not match the checksum
  // (master_grants.cc). It proves it was sent there by presenting the read
  // grant the master minted for that replica; the replica then leaves the
  // index. PERMISSION_DENIED for a grant that does not verify;
  // NOT_FOUND when the replica is no longer indexed.
  absl::Status ReportDataLoss(const v1::ReportDataLossRequest& req,
                              v1::ReportDataLossResponse* resp);

  // Promotion of an SSD-resident block into DRAM on the same store.
  // Promote answers promote_id 0 when there is nothing to do; RESOURCE_EXHAUSTED
  // when the store's DRAM has no free room (promotion never evicts).
  absl::Status Promote(const v1::PromoteRequest& req, v1::PromoteResponse* resp);
  absl::Status PromoteCommit(const v1::PromoteCommitRequest& req);

  // Reads.
  absl::Status Lookup(const v1::LookupRequest& req, v1::LookupResponse* resp);
  absl::Status MatchPrefix(const v1::MatchPrefixRequest& req, v1::MatchPrefixResponse* resp);
  // Gives back one lease on each key (taken by a Lookup or MatchPrefix
  // whose reader is done). A key whose every lease is given back is no
  // longer leased: eviction may take it at once. Unknown keys and keys
  // without a running lease are ignored.
  absl::Status ReleaseLeases(const v1::ReleaseLeasesRequest& req);
  absl::Status Remove(const v1::RemoveRequest& req, v1::RemoveResponse* resp);
  // The bytes `key` (as kept) holds in DRAM, all replicas; 0 if absent.
  uint64_t DramBytesOf(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Listing and bulk removal by pattern (master_keys.cc; the pattern forms
  // are in shelf.proto). ListKeys scans the whole index for each page: a
  // page costs O(keys) time, however small. INVALID_ARGUMENT: a pattern
  // over kPatternBytesMax, a regex that does not compile, a count over
  // kListKeysMax, a cursor longer than a key. RemoveMatching removes at most
  // kRemoveMatchingMax keys per call (`more` says there are others); a
  // leased key disappears at once and its ranges are freed when the lease
  // ends, as Remove. A non-empty `scope` limits both to keys that start
  // with it, the pattern matched against the rest (a tenant's namespace).
  absl::Status ListKeys(const v1::ListKeysRequest& req, v1::ListKeysResponse* resp,
                        const std::string& scope = "");
  // Per live store, the leading run of the chain it holds and each block's
  // tier (master_keys.cc). Touches nothing: no lease, no LRU move.
  absl::Status Locate(const v1::LocateRequest& req, v1::LocateResponse* resp);
  absl::Status RemoveMatching(const v1::RemoveMatchingRequest& req,
                              v1::RemoveMatchingResponse* resp, const std::string& scope = "");

  // Admin.
  void Status(v1::StatusResponse* resp);
  void Segments(v1::SegmentsResponse* resp);
  absl::Status Stat(const v1::StatRequest& req, v1::StatResponse* resp);
  absl::Status Drain(const v1::DrainRequest& req, v1::DrainResponse* resp);
  absl::Status Evict(const v1::EvictRequest& req, v1::EvictResponse* resp);
  absl::Status Pin(const v1::PinRequest& req);

  // Periodic work: node liveness, put timeouts, deferred frees, watermark
  // eviction. The server calls it every ~100 ms; tests call it directly.
  void Tick();

  // For tests: aborts if an invariant does not hold.
  void CheckInvariants();

  // What each tenant and principal holds, and their quotas (quotas.h).
  QuotaBook& quotas() { return *quotas_; }

  // The master's counters (also exported as metrics).
  const MasterMetrics& metrics() const { return metrics_; }

  const MasterOptions& options() const { return options_; }
  // The address reported as leader (the bound --listen address).
  void SetLeaderAddress(const std::string& address);

  // Leadership (docs/ha.md). A master without etcd leads from the start at
  // term 1. With etcd, it starts as a standby; BecomeLeader starts a term
  // with an empty index in the recovering state: stores re-register with
  // their inventories, and recovery ends when every node in `expected`
  // has registered or `grace_ms` has passed. Puts answer UNAVAILABLE while
  // recovering; lookups answer from what is known. StepDown fences at once:
  // every call but Status answers UNAVAILABLE "NOT_LEADER", naming
  // `leader_hint` when known.
  void BecomeLeader(uint64_t term, std::vector<std::string> expected, uint64_t grace_ms);
  void StepDown(const std::string& leader_hint);
  // Starts as a standby (used with etcd before the first election).
  void StartAsStandby();
  bool is_leader();
  // Fencing: when set, consulted on every call; false means the leader's
  // lease may have expired, so this master serves nothing until the
  // election confirms (it answers NOT_LEADER meanwhile).
  void set_lease_check(std::function<bool()> fn) { lease_check_ = std::move(fn); }
  // Where a standby points callers (from the election key).
  void SetLeaderHint(const std::string& address);
  uint64_t term();
  // Called (outside the lock) with each node id that registers while this
  // master leads, so the HA layer can remember it in etcd.
  void set_on_node_registered(std::function<void(const std::string&)> fn) {
    on_node_registered_ = std::move(fn);
  }

 private:
  struct Node;
  struct Object;
  // A tier's objects, least recently used first; nodes from LruNodePool.
  using LruList = std::list<Object*, LruAllocator<Object*>>;
  // A replica's tier in one byte (v1::Tier is an int).
  class TierByte {
   public:
    TierByte(v1::Tier t = v1::TIER_DRAM) : v_(static_cast<uint8_t>(t)) {}  // NOLINT: implicit
    operator v1::Tier() const { return static_cast<v1::Tier>(v_); }        // NOLINT: implicit

   private:
    uint8_t v_;
  };
  // 24 bytes: one inline in almost every object (docs/master.md, "Memory").
  struct Replica {
    uint32_t node = 0;    // index into nodes_
    uint8_t segment = 0;  // index into its node's segments (at most 64)
    TierByte tier = v1::TIER_DRAM;
    bool demoting = false;  // a DEMOTE order is out for this replica
    uint64_t offset = 0;
    LruList::iterator lru;  // position in its node's tier list
  };
  // A key stored in the index, in 29 bytes: up to 28 inline (content keys
  // are 17, docs/keys.md; under a tenant, TENANT "/" KEY: a 17-byte
  // content key fits under a tenant name of up to 10 characters), longer
  // ones on the heap. Never moved: objects stay where the index built them.
  class ObjectKey {
   public:
    explicit ObjectKey(absl::string_view s);
    ~ObjectKey();
    ObjectKey(const ObjectKey&) = delete;
    ObjectKey& operator=(const ObjectKey&) = delete;
    absl::string_view view() const;
    std::string str() const { return std::string(view()); }

   private:
    static constexpr uint8_t kInline = 28;
    static constexpr uint8_t kHeap = 0xff;
    // Inline: the bytes, then their count in b_[28]. On the heap: the
    // pointer in b_[0..7], the size in b_[8..15], kHeap in b_[28].
    char b_[kInline + 1];
  };
  static_assert(sizeof(ObjectKey) == 29);
  // A key and its hash, computed once for the shard, the prefetch and the
  // find of a batch lookup instead of once for each.
  // Trivial, so that a batch's array of them costs no initialization.
  struct HashedKey {
    const char* data;
    size_t size;
    size_t hash;
    absl::string_view key() const { return absl::string_view(data, size); }
  };
  // A find for PrefetchProbe{hash} matches nothing: it starts loading
  // each object whose slot it would compare with and goes on. It is a
  // batch lookup's second prefetch stage: a table slot holds only a
  // pointer, so the object's own miss can start only once the slot is in
  // cache (master_lookup.cc, FindBatchLocked).
  struct PrefetchProbe {
    size_t hash;
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(absl::string_view k) const { return absl::Hash<absl::string_view>{}(k); }
    size_t operator()(const Object& o) const { return (*this)(o.key.view()); }
    size_t operator()(const HashedKey& k) const { return k.hash; }
    size_t operator()(const PrefetchProbe& p) const { return p.hash; }
  };
  static HashedKey Hashed(absl::string_view k) {
    return HashedKey{k.data(), k.size(), KeyHash{}(k)};
  }
  struct KeyEq {
    using is_transparent = void;
    static absl::string_view V(absl::string_view k) { return k; }
    static absl::string_view V(const HashedKey& k) { return k.key(); }
    static absl::string_view V(const Object& o) { return o.key.view(); }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return V(a) == V(b);
    }
    bool operator()(const Object& o, const PrefetchProbe&) const { return Prefetch(o); }
    bool operator()(const PrefetchProbe&, const Object& o) const { return Prefetch(o); }
    static bool Prefetch(const Object& o) {
      // The object's lines: a 104-byte object spans up to three.
      const char* p = reinterpret_cast<const char*>(&o);
      __builtin_prefetch(p, 1);
      __builtin_prefetch(p + 64, 1);
      __builtin_prefetch(p + sizeof(Object) - 1, 1);
      return false;
    }
  };
  // What few objects carry: the put's parent key, what it told the event
  // stream (docs/events.md; the token ids are not kept), a soft pin.
  struct ObjectExtra {
    std::string parent_key;
    bool has_engine_hash = false;
    bool has_engine_parent_hash = false;
    uint32_t block_tokens = 0;
    uint32_t model = 0;  // in models_; 0: none (the key's, else the namespace)
    uint64_t engine_hash = 0;
    uint64_t engine_parent_hash = 0;
    uint64_t pin_until_ms = 0;  // soft pin: NowMs, UINT64_MAX = until unpinned
  };
  // 104 bytes, so that with its index node header it fills a 112-byte
  // malloc chunk (docs/master.md, "Memory"): what only some objects need
  // is in `extra`. Lookups, under mu_ shared and the object's shard lock,
  // write the lease and the access time; what they read unlocked (key,
  // size, checksum, generation, replicas) must not share a memory
  // location (a bit-field's word) with those.
  struct Object {
    explicit Object(absl::string_view k)
        : key(k), lease_until_ms(0), lease_holders(0), last_access_hi(0) {}
    const ObjectKey key;
    bool hard_pin = false;  // set and read under mu_ exclusive
    // The principal whose put stored the block, as QuotaBook::WriterOf
    // numbers it (its stored-bytes quotas count the replicas); 0: none
    // known (a cluster without principals, a block from an inventory).
    uint16_t writer = 0;
    uint64_t checksum = 0;
    // Which commit of the key this is (a replace, remove then put, gets a
    // new one): told to stores in RECORD notices and to readers in
    // lookups, which cache it; READ_KEY checks it. 0: unknown (learned
    // from an inventory that did not say).
    uint64_t generation = 0;
    // Written by lookups, under the shard's lock: the read lease's end,
    // the holders, the last access. Times are NowMs, which counts from
    // boot: 40 bits last 34 years (SetLeaseUntil clamps), 41 bits 69.
    // Leases granted since the lease last ran out and not yet given back;
    // the lease ends at lease_until_ms or when this drops to 0. Sticky at
    // kLeaseHoldersMax: the lease then ends at lease_until_ms only.
    uint64_t lease_until_ms : 40;
    uint64_t lease_holders : 15;
    uint64_t last_access_hi : 9;  // last_access_ms(): these, then ...
    uint32_t last_access_lo = 0;  // ... the low 32 bits
    uint32_t size = 0;            // <= --block-bytes-max, below 4 GiB
    // Out of line: most blocks carry none, and an empty std::string costs
    // 32 bytes in every object.
    std::unique_ptr<ObjectExtra> extra;
    // Inline: almost every block has one replica, and a heap array costs a
    // malloc'd block and a header besides.
    absl::InlinedVector<Replica, 1> replicas;
    // The soft pin (in `extra`).
    uint64_t pin_until_ms() const { return extra == nullptr ? 0 : extra->pin_until_ms; }
    static constexpr uint64_t kLeaseUntilMax = (uint64_t{1} << 40) - 1;
    void SetLeaseUntil(uint64_t ms) { lease_until_ms = std::min(ms, kLeaseUntilMax); }
    // The last access (NowMs).
    void Touch(uint64_t now_ms) {
      last_access_hi = (now_ms >> 32) & 0x1ff;
      last_access_lo = static_cast<uint32_t>(now_ms);
    }
    uint64_t last_access_ms() const { return (uint64_t{last_access_hi} << 32) | last_access_lo; }
  };
  // The index holds objects as a set: the key is in the object (no second
  // copy, no pointer back). Elements are const to the set only through
  // their key, which is const in Object itself; Mut gives the rest.
  static_assert(sizeof(Object) == 104, "an index node must stay in a 112-byte malloc chunk");
  static Object& Mut(const Object& obj) { return const_cast<Object&>(obj); }
  static constexpr uint32_t kLeaseHoldersMax = (1u << 15) - 1;
  struct Segment {
    uint32_t id = 0;
    std::unique_ptr<storage::RangeAllocator> alloc;
    LruList lru;                  // front = least recently used
    uint64_t demoting_bytes = 0;  // allocated bytes whose demotion is ordered
    // The put byte rate into this segment (master_demote.cc): bytes
    // placed in the current window, and the smoothed rate of past ones.
    uint64_t rate_window_start_ms = 0;
    uint64_t rate_window_bytes = 0;
    double put_bytes_per_s = 0;
    // Used bytes that eviction still has to act on.
    uint64_t settled_used() const { return alloc->used() - demoting_bytes; }
    // A store of arenas in a cluster of tenants (ArenasLocked): the tenant
    // this arena was given to with its first block. It holds that
    // tenant's blocks only, for as long as the node's registration lasts.
    bool bound = false;
    std::string tenant;
  };
  // Where a node's long-poll heartbeat waits for orders: off mu_, and
  // woken only by orders for that node, so a thousand stores long-polling
  // cost the calls that take mu_ nothing. Shared: a reset frees the Node
  // while its heartbeat still waits here.
  struct Wake {
    Mutex mu;
    CondVar cv;                                // `woken` or `noticed` was set
    bool woken ABSL_GUARDED_BY(mu) = false;    // an order: answer at once
    bool noticed ABSL_GUARDED_BY(mu) = false;  // a notice: answer soon
    void Notify() ABSL_LOCKS_EXCLUDED(mu) { Set(&woken); }
    void NotifyNotice() ABSL_LOCKS_EXCLUDED(mu) { Set(&noticed); }

   private:
    void Set(bool* flag) ABSL_LOCKS_EXCLUDED(mu) {
      {
        MutexLock lock(&mu);
        *flag = true;
      }
      cv.SignalAll();
    }
  };
  struct Node {
    v1::StoreEndpoint endpoint;
    std::string admin_address;
    std::map<std::string, std::string> labels;
    v1::NodeState state = v1::NODE_LIVE;
    bool draining = false;
    uint64_t incarnation = 0;
    // This incarnation's own key for write and read grants, drawn at each
    // registration: known to the store and this master only.
    std::string grant_key;
    std::unique_ptr<const HmacKey> grant_mac;  // grant_key, prepared
    // The last DRAM range allocation numbered on this store (write grants'
    // and promotions' range_seq): increasing, from above the floor the
    // store reports at each registration.
    uint64_t range_seq = 0;
    uint64_t last_heartbeat_ms = 0;
    std::vector<Segment> segments;
    uint64_t ssd_capacity = 0;
    uint64_t ssd_used = 0;              // as the master accounts it
    uint64_t ssd_failing_until_ms = 0;  // NowMs; no demotions before (a demotion failed)
    // One demotion at a time is timed from order to durable report; its
    // smoothed time sizes the demotion window (master_demote.cc).
    uint64_t demote_probe_id = 0;  // move id; 0 = none out
    uint64_t demote_probe_ms = 0;  // NowMs it was ordered
    double demote_turnaround_ms = 0;
    LruList ssd_lru;
    uint64_t hard_pinned_bytes = 0;
    // Orders and notices, each numbered (TierMove.seq) when queued and
    // kept until a heartbeat acknowledges it: every answer until then
    // sends it again (Heartbeat, docs/master.md "Heartbeat orders").
    std::deque<v1::TierMove> outbox;   // orders (OrderLocked): they wake a long poll
    std::deque<v1::TierMove> notices;  // RECORD/FORGET (QueueNoticeLocked): they end it soon
    // VERIFY orders out (move id -> the replica a reader reported
    // corrupt): the replica is dropped only if the store finds its bytes
    // bad (ReportDataLoss, VerifyResultLocked).
    struct Verify {
      std::string key;
      uint64_t generation = 0;
      TierByte tier = v1::TIER_DRAM;
      uint32_t segment_id = 0;  // DRAM: the segment's id and the offset
      uint64_t offset = 0;
    };
    absl::flat_hash_map<uint64_t, Verify> verifies;
    uint64_t next_seq = 1;
    uint64_t sent_through = 0;  // the highest seq sent
    bool answer_cut = false;    // the last answer left some out (the size bound)
    bool acks_orders = false;   // its heartbeats acknowledge (as the last one said)
    // Drawn at each registration; heartbeats echo it. One that names
    // another is late (sent before the store registered again): ignored.
    uint64_t registration_id = 0;
    // DROP_SSD orders the store has not reported run (move id -> key):
    // taken is not done, and a store that dies or registers again before
    // running one still lists the key (UnheardRemovalsLocked).
    absl::flat_hash_map<uint64_t, std::string> drops_unreported;
    std::shared_ptr<Wake> wake = std::make_shared<Wake>();
    // The DRAM replicas this node held when it was declared dead, kept
    // until orphans_until_ms (NowMs): the same process (same incarnation)
    // may register again, its memory intact, without knowing the keys of
    // blocks whose RECORD notices it never received.
    std::vector<v1::InventoryEntry> orphans;
    uint64_t orphans_until_ms = 0;
    // Keys removed while this node was dead (NoteRemovedLocked), which its
    // inventory must not bring back; at most kRemovedWhileDeadMax.
    absl::flat_hash_set<std::string> removed_while_dead;
    // The patterns removed while it was dead (RemoveMatching): its blocks
    // were not in the index then, so no key of theirs was noted above.
    // At most kPatternsRemovedWhileDeadMax; a flush replaces them all.
    std::vector<std::shared_ptr<const KeyMatcher>> patterns_removed_while_dead;
    // Keys committed while this node was dead (NoteCommittedLocked), made
    // at its first such commit: an entry of its inventory for a key the
    // index lacks is of an older commit when the key is here (a commit
    // since left the index, evicted or lost with its store), so it is
    // not indexed. A Bloom filter, bounded: past its design count more of
    // the node's blocks are refused, none wrongly taken; past
    // MasterOptions::dead_store_commits_max keys the record is lost.
    std::unique_ptr<KeyFilter> committed_while_dead;
    // The record above is incomplete: it overflowed its bounds, or the
    // node stayed dead past --dead-store-memory and it was dropped. Such
    // a node comes back empty: nothing it lists is indexed; it is told to
    // drop it all (LoseUnheardLocked).
    bool unheard_lost = false;
    uint64_t dead_since_ms = 0;  // NowMs it was declared dead
  };
  static constexpr size_t kRemovedWhileDeadMax = 1 << 20;
  // An answer's orders, at most (the rest go in the next one).
  static constexpr size_t kHeartbeatAnswerBytesMax = 4 << 20;
  static constexpr size_t kPatternsRemovedWhileDeadMax = 1024;
  // What a registering store has not heard of (master_unheard.cc): FORGET
  // notices and DROP_SSD orders not delivered, keys removed while dead.
  struct Unheard {
    std::set<std::tuple<std::string, uint32_t, uint64_t>> forgets;  // key, segment id, offset
    absl::flat_hash_set<std::string> drops;                         // SSD copies of these keys
    absl::flat_hash_set<std::string> removed;                       // any copy of these keys
    std::vector<std::shared_ptr<const KeyMatcher>> patterns;        // keys the index lacks
    std::unique_ptr<KeyFilter> committed;  // keys the index lacks; may be null
    bool all = false;                      // Node::unheard_lost: every entry
    // Node::drops_unreported (a same process may still run them).
    absl::flat_hash_map<uint64_t, std::string> drops_unreported;
  };
  struct PendingPut {
    std::string key;
    uint64_t size = 0;
    uint64_t checksum = 0;
    std::string parent_key;
    std::string owner;                               // who may commit or abort it
    std::unique_ptr<v1::BlockEventInfo> event_info;  // as the put carried it
    uint64_t deadline_ms = 0;                        // NowMs
    std::vector<Replica> ranges;
    bool replace = false;          // PutOptions.replace: the commit replaces the key
    uint64_t soft_pin_ttl_ms = 0;  // PutOptions.soft_pin_ttl_ms: pinned at the commit
  };
  struct PendingPromote {
    std::string key;
    uint32_t node = 0;
    uint64_t incarnation = 0;
    uint32_t segment = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
    uint64_t checksum = 0;
    uint64_t generation = 0;  // the commit promoted (a replace since: not attached)
    uint64_t deadline_ms = 0;
  };
  struct DeferredFree {
    uint64_t at_ms;
    uint32_t node;
    uint32_t segment;
    uint64_t offset;
    uint64_t size;
  };

  // The object index: one shard per slice of the key hash space.
  struct Shard {
    Mutex mu;
    absl::node_hash_set<Object, KeyHash, KeyEq> objects ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kShards = 16;
  static size_t ShardIndex(absl::string_view key) { return ShardOfHash(KeyHash{}(key)); }
  // The high bits: each shard's hash set uses the low ones.
  static size_t ShardOfHash(size_t hash) { return (hash >> 32) % kShards; }
  Shard& ShardOf(absl::string_view key);

  absl::Status ValidateKey(const std::string& key) const;
  // A batch of 1..kBatchItemsMax valid keys; `what` names the call in the
  // error ("a lookup takes 1..1024 keys, got 0").
  absl::Status ValidateKeys(const google::protobuf::RepeatedPtrField<std::string>& keys,
                            absl::string_view what) const;
  // OK when this master leads (and, for `write`, is not recovering).
  absl::Status CheckLeaderLocked(bool write) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Forgets every node, object and put (a new term starts empty).
  void ResetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Index access for callers holding mu_ exclusively (no lookup is in
  // flight, so the object may be changed after the shard is released).
  Object* FindLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts `key` (when absent); returns the object and whether it is new.
  std::pair<Object*, bool> EmplaceLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseIndexLocked(Object* obj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t ObjectCountLocked() ABSL_SHARED_LOCKS_REQUIRED(mu_);
  struct LookupCounts {
    uint64_t leases = 0, dram = 0, ssd = 0;
    void AddTo(MasterMetrics& m) const;
  };
  // The read half of Lookup and MatchPrefix, under mu_ shared: finds each
  // of `keys`, granting a lease (when `lease`) and marking the access under
  // the key's shard. Nothing can leave the index while mu_ is held, so the
  // pointers stay valid until it is released. With `stop_at_miss`, keys
  // after the first absent one are not looked for (null). Without `touch`,
  // neither lease nor access is marked (a peek).
  void FindBatchLocked(const google::protobuf::RepeatedPtrField<std::string>& keys,
                       bool stop_at_miss, bool lease, bool touch, uint64_t now, Object** found,
                       LookupCounts* counts) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Calls fn(found[i]) for each found (non-null) found[i], i in [0, n),
  // holding the lock of key i's shard, one shard at a time (each locked
  // once).
  template <typename Fn>
  void ForEachByShardLocked(const HashedKey* keys, Object* const* found, int n, Fn fn)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // How many keys ahead of its find a batch lookup fetches a key's table
  // slot, and then its object.
  static constexpr int kPrefetchSlotAhead = 12;
  static constexpr int kPrefetchObjectAhead = 6;
  // Starts loading the table slot of `key` (no shard lock: see the body).
  void PrefetchSlot(const HashedKey& key)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Starts loading the objects the find of `key` would compare with: its
  // slot should be in cache by then (PrefetchProbe; no shard lock either).
  void PrefetchObject(const HashedKey& key)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // The object of `key`, or null: a find under mu_ shared and no shard
  // lock (see the body); the caller reads only the object's const key
  // and what changes under mu_ exclusive until it takes the shard.
  Object* FindSharedLocked(const HashedKey& key)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // A lookup's lease and access mark on `obj`, under its shard's lock.
  void MarkLookupLocked(Object* obj, bool lease, uint64_t now, LookupCounts* counts)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // An answer's table of stores (Lookup and MatchPrefix asked with
  // `store_table`): each store once, replicas name it by index. With `out`
  // null, every replica carries its store.
  struct StoreTable {
    google::protobuf::RepeatedPtrField<v1::StoreEndpoint>* out = nullptr;
    absl::InlinedVector<uint32_t, 8> nodes;  // the node of each entry of *out
  };
  // Fills `out` from a found object. Reads only what changes under mu_
  // held exclusively, so no shard lock. `now_unix`: UnixMs, read once per
  // call (grant and lease expiry).
  void FillFoundLocked(const Object& obj, const std::string& key, const std::string& client_host,
                       bool lease, uint64_t now_unix, StoreTable* table, v1::ObjectLocation* out,
                       LookupCounts* counts) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Counts a hit as FillFoundLocked does, filling nothing (count_only).
  void CountHitLocked(const Object& obj, const std::string& client_host, LookupCounts* counts)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int FindNodeLocked(const std::string& id_or_address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillLocation(const Object& obj, const std::string& key, const std::string& client_host,
                    bool lease, uint64_t now_unix, v1::ObjectLocation* out,
                    StoreTable* table = nullptr) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Marks an access: last_access_ms. Under mu_ shared, the caller holds the
  // object's shard.
  void TouchLocked(Object* obj, uint64_t now) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Moves every replica of the `n` objects (null entries skipped) to the
  // back of its LRU list, in order: the last one is the most recent.
  void MoveToBackLocked(Object* const* objs, int n) ABSL_SHARED_LOCKS_REQUIRED(mu_)
      ABSL_LOCKS_EXCLUDED(lru_mu_);
  // Unlinks replica `r` of `obj` from its LRU and frees its space (now, or
  // when the object's lease ends).
  void ReleaseReplicaLocked(Object* obj, const Replica& r, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseObjectLocked(Object* obj, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hard-pinned, or soft-pinned until after `now`: not removed or replaced.
  bool PinnedLocked(const Object& obj, uint64_t now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  static absl::Status PinnedError();
  // Tells the store which committed block a DRAM range holds (or no longer
  // holds), so it can report its DRAM contents to a new master.
  void NoticeLocked(const Object& obj, const Replica& r, bool record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues an order for the node's next heartbeat and wakes its long poll.
  void OrderLocked(Node* n, v1::TierMove move) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a notice for the node's next heartbeat, which answers
  // MasterOptions::notice_delay_ms later.
  void QueueNoticeLocked(Node* n, v1::TierMove notice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Heartbeat's answer: drops what `acked` covers, then sends the rest.
  void ForgetAckedLocked(Node* n, uint64_t acked) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A store's report that the drop `move_id` ran (ok) or failed.
  static void DropReportedLocked(Node* n, const v1::TierMoveResult& result);
  void AnswerOrdersLocked(Node* n, v1::HeartbeatResponse* resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets every replica on `node` and aborts its puts in flight. With
  // `orphans`, appends the node's DRAM replicas to it first.
  void DropNodeReplicasLocked(uint32_t node, uint64_t now,
                              std::vector<v1::InventoryEntry>* orphans = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeRangeLocked(uint32_t node, uint32_t segment, uint64_t offset, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortPutLocked(uint64_t put_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees range `r` of `put` once the put's write grants have expired at
  // every store (grant_skew_ms after its deadline): until then a late
  // frame under its grant may still land there.
  void FreeAfterGrantsLocked(const PendingPut& put, const Replica& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Allocates `size` bytes on `node`, evicting LRU objects there if needed.
  // With `allow_drop`, drops LRU objects there (no demotion) until it fits;
  // without, only orders demotions (asynchronous) and fails.
  // `key` (kept) chooses the arenas of a store of arenas (ArenasLocked):
  // its tenant's, else a free one, which becomes its tenant's.
  absl::StatusOr<Replica> AllocateOnNodeLocked(uint32_t node, uint64_t size, uint64_t now,
                                               bool allow_drop, absl::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `n` is a store of arenas (it registered more than one DRAM
  // segment) in a cluster of tenants: each arena then holds one tenant's
  // blocks, since a same-host client maps whole arenas (docs/security.md,
  // "Tenant arenas").
  bool ArenasLocked(const Node& n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return options_.tenant_namespaces && n.segments.size() > 1;
  }
  // The tenant of a kept key: what precedes its first '/' ("" for none).
  static absl::string_view KeyTenant(absl::string_view kept) {
    size_t slash = kept.find('/');
    return slash == absl::string_view::npos ? absl::string_view() : kept.substr(0, slash);
  }
  // The segments of `n` AllocateOnNodeLocked tries for kept key `key`, in
  // order (master_arenas.cc): all of them, or in a store of arenas the
  // key's tenant's arenas then free ones (none: `*why` says so).
  std::vector<uint32_t> SegmentOrderLocked(const Node& n, absl::string_view key,
                                           absl::Status* why) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives free arena `seg` of `n` to the tenant of `key` (a store of
  // arenas only; a bound arena is left as it is).
  void BindArenaLocked(const Node& n, Segment* seg, absl::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What an eviction pass may do with a victim.
  enum class EvictMode {
    // Order demotions (asynchronous); drop only a DRAM replica whose block
    // has a copy on the node's SSD. The watermark pass: a block that cannot
    // be demoted stays until a put needs its room (a drop frees room at
    // once, so keeping free room ahead of puts would only waste capacity).
    kDemote,
    // Demote where possible, else drop (shelfctl evict).
    kDemoteOrDrop,
    // Drop now: a put needs the room (no demotions: they are not done yet).
    kDrop,
  };
  // Evicts (or demotes) from `seg` of `node` until `target_used` bytes are
  // used or nothing more is evictable. Returns bytes freed now.
  uint64_t EvictSegmentLocked(uint32_t node, Segment* seg, uint64_t target_used, EvictMode mode,
                              uint64_t now, v1::EvictResponse* stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Demotion ahead of need (master_demote.cc). Counts a put's bytes placed
  // in `seg`.
  void NotePutBytesLocked(Segment* seg, uint64_t bytes, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes `seg` keeps free or under demotion: its put rate times the lead
  // time, at least what the --evict-high watermark leaves.
  uint64_t DemoteHeadroomLocked(const Node& n, Segment* seg, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Orders demotions from `seg` when its free room (counting demotions
  // under way as done) is below its headroom.
  void DemoteAheadLocked(uint32_t node, Segment* seg, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Times demotion `move_id`, ordered now, if none is timed on `n`.
  void NoteDemoteOrderedLocked(Node* n, uint64_t move_id, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteDemoteResultLocked(Node* n, uint64_t move_id, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `node` can take demotions now (an SSD tier that is not failing).
  bool CanDemoteLocked(const Node& n, uint64_t now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops least recently used SSD replicas of `node` until its SSD tier
  // holds at most `target_used` bytes (or nothing more is evictable).
  void EvictSsdLocked(uint32_t node, uint64_t target_used, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvictableLocked(const Object& obj, uint64_t now, bool allow_soft_pinned,
                       bool for_demotion) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyMoveResultLocked(uint32_t node, const v1::TierMoveResult& result, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A report of a demotion whose commit went away meanwhile (`current`:
  // the key's commit now, or null); drops the copy the store wrote.
  void StaleMoveResultLocked(uint32_t node, const Object* current, const v1::TierMoveResult& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OrderDropSsdLocked(Node* n, const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A store's answer to a VERIFY order (master_grants.cc): drops the
  // replica when the store found its bytes corrupt.
  void VerifyResultLocked(uint32_t node, const v1::TierMoveResult& result, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddInventoryLocked(uint32_t node, const v1::InventoryEntry& e, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removals `n` has not heard of, taken from it (master_unheard.cc).
  Unheard UnheardRemovalsLocked(Node* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `u` says the copy `e` names was removed (not to be indexed).
  bool UnheardCoversLocked(const Unheard& u, const v1::InventoryEntry& e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells `n` again to drop the copy inventory entry `e` names.
  void TellAgainLocked(Node* n, const v1::InventoryEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A node declared dead keeps the removals it was not told of yet as
  // removed while dead.
  void RememberUnheardLocked(uint32_t node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A client removed `key`: dead nodes remember it (Node::removed_while_dead).
  void NoteRemovedLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A put committed `key` anew: dead nodes remember it
  // (Node::committed_while_dead).
  void NoteCommittedLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A client removed the keys `pattern` matches: dead nodes remember it.
  void NotePatternRemovedLocked(const std::shared_ptr<const KeyMatcher>& pattern)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `n`'s record of what it did not hear of is lost (Node::unheard_lost):
  // frees it, and logs why once per death.
  static void LoseUnheardLocked(Node* n, absl::string_view why);
  // Block events (master_events.cc); no-ops without options_.events.
  // `put_info` (what the committing put carried) may be null.
  void EmitStoredLocked(const Object& obj, const Replica& r, const v1::BlockEventInfo* put_info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitRemovedLocked(const Object& obj, const Replica& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The hash `obj` is published under: its engine hash, else its key's.
  uint64_t BlockHashLocked(const Object& obj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AllBlocksCleared on each node's topic.
  void EmitClearedLocked(const std::vector<std::string>& node_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A node's loss or a flush: between Begin and End, removals are
  // collected; End publishes them as BlockRemoved events listing many
  // blocks each, or, with --events-node-loss=cleared, AllBlocksCleared on
  // each of `node_ids` instead.
  void BeginBulkRemovalLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndBulkRemovalLocked(const std::vector<std::string>& node_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The topic fields of `obj`'s events: its model (the put's, else its
  // key's format's, else none) and its tenant.
  void FillTopicLocked(const Object& obj, KvEvent* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The id of `model` in models_ (added when new); 0 when the table is full.
  uint32_t ModelIdLocked(absl::string_view model) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillNodeStatus(uint32_t node, uint64_t now, v1::NodeStatus* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillReplica(const Replica& r, uint64_t size, v1::Replica* out, StoreTable* table = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // PutStart's steps. CheckPutStart: the request alone (no lock); the
  // number of replicas wanted. NoPlacementLocked: the error when no store
  // is a candidate. PlaceRangesLocked: allocates `want` ranges into
  // put->ranges, waiting (bounded) for demotions to free room; false when
  // the key appeared meanwhile and `resp` already says so.
  // MintGrantsLocked: the replicas and write grants of a started put.
  absl::StatusOr<uint32_t> CheckPutStart(const v1::PutStartRequest& req) const;
  absl::Status NoPlacementLocked(uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> PlaceRangesLocked(const v1::PutStartRequest& req,
                                         const std::vector<uint32_t>& candidates, uint32_t want,
                                         PendingPut* put, v1::PutStartResponse* resp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MintGrantsLocked(uint64_t put_id, uint64_t expires_unix, const PendingPut& put,
                        v1::PutStartResponse* resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A read grant for replica `r` of `key` (master_grants.cc).
  void MintReadGrant(const Replica& r, const std::string& key, uint64_t size, uint64_t expires_unix,
                     v1::Replica* out) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A random put id, non-zero and not live.
  uint64_t NewPutIdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<uint32_t> PlaceLocked(const v1::PutOptions& opts, const std::string& client_host,
                                    uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MasterOptions options_;
  Clock* const clock_;
  const uint64_t start_ms_;

  SharedMutex mu_;
  // The LRU lists change under mu_ held exclusively, or under mu_ shared
  // plus this (lookups moving what they found to the back).
  Mutex lru_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<std::unique_ptr<Node>> nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> node_by_id_ ABSL_GUARDED_BY(mu_);
  std::array<Shard, kShards> shards_;  // each shard's mutex is taken after mu_
  absl::flat_hash_map<uint64_t, PendingPut> puts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> put_by_key_ ABSL_GUARDED_BY(mu_);
  std::vector<DeferredFree> deferred_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, PendingPromote> promotes_ ABSL_GUARDED_BY(mu_);
  uint64_t next_promote_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Ranges freed so far, changed under mu_ held exclusively. A put that
  // waits for room waits off mu_, on room_cv_, for this to move.
  std::atomic<uint64_t> frees_{0};
  Mutex room_mu_ ABSL_ACQUIRED_AFTER(mu_);
  CondVar room_cv_;                                      // frees_ moved
  uint64_t demotions_pending_ ABSL_GUARDED_BY(mu_) = 0;  // DEMOTE orders not yet answered
  uint64_t next_move_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Bumped by ResetLocked: a call that waited (releasing mu_) compares it
  // before touching a Node it held, since a reset frees every Node.
  uint64_t reset_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  MasterMetrics metrics_;
  std::unique_ptr<QuotaBook> quotas_;
  std::vector<prom::CallbackHandle> gauges_;
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  bool leader_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t term_ ABSL_GUARDED_BY(mu_) = 1;
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t recovery_deadline_ms_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> expected_nodes_ ABSL_GUARDED_BY(mu_);
  std::string leader_hint_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_node_registered_;
  std::function<bool()> lease_check_;
  // Set between BeginBulkRemovalLocked and EndBulkRemovalLocked: the
  // removals collected, per topic (node, model, tenant) and medium (one of
  // kMediumDram, kMediumSsd: compared as pointers).
  using BulkTopic = std::tuple<std::string, std::string, std::string, const char*>;
  std::unique_ptr<std::map<BulkTopic, std::vector<uint64_t>>> bulk_removed_ ABSL_GUARDED_BY(mu_);
  // Models named by puts (docs/events.md, "Topics and models"); index 0 is "none".
  std::vector<std::string> models_ ABSL_GUARDED_BY(mu_) = {""};
  absl::flat_hash_map<std::string, uint32_t> model_ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_MASTER_H_
