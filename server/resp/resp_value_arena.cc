#include "server/resp/resp_value_arena.h"

#include <functional>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "shelf/client.h"

namespace shelf::resp {

namespace {

size_t RoundToPages(size_t n) {
  return (n + ValueArena::kPageBytes - 1) / ValueArena::kPageBytes * ValueArena::kPageBytes;
}

}  // namespace

absl::StatusOr<std::shared_ptr<ValueArena>> ValueArena::Create(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("a value arena needs 1 byte or more");
  const size_t rounded = RoundToPages(bytes);
  void* memory = nullptr;
  Status s = AllocateSharedHostMemory(rounded, &memory);
  if (!s.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("value arena of ", rounded, " bytes: ", s.ToString()));
  }
  return std::shared_ptr<ValueArena>(new ValueArena(static_cast<char*>(memory), rounded));
}

ValueArena::ValueArena(char* base, size_t bytes) : base_(base), bytes_(bytes) {
  free_.emplace(0, bytes);
}

ValueArena::~ValueArena() {
  Status s = FreeSharedHostMemory(base_);
  if (!s.ok()) {
    SHELF_LOG(WARNING) << "freeing the value arena" << Kv("error", s.ToString());
  }
}

PlacedValue ValueArena::Allocate(size_t capacity) {
  if (capacity == 0 || capacity > bytes_ / 4) return PlacedValue();
  const size_t want = RoundToPages(capacity);
  size_t offset = 0;
  {
    MutexLock l(&mu_);
    auto it = free_.begin();
    while (it != free_.end() && it->second < want) ++it;
    if (it == free_.end()) return PlacedValue();
    offset = it->first;
    const size_t left = it->second - want;
    free_.erase(it);
    if (left > 0) free_.emplace(offset + want, left);
    used_ += want;
  }
  PlacedValue v;
  // The deleter's reference keeps the arena (and its memory) alive for as
  // long as the value is.
  v.memory = std::unique_ptr<char, std::function<void(char*)>>(
      base_ + offset, [arena = shared_from_this(), want](char* p) { arena->Free(p, want); });
  v.capacity = capacity;
  return v;
}

void ValueArena::Free(char* p, size_t pages_bytes) {
  size_t offset = static_cast<size_t>(p - base_);
  size_t length = pages_bytes;
  MutexLock l(&mu_);
  used_ -= pages_bytes;
  // Merged with the free runs on either side, so first fit sees them whole.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(offset, length);
}

size_t ValueArena::used_bytes() const {
  MutexLock l(&mu_);
  return used_;
}

}  // namespace shelf::resp
