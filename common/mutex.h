// Mutex and MutexLock: std::mutex with Clang's thread-safety annotations.
//
//   class Cache {
//     shelf::Mutex mu_;
//     std::map<std::string, int> entries_ ABSL_GUARDED_BY(mu_);
//     void Put(std::string k, int v) ABSL_LOCKS_EXCLUDED(mu_) {
//       shelf::MutexLock lock(&mu_);
//       entries_[std::move(k)] = v;
//     }
//   };
//
// Why not absl::Mutex: Debian's Abseil is built without ThreadSanitizer
// annotations, so TSan cannot see its lock and unlock and reports what it
// guards as racy. std::mutex goes through pthread, which TSan intercepts,
// and these annotations let `-Wthread-safety` check the guarded members.
#ifndef SHELF_COMMON_MUTEX_H_
#define SHELF_COMMON_MUTEX_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace shelf {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace shelf

#endif  // SHELF_COMMON_MUTEX_H_
