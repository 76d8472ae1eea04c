// engine_example: what an inference engine does with Shelf for one request.
//
//   shelf_engine_example --master 127.0.0.1:7000 [--tokens 2048] [--block-tokens 256]
//                        [--shared-tokens 1024] [--seed 1]
//
// 1. Build the request's content keys from its token ids (KeyBuilder).
// 2. MatchPrefix: how many leading blocks the cluster already holds.
// 3. Load those blocks straight into the engine's registered KV pool
//    (BatchGetIntoAsync), overlapping the loads with the "compute" of the
//    blocks that missed.
// 4. Store the blocks it computed (BatchPutFrom), so the next request with
//    the same prefix loads them instead.
//
// The tokens are the first --shared-tokens of a fixed system prompt, then
// tokens drawn from --seed: two runs with different seeds share exactly the
// system prompt's blocks. Prints one line per step and a summary; exits 0
// when every step succeeded and every loaded block held the expected bytes.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shelf/client.h"
#include "shelf/keys.h"

namespace {

// The "KV" of a block: bytes that depend on the block's key only, so a
// loaded block can be checked against what a compute would produce.
void ComputeBlock(const std::string& key, char* out, size_t bytes) {
  uint64_t x = 1469598103934665603ull;
  for (char c : key) x = (x ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  for (size_t i = 0; i < bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out + i, &x, std::min<size_t>(8, bytes - i));
  }
}

struct Flags {
  std::string master;
  size_t tokens = 2048;
  size_t block_tokens = 256;
  size_t shared_tokens = 1024;
  size_t block_bytes = 256 << 10;  // KV bytes a block (a small model)
  uint32_t seed = 1;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (a != name || i + 1 >= argc) return nullptr;
      return argv[++i];
    };
    const char* v = nullptr;
    if ((v = value("--master")) != nullptr) {
      f->master = v;
    } else if ((v = value("--tokens")) != nullptr) {
      f->tokens = std::strtoull(v, nullptr, 10);
    } else if ((v = value("--block-tokens")) != nullptr) {
      f->block_tokens = std::strtoull(v, nullptr, 10);
    } else if ((v = value("--shared-tokens")) != nullptr) {
      f->shared_tokens = std::strtoull(v, nullptr, 10);
    } else if ((v = value("--block-bytes")) != nullptr) {
      f->block_bytes = std::strtoull(v, nullptr, 10);
    } else if ((v = value("--seed")) != nullptr) {
      f->seed = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else {
      std::fprintf(stderr, "engine_example: unknown flag '%s'\n", a.c_str());
      return false;
    }
  }
  if (f->master.empty()) {
    std::fprintf(stderr,
                 "usage: shelf_engine_example --master HOST:PORT [--tokens N] "
                 "[--block-tokens N] [--shared-tokens N] [--block-bytes N] [--seed N]\n");
    return false;
  }
  if (f->block_tokens == 0 || f->block_bytes == 0 || f->tokens / f->block_tokens == 0 ||
      f->tokens / f->block_tokens > shelf::kBatchItemsMax) {
    std::fprintf(stderr, "engine_example: need 1..%zu full blocks of tokens\n",
                 shelf::kBatchItemsMax);
    return false;
  }
  return true;
}

int Fail(const char* step, const shelf::Status& s) {
  std::fprintf(stderr, "engine_example: %s: %s\n", step, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;

  // The request: a shared system prompt, then the user's own tokens.
  std::vector<uint32_t> tokens(flags.tokens);
  std::mt19937 shared_rng(12345), own_rng(flags.seed);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = i < flags.shared_tokens ? shared_rng() % 128000 : own_rng() % 128000;
  }

  // 1. Content keys: the namespace names everything that shapes the KV.
  shelf::KeyNamespace ns;
  ns.model = "example/llama-like-1b";
  ns.dtype = "bf16";
  ns.kv_layout = "paged_nhd";
  ns.chunk_tokens = static_cast<uint32_t>(flags.block_tokens);
  std::string why;
  if (!shelf::KeyBuilder::Validate(ns, &why)) {
    std::fprintf(stderr, "engine_example: bad namespace: %s\n", why.c_str());
    return 2;
  }
  shelf::KeyBuilder keys(ns);
  std::vector<std::string> block_keys = keys.BlockKeys(tokens);
  const size_t blocks = block_keys.size();
  std::printf("request: %zu tokens, %zu blocks of %zu tokens, first key %s\n", tokens.size(),
              blocks, flags.block_tokens, shelf::KeyBuilder::ToHex(block_keys[0]).c_str());

  shelf::ClientOptions options;
  options.masters = {flags.master};
  options.timeout_ms = 10000;
  std::unique_ptr<shelf::Client> client;
  if (shelf::Status s = shelf::Client::Open(options, &client); !s.ok()) return Fail("open", s);

  // The engine's KV pool, registered once for zero-copy transfers.
  std::vector<char> kv_pool(blocks * flags.block_bytes);
  shelf::BufferHandle pool;
  if (shelf::Status s = client->RegisterBuffer(kv_pool.data(), kv_pool.size(), &pool); !s.ok()) {
    return Fail("register", s);
  }

  // The whole request gets one budget; every call below shares it.
  shelf::Deadline deadline = shelf::Deadline::After(std::chrono::milliseconds(options.timeout_ms));

  // 2. How much of the prefix is already computed?
  size_t matched = 0;
  if (shelf::Status s = client->MatchPrefix(block_keys, &matched, deadline); !s.ok()) {
    return Fail("match prefix", s);
  }
  std::printf("match prefix: %zu of %zu blocks cached\n", matched, blocks);

  // 3. Load the hits into their slots of the pool while computing the rest.
  std::vector<shelf::GetIntoItem> loads;
  for (size_t i = 0; i < matched; ++i) {
    loads.push_back({block_keys[i], pool, i * flags.block_bytes, flags.block_bytes});
  }
  shelf::BatchFuture loading;
  if (!loads.empty()) loading = client->BatchGetIntoAsync(loads, deadline);
  for (size_t i = matched; i < blocks; ++i) {
    ComputeBlock(block_keys[i], kv_pool.data() + i * flags.block_bytes, flags.block_bytes);
  }
  size_t loaded = 0;
  if (!loads.empty()) {
    if (!loading.status().ok()) return Fail("load", loading.status());
    std::vector<char> expect(flags.block_bytes);
    for (size_t i = 0; i < matched; ++i) {
      const shelf::Status& st = loading.statuses()[i];
      if (!st.ok()) {
        // A block evicted between the match and the load: compute it.
        std::printf("load: block %zu: %s; recomputing\n", i, st.ToString().c_str());
        ComputeBlock(block_keys[i], kv_pool.data() + i * flags.block_bytes, flags.block_bytes);
        continue;
      }
      ComputeBlock(block_keys[i], expect.data(), expect.size());
      if (std::memcmp(expect.data(), kv_pool.data() + i * flags.block_bytes, expect.size()) != 0) {
        std::fprintf(stderr, "engine_example: block %zu loaded wrong bytes\n", i);
        return 1;
      }
      ++loaded;
    }
  }
  std::printf("load: %zu blocks loaded into the KV pool, %zu computed\n", loaded, blocks - loaded);

  // 4. Store what was computed. Blocks already stored answer OK too.
  std::vector<shelf::PutFromItem> stores;
  for (size_t i = matched; i < blocks; ++i) {
    stores.push_back({block_keys[i], pool, i * flags.block_bytes, flags.block_bytes});
  }
  size_t stored = 0;
  if (!stores.empty()) {
    shelf::PutOptions po;
    po.deadline = deadline;
    std::vector<shelf::Status> statuses;
    if (shelf::Status s = client->BatchPutFrom(stores, &statuses, po); !s.ok()) {
      return Fail("store", s);
    }
    for (const shelf::Status& st : statuses) {
      if (st.ok()) {
        ++stored;
      } else {
        std::printf("store: %s\n", st.ToString().c_str());
      }
    }
  }
  std::printf("store: %zu of %zu computed blocks stored\n", stored, stores.size());

  if (shelf::Status s = client->UnregisterBuffer(pool); !s.ok()) return Fail("unregister", s);
  shelf::ClientStats st = client->stats();
  std::printf("summary: matched=%zu loaded=%zu computed=%zu stored=%zu bytes_loaded=%llu\n",
              matched, loaded, blocks - loaded, stored,
              static_cast<unsigned long long>(st.bytes_loaded));
  return stored == stores.size() ? 0 : 1;
}
