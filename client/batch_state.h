// internal::BatchState: what an asynchronous batch shares with its
// BatchFuture (shelf/client.h). Internal to libshelf.
#ifndef SHELF_CLIENT_BATCH_STATE_H_
#define SHELF_CLIENT_BATCH_STATE_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "shelf/client.h"

namespace shelf {

namespace internal {

// The shared state of one asynchronous batch. The worker fills the results,
// then calls Finish; a BatchFuture reads them only after done (the mutex
// orders the two).
struct BatchState {
  Mutex mu;
  CondVar finished;  // signalled once, when done turns true
  bool done ABSL_GUARDED_BY(mu) = false;
  // Written by the worker before Finish, read-only afterwards.
  Status status;
  std::vector<Status> statuses;
  std::vector<std::string> values;
  std::vector<size_t> sizes;

  void Finish() {
    MutexLock lock(&mu);
    done = true;
    finished.SignalAll();
  }
  bool IsDone() {
    MutexLock lock(&mu);
    return done;
  }
};

}  // namespace internal

}  // namespace shelf

#endif  // SHELF_CLIENT_BATCH_STATE_H_
