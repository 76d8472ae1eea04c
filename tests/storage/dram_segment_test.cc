#include "storage/dram_segment.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/io_buffer.h"

namespace shelf::storage {
namespace {

TEST(DramSegment, CreatesSharedMappingWithHugepageFallback) {
  DramSegment::Options options;
  options.size_bytes = 4 << 20;
  options.try_hugepages = true;
  options.mlock = false;
  auto seg = DramSegment::Create(options);
  ASSERT_TRUE(seg.ok()) << seg.status();
  std::memset((*seg)->data(), 0xAB, (*seg)->size());
  // A second mapping of the same fd (what a same-host client does) sees the bytes.
  void* p = mmap(nullptr, (*seg)->size(), PROT_READ, MAP_SHARED, (*seg)->fd(), 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(static_cast<unsigned char*>(p)[123], 0xAB);
  munmap(p, (*seg)->size());
  EXPECT_TRUE((*seg)->Contains(0, 4 << 20));
  EXPECT_FALSE((*seg)->Contains(1, 4 << 20));
  EXPECT_FALSE((*seg)->Contains(~0ull, 2));  // overflow-safe
}

TEST(DramSegment, ReadsWhetherAdvisedMemoryMayHaveTransparentHugepages) {
  EXPECT_FALSE(ThpModeAdvisable("always within_size advise [never] deny force"));
  EXPECT_FALSE(ThpModeAdvisable("always within_size advise never [deny] force"));
  EXPECT_TRUE(ThpModeAdvisable("always within_size [advise] never deny force"));
  EXPECT_TRUE(ThpModeAdvisable("[always] within_size advise never deny force"));
  EXPECT_TRUE(ThpModeAdvisable("always [within_size] advise never deny force"));
  EXPECT_TRUE(ThpModeAdvisable("always within_size advise never deny [force]"));
  EXPECT_FALSE(ThpModeAdvisable(""));  // no such file
  EXPECT_FALSE(ThpModeAdvisable("[advise"));
  // transparent_hugepage/enabled, for private memory.
  EXPECT_TRUE(ThpModeAdvisable("always [madvise] never"));
  EXPECT_FALSE(ThpModeAdvisable("always madvise [never]"));
}

// Pages of the segment resident in memory (mincore on the store's mapping:
// a memfd's page exists once faulted in).
size_t ResidentPages(const DramSegment& seg) {
  const size_t page = 4096, pages = seg.size() / page;
  std::vector<unsigned char> in(pages);
  if (mincore(seg.data(), seg.size(), in.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

// Without populate no page exists until written; with it, every page
// comes to exist in the background, whole segment and arenas alike, and
// bytes written meanwhile stay as written.
TEST(DramSegment, PopulatesItsPagesInTheBackground) {
  for (uint64_t arena : {uint64_t{0}, uint64_t{16} << 20}) {
    DramSegment::Options options;
    options.size_bytes = 64 << 20;
    options.try_hugepages = false;
    options.arena_bytes = arena;
    auto lazy = DramSegment::Create(options);
    ASSERT_TRUE(lazy.ok()) << lazy.status();
    EXPECT_EQ(ResidentPages(**lazy), 0u);
    EXPECT_EQ((*lazy)->populated_bytes(), 0u);

    options.populate = true;
    auto seg = DramSegment::Create(options);
    ASSERT_TRUE(seg.ok()) << seg.status();
    std::memset((*seg)->data() + (40 << 20), 0x5C, 1 << 20);  // beside the populator
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while ((*seg)->populated_bytes() < (*seg)->size() &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_EQ((*seg)->populated_bytes(), (*seg)->size()) << "arena " << arena;
    EXPECT_EQ(ResidentPages(**seg), (*seg)->size() / 4096) << "arena " << arena;
    const unsigned char* written = reinterpret_cast<unsigned char*>((*seg)->data() + (40 << 20));
    EXPECT_EQ(written[0], 0x5C);
    EXPECT_EQ(written[(1 << 20) - 1], 0x5C);
    EXPECT_EQ(reinterpret_cast<unsigned char*>((*seg)->data())[4096], 0);  // zeroes elsewhere
  }
  // Destroyed while populating: the populator stops at its next chunk.
  DramSegment::Options big;
  big.size_bytes = 1ull << 30;
  big.try_hugepages = false;
  big.populate = true;
  auto seg = DramSegment::Create(big);
  ASSERT_TRUE(seg.ok()) << seg.status();
  seg = absl::StatusOr<std::unique_ptr<DramSegment>>(nullptr);
}

TEST(DramSegment, RejectsZero) {
  DramSegment::Options empty;
  empty.size_bytes = 0;
  EXPECT_EQ(DramSegment::Create(empty).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shelf::storage
