// Demotion ahead of need: each DRAM segment keeps room free (or under
// demotion) for what its writers put in the time a demotion takes, so a put
// finds room rather than waiting for a demotion to free it. The room is the
// segment's recent put byte rate times a lead time: --demote-lead-ms, or
// twice the measured order-to-durable-report time of a demotion on that
// store when longer; never less than the --evict-high watermark leaves,
// never more than --demote-headroom-max of the segment (docs/storage.md).
// --demote-lead 0 leaves the fixed watermarks alone.
#include <algorithm>
#include <cmath>

#include "server/master/master.h"

namespace shelf {
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

}  // namespace shelf
