// Time sources. Deadlines and TTLs use the monotonic clock; only values that
// cross process boundaries (grant expiry, lease expiry shown to clients) use
// wall-clock Unix milliseconds.
//
// Components whose logic depends on time (the master's TTLs, leases and
// put timeouts, the store's heartbeat loop) read it, and wait with a
// timeout, through an injected Clock, as LevelDB's Env::NowMicros: the
// process uses Clock::Real(), tests a ManualClock (common/manual_clock.h)
// that they advance instead of sleeping.
//
//   Clock* clock = options.clock;            // Clock::Real() by default
//   uint64_t deadline = clock->NowMs() + wait_ms;
//   clock->WaitUntil(&mu_, &ready_cv_, deadline, [this] { return ready_; });
#ifndef SHELF_COMMON_CLOCK_H_
#define SHELF_COMMON_CLOCK_H_

#include <chrono>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace shelf {

inline uint64_t MonoMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline uint64_t MonoUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Milliseconds from `then` to `now`, 0 when `then` is later. A time
// stamped by another thread may be later than a `now` read before taking
// the lock that orders them; the plain unsigned difference then wraps to
// centuries.
inline uint64_t ElapsedMs(uint64_t now, uint64_t then) { return now > then ? now - then : 0; }

inline uint64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A source of time, and timed waits measured in it. A deadline passed to a
// wait is a NowMs() value. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  // The system's clocks (MonoMs, UnixMs); never destroyed.
  static Clock* Real();

  // Monotonic milliseconds.
  virtual uint64_t NowMs() = 0;
  // Wall-clock Unix milliseconds.
  virtual uint64_t UnixMs() = 0;

  // Waits until `pred` holds or NowMs() reaches `deadline_ms`, on `cv`,
  // which is signalled whenever `pred` may have become true; `mu` is
  // released meanwhile and held again on return. Returns pred(), which
  // runs with `mu` held.
  // REQUIRES: `mu` held; `pred` reads only what `mu` guards (or atomics
  // whose writers signal `cv` under `mu`).
  virtual bool WaitUntil(Mutex* mu, CondVar* cv, uint64_t deadline_ms,
                         const std::function<bool()>& pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
};

}  // namespace shelf

#endif  // SHELF_COMMON_CLOCK_H_
