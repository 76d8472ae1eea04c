// Demotion ahead of need: each DRAM segment keeps room free (or under
// demotion) for what its writers put in the time a demotion takes, so a put
// finds room rather than waiting for a demotion to free it. The room is the
// segment's recent put byte rate times a lead time: --demote-lead-ms, or
// twice the measured order-to-durable-report time of a demotion on that
// store when longer; never less than the --evict-high watermark leaves,
// never more than --demote-headroom-max of the segment (docs/storage.md).
// --demote-lead 0 leaves the fixed watermarks alone.
//
// And the stores' reports of their demotions: each names the commit it
// moved (its generation), so a report that outlived its commit (removed,
// or replaced by a later put of the key, while the store worked) is never
// applied to another commit; the copy it wrote is dropped instead.
#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/log.h"
#include "server/master/master.h"

namespace shelf::master {
namespace {

constexpr uint64_t kRateWindowMs = 50;
// A timed demotion not answered in this long (its replica went away, or
// the store died) stops being waited for.
constexpr uint64_t kProbeGiveUpMs = 10000;

}  // namespace

void Master::NotePutBytesLocked(Segment* seg, uint64_t bytes, uint64_t now) {
  if (now < seg->rate_window_start_ms) seg->rate_window_start_ms = now;  // a clock set back
  uint64_t elapsed = now - seg->rate_window_start_ms;
  if (elapsed >= kRateWindowMs) {
    // The window's average (idle windows included) weighs in by how many
    // windows it spans: a burst's rate fades within a few hundred ms.
    double sample = static_cast<double>(seg->rate_window_bytes) * 1000.0 / elapsed;
    double keep =
        std::pow(0.5, static_cast<double>(std::min<uint64_t>(elapsed / kRateWindowMs, 64)));
    seg->put_bytes_per_s = seg->put_bytes_per_s * keep + sample * (1 - keep);
    seg->rate_window_start_ms = now;
    seg->rate_window_bytes = 0;
  }
  seg->rate_window_bytes += bytes;
}

uint64_t Master::DemoteHeadroomLocked(const Node& n, Segment* seg, uint64_t now) {
  NotePutBytesLocked(seg, 0, now);  // rolls the rate window
  const double cap = static_cast<double>(seg->alloc->capacity());
  double floor = (1 - options_.evict_high) * cap;
  if (options_.demote_lead_ms == 0) return static_cast<uint64_t>(floor);  // watermarks only
  double lead_ms =
      std::max<double>(static_cast<double>(options_.demote_lead_ms), 2 * n.demote_turnaround_ms);
  double want =
      std::min(seg->put_bytes_per_s * lead_ms / 1000.0, options_.demote_headroom_max * cap);
  return static_cast<uint64_t>(std::max(want, floor));
}

void Master::DemoteAheadLocked(uint32_t node, Segment* seg, uint64_t now) {
  Node& n = *nodes_[node];
  if (!CanDemoteLocked(n, now)) return;
  const uint64_t cap = seg->alloc->capacity();
  uint64_t headroom = std::min(cap, DemoteHeadroomLocked(n, seg, now));
  if (seg->settled_used() + headroom <= cap) return;
  // Past the line: demote a batch beyond it (the watermarks' gap), so
  // orders go out in runs the store syncs together.
  uint64_t batch = static_cast<uint64_t>((options_.evict_high - options_.evict_low) * cap);
  uint64_t line = cap - headroom;
  EvictSegmentLocked(node, seg, line > batch ? line - batch : 0, EvictMode::kDemote, now, nullptr);
}

void Master::NoteDemoteOrderedLocked(Node* n, uint64_t move_id, uint64_t now) {
  if (n->demote_probe_id != 0 && now >= n->demote_probe_ms &&
      now - n->demote_probe_ms < kProbeGiveUpMs) {
    return;
  }
  n->demote_probe_id = move_id;
  n->demote_probe_ms = now;
}

void Master::NoteDemoteResultLocked(Node* n, uint64_t move_id, uint64_t now) {
  if (move_id == 0 || move_id != n->demote_probe_id) return;
  n->demote_probe_id = 0;
  double sample = now >= n->demote_probe_ms ? static_cast<double>(now - n->demote_probe_ms) : 0;
  n->demote_turnaround_ms =
      n->demote_turnaround_ms == 0 ? sample : 0.75 * n->demote_turnaround_ms + 0.25 * sample;
}

void Master::OrderDropSsdLocked(Node* n, const std::string& key) {
  v1::TierMove drop;
  drop.set_move_id(next_move_id_++);
  drop.set_key(key);
  drop.set_kind(v1::TierMove::DROP_SSD);
  OrderLocked(n, std::move(drop));
}

void Master::StaleMoveResultLocked(uint32_t node, const Object* current,
                                   const v1::TierMoveResult& result) {
  metrics_.demotions_stale.Increment();
  if (!result.ok()) return;  // nothing was written
  // The store holds a copy of a commit nobody can read: drop it, unless
  // this store has the key's current commit on its way to SSD or there.
  // On its way: a store runs its orders in order, so that demotion,
  // ordered after this one, overwrites the copy (or, failing, has it
  // dropped), and a drop ordered now would run after it and delete the
  // current commit. There: the copy may be the current commit's.
  if (current != nullptr) {
    for (const Replica& r : current->replicas) {
      if (r.node == node && (r.tier == v1::TIER_SSD || r.demoting)) return;
    }
  }
  OrderDropSsdLocked(nodes_[node].get(), result.key());
}

void Master::ApplyMoveResultLocked(uint32_t node, const v1::TierMoveResult& result, uint64_t now) {
  Object* obj = FindLocked(result.key());
  Node& n = *nodes_[node];
  NoteDemoteResultLocked(&n, result.move_id(), now);
  if (obj == nullptr || (result.generation() != 0 && result.generation() != obj->generation)) {
    // The commit it moved went away while the store worked: removed, or
    // all its replicas died, or replaced by a later commit of the key.
    // The reservations were undone when it went (ReleaseReplicaLocked).
    StaleMoveResultLocked(node, obj, result);
    return;
  }
  if (result.generation() == 0 && obj->generation != 0)
    metrics_.demotion_reports_unnamed.Increment();
  for (size_t i = 0; i < obj->replicas.size(); ++i) {
    Replica& r = obj->replicas[i];
    if (r.node != node || r.tier != v1::TIER_DRAM || !r.demoting) continue;
    r.demoting = false;
    SHELF_CHECK(demotions_pending_ > 0) << "a demotion result with no demotion pending";
    --demotions_pending_;
    Segment& seg = n.segments[r.segment];
    seg.demoting_bytes -= std::min(seg.demoting_bytes, seg.alloc->RoundUp(obj->size));
    if (!result.ok()) {
      n.ssd_used -= std::min<uint64_t>(n.ssd_used, obj->size);
      // A failing SSD tier (full disk, I/O errors) gets no demotions for a
      // while: each would cost a writer its --demote-wait for nothing.
      n.ssd_failing_until_ms = now + kSsdFailureBackoffMs;
      metrics_.demotions_failed.Increment();
      SHELF_LOG(WARNING) << "demotion failed" << Kv("node", n.endpoint.node_id())
                         << Kv("error", result.error());
      // A demotion is ordered only where the master counts no SSD copy of
      // the key, so one there now is an earlier commit's (a stale
      // report's, StaleMoveResultLocked), which this one was to replace.
      bool ssd_here = false;
      for (const Replica& other : obj->replicas) {
        ssd_here |= other.node == node && other.tier == v1::TIER_SSD;
      }
      if (!ssd_here) OrderDropSsdLocked(&n, result.key());
      return;  // stays in DRAM; eviction may drop it later
    }
    // Free the DRAM range (or defer it under a lease) and re-link as SSD.
    Replica old = r;
    n.segments[old.segment].lru.erase(old.lru);
    if (obj->lease_until_ms > now) {
      deferred_.push_back({obj->lease_until_ms, node, old.segment, old.offset, obj->size});
    } else {
      FreeRangeLocked(node, old.segment, old.offset, obj->size);
    }
    r.tier = v1::TIER_SSD;
    r.segment = 0;
    r.offset = 0;
    r.lru = n.ssd_lru.insert(n.ssd_lru.end(), obj);
    // A tier move: the DRAM copy goes, an SSD copy comes.
    EmitRemovedLocked(*obj, old);
    EmitStoredLocked(*obj, r, nullptr);
    metrics_.demotions_ok.Increment();
    return;
  }
  // No demotion of this commit is pending here (the store registered again
  // meanwhile, or a report repeated after a lost heartbeat answer): the
  // copy it wrote is kept only if the index has this node's SSD copy.
  StaleMoveResultLocked(node, obj, result);
}

}  // namespace shelf::master
