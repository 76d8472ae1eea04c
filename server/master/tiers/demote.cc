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

#include "common/check.h"
#include "common/log.h"
#include "server/master/master.h"
#include "server/master/tiers/demotion_planner.h"

namespace shelf::master {

void Master::DemoteAheadLocked(uint32_t node, Segment* seg, uint64_t now) {
  Node& n = *nodes_[node];
  if (!CanDemoteLocked(n, now)) return;
  const uint64_t cap = seg->alloc->capacity();
  const HeadroomPolicy policy{options_.evict_high, options_.demote_lead_ms,
                              options_.demote_headroom_max};
  uint64_t headroom = std::min(cap, DemoteHeadroom(policy, cap, seg->put_rate.BytesPerSecond(now),
                                                   n.demote_timer.turnaround_ms()));
  if (UnsettledLocked(*seg, options_.demote_keep_dram) + headroom <= cap) return;
  // Past the line: demote a batch beyond it (the watermarks' gap), so
  // orders go out in runs the store syncs together.
  uint64_t batch = static_cast<uint64_t>((options_.evict_high - options_.evict_low) * cap);
  uint64_t line = cap - headroom;
  EvictSegmentLocked(node, seg, line > batch ? line - batch : 0, EvictMode::kDemote, now, nullptr);
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
  n.demote_timer.Reported(result.move_id(), now);
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
    if (result.keep_dram()) {
      // A copy ahead (--demote-keep-dram): the DRAM copy stays where it is
      // in its LRU list, now clean, and the SSD copy joins it. A writer
      // takes its room at once; a reader still finds it in DRAM.
      Replica ssd;
      ssd.node = node;
      ssd.tier = v1::TIER_SSD;
      ssd.lru = n.ssd_lru.insert(n.ssd_lru.end(), obj);
      obj->replicas.push_back(ssd);  // `r` is not used past this point
      ReplicaAddedLocked(obj, &obj->replicas.back(), nullptr);
      metrics_.demotions_ok.Increment();
      RoomMadeLocked();
      return;
    }
    // Free the DRAM range and re-link as SSD. Under a lease the range
    // waits for the lease's end, or for its last reader's release
    // (EndGoneLeasesLocked), whichever comes first.
    Replica old = r;
    n.segments[old.segment].lru.erase(old.lru);
    if (obj->lease_until_ms > now) {
      deferred_.push_back(
          {obj->lease_until_ms, node, old.segment, old.offset, obj->size, GoneLeaseLocked(*obj)});
    } else {
      FreeRangeLocked(node, old.segment, old.offset, obj->size);
    }
    r.tier = v1::TIER_SSD;
    r.segment = 0;
    r.offset = 0;
    r.lru = n.ssd_lru.insert(n.ssd_lru.end(), obj);
    // A tier move: the DRAM copy goes, an SSD copy comes.
    ReplicaRemovedLocked(obj, old);
    ReplicaAddedLocked(obj, &r, nullptr);
    metrics_.demotions_ok.Increment();
    return;
  }
  // No demotion of this commit is pending here (the store registered again
  // meanwhile, or a report repeated after a lost heartbeat answer): the
  // copy it wrote is kept only if the index has this node's SSD copy.
  StaleMoveResultLocked(node, obj, result);
}

}  // namespace shelf::master
