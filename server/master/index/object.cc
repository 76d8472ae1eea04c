// ObjectKey: the key inline in the object when it fits, else on the heap.
#include "server/master/index/object.h"

#include <cstring>

namespace shelf::master {

ObjectKey::ObjectKey(absl::string_view s) {
  if (s.size() <= kInline) {
    std::memcpy(b_, s.data(), s.size());
    b_[kInline] = static_cast<char>(s.size());
    return;
  }
  char* heap = new char[s.size()];
  std::memcpy(heap, s.data(), s.size());
  uint64_t size = s.size();
  std::memcpy(b_, &heap, sizeof(heap));
  std::memcpy(b_ + 8, &size, sizeof(size));
  b_[kInline] = static_cast<char>(kHeap);
}

ObjectKey::~ObjectKey() {
  if (static_cast<uint8_t>(b_[kInline]) != kHeap) return;
  char* heap;
  std::memcpy(&heap, b_, sizeof(heap));
  delete[] heap;
}

absl::string_view ObjectKey::view() const {
  uint8_t tag = static_cast<uint8_t>(b_[kInline]);
  if (tag != kHeap) return {b_, tag};
  const char* heap;
  uint64_t size;
  std::memcpy(&heap, b_, sizeof(heap));
  std::memcpy(&size, b_ + 8, sizeof(size));
  return {heap, size};
}

}  // namespace shelf::master
