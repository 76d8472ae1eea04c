// SHA256_Init/Update/Final are deprecated in OpenSSL 3 in favour of EVP,
// but EVP has no allocation-free way to start from a saved midstate: its
// EVP_MD_CTX_copy_ex duplicates the provider context (a malloc and a free)
// on every call, which cost more than the two SHA-256 blocks of a read
// grant's MAC. The low-level calls use the same assembly (SHA-NI where the
// CPU has it).
#define OPENSSL_SUPPRESS_DEPRECATED
#include "common/hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstring>

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

HmacKey::HmacKey(absl::string_view key) : inner_(new SHA256_CTX), outer_(new SHA256_CTX) {
  constexpr size_t kBlock = 64;  // SHA-256's block size
  unsigned char k[kBlock] = {};
  if (key.size() > kBlock) {
    unsigned int len = 0;
    SHELF_CHECK(EVP_Digest(key.data(), key.size(), k, &len, EVP_sha256(), nullptr) == 1);
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  unsigned char ipad[kBlock], opad[kBlock];
  for (size_t i = 0; i < kBlock; ++i) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  SHELF_CHECK(SHA256_Init(inner_) == 1 && SHA256_Update(inner_, ipad, kBlock) == 1 &&
              SHA256_Init(outer_) == 1 && SHA256_Update(outer_, opad, kBlock) == 1)
      << "SHA-256 unavailable";
  OPENSSL_cleanse(k, sizeof(k));
  OPENSSL_cleanse(ipad, sizeof(ipad));
  OPENSSL_cleanse(opad, sizeof(opad));
}

HmacKey::~HmacKey() {
  // The midstates stand for the key: whoever has them can MAC.
  OPENSSL_cleanse(inner_, sizeof(SHA256_CTX));
  OPENSSL_cleanse(outer_, sizeof(SHA256_CTX));
  delete inner_;
  delete outer_;
}

void HmacKey::MacInto(std::initializer_list<absl::string_view> parts, char* out) const {
  unsigned char inner[kMacBytes];
  SHA256_CTX c = *inner_;
  for (absl::string_view p : parts) SHA256_Update(&c, p.data(), p.size());
  SHA256_Final(inner, &c);
  c = *outer_;
  SHA256_Update(&c, inner, sizeof(inner));
  SHA256_Final(reinterpret_cast<unsigned char*>(out), &c);
  // `c` now holds the MAC itself, and `inner` only H(key XOR ipad || the
  // message), from which the key cannot be had: nothing secret to wipe.
}

std::string HmacKey::Mac(std::initializer_list<absl::string_view> parts) const {
  std::string out(kMacBytes, '\0');
  MacInto(parts, out.data());
  return out;
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
