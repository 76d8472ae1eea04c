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

#include <chrono>
#include <condition_variable>
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
  friend class CondVar;
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

// A condition variable for Mutex. Callers wait in a loop on their own
// predicate, so the predicate reads guarded members with the lock held and
// the analysis sees it:
//
//   MutexLock lock(&mu_);
//   while (queue_.empty()) cv_.Wait(&mu_);
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu`, waits for a signal (or a spurious wake), holds `mu` again.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }

  // As Wait, for at most `timeout`. False when the time ran out.
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool signalled = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace shelf

#endif  // SHELF_COMMON_MUTEX_H_
