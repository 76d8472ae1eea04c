#include "tools/bench/kv_support.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/checksum.h"
#include "common/units.h"
#include "tools/bench/bench_util.h"

namespace shelf::bench {

Blocks::Blocks(size_t max_bytes, const std::vector<uint64_t>& sizes) : bytes_(max_bytes) {
  BlockPattern(max_bytes).Fill(0, bytes_.data());
  for (uint64_t size : sizes) {
    if (size >= 8) tail_checksums_[size] = BlockChecksum(bytes_.data() + 8, size - 8);
  }
}

bool Blocks::Check(uint64_t id, const char* data, size_t got, size_t want) const {
  if (got != want || want < 8 || std::memcmp(data, &id, sizeof(id)) != 0) return false;
  auto it = tail_checksums_.find(want);
  if (it == tail_checksums_.end()) return std::memcmp(data + 8, bytes_.data() + 8, want - 8) == 0;
  return BlockChecksum(data + 8, want - 8) == it->second;
}

absl::StatusOr<std::vector<uint64_t>> ParseSizes(const std::string& text) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<uint64_t> v = ParseSize(part);
    if (!v.ok()) return v.status();
    if (*v < 8 || *v > (1ull << 30)) {
      return absl::InvalidArgumentError(absl::StrCat("block size ", part, " not in 8B..1GiB"));
    }
    out.push_back(*v);
  }
  if (out.empty()) return absl::InvalidArgumentError("no block sizes");
  return out;
}

absl::StatusOr<std::vector<int>> ParseInts(const std::string& text, int lo, int hi) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < lo || v > hi) {
      return absl::InvalidArgumentError(absl::StrCat("'", part, "' is not in ", lo, "..", hi));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError("empty list");
  return out;
}

std::string Ratio(double shelf, double redis) {
  return redis > 0 ? absl::StrFormat("%.2fx", shelf / redis) : "-";
}

std::string LoadAverage() {
  std::string text;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof(buf), f) != nullptr) text = buf;
    std::fclose(f);
  }
  std::vector<std::string> parts = absl::StrSplit(text, ' ');
  return parts.size() >= 3 ? absl::StrCat(parts[0], " ", parts[1], " ", parts[2]) : "unknown";
}

}  // namespace shelf::bench
