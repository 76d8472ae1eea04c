#include "common/clock.h"

namespace shelf {

namespace {

class RealClock final : public Clock {
 public:
  uint64_t NowMs() override { return MonoMs(); }
  uint64_t UnixMs() override { return ::shelf::UnixMs(); }

  bool AwaitUntil(absl::Mutex* mu, const absl::Condition& cond, uint64_t deadline_ms) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    uint64_t now = MonoMs();
    return mu->AwaitWithTimeout(cond, absl::Milliseconds(ElapsedMs(deadline_ms, now)));
  }

  bool WaitUntil(std::unique_lock<std::mutex>* lock, std::condition_variable* cv,
                 uint64_t deadline_ms, const std::function<bool()>& pred) override {
    // MonoMs counts steady_clock milliseconds from its epoch.
    std::chrono::steady_clock::time_point deadline{std::chrono::milliseconds(deadline_ms)};
    return cv->wait_until(*lock, deadline, pred);
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace shelf
