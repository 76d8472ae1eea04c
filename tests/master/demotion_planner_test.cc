// The arithmetic of demotion ahead of need (server/master/tiers/
// demotion_planner.h): the put rate's windows and decay, the timing of
// demotions, and the headroom they give a segment.
#include "server/master/tiers/demotion_planner.h"

#include <gtest/gtest.h>

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(PutRateTest, ASteadyWriterConvergesToItsRate) {
  PutRate rate;
  // 1 MiB every 10 ms: 100 MiB/s.
  for (uint64_t t = 0; t <= 5000; t += 10) rate.Add(kMiB, t);
  EXPECT_NEAR(rate.BytesPerSecond(5000), 100.0 * kMiB, 3.0 * kMiB);
}

TEST(PutRateTest, NothingCountsUntilAWindowCloses) {
  PutRate rate;
  rate.Add(10 * kMiB, 0);
  EXPECT_EQ(rate.BytesPerSecond(PutRate::kWindowMs - 1), 0.0);
  EXPECT_GT(rate.BytesPerSecond(PutRate::kWindowMs), 0.0);
}

TEST(PutRateTest, ABurstFadesWhenTheWriterStops) {
  PutRate rate;
  for (uint64_t t = 0; t <= 2000; t += 10) rate.Add(kMiB, t);
  double busy = rate.BytesPerSecond(2000);
  // The first idle stretch closes the last window, its bytes averaged
  // over the idle time too; each further idle window halves what is left.
  EXPECT_LT(rate.BytesPerSecond(2500), busy / 10);
  EXPECT_LT(rate.BytesPerSecond(3000), busy / 1000);
}

TEST(PutRateTest, AClockSetBackRestartsTheWindow) {
  PutRate rate;
  rate.Add(kMiB, 10000);
  rate.Add(kMiB, 5000);  // earlier than the window's start
  EXPECT_GE(rate.BytesPerSecond(5000), 0.0);
  EXPECT_GT(rate.BytesPerSecond(5000 + PutRate::kWindowMs), 0.0);
}

TEST(DemoteTimerTest, TimesOneDemotionAtATimeAndSmoothsTheSamples) {
  DemoteTimer timer;
  timer.Ordered(1, 1000);
  timer.Ordered(2, 1010);  // one is timed already: not this one
  timer.Reported(2, 1100);
  EXPECT_EQ(timer.turnaround_ms(), 0.0);
  timer.Reported(1, 1200);
  EXPECT_EQ(timer.turnaround_ms(), 200.0);  // the first sample as it is
  timer.Ordered(3, 2000);
  timer.Reported(3, 2600);
  EXPECT_EQ(timer.turnaround_ms(), 0.75 * 200 + 0.25 * 600);
  timer.Reported(3, 9999);  // reported again: no longer timed
  EXPECT_EQ(timer.turnaround_ms(), 300.0);
}

TEST(DemoteTimerTest, AnUnansweredDemotionIsGivenUpOn) {
  DemoteTimer timer;
  timer.Ordered(1, 0);
  timer.Ordered(2, DemoteTimer::kGiveUpMs - 1);  // still waiting for 1
  timer.Ordered(3, DemoteTimer::kGiveUpMs);      // 1 given up: 3 is timed
  timer.Reported(1, DemoteTimer::kGiveUpMs + 5);
  EXPECT_EQ(timer.turnaround_ms(), 0.0);
  timer.Reported(3, DemoteTimer::kGiveUpMs + 40);
  EXPECT_EQ(timer.turnaround_ms(), 40.0);
}

TEST(DemoteTimerTest, ForgetDropsTheDemotionOut) {
  DemoteTimer timer;
  timer.Ordered(1, 0);
  timer.Forget();
  timer.Reported(1, 50);
  EXPECT_EQ(timer.turnaround_ms(), 0.0);
  timer.Ordered(2, 100);  // timed at once, no give-up wait
  timer.Reported(2, 130);
  EXPECT_EQ(timer.turnaround_ms(), 30.0);
}

TEST(DemoteHeadroomTest, RateTimesLeadBetweenTheFloorAndTheCap) {
  const HeadroomPolicy policy{0.95, 1000, 0.5};
  const uint64_t cap = 1000 * kMiB;
  // Idle: what the watermark leaves.
  EXPECT_EQ(DemoteHeadroom(policy, cap, 0, 0), 50 * kMiB);
  // 200 MiB/s for a 1 s lead.
  EXPECT_EQ(DemoteHeadroom(policy, cap, 200.0 * kMiB, 0), 200 * kMiB);
  // A store slower than the lead: twice its turnaround.
  EXPECT_EQ(DemoteHeadroom(policy, cap, 200.0 * kMiB, 1000), 400 * kMiB);
  // Never more than half the segment.
  EXPECT_EQ(DemoteHeadroom(policy, cap, 2000.0 * kMiB, 0), 500 * kMiB);
}

TEST(DemoteHeadroomTest, LeadZeroLeavesTheWatermarksAlone) {
  const HeadroomPolicy policy{0.75, 0, 0.5};
  EXPECT_EQ(DemoteHeadroom(policy, 1000, 1e12, 1e6), 250u);
}

}  // namespace
}  // namespace shelf::master
