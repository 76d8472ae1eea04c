// shelf-bench replay --clients N: the trace replayed by N concurrent
// clients, as N engine instances share one cache. Client c takes requests
// c, c + N, c + 2N, ... in trace order (paced like the serial replay when
// --speed is set), each its own Client: MatchPrefix, get the hits, put the
// misses. What matters here is MatchPrefix latency while other clients
// look up and write at the same time.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/mutex.h"
#include "shelf/client.h"
#include "testing/http_probe.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/trace.h"

namespace shelf::bench {

namespace {

// What the replay adds up over all its clients.
struct ReplayTotals {
  Samples match_us, get_us, put_us;
  uint64_t blocks = 0, hits = 0, errors = 0, mismatches = 0;
  std::string first_error;
};

// The totals the client threads add to, each once when it is done.
struct SharedTotals {
  Mutex mu;
  ReplayTotals sum ABSL_GUARDED_BY(mu);
};

// The upper bounds (us) of the buckets holding the 50th and 99th
// percentiles of `method`'s handling time in a master's /metrics text
// (shelf_master_rpc_seconds); false when it has no such samples.
bool MasterRpcPercentiles(const std::string& metrics, const std::string& method, double* p50_us,
                          double* p99_us) {
  const std::string prefix =
      absl::StrCat("shelf_master_rpc_seconds_bucket{method=\"", method, "\",le=\"");
  std::vector<std::pair<double, double>> buckets;  // finite (le in s, cumulative count)
  double total = 0;                                // the +Inf bucket: every call
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix)) continue;
    size_t quote = line.find('"');
    size_t space = line.rfind(' ');
    double le = 0, count = 0;
    if (quote == absl::string_view::npos || space == absl::string_view::npos ||
        !absl::SimpleAtod(line.substr(space + 1), &count)) {
      continue;
    }
    absl::string_view bound = line.substr(0, quote);
    if (bound == "+Inf") {
      total = count;
    } else if (absl::SimpleAtod(bound, &le)) {
      buckets.emplace_back(le, count);
    }
  }
  std::sort(buckets.begin(), buckets.end());
  if (buckets.empty() || total <= 0) return false;
  // A percentile past the last finite bound (calls over 10 s) reads as
  // that bound: the JSON has no infinity.
  auto at = [&](double q) {
    for (const auto& [le, count] : buckets) {
      if (count >= q * total) return le * 1e6;
    }
    return buckets.back().first * 1e6;
  };
  *p50_us = at(0.5);
  *p99_us = at(0.99);
  return true;
}

}  // namespace

int ReplayClients(const std::string& master, uint16_t master_metrics_port,
                  const std::vector<TraceRequest>& reqs, int clients, uint64_t block_bytes,
                  double speed, bool json_only) {
  std::vector<std::unique_ptr<Client>> handles;
  for (int c = 0; c < clients; ++c) {
    ClientOptions o;
    o.masters = {master};
    o.timeout_ms = 30000;
    std::unique_ptr<Client> client;
    if (Status s = Client::Open(o, &client); !s.ok()) {
      std::fprintf(stderr, "shelf-bench replay: %s\n", s.ToString().c_str());
      return 1;
    }
    handles.push_back(std::move(client));
  }
  const BlockPattern pattern(block_bytes);
  SharedTotals shared;
  const uint64_t trace_t0 = reqs.empty() ? 0 : reqs[0].timestamp_ms;
  const uint64_t t_start = MonoUs();
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      Client* client = handles[c].get();
      Samples m, g, p;
      uint64_t my_blocks = 0, my_hits = 0, my_errors = 0, my_mismatches = 0;
      std::string my_error;
      std::vector<char> scratch;
      auto fail = [&](const Status& s) {
        ++my_errors;
        if (my_error.empty()) my_error = s.ToString();
      };
      for (size_t i = c; i < reqs.size(); i += clients) {
        const TraceRequest& r = reqs[i];
        if (speed > 0) {
          uint64_t due_us = static_cast<uint64_t>((r.timestamp_ms - trace_t0) * 1000 / speed);
          uint64_t now = MonoUs() - t_start;
          if (due_us > now) std::this_thread::sleep_for(std::chrono::microseconds(due_us - now));
        }
        my_blocks += r.hash_ids.size();
        for (size_t base = 0; base < r.hash_ids.size(); base += 1024) {
          size_t n = std::min<size_t>(1024, r.hash_ids.size() - base);
          std::vector<std::string> keys;
          for (size_t k = 0; k < n; ++k)
            keys.push_back(absl::StrCat("trace/", r.hash_ids[base + k]));
          uint64_t t0 = MonoUs();
          size_t matched = 0;
          Status s = client->MatchPrefix(keys, &matched);
          m.Add(static_cast<double>(MonoUs() - t0));
          if (!s.ok()) {
            fail(s);
            break;
          }
          if (matched > 0) {
            std::vector<std::string> hit_keys(keys.begin(), keys.begin() + matched), values;
            std::vector<Status> statuses;
            t0 = MonoUs();
            s = client->BatchGet(hit_keys, &values, &statuses);
            g.Add(static_cast<double>(MonoUs() - t0));
            for (size_t k = 0; k < matched; ++k) {
              if (!s.ok() || !statuses[k].ok()) {
                // Another client's eviction between its MatchPrefix and
                // this get is a miss, not an error.
                if (s.ok() && statuses[k].code() == StatusCode::kNotFound) continue;
                fail(s.ok() ? statuses[k] : s);
              } else if (!pattern.Check(r.hash_ids[base + k], values[k].data(), values[k].size())) {
                ++my_mismatches;
              } else {
                ++my_hits;
              }
            }
          }
          if (matched < n) {
            scratch.resize((n - matched) * block_bytes);
            std::vector<PutItem> items;
            for (size_t k = matched; k < n; ++k) {
              char* d = scratch.data() + (k - matched) * block_bytes;
              pattern.Fill(r.hash_ids[base + k], d);
              items.push_back(PutItem{keys[k], d, block_bytes});
            }
            std::vector<Status> statuses;
            t0 = MonoUs();
            s = client->BatchPut(items, &statuses);
            p.Add(static_cast<double>(MonoUs() - t0));
            for (size_t k = 0; k < items.size(); ++k) {
              if (!s.ok() || !statuses[k].ok()) fail(s.ok() ? statuses[k] : s);
            }
            break;  // a prefix ends at its first miss
          }
        }
      }
      MutexLock lock(&shared.mu);
      ReplayTotals& sum = shared.sum;
      sum.match_us.Merge(m);
      sum.get_us.Merge(g);
      sum.put_us.Merge(p);
      sum.blocks += my_blocks;
      sum.hits += my_hits;
      sum.errors += my_errors;
      sum.mismatches += my_mismatches;
      if (sum.first_error.empty()) sum.first_error = my_error;
    });
  }
  for (std::thread& t : threads) t.join();
  ReplayTotals totals;
  {
    MutexLock lock(&shared.mu);
    totals = std::move(shared.sum);
  }
  const double wall_s = (MonoUs() - t_start) / 1e6;
  double master_p50_us = 0, master_p99_us = 0;
  const bool have_master = master_metrics_port != 0 &&
                           MasterRpcPercentiles(HttpGet(master_metrics_port, "/metrics"),
                                                "MatchPrefix", &master_p50_us, &master_p99_us);
  const double hit_ratio = totals.blocks ? static_cast<double>(totals.hits) / totals.blocks : 0;
  if (!json_only) {
    std::printf("\nShelf trace replay, %d concurrent clients: %zu requests, %llu blocks, %.1f s\n",
                clients, reqs.size(), static_cast<unsigned long long>(totals.blocks), wall_s);
    std::printf("  hit ratio %.2f%%\n", 100 * hit_ratio);
    std::printf("  MatchPrefix  p50 %.0f us  p99 %.0f us  (%zu calls)\n",
                totals.match_us.Percentile(50), totals.match_us.Percentile(99),
                totals.match_us.count());
    if (have_master) {
      std::printf(
          "    at the master: p50 <= %.0f us  p99 <= %.0f us  (its handling time, the "
          "bucket bounds of shelf_master_rpc_seconds)\n",
          master_p50_us, master_p99_us);
    }
    std::printf("  get          p50 %.0f us  p99 %.0f us\n", totals.get_us.Percentile(50),
                totals.get_us.Percentile(99));
    std::printf("  put          p50 %.0f us  p99 %.0f us\n", totals.put_us.Percentile(50),
                totals.put_us.Percentile(99));
    std::printf("  errors %llu, checksum mismatches %llu%s%s\n\n",
                static_cast<unsigned long long>(totals.errors),
                static_cast<unsigned long long>(totals.mismatches),
                totals.first_error.empty() ? "" : "; first error: ", totals.first_error.c_str());
  }
  Json o = Json::object();
  o["bench"] = "replay";
  o["clients"] = clients;
  o["requests"] = static_cast<uint64_t>(reqs.size());
  o["blocks"] = totals.blocks;
  o["hit_ratio"] = hit_ratio;
  o["matchprefix_p50_us"] = totals.match_us.Percentile(50);
  o["matchprefix_p99_us"] = totals.match_us.Percentile(99);
  if (have_master) {
    o["master_matchprefix_p50_us_at_most"] = master_p50_us;
    o["master_matchprefix_p99_us_at_most"] = master_p99_us;
  }
  o["get_p99_us"] = totals.get_us.Percentile(99);
  o["put_p99_us"] = totals.put_us.Percentile(99);
  o["errors"] = totals.errors;
  o["checksum_mismatches"] = totals.mismatches;
  o["wall_seconds"] = wall_s;
  std::printf("%s\n", JsonDump(o).c_str());
  return totals.errors == 0 && totals.mismatches == 0 ? 0 : 1;
}

}  // namespace shelf::bench
