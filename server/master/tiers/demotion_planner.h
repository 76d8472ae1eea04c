// The arithmetic of demotion ahead of need (docs/storage.md): how fast a
// segment is being filled, how long a demotion takes on its store, and so
// how much room the segment keeps free or under demotion for its writers.
//
//   PutRate rate;                        // one per DRAM segment
//   rate.Add(bytes, now_ms);             // each put placed there
//   DemoteTimer timer;                   // one per store
//   timer.Ordered(move_id, now_ms);      // each DEMOTE order sent
//   timer.Reported(move_id, now_ms);     // each durable report
//   uint64_t room = DemoteHeadroom(policy, capacity,
//                                  rate.BytesPerSecond(now_ms), timer.turnaround_ms());
//
// Plain values: the Master keeps them in its Segments and Nodes under its
// lock (registry/node.h) and acts on the answer (tiers/demote.cc).
#ifndef SHELF_SERVER_MASTER_TIERS_DEMOTION_PLANNER_H_
#define SHELF_SERVER_MASTER_TIERS_DEMOTION_PLANNER_H_

#include <cstdint>

namespace shelf::master {

// A segment's put byte rate: bytes placed in 50 ms windows, each window's
// average (idle windows included) weighed in by how many windows it spans,
// so a burst's rate fades within a few hundred milliseconds.
class PutRate {
 public:
  static constexpr uint64_t kWindowMs = 50;

  void Add(uint64_t bytes, uint64_t now_ms);
  // The smoothed rate, closing the current window first when it is over.
  double BytesPerSecond(uint64_t now_ms);

 private:
  uint64_t window_start_ms_ = 0;
  uint64_t window_bytes_ = 0;
  double bytes_per_s_ = 0;
};

// One demotion at a time timed from its order to its store's durable
// report: the smoothed time (3/4 the old, 1/4 the new sample) sizes the
// lead time of a store whose disk is slower than --demote-lead-ms.
class DemoteTimer {
 public:
  // A timed demotion not answered in this long (its replica went away, or
  // the store died) stops being waited for: the next order is timed.
  static constexpr uint64_t kGiveUpMs = 10000;

  // Times `move_id`, ordered at `now_ms`, unless one is timed already.
  void Ordered(uint64_t move_id, uint64_t now_ms);
  // The store reported `move_id` done: a sample when it is the one timed.
  void Reported(uint64_t move_id, uint64_t now_ms);
  // The store registered anew or died: the order timed will not be reported.
  void Forget() { move_id_ = 0; }

  double turnaround_ms() const { return turnaround_ms_; }

 private:
  uint64_t move_id_ = 0;  // 0: none timed
  uint64_t ordered_ms_ = 0;
  double turnaround_ms_ = 0;
};

// The knobs of MasterOptions that size the headroom.
struct HeadroomPolicy {
  double evict_high = 0.95;   // the room the watermark leaves is the floor
  uint64_t lead_ms = 1000;    // 0: the watermark alone
  double headroom_max = 0.5;  // of the segment, at most
};

// Bytes a segment of `capacity` keeps free or under demotion: its put rate
// times the lead time (the policy's, or twice the store's turnaround when
// longer), at most headroom_max of it, at least what evict_high leaves.
uint64_t DemoteHeadroom(const HeadroomPolicy& policy, uint64_t capacity, double put_bytes_per_s,
                        double turnaround_ms);

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_TIERS_DEMOTION_PLANNER_H_
