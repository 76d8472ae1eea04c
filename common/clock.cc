#include "common/clock.h"

namespace shelf {

namespace {

class RealClock final : public Clock {
 public:
  uint64_t NowMs() override { return MonoMs(); }
  uint64_t UnixMs() override { return ::shelf::UnixMs(); }

  bool WaitUntil(Mutex* mu, CondVar* cv, uint64_t deadline_ms,
                 const std::function<bool()>& pred) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!pred()) {
      uint64_t now = MonoMs();
      if (now >= deadline_ms) return false;
      cv->WaitFor(mu, std::chrono::milliseconds(deadline_ms - now));
    }
    return true;
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace shelf
