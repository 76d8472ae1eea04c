// redis-benchmark's GET rows against redis-server and shelf-resp, for
// shelf-bench resp --redis-benchmark: the rows users run themselves.
//
// For each value size x connections (-c) x pipeline depth (-P), one key is
// SET once on each server (redis-benchmark -t set -n 1: its key
// "key:000000000000" holds the tool's repeated byte), then
// `redis-benchmark -t get` reads it `requests` times: every GET a hit on
// one hot key, the tool's own pattern. Both servers get the same command
// line; the side that goes first alternates per row. The tool reads each
// reply whole but checks no bytes (shelf-bench resp's own load does).
#ifndef SHELF_TOOLS_BENCH_RESP_REDIS_BENCHMARK_H_
#define SHELF_TOOLS_BENCH_RESP_REDIS_BENCHMARK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/json.h"

namespace shelf::bench {

inline constexpr uint64_t kRedisBenchmarkRequestsMin = 2000;

struct RedisBenchmarkRow {
  uint64_t size = 0;
  int clients = 0;
  int pipeline = 0;
  uint64_t requests = 0;
  bool shelf_first = false;
  double redis_get_per_s = 0;
  double shelf_get_per_s = 0;
};

struct RedisBenchmarkOptions {
  std::string binary = "/usr/bin/redis-benchmark";
  int redis_port = 0;
  int shelf_port = 0;
  std::vector<uint64_t> sizes = {64ull << 10, 1ull << 20};
  std::vector<int> clients = {4, 32};
  std::vector<int> pipelines = {1, 16};
  // requests = row_bytes / size, at least kRedisBenchmarkRequestsMin: the
  // tool times in milliseconds, so a row must last a while.
  uint64_t row_bytes = 4ull << 30;
};

// Runs every row, printing each as it ends; stops at the first failure
// (the tool missing or failing, no GET figure in its output).
absl::Status RunRedisBenchmarkRows(const RedisBenchmarkOptions& options,
                                   std::vector<RedisBenchmarkRow>* rows);

// The JSON object of a row of either kind (this one's, shelf-bench resp's
// own load), with what names the row: size, clients, pipeline, requests
// and which server ran first.
Json RespRowJson(uint64_t size, int clients, int pipeline, uint64_t requests, bool shelf_first);

// The rows as JSON objects, and the smallest Shelf/Redis GET ratio of them
// (0 without rows).
Json RedisBenchmarkJson(const std::vector<RedisBenchmarkRow>& rows, double* min_ratio);

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_RESP_REDIS_BENCHMARK_H_
