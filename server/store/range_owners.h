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
  mutable Mutex mu_;
  std::map<uint64_t, Claim> claims_ ABSL_GUARDED_BY(mu_);  // by start offset, disjoint
  uint64_t max_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shelf::store

#endif  // SHELF_SERVER_STORE_RANGE_OWNERS_H_
