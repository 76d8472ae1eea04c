// Tests for shelf::KeyBuilder (client/include/shelf/keys.h): the checked-in
// vectors of tests/data/key_vectors.json, which an independent Python
// implementation also checks, and the properties docs/keys.md promises.

#include "shelf/keys.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/json.h"
#include "testing/test_paths.h"

namespace shelf {
namespace {

// One case of the vectors file.
struct Vector {
  std::string name;
  KeyNamespace ns;
  std::string namespace_hex;
  std::string namespace_digest_hex;
  std::vector<uint32_t> tokens;
  std::vector<std::string> keys_hex;
};

const Json& Member(const Json& object, const std::string& key) {
  static const Json kNull;
  if (!object.is_object() || !object.contains(key)) {
    ADD_FAILURE() << "missing member " << key;
    return kNull;
  }
  return object[key];
}

std::string Str(const Json& v) {
  EXPECT_TRUE(v.is_string());
  return v.is_string() ? v.get<std::string>() : std::string();
}

uint32_t U32(const Json& v) {
  EXPECT_TRUE(v.is_number_unsigned());
  if (!v.is_number_unsigned()) return 0;
  EXPECT_LE(v.get<uint64_t>(), UINT32_MAX);
  return static_cast<uint32_t>(v.get<uint64_t>());
}

std::vector<Vector> LoadVectors() {
  const std::string path = TestSourceDir() + "/tests/data/key_vectors.json";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream text;
  text << in.rdbuf();
  const Json root = JsonParse(text.str());
  EXPECT_FALSE(root.is_discarded()) << path << " is not JSON";
  EXPECT_EQ(U32(Member(root, "version")), kKeyVersion);

  std::vector<Vector> vectors;
  static const Json kNoCases = Json::array();
  const Json& cases = Member(root, "cases");
  for (const Json& c : cases.is_array() ? cases : kNoCases) {
    Vector v;
    v.name = Str(Member(c, "name"));
    const Json& ns = Member(c, "namespace");
    v.ns.model = Str(Member(ns, "model"));
    v.ns.dtype = Str(Member(ns, "dtype"));
    v.ns.kv_layout = Str(Member(ns, "kv_layout"));
    v.ns.tp_rank = U32(Member(ns, "tp_rank"));
    v.ns.tp_size = U32(Member(ns, "tp_size"));
    v.ns.salt = Str(Member(ns, "salt"));
    v.ns.chunk_tokens = U32(Member(ns, "chunk_tokens"));
    v.namespace_hex = Str(Member(c, "namespace_hex"));
    v.namespace_digest_hex = Str(Member(c, "namespace_digest_hex"));
    for (const Json& t : Member(c, "tokens")) v.tokens.push_back(U32(t));
    for (const Json& k : Member(c, "keys")) v.keys_hex.push_back(Str(k));
    vectors.push_back(std::move(v));
  }
  return vectors;
}

std::vector<std::string> Hex(const std::vector<std::string>& keys) {
  std::vector<std::string> hex;
  hex.reserve(keys.size());
  for (const std::string& k : keys) hex.push_back(KeyBuilder::ToHex(k));
  return hex;
}

KeyNamespace BasicNamespace(uint32_t chunk_tokens) {
  KeyNamespace ns;
  ns.model = "example/model-7b";
  ns.dtype = "bf16";
  ns.kv_layout = "paged_nhd";
  ns.chunk_tokens = chunk_tokens;
  return ns;
}

std::vector<uint32_t> Iota(size_t n, uint32_t first) {
  std::vector<uint32_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = first + static_cast<uint32_t>(i);
  return tokens;
}

TEST(KeyVectorsTest, KeyBuilderMatchesEveryVector) {
  const std::vector<Vector> vectors = LoadVectors();
  ASSERT_GE(vectors.size(), 8u);
  for (const Vector& v : vectors) {
    SCOPED_TRACE(v.name);
    std::string error;
    ASSERT_TRUE(KeyBuilder::Validate(v.ns, &error)) << error;
    const KeyBuilder builder(v.ns);
    EXPECT_EQ(KeyBuilder::ToHex(KeyBuilder::SerializeNamespace(v.ns)), v.namespace_hex);
    EXPECT_EQ(KeyBuilder::ToHex(builder.namespace_digest()), v.namespace_digest_hex);
    EXPECT_EQ(v.keys_hex.size(), v.tokens.size() / v.ns.chunk_tokens);
    EXPECT_EQ(Hex(builder.BlockKeys(v.tokens)), v.keys_hex);

    // The same chain, one chunk at a time.
    std::string previous;
    for (size_t i = 0; i < v.keys_hex.size(); ++i) {
      previous = builder.Extend(previous, v.tokens.data() + i * v.ns.chunk_tokens);
      EXPECT_EQ(KeyBuilder::ToHex(previous), v.keys_hex[i]) << "block " << i;
    }
  }
}

TEST(KeyVectorsTest, VectorsCoverTheCasesTheSpecNames) {
  bool salted = false, unsalted = false, tp_rank_nonzero = false, empty = false, tail = false;
  bool chunk4 = false, chunk16 = false, chunk512 = false;
  for (const Vector& v : LoadVectors()) {
    (v.ns.salt.empty() ? unsalted : salted) = true;
    tp_rank_nonzero |= v.ns.tp_rank != 0;
    empty |= v.tokens.empty();
    tail |= !v.tokens.empty() && v.tokens.size() % v.ns.chunk_tokens != 0;
    chunk4 |= v.ns.chunk_tokens == 4;
    chunk16 |= v.ns.chunk_tokens == 16;
    chunk512 |= v.ns.chunk_tokens == 512;
  }
  EXPECT_TRUE(salted && unsalted && tp_rank_nonzero && empty && tail);
  EXPECT_TRUE(chunk4 && chunk16 && chunk512);
}

// docs/keys.md, "Namespace": the layout byte for byte.
TEST(KeyBuilderTest, SerializesTheNamespaceAsSpecified) {
  KeyNamespace ns;
  ns.model = "m";
  ns.dtype = "bf16";
  ns.kv_layout = "";
  ns.tp_rank = 1;
  ns.tp_size = 258;
  ns.salt = "\xc3\xa9";
  ns.chunk_tokens = 512;
  const std::string want(
      "\x01"
      "\x01\x00\x00\x00m"
      "\x04\x00\x00\x00"
      "bf16"
      "\x00\x00\x00\x00"
      "\x01\x00\x00\x00"
      "\x02\x01\x00\x00"
      "\x02\x00\x00\x00\xc3\xa9"
      "\x00\x02\x00\x00",
      1 + 5 + 8 + 4 + 4 + 4 + 6 + 4);
  EXPECT_EQ(KeyBuilder::ToHex(KeyBuilder::SerializeNamespace(ns)), KeyBuilder::ToHex(want));
}

TEST(KeyBuilderTest, KeysAreVersionedAndFixedSize) {
  const KeyBuilder builder(BasicNamespace(4));
  const std::vector<uint32_t> tokens = Iota(12, 100);
  const std::vector<std::string> keys = builder.BlockKeys(tokens);
  ASSERT_EQ(keys.size(), 3u);
  for (const std::string& k : keys) {
    EXPECT_EQ(k.size(), kKeyBytes);
    EXPECT_EQ(static_cast<uint8_t>(k[0]), kKeyVersion);
    const std::string hex = KeyBuilder::ToHex(k);
    EXPECT_EQ(hex.size(), kKeyHexChars);
    EXPECT_EQ(hex.substr(0, 2), "01");
  }
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_NE(keys[1], keys[2]);
}

TEST(KeyBuilderTest, PartialTrailingChunkIsNeverKeyed) {
  const KeyBuilder builder(BasicNamespace(16));
  const std::vector<uint32_t> tokens = Iota(47, 7);
  const std::vector<std::string> full = builder.BlockKeys(tokens.data(), 32);
  ASSERT_EQ(full.size(), 2u);
  for (size_t n = 32; n < 48; ++n) {
    EXPECT_EQ(builder.BlockKeys(tokens.data(), n), full) << n;
  }
  EXPECT_TRUE(builder.BlockKeys(tokens.data(), 15).empty());
  EXPECT_TRUE(builder.BlockKeys(nullptr, 0).empty());
}

TEST(KeyBuilderTest, KeysOfAPrefixAreAPrefixOfTheKeys) {
  const KeyBuilder builder(BasicNamespace(4));
  const std::vector<uint32_t> tokens = Iota(40, 1);
  const std::vector<std::string> all = builder.BlockKeys(tokens);
  ASSERT_EQ(all.size(), 10u);
  for (size_t blocks = 0; blocks <= 10; ++blocks) {
    const std::vector<std::string> prefix = builder.BlockKeys(tokens.data(), 4 * blocks);
    EXPECT_EQ(prefix, std::vector<std::string>(all.begin(), all.begin() + blocks));
  }
}

TEST(KeyBuilderTest, AKeyDependsOnEveryEarlierToken) {
  const KeyBuilder builder(BasicNamespace(4));
  const std::vector<uint32_t> tokens = Iota(12, 1);
  const std::vector<std::string> base = builder.BlockKeys(tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<uint32_t> changed = tokens;
    changed[i] ^= 0x80000000u;
    const std::vector<std::string> keys = builder.BlockKeys(changed);
    for (size_t b = 0; b < keys.size(); ++b) {
      if (b < i / 4) {
        EXPECT_EQ(keys[b], base[b]) << "token " << i << " block " << b;
      } else {
        EXPECT_NE(keys[b], base[b]) << "token " << i << " block " << b;
      }
    }
  }
}

TEST(KeyBuilderTest, EveryNamespaceFieldChangesTheKeys) {
  const std::vector<uint32_t> tokens = Iota(4, 1);
  const KeyNamespace base = BasicNamespace(4);
  const std::string base_key = KeyBuilder(base).BlockKeys(tokens)[0];

  std::vector<KeyNamespace> variants(7, base);
  variants[0].model = "example/model-7b-instruct";
  variants[1].dtype = "fp16";
  variants[2].kv_layout = "paged_hnd";
  variants[3].tp_size = 2;
  variants[4].tp_rank = 1;
  variants[4].tp_size = 2;
  variants[5].salt = "lora:1";
  variants[6].chunk_tokens = 2;  // two blocks of 2: compare the second one
  for (size_t i = 0; i < variants.size(); ++i) {
    const std::vector<std::string> keys = KeyBuilder(variants[i]).BlockKeys(tokens);
    ASSERT_FALSE(keys.empty());
    EXPECT_NE(keys.back(), base_key) << "variant " << i;
    EXPECT_NE(KeyBuilder(variants[i]).namespace_digest(), KeyBuilder(base).namespace_digest())
        << "variant " << i;
  }
}

TEST(KeyBuilderTest, LengthPrefixesKeepAdjacentStringsApart) {
  KeyNamespace ab = BasicNamespace(4);
  ab.model = "ab";
  ab.dtype = "";
  KeyNamespace a_b = ab;
  a_b.model = "a";
  a_b.dtype = "b";
  KeyNamespace empty_salt = ab;
  KeyNamespace salt_is_layout = ab;  // "paged_nhd" moved from kv_layout to salt
  salt_is_layout.kv_layout = "";
  salt_is_layout.salt = "paged_nhd";
  EXPECT_NE(KeyBuilder(ab).namespace_digest(), KeyBuilder(a_b).namespace_digest());
  EXPECT_NE(KeyBuilder(empty_salt).namespace_digest(),
            KeyBuilder(salt_is_layout).namespace_digest());
}

TEST(KeyBuilderTest, ExtendChainsFromThePreviousKey) {
  const KeyBuilder builder(BasicNamespace(4));
  const std::vector<uint32_t> tokens = Iota(16, 50);
  const std::vector<std::string> keys = builder.BlockKeys(tokens);
  ASSERT_EQ(keys.size(), 4u);
  EXPECT_EQ(builder.Extend("", tokens.data()), keys[0]);
  for (size_t i = 1; i < keys.size(); ++i) {
    EXPECT_EQ(builder.Extend(keys[i - 1], tokens.data() + 4 * i), keys[i]);
  }
  // The chain follows the previous key, not the builder's namespace.
  KeyNamespace other_ns = BasicNamespace(4);
  other_ns.salt = "other";
  const KeyBuilder other(other_ns);
  EXPECT_EQ(other.Extend(keys[0], tokens.data() + 4), keys[1]);
  EXPECT_NE(other.Extend("", tokens.data()), keys[0]);
}

TEST(KeyBuilderTest, ExtendRejectsWhatIsNotAKey) {
  const KeyBuilder builder(BasicNamespace(4));
  const std::vector<uint32_t> chunk = Iota(4, 1);
  const std::string key = builder.Extend("", chunk.data());
  ASSERT_EQ(key.size(), kKeyBytes);
  EXPECT_EQ(builder.Extend(key.substr(0, kKeyBytes - 1), chunk.data()), "");
  EXPECT_EQ(builder.Extend(key + "x", chunk.data()), "");
  std::string other_version = key;
  other_version[0] = 2;
  EXPECT_EQ(builder.Extend(other_version, chunk.data()), "");
  EXPECT_EQ(builder.Extend(std::string(kKeyBytes, '\0'), chunk.data()), "");
}

TEST(KeyBuilderTest, HexRoundTrips) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  const std::string hex = KeyBuilder::ToHex(all_bytes);
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(hex.size() - 4), "feff");
  std::string back;
  ASSERT_TRUE(KeyBuilder::FromHex(hex, &back));
  EXPECT_EQ(back, all_bytes);
  ASSERT_TRUE(KeyBuilder::FromHex("01ABcd", &back));
  EXPECT_EQ(back, std::string("\x01\xab\xcd", 3));
  ASSERT_TRUE(KeyBuilder::FromHex("", &back));
  EXPECT_EQ(back, "");
  EXPECT_FALSE(KeyBuilder::FromHex("abc", &back));
  EXPECT_FALSE(KeyBuilder::FromHex("0g", &back));
  EXPECT_FALSE(KeyBuilder::FromHex("0 ", &back));
  EXPECT_EQ(KeyBuilder::ToHex(""), "");
}

TEST(KeyBuilderTest, ValidateNamesWhatIsWrong) {
  std::string error;
  EXPECT_TRUE(KeyBuilder::Validate(BasicNamespace(512), &error)) << error;
  EXPECT_TRUE(KeyBuilder::Validate(KeyNamespace(), nullptr));  // empty strings are fine

  auto invalid = [](const KeyNamespace& ns, const std::string& field) {
    std::string why;
    EXPECT_FALSE(KeyBuilder::Validate(ns, &why)) << field;
    EXPECT_NE(why.find(field), std::string::npos) << why;
    EXPECT_FALSE(KeyBuilder::Validate(ns, nullptr)) << field;
  };
  KeyNamespace ns = BasicNamespace(4);
  ns.tp_size = 0;
  ns.tp_rank = 0;
  invalid(ns, "tp_size");
  ns = BasicNamespace(4);
  ns.tp_rank = 2;
  ns.tp_size = 2;
  invalid(ns, "tp_rank");
  ns = BasicNamespace(0);
  invalid(ns, "chunk_tokens");
  ns = BasicNamespace(kKeyChunkTokensMax + 1);
  invalid(ns, "chunk_tokens");
  ns = BasicNamespace(4);
  ns.model = std::string(kKeyNamespaceStringBytesMax + 1, 'm');
  invalid(ns, "model");
  ns = BasicNamespace(4);
  ns.salt = "\xff";
  invalid(ns, "salt");
  ns = BasicNamespace(4);
  ns.dtype = "\xc0\xaf";  // overlong "/"
  invalid(ns, "dtype");
  ns = BasicNamespace(4);
  ns.kv_layout = "\xed\xa0\x80";  // a surrogate
  invalid(ns, "kv_layout");
  ns = BasicNamespace(4);
  ns.model = "\xf4\x90\x80\x80";  // past U+10FFFF
  invalid(ns, "model");
  ns = BasicNamespace(4);
  ns.model = "\xe6\xa8";  // truncated
  invalid(ns, "model");

  ns = BasicNamespace(kKeyChunkTokensMax);
  ns.model = std::string(kKeyNamespaceStringBytesMax, 'm');
  ns.salt = "\xf0\x9f\x98\x80\xe6\xa8\xa1\xc3\xa9";  // 4-, 3- and 2-byte sequences
  EXPECT_TRUE(KeyBuilder::Validate(ns, &error)) << error;
}

TEST(KeyBuilderDeathTest, ConstructingFromAnInvalidNamespaceAborts) {
  KeyNamespace ns = BasicNamespace(4);
  ns.tp_rank = 5;
  EXPECT_DEATH(KeyBuilder{ns}, "invalid KeyNamespace: tp_rank 5");
}

TEST(KeyBuilderTest, ConcurrentCallsAgree) {
  const KeyBuilder builder(BasicNamespace(16));
  const std::vector<uint32_t> tokens = Iota(size_t{16} * 64, 3);
  const std::vector<std::string> want = builder.BlockKeys(tokens);
  std::vector<std::vector<std::string>> got(4);
  std::vector<std::thread> threads;
  threads.reserve(got.size());
  for (auto& g : got) {
    threads.emplace_back([&builder, &tokens, &g] {
      for (int round = 0; round < 20; ++round) g = builder.BlockKeys(tokens);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

}  // namespace
}  // namespace shelf
