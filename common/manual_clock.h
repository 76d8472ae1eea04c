// ManualClock: a Clock that moves only when a test advances it.
//
// A component built on it (MasterOptions::clock, StoreOptions::clock) sees
// time stand still until Advance(); a wait on the clock (a put waiting for
// room, a heartbeat long poll) returns when its condition holds or exactly
// when Advance() carries NowMs() to its deadline, never on real time. So a
// TTL test advances past the TTL instead of sleeping through it, and its
// outcome does not depend on how loaded the machine is.
//
//   ManualClock clock;
//   options.clock = &clock;
//   ... start a put: it expires put_timeout_ms later ...
//   clock.Advance(options.put_timeout_ms);
//   master.Tick();  // reclaims it
//
// Thread-safe. The clock must outlive every component that uses it, and a
// mutex that a wait on it names must outlive any Advance() running while
// that wait is in progress.
#ifndef SHELF_COMMON_MANUAL_CLOCK_H_
#define SHELF_COMMON_MANUAL_CLOCK_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include "common/clock.h"

namespace shelf {

class ManualClock final : public Clock {
 public:
  // NowMs() starts at `now_ms`, UnixMs() at `unix_ms`; both move together.
  // Not 0: components use 0 for "never".
  explicit ManualClock(uint64_t now_ms = 1000000, uint64_t unix_ms = 1700000000000);

  uint64_t NowMs() override;
  uint64_t UnixMs() override;
  bool AwaitUntil(absl::Mutex* mu, const absl::Condition& cond, uint64_t deadline_ms) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool WaitUntil(std::unique_lock<std::mutex>* lock, std::condition_variable* cv,
                 uint64_t deadline_ms, const std::function<bool()>& pred) override;

  // Moves time forward by `ms` and wakes every wait in progress, so those
  // whose deadline is now reached return. Each waiter's mutex is taken
  // briefly: the caller must hold none of them.
  void Advance(uint64_t ms);

  // Waits in progress on this clock.
  size_t waiters();
  // Blocks (in real time) until at least `n` waits are in progress: a test
  // calls it to know that another thread has begun waiting.
  void WaitForWaiters(size_t n);

  // Runs `hook` after every NowMs() read, in the reading thread, with
  // nothing of the clock locked (a read made by the hook runs it too).
  // Lets a test act at the exact moment a component reads the time. An
  // empty function removes it.
  void SetReadHook(std::function<void()> hook);

 private:
  // Registers a function that makes a waiter re-check its deadline.
  uint64_t AddWaiter(std::function<void()> wake);
  void RemoveWaiter(uint64_t id);

  std::atomic<uint64_t> now_ms_;
  const uint64_t unix_offset_ms_;  // UnixMs() - NowMs()

  std::mutex mu_;
  std::condition_variable waiters_cv_;                 // a waiter was added
  std::map<uint64_t, std::function<void()>> waiters_;  // guarded by mu_
  uint64_t next_waiter_ = 1;                           // guarded by mu_
  std::function<void()> read_hook_;                    // guarded by mu_
  std::atomic<bool> has_read_hook_{false};
};

}  // namespace shelf

#endif  // SHELF_COMMON_MANUAL_CLOCK_H_
