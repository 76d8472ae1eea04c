#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "common/check.h"

namespace shelf {

ThreadPool::ThreadPool(size_t threads, size_t queue_max) : queue_max_(queue_max) {
  SHELF_CHECK(threads >= 1 && queue_max >= 1) << threads << " threads, queue of " << queue_max;
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

ThreadPool::~ThreadPool() { Shutdown(); }

bool ThreadPool::TrySubmit(std::function<void()> task) {
  MutexLock lock(&mu_);
  if (stopping_ || queue_.size() >= queue_max_) return false;
  queue_.push_back(std::move(task));
  if (!idle_.empty()) {
    Idle* next = idle_.back();
    idle_.pop_back();
    next->woken = true;
    next->cv.Signal();
  }
  return true;
}

void ThreadPool::Shutdown() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    for (Idle* idle : idle_) {
      idle->woken = true;
      idle->cv.Signal();
    }
    idle_.clear();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

size_t ThreadPool::idle_threads() {
  MutexLock lock(&mu_);
  return idle_.size();
}

void ThreadPool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) {
        Idle self;
        idle_.push_back(&self);
        while (!self.woken) self.cv.Wait(&mu_);
      }
      // Queued tasks still run after Shutdown: each owes someone a result.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

namespace {

// Shared by the caller and the helpers of one ParallelFor. Helpers hold it
// by shared_ptr: one that starts after the caller returned finds no item
// left and never touches `fn`.
struct ForState {
  explicit ForState(size_t items, const std::function<void(size_t)>* body) : n(items), fn(body) {}
  const size_t n;
  const std::function<void(size_t)>* const fn;
  std::atomic<size_t> next{0};
  Mutex mu;
  CondVar done_cv;  // `finished` reached n
  size_t finished ABSL_GUARDED_BY(mu) = 0;

  void Work() {
    for (;;) {
      size_t i = next.fetch_add(1);
      if (i >= n) return;
      (*fn)(i);
      MutexLock lock(&mu);
      if (++finished == n) done_cv.SignalAll();
    }
  }
};

}  // namespace

void ParallelFor(ThreadPool* pool, size_t n, size_t helpers_max,
                 const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || pool == nullptr || helpers_max == 0) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto state = std::make_shared<ForState>(n, &fn);
  size_t helpers = std::min(n - 1, helpers_max);
  for (size_t h = 0; h < helpers; ++h) {
    if (!pool->TrySubmit([state] { state->Work(); })) break;  // busy: do more ourselves
  }
  state->Work();
  MutexLock lock(&state->mu);
  while (state->finished != state->n) state->done_cv.Wait(&state->mu);
}

}  // namespace shelf
