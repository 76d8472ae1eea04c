// CallCoalescer: one call at a time on behalf of many threads; the calls
// that arrive while one is out go together in the next.
//
//   CallCoalescer<Job, Result> lookups;
//   Result r = lookups.Call(job, joins, run);
//
// A caller queues its job and waits. The caller at the front of the queue
// (the leader) takes the queued jobs that `joins(front, other)` admits to
// its call, in order, and runs them with `run(jobs, &results)`, one result
// per job; it then hands each waiter its result and wakes the next caller
// at the front, who leads the jobs that queued meanwhile. A caller alone
// runs at once (without a linger, below), so nothing waits for company:
// jobs go together only when they overlap a call in flight, as writers do
// in LevelDB's write queue.
// The queue's mutex is held to queue, take and hand out, never while a
// call runs.
//
// With a linger (the constructor's), a leader alone in the queue whose
// predecessor led company waits up to that long for as many callers as
// that call took, so that threads coming back from one call one after
// another (each woken in turn, or each taking a GIL in turn) go together
// again rather than as a call of one and a call of the rest. A caller
// alone after a call of one never waits.
//
// Every caller passes a `run` that does the same thing: the leader's
// serves every job it took.
#ifndef SHELF_CLIENT_CALL_COALESCER_H_
#define SHELF_CLIENT_CALL_COALESCER_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace shelf {

template <typename Job, typename Result>
class CallCoalescer {
 public:
  CallCoalescer() = default;
  explicit CallCoalescer(std::chrono::microseconds linger) : linger_(linger) {}
  CallCoalescer(const CallCoalescer&) = delete;
  CallCoalescer& operator=(const CallCoalescer&) = delete;

  // `joins(const Job& front, const Job& other)`: whether `other` may go in
  // the call `front` leads. `run(const std::vector<const Job*>& jobs,
  // std::vector<Result>* results)`: results arrives sized to jobs.
  template <typename Joins, typename Run>
  Result Call(const Job& job, Joins joins, Run run) ABSL_LOCKS_EXCLUDED(mu_) {
    Waiter self;
    self.job = &job;
    std::vector<Waiter*> taken;
    {
      MutexLock lock(&mu_);
      queue_.push_back(&self);
      // A lingering leader counts who has come.
      if (lingering_ && queue_.size() >= last_taken_) queue_.front()->cv.Signal();
      while (!self.done && queue_.front() != &self) self.cv.Wait(&mu_);
      if (self.done) return std::move(self.result);
      if (linger_.count() > 0 && last_taken_ > 1 && queue_.size() < last_taken_) {
        const auto until = std::chrono::steady_clock::now() + linger_;
        lingering_ = true;
        while (queue_.size() < last_taken_) {
          const auto now = std::chrono::steady_clock::now();
          if (now >= until) break;
          self.cv.WaitFor(&mu_, until - now);
        }
        lingering_ = false;
      }
      // The leader stays at the front while its call runs, so later callers
      // queue behind it; the jobs it takes leave the queue now.
      taken.push_back(&self);
      for (auto it = std::next(queue_.begin()); it != queue_.end();) {
        if (joins(job, *(*it)->job)) {
          taken.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      last_taken_ = taken.size();
    }
    std::vector<const Job*> jobs;
    jobs.reserve(taken.size());
    for (Waiter* w : taken) jobs.push_back(w->job);
    std::vector<Result> results(taken.size());
    run(jobs, &results);
    MutexLock lock(&mu_);
    for (size_t i = 1; i < taken.size(); ++i) {
      taken[i]->result = std::move(results[i]);
      taken[i]->done = true;
      taken[i]->cv.Signal();
    }
    queue_.pop_front();  // this caller
    if (!queue_.empty()) queue_.front()->cv.Signal();
    return std::move(results[0]);
  }

  // Callers queued, the one whose call is out included.
  size_t Queued() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return queue_.size();
  }

 private:
  struct Waiter {
    const Job* job = nullptr;
    Result result{};
    bool done = false;
    CondVar cv;
  };

  const std::chrono::microseconds linger_{0};
  Mutex mu_;
  std::deque<Waiter*> queue_ ABSL_GUARDED_BY(mu_);
  size_t last_taken_ ABSL_GUARDED_BY(mu_) = 1;   // jobs the last call took
  bool lingering_ ABSL_GUARDED_BY(mu_) = false;  // the front waits for company
};

// Cuts the jobs a leader took into runs of whole jobs of at most
// `items_max` items together (`items(job)` counts a job's; a larger job
// runs alone), and calls send(begin, end) for each run [begin, end).
template <typename Job, typename Items, typename Send>
void ForEachRunOfJobs(const std::vector<const Job*>& jobs, size_t items_max, Items items,
                      Send send) {
  for (size_t begin = 0; begin < jobs.size();) {
    size_t end = begin + 1;
    size_t total = items(*jobs[begin]);
    while (end < jobs.size() && total + items(*jobs[end]) <= items_max)
      total += items(*jobs[end++]);
    send(begin, end);
    begin = end;
  }
}

// CallCoalescer::Call for jobs with a `deadline_ms`: a job joins only a
// call whose deadline is no later than its own, so the leader's deadline
// is the earliest of every job it took; the jobs taken are cut into runs of
// at most `items_max` items (ForEachRunOfJobs), and
// send(jobs, begin, end, results) makes one call for each run.
template <typename Job, typename Result, typename Items, typename Send>
Result CallByDeadline(CallCoalescer<Job, Result>* coalescer, const Job& job, size_t items_max,
                      Items items, Send send) {
  return coalescer->Call(
      job,
      [](const Job& front, const Job& other) { return other.deadline_ms >= front.deadline_ms; },
      [&](const std::vector<const Job*>& jobs, std::vector<Result>* results) {
        ForEachRunOfJobs(jobs, items_max, items,
                         [&](size_t begin, size_t end) { send(jobs, begin, end, results); });
      });
}

}  // namespace shelf

#endif  // SHELF_CLIENT_CALL_COALESCER_H_
