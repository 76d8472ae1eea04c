// ThreadPool: a fixed set of threads running tasks from a bounded queue, and
// ParallelFor, which spreads the items of a batch over the calling thread and
// a pool. Used by libshelf and the transport engines.
//
//   ThreadPool pool(4, /*queue_max=*/16);
//   bool queued = pool.TrySubmit([] { ... });   // false: full or shut down
//   ParallelFor(&pool, keys.size(), 8, [&](size_t i) { Read(keys[i]); });
//
// Thread-safe. A task must not wait for another task of the same pool (it
// could be queued behind it); ParallelFor never does: its caller takes items
// too, so it finishes even when every pool thread is busy.
#ifndef SHELF_COMMON_THREAD_POOL_H_
#define SHELF_COMMON_THREAD_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace shelf {

class ThreadPool {
 public:
  // REQUIRES: threads >= 1, queue_max >= 1.
  ThreadPool(size_t threads, size_t queue_max);
  // Shutdown().
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`. False, with `task` dropped, when queue_max tasks already
  // wait or the pool is shut down.
  bool TrySubmit(std::function<void()> task);
  // Refuses new tasks, runs every task already queued, joins the threads.
  // Idempotent. REQUIRES: not called from a task of this pool.
  void Shutdown();

  size_t threads() const { return threads_.size(); }
  // Threads waiting for a task now.
  size_t idle_threads() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  // Constant after construction.
  const size_t queue_max_;
  std::vector<std::thread> threads_;

  // A thread waiting for a task. The pool wakes the one that went idle
  // last: its stack and caches are the warmest, and the threads idle
  // longest stay asleep, where waking the longest idle (a condition
  // variable's order) would cycle every task through every thread.
  struct Idle {
    CondVar cv;
    bool woken = false;
  };

  Mutex mu_;
  std::vector<Idle*> idle_ ABSL_GUARDED_BY(mu_);  // the last went idle last
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

// Calls fn(i) once for every i in [0, n), on the calling thread and on up to
// `helpers_max` threads of `pool` (null: the calling thread alone), and
// returns when every call has returned. Calls run concurrently: fn must be
// safe for that (typically each i touches only its own slots).
void ParallelFor(ThreadPool* pool, size_t n, size_t helpers_max,
                 const std::function<void(size_t)>& fn);

}  // namespace shelf

#endif  // SHELF_COMMON_THREAD_POOL_H_
