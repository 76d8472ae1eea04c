#include "common/units.h"

#include <gtest/gtest.h>

namespace shelf {
namespace {

TEST(ParseSize, AcceptsBinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseSize("4GiB"), 4ull << 30);
  EXPECT_EQ(*ParseSize("4gib"), 4ull << 30);
  EXPECT_EQ(*ParseSize("1000"), 1000u);
  EXPECT_EQ(*ParseSize("2KB"), 2000u);
  EXPECT_EQ(*ParseSize("3M"), 3ull << 20);
  EXPECT_EQ(*ParseSize(" 7 B "), 7u);
}

TEST(ParseSize, RejectsGarbageAndOverflow) {
  EXPECT_EQ(ParseSize("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSize("MiB").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSize("12 parsecs").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSize("-5").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSize("99999999999999999999").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSize("20000000TiB").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(*ParseDurationMs("500ms"), 500u);
  EXPECT_EQ(*ParseDurationMs("3s"), 3000u);
  EXPECT_EQ(*ParseDurationMs("3"), 3000u);
  EXPECT_EQ(*ParseDurationMs("2m"), 120000u);
  EXPECT_EQ(*ParseDurationMs("1h"), 3600000u);
  EXPECT_FALSE(ParseDurationMs("3 days").ok());
  EXPECT_FALSE(ParseDurationMs("ms").ok());
}

TEST(FormatBytes, Readable) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(4ull << 30), "4.00 GiB");
}

}  // namespace
}  // namespace shelf
