// shelf-bench replay: replays a Mooncake-format trace against a cluster and
// reports what the cache saved, next to an LRU simulation at the same
// capacity and the trace's ideal (infinite-capacity) hit ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <list>
#include <memory>
#include <thread>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/rpc.h"
#include "common/units.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "testing/http_probe.h"
#include "testing/local_cluster.h"
#include "testing/raw_peer.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/cache_sim.h"
#include "tools/bench/replay_compare.h"
#include "tools/bench/trace.h"

namespace shelf::bench {
namespace {

double IdealHitRatio(const std::vector<TraceRequest>& reqs) {
  std::unordered_map<uint64_t, bool> seen;
  uint64_t hit = 0, total = 0;
  for (const TraceRequest& r : reqs) {
    size_t m = 0;
    while (m < r.hash_ids.size() && seen.count(r.hash_ids[m])) ++m;
    hit += m;
    total += r.hash_ids.size();
    for (uint64_t id : r.hash_ids) seen[id] = true;
  }
  return total == 0 ? 0 : static_cast<double>(hit) / total;
}

struct ModelPreset {
  const char* name;
  uint64_t layers, kv_heads, head_dim;
};
constexpr ModelPreset kModels[] = {
    {"llama-3-8b", 32, 8, 128}, {"llama-3-70b", 80, 8, 128}, {"mistral-7b", 32, 8, 128},
    {"qwen2-7b", 28, 4, 128},   {"qwen2-72b", 80, 8, 128},
};
constexpr uint64_t kTokensPerBlock = 512;

// Hit ratio per tier over a window of requests.
struct Window {
  double dram = 0;
  double ssd = 0;
};

// A stacked bar chart of hit ratio per tier over time, for a terminal.
std::string AsciiChart(const std::vector<Window>& w) {
  if (w.empty()) return "";
  double top = 0.01;
  for (const Window& x : w) top = std::max(top, x.dram + x.ssd);
  const int rows = 8;
  std::string out = "  hit ratio per window of requests (# DRAM, + SSD)\n";
  for (int r = rows; r >= 1; --r) {
    double level = top * r / rows;
    out += absl::StrFormat("  %5.1f%% |", 100 * level);
    for (const Window& x : w) {
      double mid = level - top / rows / 2;
      out += x.dram >= mid ? '#' : (x.dram + x.ssd >= mid ? '+' : ' ');
    }
    out += "\n";
  }
  out += "         +" + std::string(w.size(), '-') + "> requests\n";
  return out;
}

// The same chart as an SVG file.
bool WriteSvg(const std::string& path, const std::vector<Window>& w, double lru, double ideal) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  const double width = 640, height = 320, left = 50, bottom = 290, plot_h = 260;
  double top = std::max(0.01, ideal);
  for (const Window& x : w) top = std::max(top, x.dram + x.ssd);
  double bw = w.empty() ? 0 : (width - left - 10) / w.size();
  std::fprintf(f,
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n",
               width, height);
  std::fprintf(f,
               "<text x=\"%.0f\" y=\"14\">Shelf replay: hit ratio per window "
               "(blue DRAM, orange SSD; dashed: LRU simulation, dotted: ideal)</text>\n",
               left);
  for (size_t i = 0; i < w.size(); ++i) {
    double hd = plot_h * w[i].dram / top, hs = plot_h * w[i].ssd / top;
    double x = left + i * bw;
    std::fprintf(f,
                 "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                 "fill=\"#3b6fb6\"/>\n",
                 x, bottom - hd, bw * 0.9, hd);
    std::fprintf(f,
                 "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                 "fill=\"#e08a2c\"/>\n",
                 x, bottom - hd - hs, bw * 0.9, hs);
  }
  for (auto [v, dash] : {std::pair<double, const char*>{lru, "6,4"}, {ideal, "2,3"}}) {
    double y = bottom - plot_h * v / top;
    std::fprintf(f,
                 "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"black\" "
                 "stroke-dasharray=\"%s\"/>\n",
                 left, y, width - 10, y, dash);
  }
  std::fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n",
               left, bottom, width - 10, bottom);
  for (int t = 0; t <= 4; ++t) {
    double v = top * t / 4;
    std::fprintf(f, "<text x=\"4\" y=\"%.1f\">%.1f%%</text>\n", bottom - plot_h * t / 4 + 4,
                 100 * v);
  }
  std::fprintf(f, "</svg>\n");
  return std::fclose(f) == 0;
}

// The prefix chains of a trace: each block's parent (the block before it in
// the first request that holds it) and every block in order of first use,
// parents before children.
struct Chains {
  static constexpr uint64_t kNone = ~0ull;
  std::unordered_map<uint64_t, uint64_t> parent;
  std::vector<uint64_t> order;

  explicit Chains(const std::vector<TraceRequest>& reqs) {
    for (const TraceRequest& r : reqs) {
      for (size_t k = 0; k < r.hash_ids.size(); ++k) {
        if (parent.emplace(r.hash_ids[k], k == 0 ? kNone : r.hash_ids[k - 1]).second) {
          order.push_back(r.hash_ids[k]);
        }
      }
    }
  }
};

// What the cluster's DRAM holds at one point of the replay.
struct CapacitySample {
  size_t requests = 0;          // replayed so far
  uint64_t configured = 0;      // DRAM capacity of the live stores
  uint64_t ssd_configured = 0;  // their SSD tiers' capacity
  uint64_t ssd_used = 0;        // ... of which used
  uint64_t allocated = 0;       // allocated by the master (blocks, open puts, deferred frees)
  uint64_t clean = 0;           // ... of which blocks also on their store's SSD
  uint64_t demoting = 0;        // ... of which blocks being demoted
  uint64_t puts_in_flight = 0;
  uint64_t resident_blocks = 0;  // trace blocks in the index
  uint64_t orphaned_blocks = 0;  // ... of which some ancestor is not: they can never hit
};

// Reads the master's state without changing it: Status for the capacity,
// and lookups that `peek` (no lease, no access) for which blocks are
// resident. `seen` is how many blocks of `chains.order` were used so far.
absl::Status SampleCapacity(const std::string& master, const Chains& chains, size_t seen,
                            CapacitySample* out) {
  TlsFiles none;
  auto ch = MakeChannel(master, none);
  if (!ch.ok()) return ch.status();
  auto admin = v1::AdminService::NewStub(*ch);
  auto stub = v1::MasterService::NewStub(*ch);
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, "", 10000);
    v1::StatusResponse r;
    grpc::Status s = admin->Status(&ctx, v1::StatusRequest(), &r);
    if (!s.ok()) return absl::UnavailableError(s.error_message());
    out->configured = r.dram_capacity_bytes();
    out->ssd_configured = r.ssd_capacity_bytes();
    out->ssd_used = r.ssd_used_bytes();
    out->allocated = r.dram_used_bytes();
    out->clean = r.dram_clean_bytes();
    out->demoting = r.dram_demoting_bytes();
    out->puts_in_flight = r.puts_in_flight();
  }
  std::unordered_map<uint64_t, bool> useful;  // resident and every ancestor resident
  out->resident_blocks = out->orphaned_blocks = 0;
  for (size_t base = 0; base < seen; base += 1024) {
    size_t n = std::min<size_t>(1024, seen - base);
    v1::LookupRequest req;
    req.set_peek(true);
    for (size_t k = 0; k < n; ++k) req.add_keys(absl::StrCat("trace/", chains.order[base + k]));
    grpc::ClientContext ctx;
    PrepareContext(&ctx, "", 10000);
    v1::LookupResponse resp;
    grpc::Status s = stub->Lookup(&ctx, req, &resp);
    if (!s.ok()) return absl::UnavailableError(s.error_message());
    if (resp.objects_size() != static_cast<int>(n)) return absl::InternalError("short lookup");
    // Parents come first in `order`, so theirs is known by now.
    for (size_t k = 0; k < n; ++k) {
      uint64_t id = chains.order[base + k];
      bool resident = resp.objects(static_cast<int>(k)).found();
      uint64_t p = chains.parent.at(id);
      bool chain_ok = p == Chains::kNone || useful[p];
      useful[id] = resident && chain_ok;
      out->resident_blocks += resident;
      out->orphaned_blocks += resident && !chain_ok;
    }
  }
  return absl::OkStatus();
}

}  // namespace

// replay_clients.cc: the replay by `clients` concurrent clients.
// master_metrics_port: the master's /metrics, read once the clients are
// done (0: not reported).
int ReplayClients(const std::string& master, uint16_t master_metrics_port,
                  const std::vector<TraceRequest>& reqs, int clients, uint64_t block_bytes,
                  double speed, bool json_only);

int Replay(int argc, char** argv) {
  std::string trace = DefaultTracePath();
  std::string master, model, work_dir, plot;
  int64_t requests = 1500, stores = 2, clients = 1;
  uint64_t block_bytes = 256 << 10;
  uint64_t dram_size = 256ull << 20, ssd_size = 2ull << 30;
  double speed = 0, prefill_tokens_per_s = 8000;
  bool json_only = false;
  Flags flags("shelf-bench replay",
              "replay a Mooncake-format trace: MatchPrefix, get the hits, put the misses");
  flags.AddString("trace", &trace, "trace file (JSON lines); also the first argument");
  flags.AddInt("requests", &requests, "replay the first N requests (0: all)");
  flags.AddSize("block-bytes", &block_bytes,
                "bytes per 512-token block (real Llama-3-8B KV is 64MiB; see --model)");
  flags.AddString("model", &model,
                  "compute --block-bytes from a model's fp16 KV: llama-3-8b, llama-3-70b, "
                  "mistral-7b, qwen2-7b, qwen2-72b");
  flags.AddString("master", &master, "use this cluster instead of starting one");
  flags.AddInt("stores", &stores, "stores in the cluster the bench starts");
  flags.AddSize("dram-size", &dram_size, "DRAM segment per store");
  flags.AddSize("ssd-size", &ssd_size, "SSD tier per store (0: none)");
  flags.AddDouble("speed", &speed, "0: as fast as possible; else trace pacing x this factor");
  flags.AddDouble("prefill-tokens-per-s", &prefill_tokens_per_s,
                  "GPU prefill rate used to value the tokens served from cache");
  flags.AddBool("json-only", &json_only, "print only the JSON line");
  flags.AddInt("clients", &clients,
               "concurrent replay clients, each its own Client taking every Nth request "
               "(1..64; above 1 reports latencies and hit ratio only)");
  flags.AddString("work-dir", &work_dir, "keep the started cluster's logs and data here");
  std::string master_flags;
  flags.AddString("master-flags", &master_flags,
                  "extra flags for the started master, space-separated (e.g. '--evict-high 0.8')");
  std::string store_flags;
  flags.AddString("store-flags", &store_flags,
                  "extra flags for the started stores, space-separated (e.g. '--demote-copy "
                  "never')");
  flags.AddString("plot", &plot, "also write the hit-ratio-over-time chart as SVG to this file");
  double probation = 0.1;
  flags.AddDouble("s3fifo-probation", &probation,
                  "the S3-FIFO simulation's probationary share of DRAM (0..1, exclusive)");
  bool compare = false;
  flags.AddBool("compare-dram-only", &compare,
                "run the replay twice, DRAM only (--ssd-size 0) and with --ssd-size, and print "
                "put/get GB/s and p99 side by side, and the disk's raw write GB/s");
  int64_t rounds = 3;
  flags.AddInt("rounds", &rounds,
               "with --compare-dram-only: runs of each side, alternating which goes first; "
               "each side's best put round is reported (1..16)");
  std::vector<std::string> args = flags.ParseOrExit(argc, argv);
  if (!args.empty()) trace = args[0];
  if (!(probation > 0 && probation < 1)) {
    std::fprintf(stderr, "shelf-bench replay: --s3fifo-probation takes a share in (0, 1), not %g\n",
                 probation);
    return 2;
  }
  // The fetch time is reported for the model's real block size: the bench
  // moves --block-bytes per block (a real model's blocks would make the
  // bundled trace terabytes), so the measured time is scaled by
  // model bytes / block bytes, i.e. the same bandwidth over the real bytes.
  auto model_block_bytes = [](const std::string& name) -> uint64_t {
    for (const ModelPreset& m : kModels) {
      if (name == m.name) return 2 * m.layers * m.kv_heads * m.head_dim * 2 * kTokensPerBlock;
    }
    return 0;
  };
  std::string fetch_model = model.empty() ? "llama-3-8b" : model;
  uint64_t real_block_bytes = model_block_bytes(fetch_model);
  if (real_block_bytes == 0) {
    std::fprintf(stderr, "shelf-bench replay: unknown --model '%s'\n", model.c_str());
    return 2;
  }
  if (!model.empty()) block_bytes = real_block_bytes;
  if (block_bytes == 0 || block_bytes > (1ull << 30)) {
    std::fprintf(stderr, "shelf-bench replay: --block-bytes must be 1..1GiB\n");
    return 2;
  }
  if (clients < 1 || clients > 64) {
    std::fprintf(stderr, "shelf-bench replay: --clients must be 1..64\n");
    return 2;
  }
  if (compare) {
    if (rounds < 1 || rounds > 16) {
      std::fprintf(stderr, "shelf-bench replay: --rounds must be 1..16\n");
      return 2;
    }
    // The children get every flag but these two.
    std::vector<std::string> rest;
    for (int i = 1; i < argc; ++i) {
      const absl::string_view a = argv[i];
      if (a == "--compare-dram-only" || absl::StartsWith(a, "--compare-dram-only=") ||
          absl::StartsWith(a, "--rounds=")) {
        continue;
      }
      if (a == "--rounds") {
        ++i;  // and its value
        continue;
      }
      rest.emplace_back(a);
    }
    ReplayCompareOptions co;
    co.rounds = static_cast<int>(rounds);
    co.block_bytes = block_bytes;
    // The raw row writes what the tiered cluster's SSD tiers hold, 64 MiB
    // to 1 GiB, on the file system the cluster keeps them on.
    co.raw_bytes =
        std::clamp<uint64_t>(static_cast<uint64_t>(stores) * ssd_size, 64ull << 20, 1ull << 30);
    co.dir = work_dir.empty() ? std::filesystem::temp_directory_path().string() : work_dir;
    return ReplayCompare(rest, co);
  }
  auto reqs = ReadTrace(trace, static_cast<size_t>(requests));
  if (!reqs.ok()) {
    std::fprintf(stderr, "shelf-bench replay: %s\n", std::string(reqs.status().message()).c_str());
    return 2;
  }

  std::unique_ptr<LocalCluster> cluster;
  if (master.empty()) {
    LocalCluster::Options co;
    co.stores = static_cast<int>(stores);
    co.dram_bytes = dram_size;
    co.ssd_bytes = ssd_size;
    co.work_dir = work_dir;
    // The trace starts once the populators are done (unless turned off).
    co.wait_populated = !absl::StrContains(store_flags, "populate-dram");
    for (absl::string_view f : absl::StrSplit(master_flags, ' ', absl::SkipEmpty())) {
      co.master_args.emplace_back(f);
    }
    for (absl::string_view f : absl::StrSplit(store_flags, ' ', absl::SkipEmpty())) {
      co.store_args.emplace_back(f);
    }
    // The master's /metrics: its handling time of each call (reported
    // next to what concurrent clients measured) and the puts' backpressure.
    if (master_flags.find("--metrics-listen") == std::string::npos) {
      co.master_args.insert(co.master_args.end(), {"--metrics-listen", "127.0.0.1:0"});
    }
    auto c = LocalCluster::Start(co);
    if (!c.ok()) {
      std::fprintf(stderr, "shelf-bench replay: cannot start a cluster: %s\n",
                   std::string(c.status().message()).c_str());
      return 1;
    }
    cluster = *std::move(c);
    master = cluster->master_address();
  }
  if (clients > 1) {
    return ReplayClients(master, cluster ? cluster->master_metrics_port() : 0, *reqs,
                         static_cast<int>(clients), block_bytes, speed, json_only);
  }
  ClientOptions copts;
  copts.masters = {master};
  copts.timeout_ms = 30000;
  std::unique_ptr<Client> client;
  if (Status s = Client::Open(copts, &client); !s.ok()) {
    std::fprintf(stderr, "shelf-bench replay: %s\n", s.ToString().c_str());
    return 1;
  }

  // Capacities in blocks, as the cluster allocates them (4 KiB aligned).
  uint64_t aligned = (block_bytes + 4095) / 4096 * 4096;
  uint64_t dram_blocks = static_cast<uint64_t>(stores) * (dram_size / aligned);
  uint64_t ssd_blocks = static_cast<uint64_t>(stores) * (ssd_size / block_bytes);
  LruSim sim(dram_blocks, ssd_blocks);
  LruSim sim_dram(dram_blocks, 0);
  // Admission: the same hierarchies with DRAM as S3-FIFO (docs/storage.md).
  S3FifoSim s3(dram_blocks, ssd_blocks, probation);
  S3FifoSim s3_dram(dram_blocks, 0, probation);
  uint64_t sim_hits = 0, sim_dram_hits = 0, s3_hits = 0, s3_dram_hits = 0;

  BlockPattern pattern(block_bytes);
  std::vector<char> scratch;
  Samples match_us, get_us, put_us;
  uint64_t total_blocks = 0, hit_blocks = 0, errors = 0, mismatches = 0;
  uint64_t put_bytes = 0, get_bytes = 0;
  double get_seconds = 0, put_seconds = 0;
  std::string first_error;
  Progress progress("replay", reqs->size());
  // Hit ratio per tier in 60 windows of requests, for the chart.
  const size_t windows = std::min<size_t>(60, std::max<size_t>(1, reqs->size()));
  std::vector<Window> chart;
  // DRAM use sampled every few windows (between requests, so the peeks
  // race nothing) and at the end.
  const size_t windows_per_sample = 5;
  Chains chains(*reqs);
  std::unordered_map<uint64_t, bool> used_ids;
  size_t seen_blocks = 0;  // prefix of chains.order used so far
  std::vector<CapacitySample> capacity;
  std::string sample_error;
  uint64_t win_blocks = 0, win_dram0 = 0, win_ssd0 = 0;
  uint64_t t_start = MonoUs();
  uint64_t trace_t0 = reqs->empty() ? 0 : (*reqs)[0].timestamp_ms;
  for (size_t i = 0; i < reqs->size(); ++i) {
    const TraceRequest& r = (*reqs)[i];
    if (speed > 0) {
      uint64_t due_us = static_cast<uint64_t>((r.timestamp_ms - trace_t0) * 1000 / speed);
      uint64_t now = MonoUs() - t_start;
      if (due_us > now) std::this_thread::sleep_for(std::chrono::microseconds(due_us - now));
    }
    if (r.hash_ids.empty()) continue;
    for (uint64_t id : r.hash_ids) used_ids.emplace(id, true);
    while (seen_blocks < chains.order.size() && used_ids.count(chains.order[seen_blocks])) {
      ++seen_blocks;
    }
    sim_hits += sim.Request(r.hash_ids);
    sim_dram_hits += sim_dram.Request(r.hash_ids);
    s3_hits += s3.Request(r.hash_ids);
    s3_dram_hits += s3_dram.Request(r.hash_ids);
    total_blocks += r.hash_ids.size();
    // Engines send a request's blocks in chunks of at most 1024 keys.
    for (size_t base = 0; base < r.hash_ids.size(); base += 1024) {
      size_t n = std::min<size_t>(1024, r.hash_ids.size() - base);
      std::vector<std::string> keys;
      for (size_t k = 0; k < n; ++k) keys.push_back(absl::StrCat("trace/", r.hash_ids[base + k]));
      uint64_t t0 = MonoUs();
      size_t matched = 0;
      Status s = client->MatchPrefix(keys, &matched);
      match_us.Add(static_cast<double>(MonoUs() - t0));
      if (!s.ok()) {
        ++errors;
        if (first_error.empty()) first_error = s.ToString();
        break;
      }
      if (matched > 0) {
        std::vector<std::string> hit_keys(keys.begin(), keys.begin() + matched);
        std::vector<std::string> values;
        std::vector<Status> statuses;
        t0 = MonoUs();
        s = client->BatchGet(hit_keys, &values, &statuses);
        uint64_t dt = MonoUs() - t0;
        get_us.Add(static_cast<double>(dt));
        get_seconds += dt / 1e6;
        for (size_t k = 0; k < matched; ++k) {
          if (!s.ok() || !statuses[k].ok()) {
            ++errors;
            if (first_error.empty()) first_error = s.ok() ? statuses[k].ToString() : s.ToString();
            continue;
          }
          get_bytes += values[k].size();
          if (!pattern.Check(r.hash_ids[base + k], values[k].data(), values[k].size())) {
            ++mismatches;
          } else {
            ++hit_blocks;
          }
        }
      }
      if (matched < n) {
        size_t misses = n - matched;
        scratch.resize(misses * block_bytes);
        std::vector<PutItem> items;
        for (size_t k = matched; k < n; ++k) {
          char* p = scratch.data() + (k - matched) * block_bytes;
          pattern.Fill(r.hash_ids[base + k], p);
          items.push_back(PutItem{keys[k], p, block_bytes});
        }
        std::vector<Status> statuses;
        t0 = MonoUs();
        s = client->BatchPut(items, &statuses);
        uint64_t dt = MonoUs() - t0;
        put_us.Add(static_cast<double>(dt));
        put_seconds += dt / 1e6;
        for (size_t k = 0; k < items.size(); ++k) {
          if (!s.ok() || !statuses[k].ok()) {
            ++errors;
            if (first_error.empty()) first_error = s.ok() ? statuses[k].ToString() : s.ToString();
          } else {
            put_bytes += block_bytes;
          }
        }
      }
      if (matched < n) break;  // a prefix ends at its first miss
    }
    win_blocks += r.hash_ids.size();
    if ((i + 1) * windows / reqs->size() != i * windows / reqs->size() || i + 1 == reqs->size()) {
      ClientStats now = client->stats();
      if (win_blocks > 0) {
        chart.push_back(Window{double(now.blocks_loaded_dram - win_dram0) / win_blocks,
                               double(now.blocks_loaded_ssd - win_ssd0) / win_blocks});
      }
      win_blocks = 0;
      win_dram0 = now.blocks_loaded_dram;
      win_ssd0 = now.blocks_loaded_ssd;
      if (chart.size() % windows_per_sample == 0 || i + 1 == reqs->size()) {
        CapacitySample c;
        c.requests = i + 1;
        absl::Status s = SampleCapacity(master, chains, seen_blocks, &c);
        if (s.ok()) {
          capacity.push_back(c);
        } else if (sample_error.empty()) {
          sample_error = s.ToString();
        }
      }
    }
    progress.Update(i + 1, absl::StrFormat("hit %.1f%%",
                                           total_blocks ? 100.0 * hit_blocks / total_blocks : 0.0));
  }
  double wall_s = (MonoUs() - t_start) / 1e6;
  ClientStats cs = client->stats();
  // Backpressure as the master counts it: puts that waited for demotions
  // to make room, and blocks dropped (their only copy) when a wait ran out.
  const bool have_backpressure = cluster != nullptr && cluster->master_metrics_port() != 0;
  double room_waits = 0, room_wait_s = 0, put_drops = 0;
  if (have_backpressure) {
    const std::string m = HttpGet(cluster->master_metrics_port(), "/metrics");
    room_waits = MetricValue(m, "shelf_master_put_room_waits_total");
    room_wait_s = MetricValue(m, "shelf_master_put_room_wait_seconds_total");
    put_drops = MetricValue(m, "shelf_master_put_drops_total");
  }
  mismatches += cs.checksum_mismatches;

  double hit_ratio = total_blocks ? static_cast<double>(hit_blocks) / total_blocks : 0;
  double lru = total_blocks ? static_cast<double>(sim_hits) / total_blocks : 0;
  double lru_dram = total_blocks ? static_cast<double>(sim_dram_hits) / total_blocks : 0;
  double s3fifo = total_blocks ? static_cast<double>(s3_hits) / total_blocks : 0;
  double s3fifo_dram = total_blocks ? static_cast<double>(s3_dram_hits) / total_blocks : 0;
  double ideal = IdealHitRatio(*reqs);
  double hit_dram = total_blocks ? static_cast<double>(cs.blocks_loaded_dram) / total_blocks : 0;
  double hit_ssd = total_blocks ? static_cast<double>(cs.blocks_loaded_ssd) / total_blocks : 0;
  uint64_t tokens_saved = hit_blocks * kTokensPerBlock;
  double gpu_s_saved = prefill_tokens_per_s > 0 ? tokens_saved / prefill_tokens_per_s : 0;
  double load_store = cs.bytes_stored ? static_cast<double>(cs.bytes_loaded) / cs.bytes_stored : 0;
  double fetch_scale = static_cast<double>(real_block_bytes) / static_cast<double>(block_bytes);
  double fetch_s_scaled = get_seconds * fetch_scale;
  double get_gbps = get_seconds > 0 ? get_bytes / get_seconds / 1e9 : 0.0;

  if (!json_only) {
    std::printf("\nShelf trace replay: %s\n", trace.c_str());
    std::printf(
        "  requests %zu, blocks %llu, block size %s, cluster %s\n", reqs->size(),
        static_cast<unsigned long long>(total_blocks), FormatBytes(block_bytes).c_str(),
        cluster ? absl::StrCat(stores, " stores x (DRAM ", FormatBytes(dram_size),
                               ssd_size ? absl::StrCat(" + SSD ", FormatBytes(ssd_size)) : "", ")")
                      .c_str()
                : master.c_str());
    std::printf("  wall time %.1f s\n\n", wall_s);
    std::printf("  %-34s %8s\n", "hit ratio (prefix blocks)", "value");
    std::printf("  %-34s %7.2f%%\n", "Shelf, all tiers", 100 * hit_ratio);
    std::printf("  %-34s %7.2f%%\n", "  served from DRAM", 100 * hit_dram);
    std::printf("  %-34s %7.2f%%\n", "  served from SSD", 100 * hit_ssd);
    std::printf("  %-34s %7.2f%%\n", "LRU simulation, same capacity", 100 * lru);
    std::printf("  %-34s %7.2f%%\n", "LRU simulation, DRAM only", 100 * lru_dram);
    std::printf("  %-34s %7.2f%%\n", "S3-FIFO admission, same capacity", 100 * s3fifo);
    std::printf("  %-34s %7.2f%%\n", "S3-FIFO admission, DRAM only", 100 * s3fifo_dram);
    std::printf("  %-34s %7.2f%%\n\n", "ideal (infinite capacity)", 100 * ideal);
    std::printf("  bytes loaded    %s (shm %s, tcp %s; from SSD %s)\n",
                FormatBytes(cs.bytes_loaded).c_str(), FormatBytes(cs.bytes_loaded_shm).c_str(),
                FormatBytes(cs.bytes_loaded_tcp).c_str(), FormatBytes(cs.bytes_loaded_ssd).c_str());
    std::printf("  bytes stored    %s\n", FormatBytes(cs.bytes_stored).c_str());
    std::printf("  load/store      %.3f\n", load_store);
    std::printf("  get  %.2f GB/s  p50 %.0f us  p99 %.0f us (per request batch)\n",
                get_seconds > 0 ? get_bytes / get_seconds / 1e9 : 0.0, get_us.Percentile(50),
                get_us.Percentile(99));
    std::printf("  put  %.2f GB/s  p50 %.0f us  p99 %.0f us\n",
                put_seconds > 0 ? put_bytes / put_seconds / 1e9 : 0.0, put_us.Percentile(50),
                put_us.Percentile(99));
    std::printf("  MatchPrefix     p50 %.0f us  p99 %.0f us\n", match_us.Percentile(50),
                match_us.Percentile(99));
    if (have_backpressure) {
      std::printf(
          "  backpressure    %.0f puts waited for room, %.2f s in all; %.0f blocks dropped\n"
          "                  to place puts with no SSD copy left\n",
          room_waits, room_wait_s, put_drops);
    }
    std::printf(
        "  prefill avoided %llu tokens = %.1f GPU-s at %.0f tokens/s, for %.2f s of fetching\n",
        static_cast<unsigned long long>(tokens_saved), gpu_s_saved, prefill_tokens_per_s,
        fetch_s_scaled);
    std::printf(
        "    (fetch time at the measured %.2f GB/s for %s's %s per 512-token block:\n"
        "     x%.1f the %.2f s measured with %s blocks)\n",
        get_gbps, fetch_model.c_str(), FormatBytes(real_block_bytes).c_str(), fetch_scale,
        get_seconds, FormatBytes(block_bytes).c_str());
    std::printf("\n%s\n", AsciiChart(chart).c_str());
    std::printf(
        "  DRAM over time: configured; allocated, and of it the clean share (blocks\n"
        "  also on their store's SSD: dropped at once for a writer) and the share\n"
        "  being demoted; trace blocks resident in either tier (as bytes, against\n"
        "  DRAM + SSD), and of those the orphaned tails (a block of the chain\n"
        "  before them is gone: no hit)\n");
    std::printf("  %9s %11s %11s %7s %7s %7s %11s %7s %9s %7s %6s\n", "requests", "configured",
                "allocated", "", "clean", "demot.", "resident", "", "orphaned", "", "puts");
    for (const CapacitySample& c : capacity) {
      auto pct = [](uint64_t a, uint64_t b) { return b ? 100.0 * a / b : 0.0; };
      uint64_t resident_bytes = c.resident_blocks * aligned;
      std::printf("  %9zu %11s %11s %6.1f%% %6.1f%% %6.1f%% %11s %6.1f%% %9llu %6.1f%% %6llu\n",
                  c.requests, FormatBytes(c.configured).c_str(), FormatBytes(c.allocated).c_str(),
                  pct(c.allocated, c.configured), pct(c.clean, c.configured),
                  pct(c.demoting, c.configured), FormatBytes(resident_bytes).c_str(),
                  pct(resident_bytes, c.configured + c.ssd_configured),
                  static_cast<unsigned long long>(c.orphaned_blocks),
                  pct(c.orphaned_blocks, c.resident_blocks),
                  static_cast<unsigned long long>(c.puts_in_flight));
    }
    if (!sample_error.empty()) {
      std::printf("  (some samples failed: %s)\n", sample_error.c_str());
    }
    std::printf("\n");
    if (!plot.empty()) {
      std::printf("  chart written to %s\n", WriteSvg(plot, chart, lru, ideal)
                                                 ? plot.c_str()
                                                 : "(could not write the SVG file)");
    }
    std::printf("  errors %llu, checksum mismatches %llu%s%s\n\n",
                static_cast<unsigned long long>(errors),
                static_cast<unsigned long long>(mismatches),
                first_error.empty() ? "" : "; first error: ", first_error.c_str());
  }
  Json o = Json::object();
  o["bench"] = "replay";
  o["requests"] = static_cast<uint64_t>(reqs->size());
  o["blocks"] = total_blocks;
  o["block_bytes"] = block_bytes;
  o["hit_ratio"] = hit_ratio;
  o["hit_ratio_dram"] = hit_dram;
  o["hit_ratio_ssd"] = hit_ssd;
  o["lru_sim_hit_ratio"] = lru;
  o["lru_sim_dram_only_hit_ratio"] = lru_dram;
  o["s3fifo_sim_hit_ratio"] = s3fifo;
  o["s3fifo_sim_dram_only_hit_ratio"] = s3fifo_dram;
  o["ideal_hit_ratio"] = ideal;
  o["errors"] = errors;
  o["checksum_mismatches"] = mismatches;
  o["bytes_loaded"] = cs.bytes_loaded;
  o["bytes_loaded_shm"] = cs.bytes_loaded_shm;
  o["bytes_loaded_tcp"] = cs.bytes_loaded_tcp;
  o["bytes_loaded_ssd"] = cs.bytes_loaded_ssd;
  o["bytes_stored"] = cs.bytes_stored;
  o["load_store_ratio"] = load_store;
  o["get_gbps"] = get_gbps;
  o["put_gbps"] = put_seconds > 0 ? put_bytes / put_seconds / 1e9 : 0.0;
  o["get_p50_us"] = get_us.Percentile(50);
  o["get_p99_us"] = get_us.Percentile(99);
  o["put_p50_us"] = put_us.Percentile(50);
  o["put_p99_us"] = put_us.Percentile(99);
  o["put_calls"] = put_us.count();
  o["put_seconds"] = put_seconds;
  o["matchprefix_p50_us"] = match_us.Percentile(50);
  o["matchprefix_p99_us"] = match_us.Percentile(99);
  o["prefill_tokens_avoided"] = tokens_saved;
  o["prefill_gpu_seconds_avoided"] = gpu_s_saved;
  o["fetch_seconds"] = get_seconds;
  o["fetch_seconds_at_model_size"] = fetch_s_scaled;
  o["fetch_scale"] = fetch_scale;
  o["fetch_scale_model"] = fetch_model;
  o["wall_seconds"] = wall_s;
  if (have_backpressure) {
    o["put_room_waits"] = room_waits;
    o["put_room_wait_seconds"] = room_wait_s;
    o["put_drops"] = put_drops;
  }
  Json samples = Json::array();
  double resident_sum = 0, orphaned_sum = 0;
  uint64_t resident_n = 0, dram_resident_n = 0;
  for (const CapacitySample& c : capacity) {
    Json s = Json::object();
    s["requests"] = static_cast<uint64_t>(c.requests);
    s["configured_bytes"] = c.configured;
    s["allocated_bytes"] = c.allocated;
    s["clean_bytes"] = c.clean;
    s["demoting_bytes"] = c.demoting;
    s["resident_bytes"] = c.resident_blocks * aligned;
    s["resident_blocks"] = c.resident_blocks;
    s["orphaned_blocks"] = c.orphaned_blocks;
    s["puts_in_flight"] = c.puts_in_flight;
    samples.push_back(s);
    // Averages over the samples once DRAM is full (the cold start is not
    // a loss of capacity).
    if (c.configured > 0 && c.allocated * 10 >= c.configured * 9) {
      // Against DRAM alone only where DRAM is all there is: with an SSD
      // tier, blocks resident there count too (resident_fraction_of_both_
      // tiers_when_full, below), and DRAM, full of clean copies, is full.
      if (c.ssd_configured == 0) {
        resident_sum += static_cast<double>(c.resident_blocks * aligned) / c.configured;
        ++dram_resident_n;
      }
      orphaned_sum += c.resident_blocks ? double(c.orphaned_blocks) / c.resident_blocks : 0;
      ++resident_n;
    }
  }
  // Distinct trace blocks resident in either tier, against what DRAM and
  // SSD together hold, over the samples where the two tiers are at least
  // 90% allocated together (DRAM alone may never be, while demotion
  // keeps room free).
  double resident_both_sum = 0;
  int resident_both_n = 0;
  for (const CapacitySample& c : capacity) {
    const uint64_t both = c.configured + c.ssd_configured;
    if (both == 0 || (c.allocated + c.ssd_used) * 10 < both * 9) continue;
    resident_both_sum += static_cast<double>(c.resident_blocks * aligned) / both;
    ++resident_both_n;
  }
  o["dram_samples"] = samples;
  o["dram_resident_fraction_when_full"] = dram_resident_n ? resident_sum / dram_resident_n : 0.0;
  o["resident_fraction_of_both_tiers_when_full"] =
      resident_both_n ? resident_both_sum / resident_both_n : 0.0;
  o["dram_orphaned_fraction_when_full"] = resident_n ? orphaned_sum / resident_n : 0.0;
  if (!capacity.empty()) {
    o["orphaned_blocks_end"] = capacity.back().orphaned_blocks;
    o["resident_blocks_end"] = capacity.back().resident_blocks;
  }
  std::printf("%s\n", JsonDump(o).c_str());
  return errors == 0 && mismatches == 0 ? 0 : 1;
}

}  // namespace shelf::bench
