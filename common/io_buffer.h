// AllocIoBuffer(n): memory for O_DIRECT I/O, 4 KiB aligned; from 2 MiB up,
// 2 MiB aligned and advised for transparent hugepages. Free with std::free.
//
//   char* buf = AllocIoBuffer(4 << 20);  // null when out of memory
//   pwrite(fd, buf, 4 << 20, offset);
//   std::free(buf);
//
// Why hugepages: the block layer maps a request's memory page by page, one
// segment per physically contiguous run, and a device takes a bounded
// number of segments per request (a virtio disk here: 254, so 1016 KiB of
// scattered 4 KiB pages). A 4 MiB write from 4 KiB pages becomes about
// eight requests; from 2 MiB pages, one. On a disk that pays per request
// (virtual disks do) that was the difference between 0.9 and 1.7 GB/s of
// 4 MiB writes (docs/storage.md, "Hugepage buffers").
#ifndef SHELF_COMMON_IO_BUFFER_H_
#define SHELF_COMMON_IO_BUFFER_H_

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>

namespace shelf {

inline constexpr size_t kIoBufferAlign = 4096;
inline constexpr size_t kIoBufferHugePage = size_t{2} << 20;

inline char* AllocIoBuffer(size_t n) {
  const bool huge = n >= kIoBufferHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, huge ? kIoBufferHugePage : kIoBufferAlign, std::max(n, kIoBufferAlign)) !=
      0) {
    return nullptr;
  }
  // Advice only: where transparent hugepages are off, normal pages.
  if (huge) madvise(p, n / kIoBufferHugePage * kIoBufferHugePage, MADV_HUGEPAGE);
  return static_cast<char*>(p);
}

}  // namespace shelf

#endif  // SHELF_COMMON_IO_BUFFER_H_
