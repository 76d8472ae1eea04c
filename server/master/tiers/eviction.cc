// Eviction and the tiers: which blocks may leave DRAM (not leased, not
// pinned, not under demotion), how a pass over a segment demotes or drops
// them, and the SSD tier's own least-recently-used eviction.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/sync_point.h"
#include "server/master/master.h"

namespace shelf::master {

bool Master::EvictableLocked(const Object& obj, uint64_t now, bool allow_soft_pinned,
                             bool for_demotion) const {
  // A demotion copies the block and frees its DRAM range only when the
  // lease ends (deferred free), so a lease does not stop one; a drop would
  // break the lease, so it does.
  if (obj.hard_pin || (!for_demotion && obj.lease_until_ms > now)) return false;
  if (obj.pin_until_ms() > now && !allow_soft_pinned) return false;
  for (const Replica& r : obj.replicas) {
    if (r.demoting) return false;
  }
  return true;
}

bool Master::CanDemoteLocked(const Node& n, uint64_t now) const {
  return n.ssd_capacity > 0 && n.ssd_failing_until_ms <= now;
}

uint64_t Master::EvictSegmentLocked(uint32_t node, Segment* seg, uint64_t target_used,
                                    EvictMode mode, uint64_t now, v1::EvictResponse* stats) {
  Node& n = *nodes_[node];
  const bool demote_ok = mode != EvictMode::kDrop && mode != EvictMode::kDropClean;
  // Demotion ahead of need copies (--demote-keep-dram); one that must
  // free the room (a put's, an admin's Evict) moves.
  const bool keep_dram =
      mode == EvictMode::kCopy || (options_.demote_keep_dram && mode == EvictMode::kDemote);
  // Passes that never drop a block its store holds nowhere else.
  const bool keeps_blocks =
      mode == EvictMode::kDemote || mode == EvictMode::kMoveNow || mode == EvictMode::kCopy;
  uint64_t freed = 0;
  // The list is in LRU order (lookups move what they find to the back).
  // Pass 0, when tenants have guaranteed DRAM shares, takes only blocks of
  // tenants over theirs; pass 1 skips soft-pinned blocks; pass 2 takes them
  // too, but not in a cluster of tenants, where a soft pin is another
  // tenant's to keep (docs/security.md, "Quotas").
  const bool shares = quotas_->any_guarantee();
  const int passes = options_.tenant_namespaces ? 2 : 3;
  for (int pass = shares ? 0 : 1; pass < passes; ++pass) {
    for (auto it = seg->lru.begin(); it != seg->lru.end();) {
      // Demotions already ordered will free their bytes: count them done,
      // unless this pass must make room now (it drops; a demotion may yet
      // fail).
      if ((demote_ok ? UnsettledLocked(*seg, keep_dram) : seg->alloc->used()) <= target_used) {
        return freed;
      }
      Object* obj = *it++;
      Replica* rep = nullptr;
      bool has_ssd_here = false;
      for (Replica& r : obj->replicas) {
        if (r.node == node && r.tier == v1::TIER_DRAM && &n.segments[r.segment] == seg) rep = &r;
        if (r.node == node && r.tier == v1::TIER_SSD) has_ssd_here = true;
      }
      if (rep == nullptr) continue;
      if (mode == EvictMode::kDropClean && !has_ssd_here) continue;
      // Clean copies are room already: demotion ahead of need leaves them
      // in DRAM, and a put drops them (kDropClean) before it moves blocks,
      // so those it finds are leased.
      if ((keep_dram || mode == EvictMode::kMoveNow) && has_ssd_here) continue;
      if (!EvictableLocked(*obj, now, pass == 2, demote_ok)) continue;
      if (pass == 0 && !quotas_->OverGuarantee(obj->key.view())) continue;
      uint64_t aligned = seg->alloc->RoundUp(obj->size);
      uint64_t ssd_high = static_cast<uint64_t>(options_.ssd_evict_high * n.ssd_capacity);
      bool can_demote =
          demote_ok && !has_ssd_here && obj->size <= ssd_high && n.ssd_failing_until_ms <= now;
      if (can_demote && n.ssd_used + obj->size > ssd_high) {
        // Make room on SSD first: its least recently used go, and this
        // block takes their place (an LRU across both tiers).
        EvictSsdLocked(node, static_cast<uint64_t>(options_.ssd_evict_low * n.ssd_capacity), now);
        can_demote = n.ssd_used + obj->size <= ssd_high;
      }
      if (!can_demote && obj->lease_until_ms > now) continue;  // leased: cannot drop
      // The watermark pass drops only what stays on SSD here; the rest
      // keeps its room until a put needs it.
      if (!can_demote && keeps_blocks && !has_ssd_here) continue;
      if (can_demote) {
        v1::TierMove m;
        m.set_move_id(next_move_id_++);
        m.set_key(obj->key.str());
        m.set_kind(v1::TierMove::DEMOTE);
        m.set_segment_id(seg->id);
        m.set_offset(rep->offset);
        m.set_size(obj->size);
        m.set_checksum(obj->checksum);
        m.set_generation(obj->generation);
        m.set_term(leadership_.term());
        m.set_keep_dram(keep_dram);
        n.demote_timer.Ordered(m.move_id(), now);
        OrderLocked(&n, std::move(m));
        rep->demoting = true;
        ++demotions_pending_;
        n.ssd_used += obj->size;
        seg->demoting_bytes += aligned;
        if (stats != nullptr) stats->set_demoted_objects(stats->demoted_objects() + 1);
        continue;
      }
      // Drop this replica; the object goes when it was the last one.
      Replica victim = *rep;
      obj->replicas.erase(obj->replicas.begin() + (rep - obj->replicas.data()));
      ReleaseReplicaLocked(obj, victim, now);
      if (obj->replicas.empty()) EraseIndexLocked(obj);
      freed += aligned;
      metrics_.evictions.Increment();
      if (mode == EvictMode::kDrop && !has_ssd_here) metrics_.put_drops.Increment();
      if (stats != nullptr) {
        stats->set_evicted_objects(stats->evicted_objects() + 1);
        stats->set_evicted_bytes(stats->evicted_bytes() + aligned);
      }
    }
  }
  return freed;
}

void Master::EvictSsdLocked(uint32_t node, uint64_t target_used, uint64_t now) {
  Node& n = *nodes_[node];
  // In LRU order (lookups move what they find to the back). An SSD copy of
  // a block still clean in DRAM here is a copy ahead (--demote-keep-dram),
  // written after the blocks below it: LRU order takes the older blocks
  // first, and the DRAM copy left goes back to DRAM-only.
  for (auto it = n.ssd_lru.begin(); it != n.ssd_lru.end() && n.ssd_used > target_used;) {
    Object* obj = *it++;
    size_t k = 0;
    while (k < obj->replicas.size() &&
           !(obj->replicas[k].node == node && obj->replicas[k].tier == v1::TIER_SSD)) {
      ++k;
    }
    if (k == obj->replicas.size()) continue;
    if (!EvictableLocked(*obj, now, false, false)) continue;
    Replica victim = obj->replicas[k];
    obj->replicas.erase(obj->replicas.begin() + k);
    ReleaseReplicaLocked(obj, victim, now);
    metrics_.evictions.Increment();
    if (obj->replicas.empty()) EraseIndexLocked(obj);
  }
}

uint64_t Master::UnsettledLocked(const Segment& seg, bool clean_is_room) const {
  uint64_t settled = seg.demoting_bytes + (clean_is_room ? seg.clean_bytes : 0);
  return seg.alloc->used() - std::min(seg.alloc->used(), settled);
}

}  // namespace shelf::master
