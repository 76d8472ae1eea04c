// DramSegment: the store's DRAM tier, one memfd-backed shared mapping.
//
// Hugepages are used when the machine has them reserved (MFD_HUGETLB);
// otherwise the mapping falls back to normal pages with MADV_HUGEPAGE, and
// the log says which. Same-node clients receive fd() over a Unix socket
// (SCM_RIGHTS) and map it, so a local read is one memcpy.
//
// fd() is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before Create
// returns: whoever holds a copy of it cannot change the segment's size,
// which would leave every mapping of it partly unbacked (SIGBUS). Where the
// kernel has it (Linux >= 5.1) it is also sealed F_SEAL_FUTURE_WRITE: only
// the store's own mapping, made before, can write the segment.
//
// Thread-safe for concurrent access to disjoint ranges; the master's
// allocator, not this class, decides who owns which range.
#ifndef SHELF_STORAGE_DRAM_SEGMENT_H_
#define SHELF_STORAGE_DRAM_SEGMENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace shelf::storage {

class DramSegment {
 public:
  struct Options {
    uint64_t size_bytes = 0;
    bool try_hugepages = true;
    bool mlock = false;
    // Non-zero: the segment is made of size_bytes / arena_bytes arenas of
    // this size (size_bytes must be a multiple of it), each its own sealed
    // memfd, mapped back to back so that data() still addresses the whole
    // segment. A same-host client is handed only the arenas it may read
    // (docs/security.md, "Tenant arenas"). Normal pages only.
    uint64_t arena_bytes = 0;
    // Fault every page of the segment in, in the background, once Create
    // has returned (MADV_POPULATE_WRITE, kPopulateChunkBytes at a time):
    // a page first written otherwise costs its writer a page fault, about
    // 10 us on a virtual machine and many times the copy of its 4 KiB (a
    // first 1 MiB put into fresh memory spends most of its time there),
    // where the kernel populates a page in about 1 us. Each chunk's pages
    // are then written once in place, their bytes unchanged, for where a
    // hypervisor's shadow page tables trap a populated page's first write
    // through this mapping (about 5 us a page). Hugepage and locked
    // segments are populated already.
    bool populate = false;
  };
  static constexpr uint64_t kPopulateChunkBytes = 32ull << 20;
  // What the store logs when the populator ends: every page written
  // through, or stopped early (writes fault the rest in). Benchmarks wait
  // for either (LocalCluster::Options::wait_populated).
  static constexpr char kPopulatedLog[] = "DRAM segment populated";
  static constexpr char kPopulateStoppedLog[] = "DRAM segment not populated past this point";
  // RESOURCE_EXHAUSTED if the memory cannot be had; INVALID_ARGUMENT for 0;
  // INTERNAL if the kernel cannot seal it (memfd sealing is Linux >= 3.17,
  // on hugetlbfs >= 4.16: a hugepage segment that cannot be sealed falls
  // back to normal pages).
  static absl::StatusOr<std::unique_ptr<DramSegment>> Create(const Options& options);
  ~DramSegment();
  DramSegment(const DramSegment&) = delete;
  DramSegment& operator=(const DramSegment&) = delete;

  char* data() const { return base_; }
  uint64_t size() const { return size_; }
  // The descriptor of the whole segment; -1 when it is made of arenas.
  int fd() const { return arena_fds_.empty() ? fd_ : -1; }
  // Arenas (0 without them) and arena i's descriptor, covering
  // [i * arena_bytes, +arena_bytes) of data().
  uint32_t arenas() const { return static_cast<uint32_t>(arena_fds_.size()); }
  uint64_t arena_bytes() const { return arena_bytes_; }
  int arena_fd(uint32_t i) const { return arena_fds_[i]; }
  bool hugepages() const { return hugepages_; }
  // Whether the segment's memory comes in pages of 2 MiB or more: reserved
  // hugepages, or transparent ones, which a memfd gets only where the
  // kernel allows them for shared memory (shmem_enabled, below). Memory of
  // 4 KiB pages, scattered, is written to a disk in requests of about 1 MiB
  // at most (common/io_buffer.h).
  bool large_pages() const { return large_pages_; }
  // Bytes of the segment populated so far, from its start (Options.populate;
  // size() for a hugepage or locked segment, 0 when not populating).
  uint64_t populated_bytes() const { return populated_bytes_.load(std::memory_order_acquire); }
  // Whether [offset, offset+length) lies inside the segment (overflow-safe).
  bool Contains(uint64_t offset, uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }

 private:
  DramSegment(char* base, uint64_t size, int fd, bool hugepages)
      : base_(base), size_(size), fd_(fd), hugepages_(hugepages) {}
  static absl::StatusOr<std::unique_ptr<DramSegment>> CreateArenas(const Options& options);
  // Starts the background population (Options.populate).
  void StartPopulating();
  void Populate();

  char* const base_;
  const uint64_t size_;
  const int fd_;
  const bool hugepages_;
  bool large_pages_ = false;
  uint64_t arena_bytes_ = 0;
  std::vector<int> arena_fds_;
  std::atomic<uint64_t> populated_bytes_{0};
  std::atomic<bool> stop_populating_{false};
  std::thread populator_;
};

}  // namespace shelf::storage

#endif  // SHELF_STORAGE_DRAM_SEGMENT_H_
