// Content keys: the chained XXH3-128 of docs/keys.md. Every byte layout here
// is the spec's; tests/data/key_vectors.json pins it, and an independent
// Python implementation (tests/keys/reference_keys.py) checks the vectors.

#include "shelf/keys.h"

#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace shelf {
namespace {

static_assert(sizeof(uint32_t) == 4, "token ids are 4 bytes on the wire");
static_assert(kKeyDigestBytes == sizeof(XXH128_hash_t), "the digest is one XXH3-128");

// Bytes hashed for one block: version, previous digest, the chunk's tokens.
constexpr size_t kBlockHeaderBytes = 1 + kKeyDigestBytes;
static_assert(kBlockHeaderBytes + 4ull * kKeyChunkTokensMax < (1ull << 31),
              "a block's hash input stays far below any size limit");

void PutU32(uint32_t v, char* out) {
  out[0] = static_cast<char>(v & 0xff);
  out[1] = static_cast<char>((v >> 8) & 0xff);
  out[2] = static_cast<char>((v >> 16) & 0xff);
  out[3] = static_cast<char>((v >> 24) & 0xff);
}

void AppendU32(uint32_t v, std::string* out) {
  char bytes[4];
  PutU32(v, bytes);
  out->append(bytes, sizeof(bytes));
}

// A string field: its byte length as a little-endian u32, then its bytes.
void AppendString(const std::string& s, std::string* out) {
  AppendU32(static_cast<uint32_t>(s.size()), out);
  out->append(s);
}

// XXH3-128 (seed 0, default secret) of data[0, len), written as 16 bytes: the
// 128-bit value little-endian, i.e. low64 LE then high64 LE. Note this is not
// xxHash's canonical (big-endian) form.
void Digest(const void* data, size_t len, char* out) {
  const XXH128_hash_t h = XXH3_128bits(data, len);
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((h.low64 >> (8 * i)) & 0xff);
    out[8 + i] = static_cast<char>((h.high64 >> (8 * i)) & 0xff);
  }
}

// Writes chunk[0, n) as little-endian u32s to out[0, 4n).
void PutTokens(const uint32_t* chunk, size_t n, char* out) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(out, chunk, 4 * n);
#else
  for (size_t i = 0; i < n; ++i) PutU32(chunk[i], out + 4 * i);
#endif
}

// Computes the key of `chunk` (chunk_tokens tokens) chained from
// `previous_digest` (kKeyDigestBytes bytes) into key[0, kKeyBytes). `scratch`
// is the hash input buffer, reused across calls. `previous_digest` may point
// into `key`: it is read before `key` is written.
void BlockKey(const char* previous_digest, const uint32_t* chunk, uint32_t chunk_tokens,
              std::string* scratch, char* key) {
  scratch->resize(kBlockHeaderBytes + 4 * static_cast<size_t>(chunk_tokens));
  char* in = &(*scratch)[0];
  in[0] = static_cast<char>(kKeyVersion);
  std::memcpy(in + 1, previous_digest, kKeyDigestBytes);
  PutTokens(chunk, chunk_tokens, in + kBlockHeaderBytes);
  key[0] = static_cast<char>(kKeyVersion);
  Digest(scratch->data(), scratch->size(), key + 1);
}

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing past
// U+10FFFF. The same set of byte strings Python's bytes.decode("utf-8")
// accepts, so every namespace has one spelling in every language.
bool IsValidUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80;
    unsigned char hi = 0xbf;  // bounds of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    } else {
      return false;
    }
    if (n - i < len) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return false;
    }
    i += len;
  }
  return true;
}

bool CheckString(const char* field, const std::string& value, std::string* error) {
  if (value.size() > kKeyNamespaceStringBytesMax) {
    if (error != nullptr) {
      *error = std::string(field) + " is " + std::to_string(value.size()) +
               " bytes, more than the limit of " + std::to_string(kKeyNamespaceStringBytesMax);
    }
    return false;
  }
  if (!IsValidUtf8(value)) {
    if (error != nullptr) *error = std::string(field) + " is not valid UTF-8";
    return false;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool KeyBuilder::Validate(const KeyNamespace& ns, std::string* error) {
  if (!CheckString("model", ns.model, error) || !CheckString("dtype", ns.dtype, error) ||
      !CheckString("kv_layout", ns.kv_layout, error) || !CheckString("salt", ns.salt, error)) {
    return false;
  }
  if (ns.tp_size < 1) {
    if (error != nullptr) *error = "tp_size must be at least 1";
    return false;
  }
  if (ns.tp_rank >= ns.tp_size) {
    if (error != nullptr) {
      *error = "tp_rank " + std::to_string(ns.tp_rank) + " is not below tp_size " +
               std::to_string(ns.tp_size);
    }
    return false;
  }
  if (ns.chunk_tokens < 1 || ns.chunk_tokens > kKeyChunkTokensMax) {
    if (error != nullptr) {
      *error = "chunk_tokens " + std::to_string(ns.chunk_tokens) + " is outside [1, " +
               std::to_string(kKeyChunkTokensMax) + "]";
    }
    return false;
  }
  return true;
}

KeyBuilder::KeyBuilder(KeyNamespace ns) : ns_(std::move(ns)) {
  std::string error;
  if (!Validate(ns_, &error)) {
    std::fprintf(stderr, "shelf::KeyBuilder: invalid KeyNamespace: %s\n", error.c_str());
    std::abort();
  }
  const std::string serialized = SerializeNamespace(ns_);
  h0_.resize(kKeyDigestBytes);
  Digest(serialized.data(), serialized.size(), &h0_[0]);
}

std::string KeyBuilder::SerializeNamespace(const KeyNamespace& ns) {
  std::string out;
  out.reserve(size_t{1 + 4 * 4 + 3 * 4} + ns.model.size() + ns.dtype.size() + ns.kv_layout.size() +
              ns.salt.size());
  out.push_back(static_cast<char>(kKeyVersion));
  AppendString(ns.model, &out);
  AppendString(ns.dtype, &out);
  AppendString(ns.kv_layout, &out);
  AppendU32(ns.tp_rank, &out);
  AppendU32(ns.tp_size, &out);
  AppendString(ns.salt, &out);
  AppendU32(ns.chunk_tokens, &out);
  return out;
}

std::vector<std::string> KeyBuilder::BlockKeys(const uint32_t* tokens, size_t n) const {
  const size_t chunks = n / ns_.chunk_tokens;
  std::vector<std::string> keys;
  keys.reserve(chunks);
  std::string scratch;
  char key[kKeyBytes];
  std::memcpy(key + 1, h0_.data(), kKeyDigestBytes);  // key + 1 holds h_{i-1}
  for (size_t i = 0; i < chunks; ++i) {
    BlockKey(key + 1, tokens + i * ns_.chunk_tokens, ns_.chunk_tokens, &scratch, key);
    keys.emplace_back(key, kKeyBytes);
  }
  return keys;
}

std::string KeyBuilder::Extend(const std::string& previous_key, const uint32_t* chunk) const {
  const char* previous;
  if (previous_key.empty()) {
    previous = h0_.data();
  } else if (previous_key.size() == kKeyBytes &&
             static_cast<uint8_t>(previous_key[0]) == kKeyVersion) {
    previous = previous_key.data() + 1;
  } else {
    return std::string();
  }
  std::string scratch;
  std::string key(kKeyBytes, '\0');
  BlockKey(previous, chunk, ns_.chunk_tokens, &scratch, &key[0]);
  return key;
}

std::string KeyBuilder::ToHex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * bytes.size(), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    hex[2 * i] = kDigits[b >> 4];
    hex[2 * i + 1] = kDigits[b & 0x0f];
  }
  return hex;
}

bool KeyBuilder::FromHex(const std::string& hex, std::string* bytes) {
  if (hex.size() % 2 != 0) return false;
  bytes->resize(hex.size() / 2);
  for (size_t i = 0; i < bytes->size(); ++i) {
    const int hi = HexValue(hex[2 * i]);
    const int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*bytes)[i] = static_cast<char>((hi << 4) | lo);
  }
  return true;
}

}  // namespace shelf
