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
      MutexLock lock(&mu_);
      hook = read_hook_;
    }
    if (hook) hook();
  }
  return now;
}

uint64_t ManualClock::UnixMs() { return now_ms_.load() + unix_offset_ms_; }

bool ManualClock::WaitUntil(Mutex* mu, CondVar* cv, uint64_t deadline_ms,
                            const std::function<bool()>& pred) {
  // Registered while `mu` is held, so an Advance() that follows takes `mu`
  // only once this thread waits on `cv`: the signal cannot be lost.
  uint64_t id = AddWaiter([mu, cv] {
    { MutexLock poke(mu); }
    cv->SignalAll();
  });
  while (!pred() && now_ms_.load() < deadline_ms) cv->Wait(mu);
  RemoveWaiter(id);
  return pred();
}

void ManualClock::Advance(uint64_t ms) {
  std::vector<std::function<void()>> wake;
  {
    MutexLock lock(&mu_);
    now_ms_.fetch_add(ms);
    for (const auto& [id, fn] : waiters_) wake.push_back(fn);
  }
  // Outside mu_: a waiter holds its own mutex when it registers.
  for (const auto& fn : wake) fn();
}

size_t ManualClock::waiters() {
  MutexLock lock(&mu_);
  return waiters_.size();
}

void ManualClock::WaitForWaiters(size_t n) {
  MutexLock lock(&mu_);
  while (waiters_.size() < n) waiters_cv_.Wait(&mu_);
}

void ManualClock::SetReadHook(std::function<void()> hook) {
  MutexLock lock(&mu_);
  has_read_hook_.store(static_cast<bool>(hook));
  read_hook_ = std::move(hook);
}

uint64_t ManualClock::AddWaiter(std::function<void()> wake) {
  MutexLock lock(&mu_);
  uint64_t id = next_waiter_++;
  waiters_.emplace(id, std::move(wake));
  waiters_cv_.SignalAll();
  return id;
}

void ManualClock::RemoveWaiter(uint64_t id) {
  MutexLock lock(&mu_);
  waiters_.erase(id);
}

}  // namespace shelf
