// Placement and allocation: which stores a put's replicas go to (labels,
// same-host preference, spread), and the DRAM range on each, evicting
// least recently used blocks there when a put needs the room. Tenant
// arenas narrow the segments tried (arenas.cc).
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

std::vector<uint32_t> Master::PlaceLocked(const v1::PutOptions& opts,
                                          const std::string& client_host, uint64_t size) {
  std::vector<uint32_t> live;
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = *nodes_[i];
    if (n.state != v1::NODE_LIVE || n.draining) continue;
    bool fits = false;
    for (const Segment& s : n.segments) fits |= s.alloc->capacity() >= size;
    if (fits) live.push_back(i);
  }
  // Stores with room for the block first, most free space first. Then
  // the full ones, the one whose least recently used block was used
  // longest ago first: the put evicts there, so the stores together evict
  // as one LRU rather than each its own share. Ties are broken at random
  // so equal stores share load.
  struct Rank {
    bool room = false;
    uint64_t free = 0;
    uint64_t oldest_ms = UINT64_MAX;
    uint32_t node = 0;
  };
  std::vector<Rank> ranked;
  for (uint32_t i : live) {
    Rank r;
    r.node = i;
    for (const Segment& s : nodes_[i]->segments) {
      // Clean copies (--demote-keep-dram) are room: a put drops them at once.
      const uint64_t clean = options_.demote_keep_dram ? s.clean_bytes : 0;
      r.free += s.alloc->free_bytes() + clean;
      r.room |=
          s.alloc->largest_free() >= s.alloc->RoundUp(size) || clean >= s.alloc->RoundUp(size);
      if (!s.lru.empty()) r.oldest_ms = std::min(r.oldest_ms, s.lru.front()->last_access_ms());
    }
    ranked.push_back(r);
  }
  // Ties go to a random store (std::rand shares one state across threads).
  static thread_local std::minstd_rand rng(std::random_device{}());
  std::shuffle(ranked.begin(), ranked.end(), rng);
  std::stable_sort(ranked.begin(), ranked.end(), [](const Rank& a, const Rank& b) {
    if (a.room != b.room) return a.room;
    return a.room ? a.free > b.free : a.oldest_ms < b.oldest_ms;
  });
  std::vector<uint32_t> order;
  if (opts.prefer_local()) {
    const std::string& host = opts.client_host_id().empty() ? client_host : opts.client_host_id();
    for (const Rank& r : ranked) {
      if (nodes_[r.node]->endpoint.host_id() == host) order.push_back(r.node);
    }
  }
  for (const Rank& r : ranked) {
    if (std::find(order.begin(), order.end(), r.node) == order.end()) order.push_back(r.node);
  }
  if (!opts.spread_label().empty()) {
    // Distinct label values first, then the rest.
    std::vector<uint32_t> first, rest;
    std::set<std::string> seen;
    for (uint32_t i : order) {
      auto it = nodes_[i]->labels.find(opts.spread_label());
      std::string v = it == nodes_[i]->labels.end() ? "" : it->second;
      (seen.insert(v).second ? first : rest).push_back(i);
    }
    order = first;
    order.insert(order.end(), rest.begin(), rest.end());
  }
  return order;
}

absl::StatusOr<Replica> Master::AllocateOnNodeLocked(uint32_t node, uint64_t size, uint64_t now,
                                                     bool allow_drop, absl::string_view key) {
  Node& n = *nodes_[node];
  absl::Status last = absl::ResourceExhaustedError("no segment large enough");
  const std::vector<uint32_t> order = SegmentOrderLocked(n, key, &last);
  for (uint32_t si : order) {
    Segment& seg = n.segments[si];
    if (seg.alloc->capacity() < size) continue;
    absl::StatusOr<uint64_t> off = seg.alloc->Allocate(size);
    // Drops `mode`'s victims here, one at a time, until the block fits.
    // Bounded by the segment's object count.
    auto drop_until_it_fits = [&](EvictMode mode) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      size_t budget = seg.lru.size();
      while (!off.ok() && budget-- > 0) {
        uint64_t target = seg.alloc->used() > size ? seg.alloc->used() - size : 0;
        if (EvictSegmentLocked(node, &seg, target, mode, now, nullptr) == 0) break;
        off = seg.alloc->Allocate(size);
      }
    };
    if (!off.ok() && options_.demote_keep_dram && seg.clean_bytes > 0) {
      // Clean copies first: their blocks stay on this store's SSD, so their
      // room is the writer's at once.
      drop_until_it_fits(EvictMode::kDropClean);
    }
    if (!off.ok() && !allow_drop) {
      // Full: start demotions (they free room asynchronously). With clean
      // copies kept, those left are leased: move blocks for this put.
      if (options_.demote_keep_dram && CanDemoteLocked(n, now)) {
        uint64_t need = seg.alloc->RoundUp(size);
        uint64_t target = seg.alloc->used() > need ? seg.alloc->used() - need : 0;
        EvictSegmentLocked(node, &seg, target, EvictMode::kMoveNow, now, nullptr);
      }
      DemoteAheadLocked(node, &seg, now);
    }
    if (!off.ok() && allow_drop) {
      // No room and no time left to wait: drop LRU victims.
      drop_until_it_fits(EvictMode::kDrop);
    }
    if (off.ok()) {
      BindArenaLocked(n, &seg, key);
      Replica r;
      r.node = node;
      r.tier = v1::TIER_DRAM;
      r.segment = si;
      r.offset = *off;
      // Short of headroom for the recent put rate: start demotions now
      // rather than at the next tick, so room returns before writers run
      // out of it.
      seg.put_rate.Add(seg.alloc->RoundUp(size), now);
      DemoteAheadLocked(node, &seg, now);
      return r;
    }
    last = off.status();
  }
  return last;
}

}  // namespace shelf::master
