// IoPool: a few threads that run blocking I/O (pread/pwrite on O_DIRECT
// files) so one caller keeps several I/Os in flight, the queue depth a
// disk needs to reach its bandwidth.
//
//   IoPool pool(8);
//   pool.Submit([&] { pwrite(fd, buf, n, off); });
//
// Thread-safe.
#ifndef SHELF_STORAGE_IO_POOL_H_
#define SHELF_STORAGE_IO_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace shelf {

class IoPool {
 public:
  explicit IoPool(int threads);
  ~IoPool();  // runs what was submitted, then joins
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  void Submit(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace shelf

#endif  // SHELF_STORAGE_IO_POOL_H_
