// `shelf-bench kv`'s read-grant row: what checking read grants costs a
// 1 MiB get over TCP (docs/security.md, "Read grants").
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "tools/bench/kv_support.h"

namespace shelf::bench {
namespace {

constexpr char kSecret[] = "shelf-bench-read-grants-0123456789";
constexpr int kBlocks = 32;
constexpr uint64_t kBlockBytes = 1ull << 20;

// One side: a one-store cluster with a secret whose store checks read
// grants (`on`) or not, and a client without shared memory or cache.
struct Side {
  std::unique_ptr<LocalCluster> cluster;
  std::unique_ptr<Client> client;
  std::vector<uint64_t> latencies_us;
  uint64_t bytes = 0, us = 0, errors = 0;
};

std::string StartSide(bool on, Side* side) {
  LocalCluster::Options co;
  co.stores = 1;
  co.dram_bytes = 256ull << 20;
  co.secret = kSecret;
  co.wait_populated = true;
  if (!on) co.store_args = {"--read-grants=false"};
  auto c = LocalCluster::Start(co);
  if (!c.ok()) return std::string(c.status().message());
  side->cluster = *std::move(c);
  ClientOptions o;
  o.masters = {side->cluster->master_address()};
  o.secret = kSecret;
  o.allow_shm = false;
  o.location_cache_entries = 0;
  o.timeout_ms = 20000;
  if (Status s = Client::Open(o, &side->client); !s.ok()) return s.ToString();
  std::string block(kBlockBytes, 'g');
  for (int i = 0; i < kBlocks; ++i) {
    if (Status s = side->client->Put(absl::StrCat("g/", i), block.data(), block.size()); !s.ok()) {
      return s.ToString();
    }
  }
  return "";
}

// Single gets, one thread, for `seconds`.
void Round(Side* side, double seconds) {
  std::string value;
  const uint64_t start = MonoUs();
  const uint64_t until = start + static_cast<uint64_t>(seconds * 1e6);
  for (uint64_t i = 0; MonoUs() < until; ++i) {
    const uint64_t t0 = MonoUs();
    Status s = side->client->Get(absl::StrCat("g/", i % kBlocks), &value);
    const uint64_t t1 = MonoUs();
    if (!s.ok() || value.size() != kBlockBytes) {
      ++side->errors;
      continue;
    }
    side->latencies_us.push_back(t1 - t0);
    side->bytes += kBlockBytes;
  }
  side->us += MonoUs() - start;
}

double P50(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return static_cast<double>(v[v.size() / 2]);
}

}  // namespace

Json ReadGrantRow(double seconds, bool json_only) {
  Json out = Json::object();
  Side on, off;
  std::string err = StartSide(true, &on);
  if (err.empty()) err = StartSide(false, &off);
  if (!err.empty()) {
    out["error"] = err;
    if (!json_only) std::printf("  read grants: not measured (%s)\n", err.c_str());
    return out;
  }
  // Many short alternating rounds, so drift in the machine's load hits
  // both sides alike.
  constexpr int kRounds = 10;
  for (int r = 0; r < kRounds; ++r) {
    Round(&on, seconds / kRounds);
    Round(&off, seconds / kRounds);
  }
  auto gbps = [](const Side& s) { return s.us == 0 ? 0.0 : s.bytes / (s.us * 1e3); };
  const double on_gbps = gbps(on), off_gbps = gbps(off);
  const double cost = off_gbps > 0 ? (1 - on_gbps / off_gbps) * 100 : 0;
  const double on_p50 = P50(on.latencies_us), off_p50 = P50(off.latencies_us);
  const double p50_cost = off_p50 > 0 ? (on_p50 / off_p50 - 1) * 100 : 0;
  out["block_bytes"] = kBlockBytes;
  out["on_gbps"] = on_gbps;
  out["off_gbps"] = off_gbps;
  out["on_p50_us"] = on_p50;
  out["off_p50_us"] = off_p50;
  out["cost_pct"] = cost;
  out["p50_cost_pct"] = p50_cost;
  out["errors"] = on.errors + off.errors;
  if (!json_only) {
    std::printf(
        "  read grants, 1 MiB tcp gets, 1 thread, secret on both: on %.3f GB/s p50 %.0f us; "
        "off %.3f GB/s p50 %.0f us; cost %.1f%% in GB/s, %.1f%% in p50 (goal < 5%%)%s\n\n",
        on_gbps, on_p50, off_gbps, off_p50, cost, p50_cost,
        on.errors + off.errors ? absl::StrCat("  errors ", on.errors + off.errors).c_str() : "");
  }
  return out;
}

}  // namespace shelf::bench
