// Block checksums: XXH3-64 of the block's bytes, computed by the writer and
// checked by readers (docs/storage.md). Seed 0.
//
// Blocks of a kilobyte and more are hashed by libxxhash's dispatching entry
// points where the library has them (Debian's does, on x86-64): they pick
// the widest vector unit the CPU offers (AVX2, AVX-512) at run time, where
// the inline code is built for the baseline SSE2 of every x86-64. Same hash,
// bit for bit; about 15x faster on 64 KiB and up (docs/storage.md,
// "Checksums").
#ifndef SHELF_COMMON_CHECKSUM_H_
#define SHELF_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace shelf {

// Inputs from this size up go to the out-of-line (dispatching) code; below
// it the call would cost more than the vector width saves.
inline constexpr size_t kChecksumOutOfLineBytes = 1024;

// XXH3-64 of [data, data + size), out of line: through libxxhash's
// dispatching code when it was found at build time, else the inline code.
uint64_t BlockChecksumLong(const void* data, size_t size);

inline uint64_t BlockChecksum(const void* data, size_t size) {
  if (size >= kChecksumOutOfLineBytes) return BlockChecksumLong(data, size);
  return XXH3_64bits(data, size);
}

// True when ChecksumStream, like BlockChecksumLong, runs libxxhash's
// vector code (found at build time, and the library is the header's
// version at run time).
bool ChecksumDispatches();

// The checksum of a block fed in pieces: after any split of the bytes,
// Digest() equals BlockChecksum of them all.
class ChecksumStream {
 public:
  ChecksumStream() { XXH3_64bits_reset(&state_); }
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;

  void Update(const void* data, size_t size);
  uint64_t Digest() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace shelf

#endif  // SHELF_COMMON_CHECKSUM_H_
