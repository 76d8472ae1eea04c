// The node registry's types: what the master knows of each store (Node),
// of each of its DRAM segments (Segment), and what a store that was away
// has not heard of (Unheard). The Master keeps them in its registry under
// its lock (master.h); registry/nodes.cc registers and forgets them,
// registry/heartbeat.cc carries their orders and notices.
#ifndef SHELF_SERVER_MASTER_REGISTRY_NODE_H_
#define SHELF_SERVER_MASTER_REGISTRY_NODE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/hmac.h"
#include "common/mutex.h"
#include "proto/shelf.pb.h"
#include "server/master/index/object.h"
#include "server/master/registry/key_filter.h"
#include "server/master/tiers/demotion_planner.h"
#include "storage/allocator.h"

namespace shelf::master {

class KeyMatcher;  // reads/key_matcher.h

struct Segment {
  uint32_t id = 0;
  std::unique_ptr<storage::RangeAllocator> alloc;
  LruList lru;                  // front = least recently used
  uint64_t demoting_bytes = 0;  // allocated bytes whose demotion is ordered
  // Allocated bytes of clean replicas: blocks also on this store's SSD.
  uint64_t clean_bytes = 0;
  // The put byte rate into this segment (tiers/demotion_planner.h).
  PutRate put_rate;
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
  // Signals only when the flag turns true: a waiter was woken then, or
  // saw it set when it began to wait, so a burst of commits costs one
  // wake-up of the heartbeat, not one each.
  void Set(bool* flag) ABSL_LOCKS_EXCLUDED(mu) {
    {
      MutexLock lock(&mu);
      if (*flag) return;
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
  // Times its demotions, which size its lead time (tiers/demotion_planner.h).
  DemoteTimer demote_timer;
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

  // Its DRAM segments together (docs/storage.md, "What the capacity
  // holds"): `dram_only` is what is used and neither clean nor demoting.
  struct DramTotals {
    uint64_t capacity = 0, used = 0, clean = 0, demoting = 0, objects = 0;
    uint64_t dram_only() const { return used - std::min(used, clean + demoting); }
  };
  DramTotals Dram() const {
    DramTotals t;
    for (const Segment& s : segments) {
      t.capacity += s.alloc->capacity();
      t.used += s.alloc->used();
      t.clean += s.clean_bytes;
      t.demoting += s.demoting_bytes;
      t.objects += s.lru.size();
    }
    return t;
  }

  // What goes with the node's replicas (it died, or registered anew):
  // SSD accounting, the timed demotion, pinned bytes, and the orders,
  // notices and verifications about them.
  void ForgetReplicaState() {
    ssd_used = 0;
    demote_timer.Forget();
    hard_pinned_bytes = 0;
    outbox.clear();
    notices.clear();
    verifies.clear();
  }
};
inline constexpr size_t kRemovedWhileDeadMax = 1 << 20;
// An answer's orders, at most (the rest go in the next one).
inline constexpr size_t kHeartbeatAnswerBytesMax = 4 << 20;
inline constexpr size_t kPatternsRemovedWhileDeadMax = 1024;
// What a registering store has not heard of (unheard.cc): FORGET
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

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_REGISTRY_NODE_H_
