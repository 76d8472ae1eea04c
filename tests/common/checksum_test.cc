// Block checksums are XXH3-64 (seed 0) whichever code computes them: the
// inline code, libxxhash's dispatching code, or a stream of pieces. Stores
// and clients built at other times must agree on every stored checksum.
#include "common/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace shelf {
namespace {

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + (i >> 8)) & 0xff);
  return s;
}

// XXH3-64 of Pattern(n), from python3-xxhash (xxhash.xxh3_64_intdigest).
struct Known {
  size_t size;
  uint64_t xxh3;
};
constexpr Known kKnown[] = {
    {0, 0x2d06800538d394c2ull},       {100, 0x387363ce0e6084aaull},  {1023, 0xa454369c718a6456ull},
    {1024, 0xc6c700c409d40c4bull},    {4097, 0x24abb073eb95442bull}, {65536, 0x513812aaf46c6769ull},
    {1048579, 0x7f1144962d4e30fcull},
};

TEST(ChecksumTest, IsXxh3OfTheBytesOnEitherSideOfTheOutOfLineSize) {
  for (const Known& k : kKnown) {
    const std::string data = Pattern(k.size);
    EXPECT_EQ(BlockChecksum(data.data(), data.size()), k.xxh3) << k.size << " bytes";
    EXPECT_EQ(BlockChecksumLong(data.data(), data.size()), k.xxh3) << k.size << " bytes";
  }
}

TEST(ChecksumTest, AStreamOfPiecesGivesTheWholeBlocksChecksum) {
  const std::string data = Pattern(1048579);
  // Pieces under, at and over the out-of-line size, and odd ones.
  const std::vector<size_t> pieces = {1, 7, 1023, 1024, 4096, 65536, 1 << 20, 300000};
  for (size_t piece : pieces) {
    ChecksumStream s;
    for (size_t at = 0; at < data.size(); at += piece) {
      s.Update(data.data() + at, std::min(piece, data.size() - at));
    }
    EXPECT_EQ(s.Digest(), 0x7f1144962d4e30fcull) << "pieces of " << piece;
  }
  // Mixed sizes in one stream.
  ChecksumStream mixed;
  size_t at = 0;
  for (size_t i = 0; at < data.size(); ++i) {
    const size_t n = std::min(pieces[i % pieces.size()], data.size() - at);
    mixed.Update(data.data() + at, n);
    at += n;
  }
  EXPECT_EQ(mixed.Digest(), 0x7f1144962d4e30fcull);
  EXPECT_EQ(ChecksumStream().Digest(), 0x2d06800538d394c2ull);
}

#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
// Where libxxhash ships its dispatcher (Debian's does), the build finds it:
// without it every checksum of a large block runs at the speed of SSE2.
TEST(ChecksumTest, TheBuildUsesLibxxhashsDispatcher) { EXPECT_TRUE(ChecksumDispatches()); }
#endif

}  // namespace
}  // namespace shelf
