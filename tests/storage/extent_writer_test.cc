// ExtentWriter on a real file: writes queued back to back, adjacent on
// disk or not, in any size, all land where they were asked to, and each
// one's completion runs once with its verdict.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "storage/io_pool.h"

namespace shelf::storage {
namespace {

// Staged or not (each run gathered into one hugepage buffer first).
class ExtentWriterTest : public ::testing::TestWithParam<bool> {};

TEST_P(ExtentWriterTest, AdjacentAndScatteredWritesLandWhereAsked) {
  const std::string path = ::testing::TempDir() + "/extent-writer-" + std::to_string(getpid());
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  constexpr uint64_t kFile = 64ull << 20;
  ASSERT_EQ(ftruncate(fd, kFile), 0);
  // Runs of adjacent 4 KiB to 256 KiB pieces (merged into one pwritev),
  // with gaps between runs and one run written back to front.
  struct Piece {
    uint64_t offset, length;
  };
  std::vector<Piece> pieces;
  std::mt19937_64 rng(7);
  uint64_t at = 0;
  for (int run = 0; run < 40; ++run) {
    std::vector<Piece> r;
    for (int i = 0; i < 1 + static_cast<int>(rng() % 70); ++i) {
      uint64_t len = 4096 * (1 + rng() % 64);
      if (at + len > kFile) break;
      r.push_back({at, len});
      at += len;
    }
    if (run == 3) std::reverse(r.begin(), r.end());
    pieces.insert(pieces.end(), r.begin(), r.end());
    at += 4096 * (rng() % 3);  // a gap, or none
  }
  std::vector<std::string> data;
  for (size_t i = 0; i < pieces.size(); ++i) {
    data.emplace_back(pieces[i].length, static_cast<char>('a' + i % 26));
    std::memcpy(data.back().data(), &i, sizeof(i));
  }
  Mutex mu;
  CondVar cv;
  std::vector<int> calls(pieces.size(), 0);
  size_t done = 0;
  {
    IoPool pool(8);
    ExtentWriter writer(fd, &pool, 8, /*stage=*/GetParam());
    for (size_t i = 0; i < pieces.size(); ++i) {
      writer.Write(pieces[i].offset, data[i].data(), pieces[i].length, [&, i](int err) {
        EXPECT_EQ(err, 0);
        MutexLock lock(&mu);
        ++calls[i];
        ++done;
        cv.SignalAll();
      });
    }
    MutexLock lock(&mu);
    while (done < pieces.size()) cv.Wait(&mu);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    std::string got(pieces[i].length, '\0');
    ASSERT_EQ(pread(fd, got.data(), got.size(), static_cast<off_t>(pieces[i].offset)),
              static_cast<ssize_t>(got.size()));
    EXPECT_TRUE(got == data[i]) << "piece " << i << " at " << pieces[i].offset;
  }
  close(fd);
  unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Staging, ExtentWriterTest, ::testing::Bool());

}  // namespace
}  // namespace shelf::storage
