// Mutex and MutexLock: std::mutex with Clang's thread-safety annotations.
// SharedMutex, ReaderMutexLock and WriterMutexLock: a pthread reader-writer
// lock that serves writers first, for state many threads read at once (the
// master's index). CondVar: waits on a Mutex.
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
// Every lock in the tree is one of these. Why not absl::Mutex: Debian's
// Abseil is built without ThreadSanitizer annotations, so TSan cannot see
// its lock and unlock and reports what it guards as racy. std::mutex and
// pthread_rwlock_t go through pthread, which TSan intercepts, and these
// annotations let `-Wthread-safety` check the guarded members. A wait on a
// condition is a CondVar and a loop on the predicate; there is no Await.
#ifndef SHELF_COMMON_MUTEX_H_
#define SHELF_COMMON_MUTEX_H_

#include <pthread.h>

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

// As MutexLock, and Release() unlocks before the scope ends (then the
// destructor does nothing).
class ABSL_SCOPED_LOCKABLE ReleasableMutexLock {
 public:
  explicit ReleasableMutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~ReleasableMutexLock() ABSL_UNLOCK_FUNCTION() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  void Release() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    mu_ = nullptr;
  }
  ReleasableMutexLock(const ReleasableMutexLock&) = delete;
  ReleasableMutexLock& operator=(const ReleasableMutexLock&) = delete;

 private:
  Mutex* mu_;
};

// A reader-writer lock: many holders in shared mode, or one in exclusive.
//
//   shelf::SharedMutex mu_;
//   ReaderMutexLock lock(&mu_);  // reads what mu_ guards, beside other readers
//   WriterMutexLock lock(&mu_);  // changes it, alone
//
// A waiting writer goes before readers that come after it: under a steady
// stream of lookups, a heartbeat or a put still gets the lock. (glibc's
// default, which std::shared_mutex takes, lets new readers pass a waiting
// writer for as long as they keep coming.)
class ABSL_LOCKABLE SharedMutex {
 public:
  SharedMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&mu_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~SharedMutex() { pthread_rwlock_destroy(&mu_); }
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { pthread_rwlock_wrlock(&mu_); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { pthread_rwlock_unlock(&mu_); }
  // REQUIRES: this thread does not hold it already, in either mode (a
  // second shared lock could wait behind a writer that waits for the first).
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { pthread_rwlock_rdlock(&mu_); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { pthread_rwlock_unlock(&mu_); }

 private:
  pthread_rwlock_t mu_;
};

// Holds `mu` shared for its scope.
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->ReaderLock();
  }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// Holds `mu` exclusively for its scope.
class ABSL_SCOPED_LOCKABLE WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~WriterMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
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

  // As WaitFor, looping until pred() holds or `timeout` has passed.
  // Returns pred(), which runs with `mu` held.
  template <class Rep, class Period, class Predicate>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout, Predicate pred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool held = cv_.wait_for(lock, timeout, std::move(pred));
    lock.release();
    return held;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace shelf

#endif  // SHELF_COMMON_MUTEX_H_
