#include "storage/io_pool.h"

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "common/io_buffer.h"

namespace shelf::storage {
IoPool::IoPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

IoPool::~IoPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

void IoPool::Submit(std::function<void()> fn) {
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
  }
  // One job, one waiter: waking every thread for each job (a 32 KiB
  // write) would wake all but one for nothing.
  cv_.Signal();
}

void IoPool::Loop() {
  while (true) {
    std::function<void()> fn;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
      if (queue_.empty()) return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

ExtentWriter::~ExtentWriter() {
  MutexLock lock(&mu_);
  while (drains_ > 0) drained_.Wait(&mu_);
}

void ExtentWriter::Write(uint64_t offset, char* buf, uint64_t length, std::function<void(int)> done,
                         bool gather) {
  {
    MutexLock lock(&mu_);
    jobs_.push_back(Job{offset, buf, length, std::move(done), gather});
    // A drain under way takes this job when it is done with its run; one
    // more is started while fewer than drains_max_ run.
    if (drains_ >= drains_max_) return;
    ++drains_;
  }
  pool_->Submit([this] { Drain(); });
}

void ExtentWriter::Drain() {
  for (;;) {
    std::vector<Job> run;
    {
      MutexLock lock(&mu_);
      if (jobs_.empty()) {
        if (--drains_ == 0) drained_.SignalAll();
        return;
      }
      uint64_t bytes = 0;
      // The oldest job, and those queued after it that continue it on disk.
      while (!jobs_.empty() && run.size() < kRunJobsMax &&
             (run.empty() || (jobs_.front().offset == run.back().offset + run.back().length &&
                              bytes + jobs_.front().length <= kRunBytesMax))) {
        bytes += jobs_.front().length;
        run.push_back(std::move(jobs_.front()));
        jobs_.pop_front();
      }
    }
    WriteRun(run);
  }
}

void ExtentWriter::WriteRun(std::vector<Job>& run) {
  std::vector<struct iovec> iov(run.size());
  uint64_t total = 0;
  bool gather = false;
  for (size_t i = 0; i < run.size(); ++i) {
    iov[i] = {run[i].buf, run[i].length};
    total += run[i].length;
    gather = gather || run[i].gather;
  }
  // Staged: the run's bytes gathered in this thread's hugepage buffer (a
  // run is at most kRunBytesMax), one iovec.
  thread_local std::unique_ptr<char, decltype(&std::free)> staging(nullptr, &std::free);
  if (stage_ && gather && run.size() > 1 && total <= kRunBytesMax) {
    if (staging == nullptr) staging.reset(AllocIoBuffer(kRunBytesMax));
    if (staging != nullptr) {
      char* at = staging.get();
      for (const Job& j : run) {
        std::memcpy(at, j.buf, j.length);
        at += j.length;
      }
      iov.assign(1, {staging.get(), total});
    }
  }
  ssize_t n;
  do {
    n = pwritev(fd_, iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(run[0].offset));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(total)) {
    for (Job& j : run) j.done(0);
    return;
  }
  // Short or failed: each job again on its own (rewriting bytes already
  // written is harmless), so each gets its own verdict.
  for (Job& j : run) {
    int err = 0;
    char* p = j.buf;
    uint64_t left = j.length, at = j.offset;
    while (left > 0) {
      ssize_t w = pwrite(fd_, p, left, static_cast<off_t>(at));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : EIO;
        break;
      }
      p += w;
      left -= static_cast<uint64_t>(w);
      at += static_cast<uint64_t>(w);
    }
    j.done(err);
  }
}

}  // namespace shelf::storage
