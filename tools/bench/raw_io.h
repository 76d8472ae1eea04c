// Raw O_DIRECT I/O at a queue depth: the disk's best, against which the
// SSD tier is measured (shelf-bench ssd, and the raw write row of
// shelf-bench replay --compare-dram-only).
//
//   Measure m;
//   RawWrite(dir + "/raw.dat", block, 32 << 10, 4096, /*depth=*/8, &m);
//   printf("%.2f GB/s\n", m.gbps());
#ifndef SHELF_TOOLS_BENCH_RAW_IO_H_
#define SHELF_TOOLS_BENCH_RAW_IO_H_

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "common/io_buffer.h"
#include "tools/bench/bench_util.h"

namespace shelf::bench {

inline constexpr size_t kAlign = 4096;

struct AlignedBuffer {
  // As the store's I/O buffers: hugepages advised from 2 MiB up.
  explicit AlignedBuffer(size_t n) : data(AllocIoBuffer(n)), size(n) {
    if (data == nullptr) std::abort();
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data;
  size_t size;
};

struct Measure {
  uint64_t bytes = 0;
  double seconds = 0;
  Samples lat_us;
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// Block `id` of `size` bytes: `base` with the id in its first 8 bytes.
void Stamp(uint64_t id, char* block);

// True when `data` is block `id` whole: its stamp and every other byte.
bool SameBlock(uint64_t id, const char* data, const char* base, uint64_t size);

// Runs fn(thread, i) for every i in [0, count) on `depth` threads, each
// taking the next index: `depth` I/Os in flight at once. Latencies per
// thread are merged into m->lat_us.
absl::Status OnThreads(int depth, uint64_t count, Measure* m,
                       const std::function<absl::Status(int, uint64_t)>& fn);

// O_DIRECT pwrite of `count` blocks of `size` bytes (`base`, each stamped
// with its index) into one preallocated file at queue depth `depth`
// (threads), aligned buffers, then fdatasync. The file stays: RawRead
// reads it back; the caller removes it.
absl::Status RawWrite(const std::string& path, const char* base, uint64_t size, uint64_t count,
                      int depth, Measure* m);

// Reads back what RawWrite wrote at queue depth `depth` and compares every
// block with `base` stamped (inside the timed loop); blocks that differ
// are added to *mismatches.
absl::Status RawRead(const std::string& path, const char* base, uint64_t size, uint64_t count,
                     int depth, Measure* m, uint64_t* mismatches);

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_RAW_IO_H_
