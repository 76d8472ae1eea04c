#include "common/manual_clock.h"

#include <utility>
#include <vector>

#include "common/check.h"

namespace shelf {

ManualClock::ManualClock(uint64_t now_ms, uint64_t unix_ms)
    : now_ms_(now_ms), unix_offset_ms_(unix_ms - now_ms) {
  SHELF_CHECK(unix_ms >= now_ms) << "unix " << unix_ms << " before monotonic " << now_ms;
}

uint64_t ManualClock::NowMs() {
  uint64_t now = now_ms_.load();
  if (has_read_hook_.load()) {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = read_hook_;
    }
    if (hook) hook();
  }
  return now;
}

uint64_t ManualClock::UnixMs() { return now_ms_.load() + unix_offset_ms_; }

bool ManualClock::AwaitUntil(absl::Mutex* mu, const absl::Condition& cond, uint64_t deadline_ms) {
  struct Wait {
    const absl::Condition* cond;
    const std::atomic<uint64_t>* now_ms;
    uint64_t deadline_ms;
  } wait{&cond, &now_ms_, deadline_ms};
  // Registered while `mu` is held, so an Advance() that follows takes `mu`
  // only once this thread waits in Await; releasing it there makes absl
  // evaluate the condition below with the new time.
  uint64_t id = AddWaiter([mu] {
    mu->Lock();
    mu->Unlock();
  });
  mu->Await(absl::Condition(
      +[](Wait* w) { return w->cond->Eval() || w->now_ms->load() >= w->deadline_ms; }, &wait));
  RemoveWaiter(id);
  return cond.Eval();
}

bool ManualClock::WaitUntil(std::unique_lock<std::mutex>* lock, std::condition_variable* cv,
                            uint64_t deadline_ms, const std::function<bool()>& pred) {
  std::mutex* m = lock->mutex();
  uint64_t id = AddWaiter([m, cv] {
    { std::lock_guard<std::mutex> poke(*m); }
    cv->notify_all();
  });
  while (!pred() && now_ms_.load() < deadline_ms) cv->wait(*lock);
  RemoveWaiter(id);
  return pred();
}

void ManualClock::Advance(uint64_t ms) {
  std::vector<std::function<void()>> wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    now_ms_.fetch_add(ms);
    for (const auto& [id, fn] : waiters_) wake.push_back(fn);
  }
  // Outside mu_: a waiter holds its own mutex when it registers.
  for (const auto& fn : wake) fn();
}

size_t ManualClock::waiters() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_.size();
}

void ManualClock::WaitForWaiters(size_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  waiters_cv_.wait(lock, [&] { return waiters_.size() >= n; });
}

void ManualClock::SetReadHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  has_read_hook_.store(static_cast<bool>(hook));
  read_hook_ = std::move(hook);
}

uint64_t ManualClock::AddWaiter(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_waiter_++;
  waiters_.emplace(id, std::move(wake));
  waiters_cv_.notify_all();
  return id;
}

void ManualClock::RemoveWaiter(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  waiters_.erase(id);
}

}  // namespace shelf
