#include "tools/bench/resp_redis_benchmark.h"

#include <stdio.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/units.h"

namespace shelf::bench {

bool StopRequested();  // main.cc

namespace {

// Runs `command` through the shell; its standard output and error.
absl::StatusOr<std::string> Output(const std::string& command) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return absl::InternalError(absl::StrCat("cannot run: ", command));
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) return absl::InternalError(absl::StrCat(command, " failed: ", out.substr(0, 512)));
  return out;
}

// The last "GET: N requests per second" figure of redis-benchmark -q's
// output (it rewrites a progress line with \r before the final one).
absl::StatusOr<double> GetsPerSecond(const std::string& out) {
  const size_t at = out.rfind("GET: ");
  double v = 0;
  if (at != std::string::npos) {
    const size_t begin = at + 5;
    const size_t end = out.find(' ', begin);
    if (absl::SimpleAtod(out.substr(begin, end - begin), &v) && v > 0) return v;
  }
  return absl::InternalError(
      absl::StrCat("no GET figure in redis-benchmark's output: ", out.substr(0, 512)));
}

absl::StatusOr<double> RunSide(const RedisBenchmarkOptions& o, int port,
                               const RedisBenchmarkRow& row) {
  const std::string base = absl::StrCat(o.binary, " -h 127.0.0.1 -p ", port, " -d ", row.size);
  absl::StatusOr<std::string> set = Output(base + " -t set -n 1 -c 1 -q");
  if (!set.ok()) return set.status();
  absl::StatusOr<std::string> get = Output(absl::StrCat(base, " -t get -n ", row.requests, " -c ",
                                                        row.clients, " -P ", row.pipeline, " -q"));
  if (!get.ok()) return get.status();
  return GetsPerSecond(*get);
}

}  // namespace

absl::Status RunRedisBenchmarkRows(const RedisBenchmarkOptions& o,
                                   std::vector<RedisBenchmarkRow>* rows) {
  std::printf("redis-benchmark GET (one hot key):\n%-10s %4s %4s %8s %5s | %12s %12s %7s\n", "size",
              "-c", "-P", "-n", "first", "redis get/s", "shelf get/s", "ratio");
  for (uint64_t size : o.sizes) {
    for (int c : o.clients) {
      for (int p : o.pipelines) {
        if (StopRequested()) return absl::OkStatus();
        RedisBenchmarkRow row;
        row.size = size;
        row.clients = c;
        row.pipeline = p;
        row.requests = std::max<uint64_t>(o.row_bytes / size, kRedisBenchmarkRequestsMin);
        row.shelf_first = rows->size() % 2 == 1;
        for (bool shelf : {row.shelf_first, !row.shelf_first}) {
          absl::StatusOr<double> v = RunSide(o, shelf ? o.shelf_port : o.redis_port, row);
          if (!v.ok()) return v.status();
          (shelf ? row.shelf_get_per_s : row.redis_get_per_s) = *v;
        }
        std::printf("%-10s %4d %4d %8llu %5s | %12.0f %12.0f %7.2f\n",
                    FormatBytes(row.size).c_str(), row.clients, row.pipeline,
                    static_cast<unsigned long long>(row.requests),
                    row.shelf_first ? "shelf" : "redis", row.redis_get_per_s, row.shelf_get_per_s,
                    row.shelf_get_per_s / row.redis_get_per_s);
        std::fflush(stdout);
        rows->push_back(row);
      }
    }
  }
  return absl::OkStatus();
}

Json RespRowJson(uint64_t size, int clients, int pipeline, uint64_t requests, bool shelf_first) {
  Json o = Json::object();
  o["size"] = size;
  o["clients"] = clients;
  o["pipeline"] = pipeline;
  o["requests"] = requests;
  o["first"] = shelf_first ? "shelf" : "redis";
  return o;
}

Json RedisBenchmarkJson(const std::vector<RedisBenchmarkRow>& rows, double* min_ratio) {
  *min_ratio = 0;
  Json out = Json::array();
  for (const RedisBenchmarkRow& r : rows) {
    const double ratio = r.shelf_get_per_s / r.redis_get_per_s;
    *min_ratio = out.empty() ? ratio : std::min(*min_ratio, ratio);
    Json o = RespRowJson(r.size, r.clients, r.pipeline, r.requests, r.shelf_first);
    o["redis_get"] = r.redis_get_per_s;
    o["shelf_get"] = r.shelf_get_per_s;
    o["ratio"] = ratio;
    out.push_back(o);
  }
  return out;
}

}  // namespace shelf::bench
