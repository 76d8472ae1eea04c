// ConfigureMutexDeadlockDetection: turns off Abseil's lock-order checks.
//
// The project's own locks are shelf::Mutex and shelf::SharedMutex
// (common/mutex.h), whose lock order ThreadSanitizer checks in the
// sanitizer stage (tests/sanitize.sh). gRPC locks absl::Mutex inside, and
// Debian's Abseil is built as a debug library, so every one of those locks
// runs Abseil's deadlock detector: it records the lock in a global graph of
// held locks under one spin lock that every thread takes, a visible share
// of the CPU of a busy daemon. Daemons and benches call this first thing in
// main.
#ifndef SHELF_COMMON_MUTEX_DEBUG_H_
#define SHELF_COMMON_MUTEX_DEBUG_H_

#include "absl/synchronization/mutex.h"

namespace shelf {

inline void ConfigureMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace shelf

#endif  // SHELF_COMMON_MUTEX_DEBUG_H_
