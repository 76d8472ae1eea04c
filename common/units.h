// Parsing and printing of sizes ("512MiB", "4GiB", "1000") and durations
// ("500ms", "3s", "2m"), as every flag and config file accepts them.
//
//   absl::StatusOr<uint64_t> bytes = shelf::ParseSize("4GiB");
//   absl::StatusOr<uint64_t> ms = shelf::ParseDurationMs("500ms");
#ifndef SHELF_COMMON_UNITS_H_
#define SHELF_COMMON_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shelf {

// Accepts a decimal integer followed by an optional unit: B, KB, MB, GB, TB
// (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024), case-insensitive;
// K/M/G/T alone mean the binary units. Returns INVALID_ARGUMENT on anything
// else, including overflow of 64 bits.
absl::StatusOr<uint64_t> ParseSize(absl::string_view text);

// Accepts an integer followed by ms, s, m or h (a bare number is seconds).
// Returns milliseconds; INVALID_ARGUMENT on anything else.
absl::StatusOr<uint64_t> ParseDurationMs(absl::string_view text);

// "4.00 GiB", "512 B": for humans, not for parsing back.
std::string FormatBytes(uint64_t bytes);

}  // namespace shelf

#endif  // SHELF_COMMON_UNITS_H_
