// shelf-bench client: what the client SDK adds on the paths an engine takes
// for every request.
//
//   matchprefix  MatchPrefix latency (p50, p99) for chains of 8, 64 and 512
//                content keys, all present: the "how much is computed
//                already" question an engine asks before it schedules.
//   batchget     BatchGet of 32 blocks of 1 MiB, repeated: local (the store
//                is on this host: shared memory) and remote (allow_shm=false:
//                the TCP data plane), and remote with one transfer thread to
//                show what reading the blocks in parallel brings.
//   batchgetinto the same into a registered buffer (zero-copy).
//
// Starts its own cluster (LocalCluster) unless --master is given. Prints a
// table, then one JSON object on its last line (matchprefix_64_p99_us, ...).
// Finishes in well under five minutes with the defaults; --quick in seconds.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "shelf/client.h"
#include "shelf/keys.h"
#include "testing/local_cluster.h"
#include "tools/bench/bench_util.h"

namespace shelf::bench {

bool StopRequested();  // main.cc: SIGINT/SIGTERM arrived

namespace {

constexpr size_t kChainLengths[] = {8, 64, 512};
constexpr size_t kChainBlockBytes = 4096;  // MatchPrefix never moves the bytes
constexpr size_t kBatchBlocks = 32;
constexpr size_t kBatchBlockBytes = 1 << 20;
constexpr size_t kWarmupCalls = 20;
static_assert(kChainLengths[2] <= kBatchItemsMax, "one MatchPrefix call per chain");
static_assert(kBatchBlocks <= kBatchItemsMax, "one BatchGet call per round");

struct LatencyRow {
  size_t keys = 0;
  size_t matched = 0;
  uint64_t calls = 0, errors = 0;
  double p50_us = 0, p99_us = 0, mean_us = 0;
};

struct ThroughputRow {
  std::string name;       // "batchget", "batchgetinto"
  std::string transport;  // "shm", "tcp", "tcp-serial"
  uint64_t rounds = 0, errors = 0, mismatches = 0;
  double seconds = 0, gibps = 0, p50_ms = 0, p99_ms = 0;
  std::string first_error;
};

std::unique_ptr<Client> Open(const std::string& master, bool allow_shm, uint32_t transfer_threads) {
  ClientOptions o;
  o.masters = {master};
  o.timeout_ms = 30000;
  o.allow_shm = allow_shm;
  o.transfer_threads = transfer_threads;
  std::unique_ptr<Client> c;
  if (Status s = Client::Open(o, &c); !s.ok()) {
    std::fprintf(stderr, "shelf-bench client: %s\n", s.ToString().c_str());
    return nullptr;
  }
  return c;
}

// Keys unique to this run, so a long-lived cluster given with --master
// never answers from an earlier run's blocks.
KeyNamespace RunNamespace(const char* what) {
  KeyNamespace ns;
  ns.model = "shelf-bench/client";
  ns.dtype = "bf16";
  ns.kv_layout = what;
  ns.salt = std::to_string(UnixMs()) + "/" + std::to_string(MonoUs());
  ns.chunk_tokens = 16;
  return ns;
}

std::vector<std::string> ChainKeys(const KeyNamespace& ns, size_t blocks) {
  std::vector<uint32_t> tokens(blocks * ns.chunk_tokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 2654435761u);
  return KeyBuilder(ns).BlockKeys(tokens);
}

LatencyRow MeasureMatchPrefix(Client* client, const std::vector<std::string>& chain, size_t keys,
                              uint64_t calls) {
  LatencyRow row;
  row.keys = keys;
  std::vector<std::string> prefix(chain.begin(), chain.begin() + keys);
  Samples us;
  for (uint64_t i = 0; i < kWarmupCalls + calls && !StopRequested(); ++i) {
    size_t matched = 0;
    uint64_t t0 = MonoUs();
    Status s = client->MatchPrefix(prefix, &matched);
    uint64_t dt = MonoUs() - t0;
    if (i < kWarmupCalls) continue;
    ++row.calls;
    // Every key of the chain was put: a shorter match is an error, not a
    // faster call.
    if (!s.ok() || matched != keys) {
      ++row.errors;
      continue;
    }
    row.matched = matched;
    us.Add(static_cast<double>(dt));
  }
  row.p50_us = us.Percentile(50);
  row.p99_us = us.Percentile(99);
  row.mean_us = us.count() > 0 ? us.Sum() / us.count() : 0;
  return row;
}

ThroughputRow MeasureBatchGet(Client* client, const std::string& transport, bool into,
                              const std::vector<std::string>& keys, const BlockPattern& pattern,
                              uint64_t rounds) {
  ThroughputRow row;
  row.name = into ? "batchgetinto" : "batchget";
  row.transport = transport;
  std::vector<char> pool;
  BufferHandle handle;
  std::vector<GetIntoItem> items;
  if (into) {
    pool.resize(keys.size() * kBatchBlockBytes);
    if (Status s = client->RegisterBuffer(pool.data(), pool.size(), &handle); !s.ok()) {
      row.errors = 1;
      row.first_error = s.ToString();
      return row;
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      items.push_back({keys[i], handle, i * kBatchBlockBytes, kBatchBlockBytes});
    }
  }
  Samples ms;
  std::vector<std::string> values;
  std::vector<Status> statuses;
  std::vector<size_t> sizes;
  // One warm-up round: connections, shared-memory mappings, page faults.
  for (uint64_t r = 0; r < rounds + 1 && !StopRequested(); ++r) {
    uint64_t t0 = MonoUs();
    Status s = into ? client->BatchGetInto(items, &statuses, &sizes)
                    : client->BatchGet(keys, &values, &statuses);
    uint64_t dt = MonoUs() - t0;
    bool ok = s.ok();
    for (size_t i = 0; ok && i < keys.size(); ++i) {
      if (!statuses[i].ok()) {
        ok = false;
        s = statuses[i];
      }
    }
    if (!ok) {
      ++row.errors;
      if (row.first_error.empty()) row.first_error = s.ToString();
      continue;
    }
    // Every block of the first and the last round is checked byte for byte.
    if (r == 0 || r == rounds) {
      for (size_t i = 0; i < keys.size(); ++i) {
        const char* data = into ? pool.data() + i * kBatchBlockBytes : values[i].data();
        size_t size = into ? sizes[i] : values[i].size();
        if (!pattern.Check(i, data, size)) ++row.mismatches;
      }
    }
    if (r == 0) continue;
    ++row.rounds;
    row.seconds += dt / 1e6;
    ms.Add(dt / 1000.0);
  }
  if (into) client->UnregisterBuffer(handle);
  if (row.seconds > 0) {
    row.gibps = static_cast<double>(row.rounds * keys.size() * kBatchBlockBytes) / (1ull << 30) /
                row.seconds;
  }
  row.p50_ms = ms.Percentile(50);
  row.p99_ms = ms.Percentile(99);
  return row;
}

}  // namespace

int ClientBench(int argc, char** argv) {
  std::string master, work_dir;
  int64_t stores = 2, calls = 1000, rounds = 20;
  uint64_t dram_size = 256ull << 20;
  bool quick = false, json_only = false;
  Flags flags("shelf-bench client",
              "MatchPrefix latency and BatchGet throughput through libshelf.");
  flags.AddString("master", &master, "use this cluster instead of starting one");
  flags.AddInt("stores", &stores, "stores in the cluster the bench starts");
  flags.AddSize("dram-size", &dram_size, "DRAM segment per store");
  flags.AddInt("calls", &calls, "MatchPrefix calls per chain length");
  flags.AddInt("rounds", &rounds, "BatchGet rounds per row");
  flags.AddBool("quick", &quick, "a short run (200 calls, 5 rounds), for tests");
  flags.AddBool("json-only", &json_only, "print only the JSON line");
  flags.AddString("work-dir", &work_dir, "keep the cluster's logs here");
  flags.ParseOrExit(argc, argv);
  if (quick) {
    if (!flags.WasSet("calls")) calls = 200;
    if (!flags.WasSet("rounds")) rounds = 5;
  }
  if (calls < 1 || calls > 1000000 || rounds < 1 || rounds > 100000 || stores < 1 || stores > 64) {
    std::fprintf(stderr, "shelf-bench client: --calls, --rounds or --stores out of range\n");
    return 2;
  }
  uint64_t needed = kChainLengths[2] * kChainBlockBytes + kBatchBlocks * kBatchBlockBytes;
  if (master.empty() && dram_size * static_cast<uint64_t>(stores) < 2 * needed) {
    std::fprintf(stderr, "shelf-bench client: --dram-size too small (need %s in all)\n",
                 std::to_string(2 * needed).c_str());
    return 2;
  }

  std::unique_ptr<LocalCluster> cluster;
  if (master.empty()) {
    LocalCluster::Options co;
    co.stores = static_cast<int>(stores);
    co.dram_bytes = dram_size;
    co.work_dir = work_dir;
    co.keep_work_dir = !work_dir.empty();
    auto c = LocalCluster::Start(co);
    if (!c.ok()) {
      std::fprintf(stderr, "shelf-bench client: cannot start a cluster: %s\n",
                   std::string(c.status().message()).c_str());
      return 1;
    }
    cluster = *std::move(c);
    master = cluster->master_address();
  }
  std::unique_ptr<Client> shm = Open(master, /*allow_shm=*/true, 8);
  std::unique_ptr<Client> tcp = Open(master, /*allow_shm=*/false, 8);
  std::unique_ptr<Client> tcp_serial = Open(master, /*allow_shm=*/false, 1);
  if (shm == nullptr || tcp == nullptr || tcp_serial == nullptr) return 1;

  // The data: a chain of 512 small blocks, and 32 blocks of 1 MiB.
  std::vector<std::string> chain = ChainKeys(RunNamespace("chain"), kChainLengths[2]);
  std::vector<std::string> batch = ChainKeys(RunNamespace("batch"), kBatchBlocks);
  BlockPattern small(kChainBlockBytes), big(kBatchBlockBytes);
  std::vector<PutItem> items;
  std::vector<std::vector<char>> blocks;
  for (size_t i = 0; i < chain.size(); ++i) {
    blocks.emplace_back(kChainBlockBytes);
    small.Fill(i, blocks.back().data());
    items.push_back({chain[i], blocks.back().data(), kChainBlockBytes});
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    blocks.emplace_back(kBatchBlockBytes);
    big.Fill(i, blocks.back().data());
    items.push_back({batch[i], blocks.back().data(), kBatchBlockBytes});
  }
  for (size_t base = 0; base < items.size(); base += kBatchItemsMax) {
    std::vector<PutItem> part(items.begin() + base,
                              items.begin() + std::min(items.size(), base + kBatchItemsMax));
    std::vector<Status> statuses;
    Status s = shm->BatchPut(part, &statuses);
    for (size_t i = 0; s.ok() && i < statuses.size(); ++i) {
      if (!statuses[i].ok()) s = statuses[i];
    }
    if (!s.ok()) {
      std::fprintf(stderr, "shelf-bench client: loading the blocks: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  blocks.clear();

  std::vector<LatencyRow> latency;
  for (size_t n : kChainLengths) {
    if (StopRequested()) break;
    latency.push_back(MeasureMatchPrefix(shm.get(), chain, n, static_cast<uint64_t>(calls)));
  }
  std::vector<ThroughputRow> throughput;
  struct Run {
    Client* client;
    const char* transport;
    bool into;
  };
  const Run runs[] = {{shm.get(), "shm", false},
                      {tcp.get(), "tcp", false},
                      {tcp_serial.get(), "tcp-serial", false},
                      {shm.get(), "shm", true},
                      {tcp.get(), "tcp", true}};
  for (const Run& r : runs) {
    if (StopRequested()) break;
    throughput.push_back(
        MeasureBatchGet(r.client, r.transport, r.into, batch, big, static_cast<uint64_t>(rounds)));
  }

  uint64_t errors = 0, mismatches = 0;
  for (const LatencyRow& r : latency) errors += r.errors;
  for (const ThroughputRow& r : throughput) {
    errors += r.errors;
    mismatches += r.mismatches;
  }
  if (!json_only) {
    std::printf("MatchPrefix, all keys present (%lld calls each)\n", static_cast<long long>(calls));
    std::printf("%6s %8s %10s %10s %10s %7s\n", "keys", "matched", "p50_us", "p99_us", "mean_us",
                "errors");
    for (const LatencyRow& r : latency) {
      std::printf("%6zu %8zu %10.1f %10.1f %10.1f %7llu\n", r.keys, r.matched, r.p50_us, r.p99_us,
                  r.mean_us, static_cast<unsigned long long>(r.errors));
    }
    std::printf("\nBatchGet of %zu blocks of 1 MiB (%lld rounds each)\n", kBatchBlocks,
                static_cast<long long>(rounds));
    std::printf("%-13s %-11s %8s %9s %9s %7s %10s\n", "call", "transport", "GiB/s", "p50_ms",
                "p99_ms", "errors", "mismatches");
    for (const ThroughputRow& r : throughput) {
      std::printf("%-13s %-11s %8.2f %9.2f %9.2f %7llu %10llu\n", r.name.c_str(),
                  r.transport.c_str(), r.gibps, r.p50_ms, r.p99_ms,
                  static_cast<unsigned long long>(r.errors),
                  static_cast<unsigned long long>(r.mismatches));
      if (!r.first_error.empty()) std::printf("    first error: %s\n", r.first_error.c_str());
    }
    std::printf("\n");
  }
  Json o = Json::object();
  o["bench"] = "client";
  for (const LatencyRow& r : latency) {
    std::string p = absl::StrFormat("matchprefix_%d_", r.keys);
    o[p + "p50_us"] = r.p50_us;
    o[p + "p99_us"] = r.p99_us;
    o[p + "matched"] = static_cast<uint64_t>(r.matched);
  }
  for (const ThroughputRow& r : throughput) {
    std::string t = r.transport;
    std::replace(t.begin(), t.end(), '-', '_');
    std::string p = r.name + "_" + t + "_";
    o[p + "gibps"] = r.gibps;
    o[p + "p50_ms"] = r.p50_ms;
    o[p + "p99_ms"] = r.p99_ms;
  }
  o["batch_blocks"] = static_cast<uint64_t>(kBatchBlocks);
  o["block_bytes"] = static_cast<uint64_t>(kBatchBlockBytes);
  o["matchprefix_calls"] = static_cast<int64_t>(calls);
  o["batchget_rounds"] = static_cast<int64_t>(rounds);
  o["errors"] = errors;
  o["mismatches"] = mismatches;
  o["stopped"] = StopRequested();
  std::printf("%s\n", JsonDump(o).c_str());
  return errors == 0 && mismatches == 0 && !StopRequested() ? 0 : 1;
}

}  // namespace shelf::bench
