// gen_key_vectors: writes the content-key test vectors (docs/keys.md) as JSON.
//
// The vectors were generated once and are checked in; they pin the key format.
// A change of the output for an existing case is a change of the hash, which
// needs a new key version, never a regenerated file.
//
//   gen_key_vectors > tests/data/key_vectors.json
//
// Every case is checked by tests/keys/keys_test.cc (KeyBuilder) and by
// tests/keys/test_key_vectors.py (an independent Python implementation).

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "shelf/keys.h"

namespace {

struct Case {
  std::string name;
  std::string about;
  shelf::KeyNamespace ns;
  std::vector<uint32_t> tokens;
};

// Token ids shaped like a real vocabulary's (below 128256), from a fixed LCG.
std::vector<uint32_t> PseudoTokens(size_t n, uint32_t seed) {
  std::vector<uint32_t> tokens(n);
  uint32_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    tokens[i] = (x >> 8) % 128256u;
  }
  return tokens;
}

shelf::KeyNamespace Ns(std::string model, std::string dtype, std::string kv_layout,
                       uint32_t tp_rank, uint32_t tp_size, std::string salt,
                       uint32_t chunk_tokens) {
  shelf::KeyNamespace ns;
  ns.model = std::move(model);
  ns.dtype = std::move(dtype);
  ns.kv_layout = std::move(kv_layout);
  ns.tp_rank = tp_rank;
  ns.tp_size = tp_size;
  ns.salt = std::move(salt);
  ns.chunk_tokens = chunk_tokens;
  return ns;
}

std::vector<Case> Cases() {
  const std::vector<uint32_t> twelve = {128000, 791, 4062,  14198, 39935, 35308,
                                        927,    279, 16053, 5679,  13,    128001};
  const std::vector<uint32_t> eight = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<Case> cases;
  cases.push_back({"chunk4_basic", "three full chunks of 4, no salt",
                   Ns("example/model-7b", "bf16", "paged_nhd", 0, 1, "", 4), twelve});
  cases.push_back({"chunk4_salted", "chunk4_basic with a salt: every key differs",
                   Ns("example/model-7b", "bf16", "paged_nhd", 0, 1, "lora:sql-adapter-v2", 4),
                   twelve});
  cases.push_back({"chunk4_tp_rank1_of_2", "chunk4_basic on tensor-parallel rank 1 of 2",
                   Ns("example/model-7b", "bf16", "paged_nhd", 1, 2, "", 4), twelve});
  cases.push_back({"chunk16_partial_tail", "37 tokens: two full chunks of 16, 5 unkeyed",
                   Ns("example/model-7b", "fp16", "paged_hnd", 0, 1, "", 16),
                   PseudoTokens(37, 16)});
  cases.push_back({"chunk512_partial_tail", "1100 tokens: two full chunks of 512, 76 unkeyed",
                   Ns("meta-llama/Llama-3.1-8B", "fp8_e4m3", "layer_major", 2, 4, "", 512),
                   PseudoTokens(1100, 512)});
  cases.push_back({"empty_sequence",
                   "no tokens, no keys",
                   Ns("meta-llama/Llama-3.1-8B", "bf16", "paged_nhd", 0, 1, "", 512),
                   {}});
  cases.push_back({"shorter_than_a_chunk", "15 tokens with chunks of 16: no keys",
                   Ns("example/model-7b", "bf16", "paged_nhd", 0, 1, "", 16),
                   PseudoTokens(15, 15)});
  cases.push_back({"utf8_and_extreme_ids",
                   "non-ASCII strings, empty dtype and layout, ids with every byte set",
                   Ns("\xe6\xa8\xa1\xe5\x9e\x8b-\xc3\xbc", "", "", 3, 8, "\xc3\xa9", 4),
                   {0, 1, 0x7fffffffu, 0x80000000u, 0xffffffffu, 0x01020304u, 0xdeadbeefu, 255}});
  cases.push_back({"length_prefix_ab_empty", "model \"ab\", dtype \"\"",
                   Ns("ab", "", "paged_nhd", 0, 1, "", 4), eight});
  cases.push_back({"length_prefix_a_b",
                   "model \"a\", dtype \"b\": same bytes concatenated, different keys",
                   Ns("a", "b", "paged_nhd", 0, 1, "", 4), eight});
  return cases;
}

}  // namespace

int main() {
  shelf::Json root = shelf::Json::object();
  root["spec"] = "docs/keys.md";
  root["version"] = shelf::kKeyVersion;
  shelf::Json out_cases = shelf::Json::array();
  for (const Case& k : Cases()) {
    std::string error;
    if (!shelf::KeyBuilder::Validate(k.ns, &error)) {
      std::fprintf(stderr, "case %s: %s\n", k.name.c_str(), error.c_str());
      return 1;
    }
    const shelf::KeyBuilder builder(k.ns);
    shelf::Json ns = shelf::Json::object();
    ns["model"] = k.ns.model;
    ns["dtype"] = k.ns.dtype;
    ns["kv_layout"] = k.ns.kv_layout;
    ns["tp_rank"] = k.ns.tp_rank;
    ns["tp_size"] = k.ns.tp_size;
    ns["salt"] = k.ns.salt;
    ns["chunk_tokens"] = k.ns.chunk_tokens;
    shelf::Json c = shelf::Json::object();
    c["name"] = k.name;
    c["about"] = k.about;
    c["namespace"] = std::move(ns);
    c["namespace_hex"] = shelf::KeyBuilder::ToHex(shelf::KeyBuilder::SerializeNamespace(k.ns));
    c["namespace_digest_hex"] = shelf::KeyBuilder::ToHex(builder.namespace_digest());
    c["tokens"] = k.tokens;
    shelf::Json keys = shelf::Json::array();
    for (const std::string& key : builder.BlockKeys(k.tokens)) {
      keys.push_back(shelf::KeyBuilder::ToHex(key));
    }
    c["keys"] = std::move(keys);
    out_cases.push_back(std::move(c));
  }
  root["cases"] = std::move(out_cases);
  // The namespace strings are valid UTF-8 (Validate checks the vectors'
  // own), written as they are.
  const std::string out =
      root.dump(2, ' ', /*ensure_ascii=*/false, shelf::Json::error_handler_t::replace) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
