// WaitFor: the one polling loop of the tests and benchmarks. Calls `pred`
// until it returns true or `timeout_ms` passes; returns whether it held.
// A condition that never holds costs the timeout, never a hang.
//
//   ASSERT_TRUE(WaitFor([&] { return cluster.LiveStores() == 2; }, 10000));
#ifndef SHELF_TESTING_WAIT_FOR_H_
#define SHELF_TESTING_WAIT_FOR_H_

#include <chrono>
#include <cstdint>
#include <thread>

#include "common/clock.h"

namespace shelf {

template <typename Pred>
bool WaitFor(Pred&& pred, uint64_t timeout_ms, uint64_t poll_ms = 20) {
  const uint64_t until = MonoMs() + timeout_ms;
  for (;;) {
    if (pred()) return true;
    if (MonoMs() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
}

}  // namespace shelf

#endif  // SHELF_TESTING_WAIT_FOR_H_
