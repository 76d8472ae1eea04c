#include "storage/allocator.h"

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace shelf::storage {

RangeAllocator::RangeAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity & ~(alignment - 1)), alignment_(alignment) {
  SHELF_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0) << "alignment " << alignment;
  if (capacity_ > 0) InsertFree(0, capacity_);
}

void RangeAllocator::InsertFree(uint64_t offset, uint64_t size) {
  by_offset_.emplace(offset, size);
  by_size_.emplace(size, offset);
}

void RangeAllocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_offset_.erase(it);
}

absl::StatusOr<uint64_t> RangeAllocator::Allocate(uint64_t size) {
  if (size == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes");
  if (size > capacity_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("block of ", size, " bytes exceeds segment capacity ", capacity_));
  }
  uint64_t need = RoundUp(size);
  auto fit = by_size_.lower_bound({need, 0});
  if (fit == by_size_.end()) {
    return absl::ResourceExhaustedError(absl::StrCat("no free range of ", need, " bytes (free ",
                                                     free_bytes(), " in ", by_offset_.size(),
                                                     " extents)"));
  }
  uint64_t extent_size = fit->first;
  uint64_t offset = fit->second;
  EraseFree(by_offset_.find(offset));
  if (extent_size > need) InsertFree(offset + need, extent_size - need);
  // Paired with Free's and Reserve's: the bytes handed out were free.
  SHELF_CHECK(need <= capacity_ - used_) << "allocating " << need << " with " << used_ << " used";
  used_ += need;
  return offset;
}

absl::Status RangeAllocator::Free(uint64_t offset, uint64_t size) {
  // size first: RoundUp of a size near 2^64 wraps to a small length.
  if (size == 0 || size > capacity_ || offset % alignment_ != 0 || offset > capacity_ ||
      RoundUp(size) > capacity_ - offset) {
    return absl::FailedPreconditionError(
        absl::StrCat("free of [", offset, ", +", size, ") outside segment of ", capacity_));
  }
  uint64_t len = RoundUp(size);
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first < offset + len) {
    return absl::FailedPreconditionError(absl::StrCat("double free at offset ", offset));
  }
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > offset) {
      return absl::FailedPreconditionError(absl::StrCat("double free at offset ", offset));
    }
  }
  uint64_t start = offset;
  uint64_t end = offset + len;
  if (next != by_offset_.end() && next->first == end) {
    end += next->second;
    EraseFree(next);
  }
  auto after = by_offset_.lower_bound(start);
  if (after != by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == start) {
      start = prev->first;
      EraseFree(prev);
    }
  }
  InsertFree(start, end - start);
  // Paired with Allocate's and Reserve's: only bytes counted as used come back.
  SHELF_CHECK(len <= used_) << "freeing " << len << " with " << used_ << " used";
  used_ -= len;
  return absl::OkStatus();
}

absl::Status RangeAllocator::Reserve(uint64_t offset, uint64_t size) {
  // size first: RoundUp of a size near 2^64 wraps to a small length.
  if (size == 0 || size > capacity_ || offset % alignment_ != 0 || offset > capacity_ ||
      RoundUp(size) > capacity_ - offset) {
    return absl::FailedPreconditionError(
        absl::StrCat("reserve of [", offset, ", +", size, ") outside segment of ", capacity_));
  }
  uint64_t len = RoundUp(size);
  auto it = by_offset_.upper_bound(offset);
  if (it == by_offset_.begin()) {
    return absl::FailedPreconditionError(absl::StrCat("range at ", offset, " is not free"));
  }
  --it;
  uint64_t ext_off = it->first;
  uint64_t ext_len = it->second;
  if (ext_off + ext_len < offset + len) {
    return absl::FailedPreconditionError(absl::StrCat("range at ", offset, " is not free"));
  }
  EraseFree(it);
  if (offset > ext_off) InsertFree(ext_off, offset - ext_off);
  if (ext_off + ext_len > offset + len) {
    InsertFree(offset + len, ext_off + ext_len - offset - len);
  }
  SHELF_CHECK(len <= capacity_ - used_) << "reserving " << len << " with " << used_ << " used";
  used_ += len;
  return absl::OkStatus();
}

uint64_t RangeAllocator::largest_free() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

void RangeAllocator::CheckInvariants() const {
  uint64_t free_sum = 0;
  uint64_t prev_end = 0;
  bool first = true;
  for (const auto& [off, len] : by_offset_) {
    SHELF_CHECK(len != 0 && off % alignment_ == 0 && off + len <= capacity_)
        << "extent " << off << "+" << len;
    SHELF_CHECK(first || off > prev_end) << "extent " << off << " overlaps or is not coalesced";
    SHELF_CHECK(by_size_.count({len, off}) == 1) << "extent " << off << " not in the size index";
    prev_end = off + len;
    first = false;
    free_sum += len;
  }
  SHELF_CHECK(by_size_.size() == by_offset_.size());
  SHELF_CHECK(free_sum + used_ == capacity_) << free_sum << " free + " << used_ << " used";
}

}  // namespace shelf::storage
