// Pieces of `shelf-bench kv` (kv_bench.cc): the blocks it writes and
// checks, its argument parsers, and the load average it reports.
#ifndef SHELF_TOOLS_BENCH_KV_SUPPORT_H_
#define SHELF_TOOLS_BENCH_KV_SUPPORT_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json.h"

namespace shelf::bench {

// Block contents: one random pattern; the first 8 bytes carry the block's
// id, so a reader checks the bytes and that it got the block it asked for.
// Every get is checked: the id, and an XXH3 of the other bytes against the
// pattern's, computed once per block size (one pass over the data, about
// the cost of the memcpy a get makes anyway).
class Blocks {
 public:
  Blocks(size_t max_bytes, const std::vector<uint64_t>& sizes);
  void Fill(uint64_t id, char* out, size_t size) const {
    std::memcpy(out, bytes_.data(), size);
    Stamp(id, out);
  }
  static void Stamp(uint64_t id, char* out) { std::memcpy(out, &id, sizeof(id)); }
  bool Check(uint64_t id, const char* data, size_t got, size_t want) const;

 private:
  std::vector<char> bytes_;
  std::map<uint64_t, uint64_t> tail_checksums_;  // block size -> XXH3 of bytes [8, size)
};

// Block sizes ("64KiB,1MiB"), each 8 B..1 GiB.
absl::StatusOr<std::vector<uint64_t>> ParseSizes(const std::string& text);
// A comma-separated list of integers in lo..hi.
absl::StatusOr<std::vector<int>> ParseInts(const std::string& text, int lo, int hi);
// "shelf/redis" as "1.23x", "-" without a Redis figure.
std::string Ratio(double shelf, double redis);
// The 1-, 5- and 15-minute load averages: a busy machine skews every row.
std::string LoadAverage();
// Single 1 MiB gets over TCP from two one-store clusters with a secret, one
// whose store checks read grants and one started --read-grants=false, in
// alternating rounds (`seconds` per side in all). Prints the row unless
// `json_only`; returns its figures (kv_grants.cc).
Json ReadGrantRow(double seconds, bool json_only);

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_KV_SUPPORT_H_
