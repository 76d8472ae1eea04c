// HMAC-SHA256 (OpenSSL) and constant-time comparison, for write grants and
// the data-plane handshake.
#ifndef SHELF_COMMON_HMAC_H_
#define SHELF_COMMON_HMAC_H_

#include <initializer_list>
#include <string>

#include "absl/strings/string_view.h"

struct SHA256state_st;  // OpenSSL's SHA256_CTX

namespace shelf {

inline constexpr size_t kMacBytes = 32;

// Returns the 32-byte HMAC-SHA256 of `message` under `key`.
std::string HmacSha256(absl::string_view key, absl::string_view message);

// A key's HMAC-SHA256 with its padded-key blocks hashed once: each MAC
// then costs the message's hashing alone, two SHA-256 blocks for a message
// under 56 bytes. The midstates are plain SHA-256 states copied per MAC:
// no allocation and no provider dispatch, about a tenth of HmacSha256's
// time for a short message (a read grant). Immutable after construction;
// Mac and MacInto are thread-safe.
class HmacKey {
 public:
  explicit HmacKey(absl::string_view key);
  ~HmacKey();
  HmacKey(const HmacKey&) = delete;
  HmacKey& operator=(const HmacKey&) = delete;
  // HMAC-SHA256 of the concatenation of `parts`: equal to HmacSha256(key,
  // parts[0] + parts[1] + ...).
  std::string Mac(std::initializer_list<absl::string_view> parts) const;
  // The same MAC written to `out` (kMacBytes), with no allocation.
  void MacInto(std::initializer_list<absl::string_view> parts, char* out) const;

 private:
  SHA256state_st* inner_;  // after the key XOR ipad block
  SHA256state_st* outer_;  // after the key XOR opad block
};
// Constant-time equality of two byte strings.
bool ConstantTimeEqual(absl::string_view a, absl::string_view b);
// `n` cryptographically random bytes.
std::string RandomBytes(size_t n);

}  // namespace shelf

#endif  // SHELF_COMMON_HMAC_H_
