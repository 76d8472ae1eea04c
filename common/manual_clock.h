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
#include <cstdint>
#include <functional>
#include <map>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace shelf {

class ManualClock final : public Clock {
 public:
  // NowMs() starts at `now_ms`, UnixMs() at `unix_ms`; both move together.
  // Not 0: components use 0 for "never".
  explicit ManualClock(uint64_t now_ms = 1000000, uint64_t unix_ms = 1700000000000);

  uint64_t NowMs() override;
  uint64_t UnixMs() override;
  bool WaitUntil(Mutex* mu, CondVar* cv, uint64_t deadline_ms,
                 const std::function<bool()>& pred) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves time forward by `ms` and wakes every wait in progress, so those
  // whose deadline is now reached return. Each waiter's mutex is taken
  // briefly: the caller must hold none of them.
  void Advance(uint64_t ms) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits in progress on this clock.
  size_t waiters() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks (in real time) until at least `n` waits are in progress: a test
  // calls it to know that another thread has begun waiting.
  void WaitForWaiters(size_t n) ABSL_LOCKS_EXCLUDED(mu_);

  // Runs `hook` after every NowMs() read, in the reading thread, with
  // nothing of the clock locked (a read made by the hook runs it too).
  // Lets a test act at the exact moment a component reads the time. An
  // empty function removes it.
  void SetReadHook(std::function<void()> hook) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Registers a function that makes a waiter re-check its deadline.
  uint64_t AddWaiter(std::function<void()> wake) ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveWaiter(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  std::atomic<uint64_t> now_ms_;
  const uint64_t unix_offset_ms_;  // UnixMs() - NowMs()

  Mutex mu_;
  CondVar waiters_cv_;  // a waiter was added
  std::map<uint64_t, std::function<void()>> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  std::function<void()> read_hook_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> has_read_hook_{false};
};

}  // namespace shelf

#endif  // SHELF_COMMON_MANUAL_CLOCK_H_
