#include "storage/dram_segment.h"

#include <errno.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace shelf {
namespace {

constexpr uint64_t kHugePage = 2ull << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<DramSegment>> DramSegment::Create(const Options& options) {
  if (options.size_bytes == 0) return absl::InvalidArgumentError("DRAM segment size is 0");
  // Hugepages first: only when the size is a multiple of 2 MiB and pages are
  // reserved; ftruncate/mmap fail otherwise and we fall back.
  if (options.try_hugepages && options.size_bytes % kHugePage == 0) {
    int fd = memfd_create("shelf-segment", MFD_CLOEXEC | MFD_HUGETLB);
    if (fd >= 0) {
      void* p = MAP_FAILED;
      if (ftruncate(fd, static_cast<off_t>(options.size_bytes)) == 0) {
        p = mmap(nullptr, options.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                 0);
      }
      if (p != MAP_FAILED) {
        SHELF_LOG(INFO) << "DRAM segment on hugepages" << Kv("bytes", options.size_bytes);
        if (options.mlock && mlock(p, options.size_bytes) != 0) {
          SHELF_LOG(WARNING) << "mlock failed" << Kv("error", std::strerror(errno));
        }
        return std::unique_ptr<DramSegment>(
            new DramSegment(static_cast<char*>(p), options.size_bytes, fd, true));
      }
      close(fd);
    }
    SHELF_LOG(INFO) << "no reserved hugepages: DRAM segment on normal pages (THP advised)";
  }
  int fd = memfd_create("shelf-segment", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(options.size_bytes)) != 0) {
    int e = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot size DRAM segment to ", options.size_bytes, ": ", std::strerror(e)));
  }
  void* p = mmap(nullptr, options.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("mmap DRAM segment: ", std::strerror(e)));
  }
  madvise(p, options.size_bytes, MADV_HUGEPAGE);
  if (options.mlock && mlock(p, options.size_bytes) != 0) {
    SHELF_LOG(WARNING) << "mlock failed (raise LimitMEMLOCK / ulimit -l)"
                       << Kv("error", std::strerror(errno));
  }
  return std::unique_ptr<DramSegment>(
      new DramSegment(static_cast<char*>(p), options.size_bytes, fd, false));
}

DramSegment::~DramSegment() {
  munmap(base_, size_);
  close(fd_);
}

}  // namespace shelf
