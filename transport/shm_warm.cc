#include "transport/shm_warm.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

namespace shelf::transport {

namespace {

constexpr uint64_t kPageBytes = 4096;
// Bytes walked under one hold of a mapping: a dropped mapping waits at
// most this long to be unmapped (512 pages: about 1 ms where each first
// touch traps, far less elsewhere).
constexpr uint64_t kChunkBytes = 2 << 20;

// Lowers the calling thread to SCHED_IDLE where the kernel allows it;
// otherwise it runs at the priority it has.
void RunWhenIdle() {
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
}

// Reads one byte of each page of [base, +bytes). Not instrumented: the
// bytes are the store's, written by another process, and a sanitizer's
// shadow for each page read would cost more than the page.
__attribute__((no_sanitize("address", "thread"))) void TouchPages(const char* base,
                                                                  uint64_t bytes) {
  for (uint64_t at = 0; at < bytes; at += kPageBytes) {
    (void)*static_cast<const volatile char*>(base + at);
  }
}

}  // namespace

MappingWarmer::~MappingWarmer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void MappingWarmer::Add(std::weak_ptr<const void> keep, const char* base, uint64_t size) {
  if (bytes_max_ == 0 || base == nullptr || size == 0) return;
  MutexLock lock(&mu_);
  if (stop_) return;
  jobs_.push_back(Job{std::move(keep), base, std::min(size, bytes_max_)});
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  changed_.SignalAll();
}

void MappingWarmer::WaitIdle() {
  MutexLock lock(&mu_);
  while (!stop_ && (busy_ || !jobs_.empty())) changed_.Wait(&mu_);
}

void MappingWarmer::Run() {
  RunWhenIdle();
  for (;;) {
    Job job;
    {
      MutexLock lock(&mu_);
      while (!stop_ && jobs_.empty()) changed_.Wait(&mu_);
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
    }
    for (uint64_t at = 0; at < job.size; at += kChunkBytes) {
      {
        MutexLock lock(&mu_);
        if (stop_) break;
      }
      std::shared_ptr<const void> held = job.keep.lock();
      if (held == nullptr) break;  // unmapped: nothing left to warm
      const uint64_t end = std::min(job.size, at + kChunkBytes);
      TouchPages(job.base + at, end - at);
      warmed_bytes_.fetch_add(end - at, std::memory_order_relaxed);
    }
    MutexLock lock(&mu_);
    busy_ = false;
    changed_.SignalAll();
  }
}

}  // namespace shelf::transport
