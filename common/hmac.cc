#include "common/hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cassert>

namespace shelf {

std::string HmacSha256(absl::string_view key, absl::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &out_len);
  assert(out_len == kMacBytes);
  return std::string(reinterpret_cast<char*>(out), out_len);
}

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  int ok = RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n));
  (void)ok;
  assert(ok == 1);
  return out;
}

}  // namespace shelf
