// Memory for O_DIRECT I/O.
//
//   char* buf = AllocIoBuffer(4 << 20);  // null when out of memory
//   pwrite(fd, buf, 4 << 20, offset);
//   std::free(buf);
//
// AllocIoBuffer(n) is 4 KiB aligned; from 2 MiB up, 2 MiB aligned and
// advised for transparent hugepages, for a buffer written or read whole
// (a scratch buffer mostly left untouched is better off with
// AllocAlignedBuffer: a hugepage makes 2 MiB resident at its first touch).
//
// Why hugepages: the block layer maps a request's memory page by page, one
// segment per physically contiguous run, and a device takes a bounded
// number of segments per request (/sys/block/DEV/queue/max_segments; 254
// on a virtio disk, so 1016 KiB of scattered 4 KiB pages). A 4 MiB write
// from 4 KiB pages becomes about five requests; from 2 MiB pages, one. A
// disk that pays per request (virtual disks do) writes large blocks much
// faster in fewer requests (docs/storage.md, "Hugepage buffers", has the
// figures).
//
// Large buffers come from posix_memalign: glibc maps them apart from the
// heap above its mmap threshold (128 KiB, rising to 32 MiB as large blocks
// are freed); below it the advice stays on that part of the heap after the
// free, which costs at most a hugepage where a later allocation lands.
#ifndef SHELF_COMMON_IO_BUFFER_H_
#define SHELF_COMMON_IO_BUFFER_H_

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/string_view.h"

namespace shelf {

inline constexpr size_t kIoBufferAlign = 4096;
inline constexpr size_t kIoBufferHugePage = size_t{2} << 20;

// 4 KiB aligned, no advice. Free with std::free; null when out of memory.
inline char* AllocAlignedBuffer(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, kIoBufferAlign, std::max(n, kIoBufferAlign)) != 0) return nullptr;
  return static_cast<char*>(p);
}

// As above, and from 2 MiB up on hugepages where the kernel gives them.
inline char* AllocIoBuffer(size_t n) {
  if (n < kIoBufferHugePage) return AllocAlignedBuffer(n);
  void* p = nullptr;
  if (posix_memalign(&p, kIoBufferHugePage, n) != 0) return nullptr;
  // Advice only: where transparent hugepages are off, normal pages.
  madvise(p, n / kIoBufferHugePage * kIoBufferHugePage, MADV_HUGEPAGE);
  return static_cast<char*>(p);
}

// Whether a transparent-hugepage mode file of /sys/kernel/mm/
// transparent_hugepage ("always [madvise] never", or for shared memory
// "always within_size advise [never] deny force": the mode in brackets)
// gives memory advised MADV_HUGEPAGE hugepages.
inline bool ThpModeAdvisable(absl::string_view text) {
  const size_t open = text.find('[');
  const size_t close = text.find(']', open);
  if (open == absl::string_view::npos || close == absl::string_view::npos) return false;
  const absl::string_view mode = text.substr(open + 1, close - open - 1);
  return mode == "always" || mode == "madvise" || mode == "advise" || mode == "within_size" ||
         mode == "force";
}

// ThpModeAdvisable of /sys/kernel/mm/transparent_hugepage/`file` now
// (false where the kernel does not say).
inline bool ThpAdvisable(const char* file) {
  std::ifstream in(std::string("/sys/kernel/mm/transparent_hugepage/") + file);
  std::string text;
  std::getline(in, text);
  return ThpModeAdvisable(text);
}

}  // namespace shelf

#endif  // SHELF_COMMON_IO_BUFFER_H_
