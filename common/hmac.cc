#include "common/hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

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

HmacKey::HmacKey(absl::string_view key) : inner_(EVP_MD_CTX_new()), outer_(EVP_MD_CTX_new()) {
  SHELF_CHECK(inner_ != nullptr && outer_ != nullptr) << "EVP_MD_CTX_new failed";
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
  SHELF_CHECK(EVP_DigestInit_ex(inner_, EVP_sha256(), nullptr) == 1 &&
              EVP_DigestUpdate(inner_, ipad, kBlock) == 1 &&
              EVP_DigestInit_ex(outer_, EVP_sha256(), nullptr) == 1 &&
              EVP_DigestUpdate(outer_, opad, kBlock) == 1)
      << "SHA-256 unavailable";
  OPENSSL_cleanse(k, sizeof(k));
  OPENSSL_cleanse(ipad, sizeof(ipad));
  OPENSSL_cleanse(opad, sizeof(opad));
}

HmacKey::~HmacKey() {
  EVP_MD_CTX_free(inner_);
  EVP_MD_CTX_free(outer_);
}

namespace {

// A digest context per thread, reused by every HmacKey::Mac: no allocation
// per MAC.
EVP_MD_CTX* ThreadContext() {
  struct Holder {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~Holder() { EVP_MD_CTX_free(ctx); }
  };
  static thread_local Holder holder;
  SHELF_CHECK(holder.ctx != nullptr) << "EVP_MD_CTX_new failed";
  return holder.ctx;
}

}  // namespace

std::string HmacKey::Mac(std::initializer_list<absl::string_view> parts) const {
  EVP_MD_CTX* w = ThreadContext();
  unsigned char inner[EVP_MAX_MD_SIZE];
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int inner_len = 0, out_len = 0;
  bool ok = EVP_MD_CTX_copy_ex(w, inner_) == 1;
  for (absl::string_view p : parts) ok = ok && EVP_DigestUpdate(w, p.data(), p.size()) == 1;
  ok = ok && EVP_DigestFinal_ex(w, inner, &inner_len) == 1;
  ok = ok && EVP_MD_CTX_copy_ex(w, outer_) == 1 && EVP_DigestUpdate(w, inner, inner_len) == 1 &&
       EVP_DigestFinal_ex(w, out, &out_len) == 1;
  SHELF_CHECK(ok && out_len == kMacBytes) << "HMAC-SHA256 failed";
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
