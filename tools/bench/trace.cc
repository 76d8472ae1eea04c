#include "tools/bench/trace.h"

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/json.h"

namespace shelf::bench {
namespace {

// A non-negative whole number (Mooncake traces write some as 12.0).
bool ToUint(const Json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!(d >= 0) || d >= 18446744073709551616.0) return false;
    *out = static_cast<uint64_t>(d);
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t limit) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read trace '", path, "'"));
  std::vector<TraceRequest> out;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line) && (limit == 0 || out.size() < limit)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    TraceRequest r;
    auto bad = [&](const char* what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", what));
    };
    const Json j = JsonParse(line);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    auto ts = j.find("timestamp");
    if (ts == j.end() || !ToUint(*ts, &r.timestamp_ms)) return bad("no timestamp");
    if (auto it = j.find("input_length"); it != j.end()) ToUint(*it, &r.input_length);
    if (auto it = j.find("output_length"); it != j.end()) ToUint(*it, &r.output_length);
    auto ids = j.find("hash_ids");
    if (ids == j.end()) return bad("no hash_ids");
    if (!ids->is_array()) return bad("hash_ids is not a list");
    for (const Json& id : *ids) {
      uint64_t v = 0;
      if (!ToUint(id, &v)) return bad("malformed hash_ids");
      r.hash_ids.push_back(v);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace shelf::bench
