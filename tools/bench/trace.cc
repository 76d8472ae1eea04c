#include "tools/bench/trace.h"

#include <cctype>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace shelf::bench {
namespace {

// Finds `"name"` followed by ':' and returns the position after the colon.
size_t FindField(const std::string& line, const char* name) {
  std::string quoted = absl::StrCat("\"", name, "\"");
  size_t p = line.find(quoted);
  if (p == std::string::npos) return p;
  p = line.find(':', p + quoted.size());
  return p == std::string::npos ? p : p + 1;
}

bool ParseUint(const std::string& line, size_t* pos, uint64_t* out) {
  while (*pos < line.size() && std::isspace(static_cast<unsigned char>(line[*pos]))) ++*pos;
  size_t start = *pos;
  uint64_t v = 0;
  while (*pos < line.size() && std::isdigit(static_cast<unsigned char>(line[*pos]))) {
    v = v * 10 + (line[*pos] - '0');
    ++*pos;
  }
  *out = v;
  return *pos > start;
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
    size_t p = FindField(line, "timestamp");
    if (p == std::string::npos || !ParseUint(line, &p, &r.timestamp_ms)) return bad("no timestamp");
    p = FindField(line, "input_length");
    if (p != std::string::npos) ParseUint(line, &p, &r.input_length);
    p = FindField(line, "output_length");
    if (p != std::string::npos) ParseUint(line, &p, &r.output_length);
    p = FindField(line, "hash_ids");
    if (p == std::string::npos) return bad("no hash_ids");
    p = line.find('[', p);
    if (p == std::string::npos) return bad("hash_ids is not a list");
    ++p;
    while (true) {
      while (p < line.size() && (std::isspace(static_cast<unsigned char>(line[p])) || line[p] == ','))
        ++p;
      if (p < line.size() && line[p] == ']') break;
      uint64_t id = 0;
      if (!ParseUint(line, &p, &id)) return bad("malformed hash_ids");
      r.hash_ids.push_back(id);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace shelf::bench
