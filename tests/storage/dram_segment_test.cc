#include "storage/dram_segment.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

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

TEST(DramSegment, RejectsZero) {
  DramSegment::Options empty;
  empty.size_bytes = 0;
  EXPECT_EQ(DramSegment::Create(empty).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shelf::storage
