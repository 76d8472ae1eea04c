// Block checksums: XXH3-64 of the block's bytes, computed by the writer and
// checked by readers (docs/storage.md). Seed 0.
#ifndef SHELF_COMMON_CHECKSUM_H_
#define SHELF_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace shelf {

inline uint64_t BlockChecksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace shelf

#endif  // SHELF_COMMON_CHECKSUM_H_
