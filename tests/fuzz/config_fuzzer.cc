// Fuzzes the configuration parser every binary shares (common/flags.h): the
// input is a config file for ParseConfigText and, split at NUL bytes, a
// command line for Parse; sizes and durations also go straight to
// ParseSize/ParseDurationMs. Properties, beyond "does not crash": a failed
// parse is INVALID_ARGUMENT (or NOT_FOUND for a missing --config file); a
// plain decimal size parses to its value exactly when it fits 64 bits.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/units.h"

namespace shelf {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "config_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

struct Bound {
  std::string listen = "127.0.0.1:7000";
  bool flag = false;
  int64_t count = 3;
  double ratio = 0.5;
  uint64_t bytes = 1 << 20;
  uint64_t ms = 500;
};

void Bind(Flags* f, Bound* b) {
  f->AddString("listen", &b->listen, "address");
  f->AddBool("hugepages", &b->flag, "a switch");
  f->AddInt("max-connections", &b->count, "a count");
  f->AddDouble("evict-high", &b->ratio, "a ratio");
  f->AddSize("dram-size", &b->bytes, "a size");
  f->AddDurationMs("lease", &b->ms, "a duration");
}

void CheckDecimal(const std::string& text) {
  if (text.empty() || text.size() > 30) return;
  for (char c : text) {
    if (c < '0' || c > '9') return;
  }
  errno = 0;
  unsigned long long want = std::strtoull(text.c_str(), nullptr, 10);
  bool fits = errno != ERANGE;
  absl::StatusOr<uint64_t> got = ParseSize(text);
  Check(got.ok() == fits, "a decimal size parses iff it fits 64 bits");
  if (got.ok()) Check(*got == want, "a decimal size parses to its value");
}

}  // namespace
}  // namespace shelf

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shelf;
  std::string text(reinterpret_cast<const char*>(data), size);
  {
    Flags f("fuzz", "config fuzzing");
    Bound b;
    Bind(&f, &b);
    absl::Status s = f.ParseConfigText(text, "fuzz.conf");
    Check(s.ok() || s.code() == absl::StatusCode::kInvalidArgument, "config errors");
  }
  {
    // The same bytes as a command line, without --config (no file access).
    std::vector<std::string> args = {"fuzz"};
    std::string cur;
    for (char c : text) {
      if (c == '\0') {
        args.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    args.push_back(cur);
    bool has_config = false;
    for (const std::string& a : args) has_config |= a.rfind("--config", 0) == 0;
    if (!has_config && args.size() < 64) {
      std::vector<const char*> argv;
      argv.reserve(args.size());
      for (const std::string& a : args) argv.push_back(a.c_str());
      Flags f("fuzz", "command-line fuzzing");
      Bound b;
      Bind(&f, &b);
      absl::StatusOr<std::vector<std::string>> r =
          f.Parse(static_cast<int>(argv.size()), argv.data());
      Check(r.ok() || r.status().code() == absl::StatusCode::kInvalidArgument,
            "command-line errors");
      f.Help();
    }
  }
  size_t nl = text.find('\n');
  std::string first = text.substr(0, nl);
  (void)ParseSize(first);
  (void)ParseDurationMs(first);
  (void)FormatBytes(size * 0x9E3779B97F4A7C15ull);
  CheckDecimal(first);
  return 0;
}
