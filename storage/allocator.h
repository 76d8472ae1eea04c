// RangeAllocator: hands out aligned byte ranges of one segment.
//
// Best fit over free extents kept in two ordered indexes (by offset, for
// coalescing; by size, for the fit), so Allocate and Free are O(log n) in
// the number of free extents. Freed neighbours coalesce at once, so the free
// space is always the fewest extents possible; fragmentation stays bounded
// by the size mix of live blocks.
//
//   RangeAllocator a(1 << 30, 4096);
//   absl::StatusOr<uint64_t> off = a.Allocate(65536);
//   a.Free(*off, 65536);
//
// Thread-compatible: the caller serializes access (the master holds one
// allocator per segment under that segment's mutex).
#ifndef SHELF_STORAGE_ALLOCATOR_H_
#define SHELF_STORAGE_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shelf::storage {

class RangeAllocator {
 public:
  // REQUIRES: alignment is a power of two. The usable capacity is
  // `capacity` rounded down to the alignment.
  RangeAllocator(uint64_t capacity, uint64_t alignment);

  // Returns the offset of a free range of at least `size` bytes (rounded up
  // to the alignment). RESOURCE_EXHAUSTED when no extent fits;
  // INVALID_ARGUMENT for size 0.
  absl::StatusOr<uint64_t> Allocate(uint64_t size);

  // Returns a range obtained from Allocate (same size) to the free pool.
  // FAILED_PRECONDITION (and no change) if any part of it is already free or
  // lies outside the segment.
  absl::Status Free(uint64_t offset, uint64_t size);

  // Marks [offset, offset+size) allocated; used when a master rebuilds its
  // allocators from a store's inventory. FAILED_PRECONDITION if not free.
  absl::Status Reserve(uint64_t offset, uint64_t size);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t free_bytes() const { return capacity_ - used_; }
  uint64_t free_extents() const { return by_offset_.size(); }
  uint64_t largest_free() const;
  uint64_t RoundUp(uint64_t size) const { return (size + alignment_ - 1) & ~(alignment_ - 1); }

  // Checks the internal invariants (both indexes agree, extents disjoint,
  // coalesced, sums match). For tests; aborts on a violation.
  void CheckInvariants() const;

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t capacity_;
  const uint64_t alignment_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (size, offset)
};

}  // namespace shelf::storage

#endif  // SHELF_STORAGE_ALLOCATOR_H_
