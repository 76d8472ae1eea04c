// HMAC-SHA256 (OpenSSL) and constant-time comparison, for write grants and
// the data-plane handshake.
#ifndef SHELF_COMMON_HMAC_H_
#define SHELF_COMMON_HMAC_H_

#include <string>

#include "absl/strings/string_view.h"

namespace shelf {

inline constexpr size_t kMacBytes = 32;

// Returns the 32-byte HMAC-SHA256 of `message` under `key`.
std::string HmacSha256(absl::string_view key, absl::string_view message);
// Constant-time equality of two byte strings.
bool ConstantTimeEqual(absl::string_view a, absl::string_view b);
// `n` cryptographically random bytes.
std::string RandomBytes(size_t n);

}  // namespace shelf

#endif  // SHELF_COMMON_HMAC_H_
