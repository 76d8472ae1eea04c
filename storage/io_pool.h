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

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace shelf::storage {

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

// ExtentWriter: writes to one file through an IoPool, merging writes that
// continue each other on disk (queued one after the other, each at the end
// of the one before) into one pwritev of up to 4 MiB: a run of small blocks
// written to adjacent extents costs one system call and one device request
// instead of one each. Buffers must stay valid until `done` runs. At most
// `drains` pool jobs write at once, each taking run after run until the
// queue is empty: under a steady stream of writes no write wakes a thread.
//
// With `stage`, a run of two writes or more, one of them at least asked to
// be gathered, is first copied into one hugepage buffer (the pool thread's
// own, 4 MiB) and written from there: writes from memory of scattered
// 4 KiB pages then reach the device as one request per run, not one per
// 254 pages (common/io_buffer.h).
//
// Thread-safe.
class ExtentWriter {
 public:
  // `drains`: the writes in flight at most (the pool's thread count).
  ExtentWriter(int fd, IoPool* pool, int drains = 8, bool stage = false)
      : fd_(fd), pool_(pool), drains_max_(drains < 1 ? 1 : drains), stage_(stage) {}
  // Waits for the drains under way: a drain looks for more work after
  // the last `done` it runs, so a caller that saw every `done` may still
  // have one in flight.
  ~ExtentWriter() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes [buf, +length) at `offset`; done(0 or an errno) runs on a pool
  // thread once it is written (or failed). `gather`: `buf` is not on
  // hugepages, and its run is worth staging.
  void Write(uint64_t offset, char* buf, uint64_t length, std::function<void(int)> done,
             bool gather = true) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kRunJobsMax = 64;
  static constexpr uint64_t kRunBytesMax = 4ull << 20;
  struct Job {
    uint64_t offset;
    char* buf;
    uint64_t length;
    std::function<void(int)> done;
    bool gather;
  };
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes one run (the oldest job and those continuing it on disk).
  void WriteRun(std::vector<Job>& run);

  const int fd_;
  IoPool* const pool_;
  const int drains_max_;
  const bool stage_;
  Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  int drains_ ABSL_GUARDED_BY(mu_) = 0;  // Drain jobs submitted and not finished
  CondVar drained_;                      // drains_ reached 0
};

}  // namespace shelf::storage

#endif  // SHELF_STORAGE_IO_POOL_H_
