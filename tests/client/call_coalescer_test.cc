// CallCoalescer: a lone caller runs at once; callers that arrive while a
// call is out go together in the next, each with its own result; a job
// goes only with a call it joins; with a linger, a leader alone after a
// call that took company waits for it.
#include "client/call_coalescer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace shelf {
namespace {

struct Job {
  int value = 0;
  int group = 0;
};

// Records each call's jobs; a call blocks while `hold` is set.
class Recorder {
 public:
  void Run(const std::vector<const Job*>& jobs, std::vector<int>* results) {
    {
      MutexLock lock(&mu_);
      std::vector<int> values;
      values.reserve(jobs.size());
      for (const Job* j : jobs) values.push_back(j->value);
      calls_.push_back(values);
      while (hold_) released_.Wait(&mu_);
    }
    for (size_t i = 0; i < jobs.size(); ++i) (*results)[i] = jobs[i]->value * 10;
  }
  void Hold(bool on) {
    MutexLock lock(&mu_);
    hold_ = on;
    if (!on) released_.SignalAll();
  }
  std::vector<std::vector<int>> calls() {
    MutexLock lock(&mu_);
    return calls_;
  }

 private:
  Mutex mu_;
  CondVar released_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::vector<int>> calls_ ABSL_GUARDED_BY(mu_);
};

bool SameGroup(const Job& a, const Job& b) { return a.group == b.group; }

void WaitForQueued(CallCoalescer<Job, int>* c, size_t n) {
  while (c->Queued() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// A coalescer whose calls the test can hold out: a leader's call blocks
// until Finish, while the waiters queue behind it.
class CallCoalescerTest : public ::testing::Test {
 protected:
  int Call(const Job& job) {
    return c_.Call(
        job, SameGroup,
        [this](const std::vector<const Job*>& jobs, std::vector<int>* out) { r_.Run(jobs, out); });
  }
  // Starts a leader whose call is held out.
  void Lead(const Job& job) {
    r_.Hold(true);
    leader_ = std::thread([this, job] { leader_result_ = Call(job); });
    WaitForQueued(&c_, 1);
  }
  // Queues `jobs` behind the leader, each in its own thread and in order,
  // then lets the calls run; each job's result once every call is done.
  std::vector<int> QueueAndFinish(const std::vector<Job>& jobs) {
    std::vector<int> got(jobs.size(), -1);
    std::vector<std::thread> waiters;
    waiters.reserve(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      waiters.emplace_back([this, &got, &jobs, i] { got[i] = Call(jobs[i]); });
      WaitForQueued(&c_, 2 + i);
    }
    r_.Hold(false);
    leader_.join();
    for (std::thread& t : waiters) t.join();
    return got;
  }

  CallCoalescer<Job, int> c_;
  Recorder r_;
  std::thread leader_;
  int leader_result_ = -1;
};

TEST_F(CallCoalescerTest, ALoneCallerRunsAtOnceWithItsOwnJob) {
  EXPECT_EQ(Call(Job{4, 0}), 40);
  EXPECT_EQ(Call(Job{5, 0}), 50);
  EXPECT_EQ(r_.calls(), (std::vector<std::vector<int>>{{4}, {5}}));
  EXPECT_EQ(c_.Queued(), 0u);
}

TEST_F(CallCoalescerTest, CallersQueuedBehindACallGoTogetherInTheNext) {
  Lead(Job{1, 0});
  const std::vector<Job> jobs = {{100, 0}, {101, 0}, {102, 0}, {103, 0}, {104, 0}, {105, 0}};
  std::vector<int> got = QueueAndFinish(jobs);
  EXPECT_EQ(leader_result_, 10);
  EXPECT_EQ(got, (std::vector<int>{1000, 1010, 1020, 1030, 1040, 1050}));
  EXPECT_EQ(r_.calls(), (std::vector<std::vector<int>>{{1}, {100, 101, 102, 103, 104, 105}}));
  EXPECT_EQ(c_.Queued(), 0u);
}

TEST_F(CallCoalescerTest, AJobGoesOnlyWithACallItJoins) {
  Lead(Job{0, 0});
  // Groups 1, 2, 1, 2, ...: none joins the leader's group 0.
  const std::vector<Job> jobs = {{1, 1}, {2, 2}, {3, 1}, {4, 2}, {5, 1}, {6, 2}, {7, 1}, {8, 2}};
  std::vector<int> got = QueueAndFinish(jobs);
  EXPECT_EQ(got, (std::vector<int>{10, 20, 30, 40, 50, 60, 70, 80}));
  // The leader's call, then group 1's (jobs 1, 3, 5, 7), then group 2's.
  EXPECT_EQ(r_.calls(), (std::vector<std::vector<int>>{{0}, {1, 3, 5, 7}, {2, 4, 6, 8}}));
}

// With a linger: after a call that took company, a leader alone waits for
// as many callers as that call took and goes with them; one that waits in
// vain goes alone once the linger is over, and the next alone goes at once.
TEST(CallCoalescerLingerTest, ALeaderAloneAfterCompanyWaitsForItsReturn) {
  for (const auto linger : {std::chrono::microseconds(std::chrono::minutes(5)),
                            std::chrono::microseconds(std::chrono::milliseconds(20))}) {
    const bool waits_long = linger > std::chrono::seconds(1);
    SCOPED_TRACE(waits_long ? "linger 5 min" : "linger 20 ms");
    CallCoalescer<Job, int> c(linger);
    Recorder r;
    auto call = [&](int v) {
      return c.Call(
          Job{v, 0}, SameGroup,
          [&](const std::vector<const Job*>& jobs, std::vector<int>* out) { r.Run(jobs, out); });
    };
    // A call of one held out, two callers behind it: a call of two next.
    r.Hold(true);
    std::vector<std::thread> threads;
    threads.emplace_back([&] { call(1); });
    WaitForQueued(&c, 1);
    threads.emplace_back([&] { call(2); });
    WaitForQueued(&c, 2);
    threads.emplace_back([&] { call(3); });
    WaitForQueued(&c, 3);
    r.Hold(false);
    for (std::thread& t : threads) t.join();
    threads.clear();
    ASSERT_EQ(r.calls(), (std::vector<std::vector<int>>{{1}, {2, 3}}));

    if (waits_long) {
      // Alone: it waits (no call is made) until a second caller comes.
      int got4 = -1, got5 = -1;
      threads.emplace_back([&] { got4 = call(4); });
      WaitForQueued(&c, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_EQ(r.calls().size(), 2u) << "the leader went without waiting";
      threads.emplace_back([&] { got5 = call(5); });
      for (std::thread& t : threads) t.join();
      EXPECT_EQ(got4, 40);
      EXPECT_EQ(got5, 50);
      EXPECT_EQ(r.calls().back(), (std::vector<int>{4, 5}));
    } else {
      // Nobody comes: it goes alone after the linger, and so does the next.
      EXPECT_EQ(call(6), 60);
      EXPECT_EQ(call(7), 70);
      EXPECT_EQ(r.calls(), (std::vector<std::vector<int>>{{1}, {2, 3}, {6}, {7}}));
    }
    EXPECT_EQ(c.Queued(), 0u);
  }
}

TEST(CallCoalescerThreadsTest, ManyThreadsEachGetTheirOwnResult) {
  CallCoalescer<Job, int> c;
  auto run = [&](const std::vector<const Job*>& jobs, std::vector<int>* out) {
    for (size_t i = 0; i < jobs.size(); ++i) (*out)[i] = jobs[i]->value * 10;
  };
  constexpr int kThreads = 8, kEach = 2000;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        int v = t * kEach + i;
        if (c.Call(Job{v, 0}, SameGroup, run) != v * 10) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(c.Queued(), 0u);
}

TEST(ForEachRunOfJobsTest, RunsHoldWholeJobsWithinTheItemBound) {
  std::vector<Job> jobs = {{3, 0}, {3, 0}, {5, 0}, {1, 0}, {10, 0}, {2, 0}};
  std::vector<const Job*> ptrs;
  ptrs.reserve(jobs.size());
  for (const Job& j : jobs) ptrs.push_back(&j);
  std::vector<std::pair<size_t, size_t>> runs;
  ForEachRunOfJobs(
      ptrs, 6, [](const Job& j) { return static_cast<size_t>(j.value); },
      [&](size_t begin, size_t end) { runs.emplace_back(begin, end); });
  // 3+3; 5+1; 10 alone, over the bound; 2.
  EXPECT_EQ(runs, (std::vector<std::pair<size_t, size_t>>{{0, 2}, {2, 4}, {4, 5}, {5, 6}}));
}

}  // namespace
}  // namespace shelf
