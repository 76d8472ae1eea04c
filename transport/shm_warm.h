// Reads through the mappings of same-host stores' segments once, in the
// background, so that a block's first read through a mapping pays nothing
// for the page's first touch.
//
// A store populates its segment, but each process that maps it pays for the
// first access to every page through its own mapping. Where the host is a
// virtual machine that keeps shadow page tables, that first access traps to
// the hypervisor even when the page table is populated: about 1.8 us per
// 4 KiB page on a 2-core test host, 30 us on the first read of a 64 KiB
// block against 2 us on the next. The warmer reads one byte of each page of
// a mapping, up to a bound per mapping, on one thread at idle priority
// (SCHED_IDLE: it runs only on a core nothing else wants), so the cost moves
// off the read path. On bare metal it costs little and saves little; the
// price either way is the page tables of the warmed bytes (2 MiB per GiB).
//
// Thread-safe.
#ifndef SHELF_TRANSPORT_SHM_WARM_H_
#define SHELF_TRANSPORT_SHM_WARM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "common/mutex.h"

namespace shelf::transport {

class MappingWarmer {
 public:
  // `bytes_max`: bytes of each mapping read through (from its start);
  // 0 turns the warmer off (Add does nothing).
  explicit MappingWarmer(uint64_t bytes_max) : bytes_max_(bytes_max) {}
  // Stops the walk where it is and joins the thread.
  ~MappingWarmer();
  MappingWarmer(const MappingWarmer&) = delete;
  MappingWarmer& operator=(const MappingWarmer&) = delete;

  // Queues [base, +size) for a read-through. `keep` owns the mapping: the
  // walk holds it only while it reads a chunk, and a mapping whose owner is
  // gone is dropped where the walk stands. Starts the thread the first time.
  void Add(std::weak_ptr<const void> keep, const char* base, uint64_t size);

  // Bytes read through so far, all mappings together.
  uint64_t warmed_bytes() const { return warmed_bytes_.load(std::memory_order_relaxed); }
  // Blocks until every queued mapping is walked or dropped (tests).
  void WaitIdle();

 private:
  struct Job {
    std::weak_ptr<const void> keep;
    const char* base;
    uint64_t size;
  };
  void Run();

  const uint64_t bytes_max_;
  std::atomic<uint64_t> warmed_bytes_{0};
  Mutex mu_;
  CondVar changed_;  // a job queued or done, or stop_ set
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a job is being walked
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the first Add (under mu_)
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_SHM_WARM_H_
