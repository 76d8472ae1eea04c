// The limits of the Shelf protocol, in one place: the master and the stores
// enforce them, the client checks them before a call leaves the process,
// proto/shelf.proto's comments point here, and every error message that
// names a limit is built from these constants. A request beyond a limit
// fails with INVALID_ARGUMENT.
//
//   if (key.size() > shelf::kKeyBytesMax) ...   // "exceeds the limit of 256"
//
// Raising one is a protocol change: an older master or store still enforces
// its own value, so mixed fleets see the smaller one.
#ifndef SHELF_LIMITS_H_
#define SHELF_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace shelf {

// A key is 1..kKeyBytesMax bytes, opaque.
inline constexpr size_t kKeyBytesMax = 256;
// A batch call (lookup, prefix match, batch put, commit, abort, remove,
// lease release) carries 1..kBatchItemsMax items.
inline constexpr size_t kBatchItemsMax = 1024;
// Copies of one object: 1..kReplicasMax.
inline constexpr uint32_t kReplicasMax = 8;
// RegisterRequest.protocol_version: the master rejects any other.
inline constexpr uint32_t kProtocolVersion = 1;
// ListKeys and RemoveMatching patterns are at most this many bytes.
inline constexpr size_t kPatternBytesMax = 256;
// Keys in one ListKeys page.
inline constexpr size_t kListKeysMax = 1024;
// Token ids one put may carry for the KV event stream (BlockEventInfo).
inline constexpr size_t kBlockEventTokenIdsMax = 65536;

static_assert(kKeyBytesMax >= 1 && kBatchItemsMax >= 1 && kReplicasMax >= 1);

}  // namespace shelf

#endif  // SHELF_LIMITS_H_
