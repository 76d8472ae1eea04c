#include "storage/dram_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/io_buffer.h"
#include "common/log.h"

namespace shelf::storage {
namespace {

constexpr uint64_t kHugePage = 2ull << 20;
constexpr uint64_t kPageBytes = 4096;

// Writes every 4 KiB page of [p, p + n) once, leaving its bytes as they
// are: an atomic OR of zero into its first word is a write the hardware
// (and a hypervisor's shadow page tables) sees, and, being one locked
// read-modify-write, it loses nothing a put writes into that word before or
// after it. Where a hypervisor keeps shadow page tables, a page the kernel
// populated (MADV_POPULATE_WRITE) still traps on the first write through
// this mapping, about 5 us a page: a first 64 KiB put into it took 84 us
// where a written page takes 3.
//
// The puts it runs beside write these words with memcpy. Hardware orders a
// locked OR against them; the C++ memory model calls an atomic beside a
// plain write a race all the same, so on x86-64 the OR is an instruction
// the compiler and the sanitizers do not see.
void TouchForWrite(char* p, uint64_t n) {
  for (uint64_t at = 0; at < n; at += kPageBytes) {
    auto* word = reinterpret_cast<uint64_t*>(p + at);
#if defined(__x86_64__)
    asm volatile("lock orq $0, %0" : "+m"(*word) : : "memory");
#else
    __atomic_fetch_or(word, uint64_t{0}, __ATOMIC_RELAXED);
#endif
  }
}

// The seals every segment carries before its descriptor can leave the
// store: no peer that receives it may change its size (a shrink leaves the
// store's and every engine's mapping partly unbacked: SIGBUS), and nobody
// may lift or add seals afterwards.
constexpr int kSegmentSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// Seals `fd` once the store has sized and mapped it. F_SEAL_FUTURE_WRITE
// too where the kernel has it (Linux >= 5.1): the store's own mapping stays
// writable, but no holder of the descriptor can map it writable or write(2)
// it. Without it (EINVAL) ShmServer offers no shared memory (TCP only).
absl::Status Seal(int fd) {
  if (fcntl(fd, F_ADD_SEALS, kSegmentSeals | F_SEAL_FUTURE_WRITE) == 0) return absl::OkStatus();
  if (errno != EINVAL || fcntl(fd, F_ADD_SEALS, kSegmentSeals) != 0) {
    return absl::InternalError(absl::StrCat("sealing the DRAM segment: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DramSegment>> DramSegment::Create(const Options& options) {
  if (options.size_bytes == 0) return absl::InvalidArgumentError("DRAM segment size is 0");
  if (options.arena_bytes != 0) return CreateArenas(options);
  // Hugepages first: only when the size is a multiple of 2 MiB and pages are
  // reserved; ftruncate/mmap fail otherwise and we fall back.
  if (options.try_hugepages && options.size_bytes % kHugePage == 0) {
    int fd = memfd_create("shelf-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
    if (fd >= 0) {
      void* p = MAP_FAILED;
      if (ftruncate(fd, static_cast<off_t>(options.size_bytes)) == 0) {
        p = mmap(nullptr, options.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                 0);
      }
      if (p != MAP_FAILED && !Seal(fd).ok()) {
        munmap(p, options.size_bytes);
        p = MAP_FAILED;
      }
      if (p != MAP_FAILED) {
        SHELF_LOG(INFO) << "DRAM segment on hugepages" << Kv("bytes", options.size_bytes);
        if (options.mlock && mlock(p, options.size_bytes) != 0) {
          SHELF_LOG(WARNING) << "mlock failed" << Kv("error", ErrnoText(errno));
        }
        std::unique_ptr<DramSegment> seg(
            new DramSegment(static_cast<char*>(p), options.size_bytes, fd, true));
        seg->large_pages_ = true;
        seg->populated_bytes_.store(options.size_bytes);  // MAP_POPULATE
        return seg;
      }
      close(fd);
    }
    SHELF_LOG(INFO) << "no reserved hugepages: DRAM segment on normal pages (THP advised)";
  }
  int fd = memfd_create("shelf-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("memfd_create: ", ErrnoText(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(options.size_bytes)) != 0) {
    int e = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot size DRAM segment to ", options.size_bytes, ": ", ErrnoText(e)));
  }
  void* p = mmap(nullptr, options.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("mmap DRAM segment: ", ErrnoText(e)));
  }
  if (absl::Status s = Seal(fd); !s.ok()) {
    munmap(p, options.size_bytes);
    close(fd);
    return s;
  }
  madvise(p, options.size_bytes, MADV_HUGEPAGE);
  if (options.mlock && mlock(p, options.size_bytes) != 0) {
    SHELF_LOG(WARNING) << "mlock failed (raise LimitMEMLOCK / ulimit -l)"
                       << Kv("error", ErrnoText(errno));
  }
  std::unique_ptr<DramSegment> seg(
      new DramSegment(static_cast<char*>(p), options.size_bytes, fd, false));
  seg->large_pages_ = ThpAdvisable("shmem_enabled");
  if (options.populate) seg->StartPopulating();
  return seg;
}

absl::StatusOr<std::unique_ptr<DramSegment>> DramSegment::CreateArenas(const Options& options) {
  const uint64_t arena = options.arena_bytes;
  if (arena % 4096 != 0 || options.size_bytes % arena != 0) {
    return absl::InvalidArgumentError(absl::StrCat("DRAM size ", options.size_bytes,
                                                   " is not a whole number of arenas of ", arena,
                                                   " bytes (a multiple of 4096)"));
  }
  // One reservation for the whole segment, then each arena's memfd mapped
  // over its part of it.
  void* p = mmap(nullptr, options.size_bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("reserving the segment: ", ErrnoText(errno)));
  }
  char* base = static_cast<char*>(p);
  std::unique_ptr<DramSegment> seg(new DramSegment(base, options.size_bytes, -1, false));
  seg->arena_bytes_ = arena;
  for (uint64_t at = 0; at < options.size_bytes; at += arena) {
    int fd = memfd_create("shelf-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
      return absl::ResourceExhaustedError(absl::StrCat("memfd_create: ", ErrnoText(errno)));
    }
    seg->arena_fds_.push_back(fd);  // closed by the destructor from here
    if (ftruncate(fd, static_cast<off_t>(arena)) != 0 ||
        mmap(base + at, arena, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
            MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot make a DRAM arena of ", arena, " bytes: ", ErrnoText(errno)));
    }
    if (absl::Status s = Seal(fd); !s.ok()) return s;
  }
  madvise(base, options.size_bytes, MADV_HUGEPAGE);
  // Transparent hugepages fill only the arenas' aligned 2 MiB stretches.
  seg->large_pages_ = ThpAdvisable("shmem_enabled") && arena % kHugePage == 0 &&
                      reinterpret_cast<uintptr_t>(base) % kHugePage == 0;
  if (options.mlock && mlock(base, options.size_bytes) != 0) {
    SHELF_LOG(WARNING) << "mlock failed (raise LimitMEMLOCK / ulimit -l)"
                       << Kv("error", ErrnoText(errno));
  }
  SHELF_LOG(INFO) << "DRAM segment in arenas" << Kv("arenas", seg->arena_fds_.size())
                  << Kv("arena_bytes", arena);
  if (options.populate) seg->StartPopulating();
  return seg;
}

void DramSegment::StartPopulating() {
  populator_ = std::thread([this] { Populate(); });
}

void DramSegment::Populate() {
  const uint64_t start_ms = MonoMs();
  uint64_t at = 0;
  while (at < size_ && !stop_populating_.load(std::memory_order_relaxed)) {
    const uint64_t n = std::min(kPopulateChunkBytes, size_ - at);
    // Faults the pages in as writes do, without touching their bytes: safe
    // beside the store's writes to them.
    if (madvise(base_ + at, n, MADV_POPULATE_WRITE) != 0) {
      // EINVAL: a kernel before 5.14; ENOMEM/EFAULT: the memory is not
      // there (a tmpfs or cgroup limit). Writes fault the rest in.
      SHELF_LOG(WARNING) << kPopulateStoppedLog << "; writes fault it in"
                         << Kv("populated_bytes", at) << Kv("error", ErrnoText(errno));
      return;
    }
    TouchForWrite(base_ + at, n);
    at += n;
    populated_bytes_.store(at, std::memory_order_release);
  }
  if (at == size_) {
    SHELF_LOG(INFO) << kPopulatedLog << Kv("bytes", size_) << Kv("ms", MonoMs() - start_ms);
  }
}

DramSegment::~DramSegment() {
  stop_populating_.store(true);
  if (populator_.joinable()) populator_.join();
  munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
  for (int fd : arena_fds_) close(fd);
}

}  // namespace shelf::storage
