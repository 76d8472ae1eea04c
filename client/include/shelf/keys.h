// Content keys: the deterministic block keys an engine gives Shelf.
//
// A sequence of token ids is cut into chunks of `chunk_tokens` tokens; chunk i
// gets a key that digests the namespace (model, dtype, KV layout, tensor-
// parallel rank and size, salt, chunk size) and every token of chunks 0..i. The
// same prefix in the same namespace gives the same keys in every process,
// language and release; the hash (XXH3-128, chained) is specified byte for byte
// in docs/keys.md, with test vectors in tests/data/key_vectors.json. A change
// of the hash is a new version byte, never a silent change.
//
//   shelf::KeyNamespace ns;
//   ns.model = "meta-llama/Llama-3.1-8B";
//   ns.dtype = "bf16";
//   ns.kv_layout = "paged_nhd";
//   ns.chunk_tokens = 512;
//   shelf::KeyBuilder keys(ns);
//   std::vector<std::string> block_keys = keys.BlockKeys(tokens.data(), tokens.size());
//   // block_keys[i] names tokens [0, 512 * (i + 1)); a partial tail has no key.
//   std::string next = keys.Extend(block_keys.back(), next_chunk.data());
//   printf("%s\n", shelf::KeyBuilder::ToHex(next).c_str());
//
// Thread safety: a KeyBuilder is immutable after construction; any number of
// threads may call its const methods at once without synchronization. The
// static functions are pure.
//
// This header is public and self-contained: it includes only standard headers,
// so engines build against it without Abseil.

#ifndef SHELF_CLIENT_INCLUDE_SHELF_KEYS_H_
#define SHELF_CLIENT_INCLUDE_SHELF_KEYS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shelf {

// The key format this header builds. It is the first byte of every key and of
// every hashed input, so keys of different versions never compare equal.
inline constexpr uint8_t kKeyVersion = 1;
// Bytes of the chain digest (XXH3-128).
inline constexpr size_t kKeyDigestBytes = 16;
// Bytes of a key on the wire: the version byte, then the digest.
inline constexpr size_t kKeyBytes = 1 + kKeyDigestBytes;
// Characters of a key's hex form (two lowercase digits a byte).
inline constexpr size_t kKeyHexChars = 2 * kKeyBytes;
// Limits on a namespace, checked by KeyBuilder::Validate.
inline constexpr size_t kKeyNamespaceStringBytesMax = 1024;
inline constexpr uint32_t kKeyChunkTokensMax = 1u << 20;
// Keys at the wire and API are at most 256 bytes.
static_assert(kKeyBytes <= 256, "content keys must fit the wire's key limit");

// Everything that must differ for two caches to hold different bytes for the
// same tokens. Strings are UTF-8; they are hashed as their bytes, with a length
// prefix, so ("ab", "") and ("a", "b") are different namespaces. An absent
// salt and the empty salt are the same namespace.
struct KeyNamespace {
  std::string model;            // e.g. "meta-llama/Llama-3.1-8B"
  std::string dtype;            // element type of the KV cache, e.g. "bf16", "fp8_e4m3"
  std::string kv_layout;        // the engine's block layout, e.g. "paged_nhd"
  uint32_t tp_rank = 0;         // REQUIRES: tp_rank < tp_size
  uint32_t tp_size = 1;         // REQUIRES: tp_size >= 1
  std::string salt;             // anything else that changes the KV: a LoRA id, ...
  uint32_t chunk_tokens = 512;  // tokens a block; REQUIRES: 1..kKeyChunkTokensMax
};

// Builds the content keys of one namespace. Cheap to copy; construction
// hashes the namespace once.
class KeyBuilder {
 public:
  // Returns true when `ns` is one KeyBuilder accepts: tp_size >= 1,
  // tp_rank < tp_size, 1 <= chunk_tokens <= kKeyChunkTokensMax, and every
  // string valid UTF-8 of at most kKeyNamespaceStringBytesMax bytes. Otherwise
  // returns false and, when `error` is not null, sets *error to why.
  static bool Validate(const KeyNamespace& ns, std::string* error);

  // REQUIRES: Validate(ns, nullptr). An invalid namespace is a bug in the
  // caller: the process aborts with the reason on stderr. Check configuration
  // from outside with Validate first.
  explicit KeyBuilder(KeyNamespace ns);

  // The namespace this builder keys.
  const KeyNamespace& key_namespace() const { return ns_; }

  // One key per full chunk of `tokens[0, n)`, in order: element i is the key
  // of tokens [0, chunk_tokens * (i + 1)). A partial trailing chunk gets no
  // key; fewer than chunk_tokens tokens give an empty vector. Each key is
  // kKeyBytes bytes. `tokens` may be null when n == 0.
  std::vector<std::string> BlockKeys(const uint32_t* tokens, size_t n) const;
  std::vector<std::string> BlockKeys(const std::vector<uint32_t>& tokens) const {
    return BlockKeys(tokens.data(), tokens.size());
  }

  // The key of the chunk `chunk[0, chunk_tokens)` that follows the block keyed
  // `previous_key`, or the first block's key when `previous_key` is empty. So
  // Extend(BlockKeys(t)[i - 1], t + i * chunk_tokens) == BlockKeys(t)[i].
  // The namespace enters only through the first block: a previous key from
  // another namespace continues that namespace's chain. Returns the empty
  // string, never a key, when `previous_key` is neither empty nor a key of
  // this version (kKeyBytes bytes starting with kKeyVersion).
  std::string Extend(const std::string& previous_key, const uint32_t* chunk) const;

  // The serialized namespace (docs/keys.md, "Namespace"), for tests and for
  // other implementations to compare against.
  static std::string SerializeNamespace(const KeyNamespace& ns);

  // h0: the XXH3-128 digest of SerializeNamespace(key_namespace()), as
  // kKeyDigestBytes bytes (little-endian 128-bit value). The chain's seed.
  const std::string& namespace_digest() const { return h0_; }

  // Lowercase hex of any byte string: 2 * bytes.size() characters. For a key,
  // kKeyHexChars characters starting "01".
  static std::string ToHex(const std::string& bytes);

  // Parses the hex form back into bytes (either case). Returns false, leaving
  // *bytes unspecified, on an odd length or a character that is not a hex
  // digit. Accepts any length; checking that the result is a key is the
  // caller's (size() == kKeyBytes && bytes[0] == kKeyVersion).
  static bool FromHex(const std::string& hex, std::string* bytes);

 private:
  // Constant after construction.
  KeyNamespace ns_;
  std::string h0_;  // kKeyDigestBytes bytes
};

}  // namespace shelf

#endif  // SHELF_CLIENT_INCLUDE_SHELF_KEYS_H_
