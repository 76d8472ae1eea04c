// ValueArena: shared host memory (libshelf's AllocateSharedHostMemory)
// that shelf-resp reads large SET values into, straight from the socket.
// A store on the same host maps it once, read-only, and copies a put from
// it into its segment: the value is copied once after the socket's copy,
// where a value in heap memory is copied twice (into libshelf's staging
// memory, then by the store into its segment).
//
//   absl::StatusOr<std::shared_ptr<ValueArena>> arena = ValueArena::Create(64 << 20);
//   PlacedValue v = (*arena)->Allocate(n);  // empty when there is no room
//   ... fill v, put v.data() ...
//   // v's destructor gives the room back
//
// A value takes whole pages, first fit; one larger than a quarter of the
// arena is never placed, so that a few huge values do not leave every
// other SET without room. A value holds a reference to its arena: the
// memory lives until the arena and all its values are gone.
//
// Thread-safe: the event loop places values, the workers that ran their
// commands free them.
#ifndef SHELF_SERVER_RESP_RESP_VALUE_ARENA_H_
#define SHELF_SERVER_RESP_RESP_VALUE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/resp/resp_parser.h"

namespace shelf::resp {

class ValueArena : public std::enable_shared_from_this<ValueArena> {
 public:
  static constexpr size_t kPageBytes = 4096;

  // `bytes` (rounded up to whole pages) of shared host memory, populated.
  // INVALID_ARGUMENT for 0; RESOURCE_EXHAUSTED when the memory cannot be
  // had.
  static absl::StatusOr<std::shared_ptr<ValueArena>> Create(size_t bytes);
  ~ValueArena();
  ValueArena(const ValueArena&) = delete;
  ValueArena& operator=(const ValueArena&) = delete;

  // Room for `capacity` bytes (1 or more), or an empty PlacedValue when the
  // arena has no free run of pages that large or `capacity` is over a
  // quarter of it.
  PlacedValue Allocate(size_t capacity) ABSL_LOCKS_EXCLUDED(mu_);

  size_t bytes() const { return bytes_; }
  // Bytes of the pages values hold now.
  size_t used_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // True when `p` lies in this arena's memory.
  bool Contains(const char* p) const { return p >= base_ && p < base_ + bytes_; }

 private:
  ValueArena(char* base, size_t bytes);
  void Free(char* p, size_t pages_bytes) ABSL_LOCKS_EXCLUDED(mu_);

  char* const base_;
  const size_t bytes_;
  mutable Mutex mu_;
  // Free runs of pages: offset -> length, never two adjacent.
  std::map<size_t, size_t> free_ ABSL_GUARDED_BY(mu_);
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shelf::resp

#endif  // SHELF_SERVER_RESP_RESP_VALUE_ARENA_H_
