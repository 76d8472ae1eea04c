// The limits of the Shelf protocol, in one place: the master and the stores
// enforce them, the client checks them before a call leaves the process,
// proto/shelf.proto's comments point here, and every error message that
// names a limit is built from these constants. A request beyond a limit
// fails with INVALID_ARGUMENT. The checks every layer shares are here too:
// a key's length (one message wherever a key is refused) and the cutting
// of a larger batch into batch calls.
//
//   if (std::string why = shelf::KeyLengthError(key.size()); !why.empty()) ...
//   shelf::ForEachBatchSlice(keys.size(), [&](size_t begin, size_t end) { ... });
//
// Raising one is a protocol change: an older master or store still enforces
// its own value, so mixed fleets see the smaller one.
#ifndef SHELF_COMMON_INCLUDE_SHELF_LIMITS_H_
#define SHELF_COMMON_INCLUDE_SHELF_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

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
// A block's model (BlockEventInfo.model) names an event topic
// kv@<node>@<model>: 1..kEventModelBytesMax printable ASCII bytes, no '@'.
inline constexpr size_t kEventModelBytesMax = 128;

static_assert(kKeyBytesMax >= 1 && kBatchItemsMax >= 1 && kReplicasMax >= 1);

// Whether a key of `key_bytes` bytes is one Shelf can hold: 1..kKeyBytesMax.
inline bool ValidKeyLength(size_t key_bytes) { return key_bytes >= 1 && key_bytes <= kKeyBytesMax; }

// Whether `model` can name an event topic (kEventModelBytesMax).
inline bool ValidEventModel(std::string_view model) {
  if (model.empty() || model.size() > kEventModelBytesMax) return false;
  for (char c : model) {
    if (c == '@' || c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// Why a key of `key_bytes` bytes is refused, or empty when it is not. The
// one message for a bad key length, whichever layer refuses it.
inline std::string KeyLengthError(size_t key_bytes) {
  if (key_bytes == 0) {
    return "empty key: a key is 1.." + std::to_string(kKeyBytesMax) + " bytes";
  }
  if (key_bytes > kKeyBytesMax) {
    return "key of " + std::to_string(key_bytes) + " bytes exceeds the limit: a key is 1.." +
           std::to_string(kKeyBytesMax) + " bytes";
  }
  return std::string();
}

// Cuts [0, n) into consecutive slices of at most kBatchItemsMax items, the
// batch calls a larger batch becomes, and calls fn(begin, end) for each in
// order. fn returns void, or bool: false stops at that slice.
template <typename Fn>
void ForEachBatchSlice(size_t n, Fn&& fn) {
  for (size_t begin = 0; begin < n; begin += kBatchItemsMax) {
    const size_t end = n - begin < kBatchItemsMax ? n : begin + kBatchItemsMax;
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&, size_t, size_t>>) {
      fn(begin, end);
    } else if (!fn(begin, end)) {
      return;
    }
  }
}

}  // namespace shelf

#endif  // SHELF_COMMON_INCLUDE_SHELF_LIMITS_H_
