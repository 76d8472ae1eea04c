#include "common/hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "common/check.h"

namespace shelf {

std::string HmacSha256(absl::string_view key, absl::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &out_len);
  SHELF_CHECK(out_len == kMacBytes) << "HMAC-SHA256 gave " << out_len << " bytes";
  return std::string(reinterpret_cast<char*>(out), out_len);
}

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  int ok = RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n));
  // No randomness means no secure nonces or grant keys: nothing to go on with.
  SHELF_CHECK(ok == 1) << "RAND_bytes failed";
  return out;
}

}  // namespace shelf
