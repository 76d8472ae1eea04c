// ValueArena: whole pages first fit, freed runs merged back, values over a
// quarter of the arena refused, the memory alive while any value is, and
// the memory shared host memory a same-host put is copied from once.
#include "server/resp/resp_value_arena.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace shelf::resp {
namespace {

constexpr size_t kPage = ValueArena::kPageBytes;

TEST(ValueArenaTest, PagesAreTakenFirstFitAndGivenBackWhole) {
  absl::StatusOr<std::shared_ptr<ValueArena>> made = ValueArena::Create(16 * kPage - 100);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<ValueArena> arena = *std::move(made);
  EXPECT_EQ(arena->bytes(), 16 * kPage);  // rounded up to pages

  // Four values of one to four pages fill it (a quarter at most each).
  std::vector<PlacedValue> v;
  for (size_t capacity : {4 * kPage, 4 * kPage, 4 * kPage - 1, 3 * kPage + 1}) {
    v.push_back(arena->Allocate(capacity));
    ASSERT_TRUE(v.back()) << "capacity " << capacity;
    EXPECT_EQ(v.back().capacity, capacity);
    EXPECT_TRUE(arena->Contains(v.back().data()));
    std::memset(v.back().data(), 0x5a, capacity);  // all of it writable
  }
  EXPECT_EQ(arena->used_bytes(), 16 * kPage);
  EXPECT_FALSE(arena->Allocate(1)) << "a full arena placed a value";
  EXPECT_FALSE(arena->Allocate(4 * kPage + 1)) << "over a quarter";
  EXPECT_FALSE(arena->Allocate(0));

  // Freeing the middle two leaves one run of eight pages: a value of four
  // fits twice, where the first and last values were.
  char* second = v[1].data();
  v[1] = PlacedValue();
  v[2] = PlacedValue();
  EXPECT_EQ(arena->used_bytes(), 8 * kPage);
  PlacedValue a = arena->Allocate(4 * kPage);
  PlacedValue b = arena->Allocate(4 * kPage);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a.data(), second);
  EXPECT_EQ(b.data(), second + 4 * kPage);

  // Everything back: one run again, so a quarter fits at the start.
  v.clear();
  a = PlacedValue();
  b = PlacedValue();
  EXPECT_EQ(arena->used_bytes(), 0u);
  std::vector<PlacedValue> all;
  all.reserve(4);
  for (int i = 0; i < 4; ++i) all.push_back(arena->Allocate(4 * kPage));
  for (const PlacedValue& x : all) EXPECT_TRUE(x);
}

// A value outlives the last other reference to its arena: its memory is
// still mapped until it goes.
TEST(ValueArenaTest, AValueKeepsItsArenaAlive) {
  absl::StatusOr<std::shared_ptr<ValueArena>> made = ValueArena::Create(64 * kPage);
  ASSERT_TRUE(made.ok()) << made.status();
  PlacedValue v = (*made)->Allocate(10 * kPage);
  ASSERT_TRUE(v);
  made = absl::StatusOr<std::shared_ptr<ValueArena>>(nullptr);
  std::memset(v.data(), 1, v.capacity);  // would fault on unmapped memory
  EXPECT_EQ(v.data()[v.capacity - 1], 1);
}

TEST(ValueArenaTest, RefusesAnEmptyArena) {
  EXPECT_EQ(ValueArena::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shelf::resp
