#include "server/master/tiers/demotion_planner.h"

#include <algorithm>
#include <cmath>

namespace shelf::master {

void PutRate::Add(uint64_t bytes, uint64_t now_ms) {
  BytesPerSecond(now_ms);  // closes the window when it is over
  window_bytes_ += bytes;
}

double PutRate::BytesPerSecond(uint64_t now_ms) {
  if (now_ms < window_start_ms_) window_start_ms_ = now_ms;  // a clock set back
  uint64_t elapsed = now_ms - window_start_ms_;
  if (elapsed >= kWindowMs) {
    double sample = static_cast<double>(window_bytes_) * 1000.0 / static_cast<double>(elapsed);
    double keep = std::pow(0.5, static_cast<double>(std::min<uint64_t>(elapsed / kWindowMs, 64)));
    bytes_per_s_ = bytes_per_s_ * keep + sample * (1 - keep);
    window_start_ms_ = now_ms;
    window_bytes_ = 0;
  }
  return bytes_per_s_;
}

void DemoteTimer::Ordered(uint64_t move_id, uint64_t now_ms) {
  if (move_id_ != 0 && now_ms >= ordered_ms_ && now_ms - ordered_ms_ < kGiveUpMs) return;
  move_id_ = move_id;
  ordered_ms_ = now_ms;
}

void DemoteTimer::Reported(uint64_t move_id, uint64_t now_ms) {
  if (move_id == 0 || move_id != move_id_) return;
  move_id_ = 0;
  double sample = now_ms >= ordered_ms_ ? static_cast<double>(now_ms - ordered_ms_) : 0;
  turnaround_ms_ = turnaround_ms_ == 0 ? sample : 0.75 * turnaround_ms_ + 0.25 * sample;
}

uint64_t DemoteHeadroom(const HeadroomPolicy& policy, uint64_t capacity, double put_bytes_per_s,
                        double turnaround_ms) {
  const double cap = static_cast<double>(capacity);
  double floor = (1 - policy.evict_high) * cap;
  if (policy.lead_ms == 0) return static_cast<uint64_t>(floor);
  double lead_ms = std::max(static_cast<double>(policy.lead_ms), 2 * turnaround_ms);
  double want = std::min(put_bytes_per_s * lead_ms / 1000.0, policy.headroom_max * cap);
  return static_cast<uint64_t>(std::max(want, floor));
}

}  // namespace shelf::master
