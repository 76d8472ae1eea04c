#include "common/units.h"

#include <cctype>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace shelf {
namespace {

// Splits "123abc" into 123 and "abc". Fails on no digits or overflow.
absl::Status SplitNumber(absl::string_view text, uint64_t* number, std::string* unit) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t digit = text[i] - '0';
    if (value > (UINT64_MAX - digit) / 10) {
      return absl::InvalidArgumentError(absl::StrCat("number too large: '", text, "'"));
    }
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) {
    return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", text, "'"));
  }
  *number = value;
  *unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(i)));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Multiply(uint64_t value, uint64_t scale, absl::string_view text) {
  if (scale != 0 && value > UINT64_MAX / scale) {
    return absl::InvalidArgumentError(absl::StrCat("value too large: '", text, "'"));
  }
  return value * scale;
}

}  // namespace

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  uint64_t value = 0;
  std::string unit;
  if (absl::Status s = SplitNumber(text, &value, &unit); !s.ok()) return s;
  struct Unit {
    const char* name;
    uint64_t scale;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ull << 10},
      {"kib", 1ull << 10},
      {"kb", 1000ull},
      {"m", 1ull << 20},
      {"mib", 1ull << 20},
      {"mb", 1000ull * 1000},
      {"g", 1ull << 30},
      {"gib", 1ull << 30},
      {"gb", 1000ull * 1000 * 1000},
      {"t", 1ull << 40},
      {"tib", 1ull << 40},
      {"tb", 1000ull * 1000 * 1000 * 1000},
  };
  for (const Unit& u : kUnits) {
    if (unit == u.name) return Multiply(value, u.scale, text);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad size '", text, "': use a number with B, KiB, MiB, GiB, TiB (or KB, MB, GB)"));
}

absl::StatusOr<uint64_t> ParseDurationMs(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  uint64_t value = 0;
  std::string unit;
  if (absl::Status s = SplitNumber(text, &value, &unit); !s.ok()) return s;
  if (unit == "ms") return value;
  if (unit.empty() || unit == "s") return Multiply(value, 1000, text);
  if (unit == "m" || unit == "min") return Multiply(value, uint64_t{60} * 1000, text);
  if (unit == "h") return Multiply(value, uint64_t{3600} * 1000, text);
  return absl::InvalidArgumentError(
      absl::StrCat("bad duration '", text, "': use a number with ms, s, m or h"));
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int i = 0;
  while (value >= 1024 && i < 5) {
    value /= 1024;
    ++i;
  }
  char buf[32];
  if (i == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", value, kNames[i]);
  }
  return buf;
}

}  // namespace shelf
