// ConfigureMutexDeadlockDetection: whether absl::Mutex checks lock order.
//
// Debian's Abseil is built as a debug library, so every absl::Mutex lock
// runs Abseil's deadlock detector: it records the lock in a global graph of
// held locks under one spin lock that every thread takes. On the master's
// lookup path that is a visible share of the CPU and a lock all threads
// share (docs/benchmarks.md, "master"). Daemons and benches call this
// first thing in main: it turns the detector off unless
// SHELF_MUTEX_DEADLOCK_DETECTION=1, which tests/run.sh sets so the test
// suite's daemons still abort on a lock-order cycle. Test binaries that
// never call it keep Abseil's default.
#ifndef SHELF_COMMON_MUTEX_DEBUG_H_
#define SHELF_COMMON_MUTEX_DEBUG_H_

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace shelf {

inline void ConfigureMutexDeadlockDetection() {
  const char* keep = std::getenv("SHELF_MUTEX_DEADLOCK_DETECTION");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace shelf

#endif  // SHELF_COMMON_MUTEX_DEBUG_H_
