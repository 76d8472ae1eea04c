// Master: the metadata master's state machine, without the RPC layer.
//
// Owns the node registry and liveness, one RangeAllocator per DRAM segment,
// the object index, two-phase puts, read leases, pins and eviction. It never
// touches block bytes. The gRPC services (service.h) are thin adapters over
// the public calls, and benchmarks and tests call them in-process; the etcd
// side of HA drives the master's role through Electable alone.
//
// Its parts, by concern (one index lock, so one class; each subfolder holds
// a concern's calls and the collaborators it has on its own):
//   index/      Object, Replica, ObjectKey, the shards (index/object.h)
//   registry/   Node, Segment; registration, heartbeats, what a store missed
//   placement/  where a put goes, the range on each store, tenant arenas
//   puts/       two-phase puts, write and read grants, reported data loss
//   reads/      lookups and leases, listing, Locate, key patterns
//   tiers/      eviction, demotion ahead of need (demotion_planner.h), promotion
//   ha/         Leadership (the role's state), Electable, the terms
//   events/     BlockEvents (index changes as events), the publisher
//   quotas/     QuotaBook, tenant keys
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
#include <utility>
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
#include "server/master/events/block_events.h"
#include "server/master/events/kv_events.h"
#include "server/master/ha/electable.h"
#include "server/master/ha/leadership.h"
#include "server/master/index/object.h"
#include "server/master/master_metrics.h"
#include "server/master/master_options.h"
#include "server/master/puts/pending.h"
#include "server/master/quotas/quotas.h"
#include "server/master/registry/node.h"
#include "shelf/limits.h"
#include "storage/allocator.h"

namespace shelf::master {

class Master final : private Electable {
 public:
  // Metrics go to `exposition` (the process-wide default when null), which
  // must outlive the master.
  explicit Master(MasterOptions options, prom::Exposition* exposition = nullptr);
  ~Master() override;

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
  // (puts/grants.cc). It proves it was sent there by presenting the read
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
  // Listing and bulk removal by pattern (reads/keys.cc; the pattern forms
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
  // tier (reads/keys.cc). Touches nothing: no lease, no LRU move.
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

  // What each tenant and principal holds, and their quotas (quotas/quotas.h).
  QuotaBook& quotas() { return *quotas_; }

  // The master's counters (also exported as metrics).
  const MasterMetrics& metrics() const { return metrics_; }

  const MasterOptions& options() const { return options_; }
  // The master's role, as the etcd side of HA drives it (ha/electable.h).
  Electable& electable() { return *this; }

 private:
  // Electable (ha/terms.cc).
  void BecomeLeader(uint64_t term, std::vector<std::string> expected, uint64_t grace_ms) override;
  void StepDown(const std::string& leader_hint) override;
  void StartAsStandby() override;
  bool is_leader() override;
  uint64_t term() override;
  void SetLeaderHint(const std::string& address) override;
  void SetLeaderAddress(const std::string& address) override;
  void set_lease_check(std::function<bool()> fn) override;
  void set_on_node_registered(std::function<void(const std::string&)> fn) override {
    on_node_registered_ = std::move(fn);
  }

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
  // Gives back one reader's lease on each removed object named (key as
  // kept, generation): the last frees the object's deferred ranges now.
  void ReleaseGoneLeasesLocked(const std::vector<std::pair<std::string, uint64_t>>& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the deferred ranges of each object named whose lease every
  // holder has given back while it stayed in the index (a demotion, a
  // dropped copy): ReleaseLeases saw its count reach 0.
  void EndGoneLeasesLocked(const std::vector<std::pair<std::string, uint64_t>>& ended)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The GoneLease of `obj`'s lease, for a DRAM range freed under it (its id
  // for DeferredFree::gone_lease), made or brought to the object's count
  // now; 0 when the lease's holders are not counted (none, or the count
  // stopped at kLeaseHoldersMax): the range then waits for the lease's end.
  uint64_t GoneLeaseLocked(const Object& obj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees every deferred range of a GoneLease and forgets it.
  void FreeGoneLeaseLocked(const std::pair<std::string, uint64_t>& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes the puts waiting for room (frees_ moves).
  void RoomMadeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeRangeLocked(uint32_t node, uint32_t segment, uint64_t offset, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortPutLocked(uint64_t put_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live put `id` when `owner` started it; else null, with `st` saying
  // why (NOT_FOUND: unknown or reclaimed; PERMISSION_DENIED: another's).
  PendingPut* OwnedPutLocked(uint64_t id, const std::string& owner, v1::RpcStatus* st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // order (placement/arenas.cc): all of them, or in a store of arenas the
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
    // Drop clean replicas only (their block stays on the node's SSD): a
    // put takes their room at once, losing nothing (--demote-keep-dram).
    kDropClean,
    // Move DRAM-only blocks to SSD (no copy kept): a put found no room it
    // could take at once (clean copies leased) and waits for these.
    kMoveNow,
    // Copy DRAM-only blocks to SSD, keeping them in DRAM (an admin's
    // Evict with copy); nothing dropped.
    kCopy,
  };
  // The bytes of `seg` eviction still has to act on: allocated, less what
  // demotions under way will free, less (`clean_is_room`) clean replicas,
  // which a writer takes at once.
  uint64_t UnsettledLocked(const Segment& seg, bool clean_is_room) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts (or demotes) from `seg` of `node` until `target_used` bytes are
  // used or nothing more is evictable. Returns bytes freed now.
  uint64_t EvictSegmentLocked(uint32_t node, Segment* seg, uint64_t target_used, EvictMode mode,
                              uint64_t now, v1::EvictResponse* stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Demotion ahead of need (tiers/demote.cc, the arithmetic in
  // tiers/demotion_planner.h).
  // Orders demotions from `seg` when its free room (counting demotions
  // under way as done) is below its headroom.
  void DemoteAheadLocked(uint32_t node, Segment* seg, uint64_t now)
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
  // A store's answer to a VERIFY order (puts/grants.cc): drops the
  // replica when the store found its bytes corrupt.
  void VerifyResultLocked(uint32_t node, const v1::TierMoveResult& result, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddInventoryLocked(uint32_t node, const v1::InventoryEntry& e, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removals `n` has not heard of, taken from it (registry/unheard.cc).
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
  // A replica entered or left the index (every change of a replica set
  // passes here): its writer's and tenant's stored bytes (quotas/quotas.h),
  // the event stream (events_) and its segment's clean bytes follow. `r`
  // entered as one of obj->replicas; one that left may be a copy taken out
  // of them. `put_info` (what the committing put carried) may be null.
  void ReplicaAddedLocked(Object* obj, Replica* r, const v1::BlockEventInfo* put_info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReplicaRemovedLocked(Object* obj, const Replica& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // A read grant for replica `r` of `key` (puts/grants.cc).
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
  // The leases of objects that lost a DRAM range while readers held them
  // (removed, replaced, demoted, a copy dropped), by key as kept and
  // generation: those ranges wait in deferred_ until the lease ends, or
  // until every reader has given it back (ReleaseLeases), whichever comes
  // first. While the object is in the index its own count says when; once
  // it is gone, `holders` (its count when it went).
  struct GoneLease {
    uint64_t id = 0;
    uint32_t holders = 0;
    uint64_t until_ms = 0;
  };
  absl::flat_hash_map<std::pair<std::string, uint64_t>, GoneLease> gone_leases_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_gone_lease_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, PendingPromote> promotes_ ABSL_GUARDED_BY(mu_);
  uint64_t next_promote_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Ranges freed (or made clean: a writer's at once) so far, changed under
  // mu_ held exclusively (RoomMadeLocked). A put that waits for room waits
  // off mu_, on room_cv_, for this to move.
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
  // Whether this master leads, its term, its recovery (ha/leadership.h).
  Leadership leadership_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_node_registered_;
  // The event stream's side of the index (docs/events.md).
  BlockEvents events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_MASTER_H_
