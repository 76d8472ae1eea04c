// Reading request traces in the Mooncake format: one JSON object per line
// with `timestamp` (ms), `input_length`, `output_length` and `hash_ids`
// (one id per 512-token block; equal ids mean equal prefix blocks).
#ifndef SHELF_TOOLS_BENCH_TRACE_H_
#define SHELF_TOOLS_BENCH_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shelf::bench {

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint64_t input_length = 0;
  uint64_t output_length = 0;
  std::vector<uint64_t> hash_ids;
};

// Reads at most `limit` requests (0: all). INVALID_ARGUMENT names the line
// of a malformed record.
absl::StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t limit);

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_TRACE_H_
