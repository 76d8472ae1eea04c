// RangeOwners: which block each range of the DRAM segment was last written
// for, so that a grant outlives nothing (docs/security.md, "Grants bound to
// their blocks").
//
// The master frees a removed or evicted block's range at once and may hand
// it to the next put, while grants naming the range stay valid for up to a
// minute. Each write grant carries the range's allocation number
// (`range_seq`, increasing per store) and the digest of the put's key. A
// write is admitted only if no newer allocation has claimed any byte of its
// range; it then claims the range for its own, dropping the older claims
// it overlaps. A read by range is served only if one claim covers it and
// names the key of the reader's grant. So a stale grant's holder neither
// reads nor overwrites the bytes of the block that reused its range.
//
// Claims are kept until a newer allocation overlaps them: disjoint, each at
// least one allocation granule, so at most one per granule of the segment
// (about 80 bytes each). A removed block's claim admits only reads for its
// own key, of bytes nobody else has written since.
//
// A write admitted before a newer one claims the range still streams its
// payload there: the newer write is refused (UNAVAILABLE) while an older
// write of an overlapping range is in flight, rather than interleave bytes.
//
// With a key board (transport/shm_board.h) the claims also keep it: a
// block is marked there only while a claim for its key covers its range
// (Publish), and every slot of a claim's range is cleared before a write
// that overlaps it is admitted, under the same lock, so no mark outlives
// the bytes it vouches for.
//
// Thread-safe.
#ifndef SHELF_SERVER_STORE_RANGE_OWNERS_H_
#define SHELF_SERVER_STORE_RANGE_OWNERS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "transport/shm_board.h"
#include "transport/wire.h"

namespace shelf::store {

class RangeOwners {
 public:
  // Admits a write of [offset, offset + length) (global offsets) under an
  // allocation numbered `seq` for the key of digest `key_digest`, and
  // claims the range for it: PERMISSION_DENIED when a newer allocation has
  // claimed any byte of it, UNAVAILABLE while an older one's write of an
  // overlapping range is in flight. Every admitted write is ended with
  // EndWrite.
  absl::Status BeginWrite(uint64_t offset, uint64_t length, uint64_t seq,
                          absl::string_view key_digest);
  void EndWrite(uint64_t offset, uint64_t seq);

  // OK iff one claim covers [offset, offset + length) and names
  // `key_digest`; PERMISSION_DENIED otherwise.
  absl::Status CheckRead(uint64_t offset, uint64_t length, absl::string_view key_digest) const;

  // Keeps `board` from now on (null: none; not owned). Called before the
  // store takes writes.
  void AttachBoard(transport::KeyBoard* board);
  // Marks the block of key digest `key_digest` at [offset, +length) with
  // `tag` on the board if a claim covers it as CheckRead would admit a
  // read; otherwise leaves its slot as it is (a write since has cleared
  // it). Without a board, nothing.
  void Publish(uint64_t offset, uint64_t length, absl::string_view key_digest, uint64_t tag);
  // Clears the board's slot of the block at `offset` (its record is gone).
  void Unpublish(uint64_t offset);

  // The highest allocation number ever admitted: the master numbers the
  // store's next ranges above it when the store registers.
  uint64_t max_seq() const;

 private:
  struct Claim {
    uint64_t end = 0;
    uint64_t seq = 0;
    std::array<char, transport::wire::kKeyDigestBytes> key_digest{};
    uint32_t writers = 0;  // admitted writes not yet ended
  };
  bool CoveredLocked(uint64_t offset, uint64_t length, absl::string_view key_digest) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  transport::KeyBoard* board_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<uint64_t, Claim> claims_ ABSL_GUARDED_BY(mu_);  // by start offset, disjoint
  uint64_t max_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shelf::store

#endif  // SHELF_SERVER_STORE_RANGE_OWNERS_H_
