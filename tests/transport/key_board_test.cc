// The key board (transport/shm_board.h) as the store keeps it through its
// range claims (server/store/range_owners.h) and as a client reads it
// through a read-only mapping of the board's descriptor: a mark appears only
// while a claim for its key covers the block, and goes before any write to
// an overlapping range is admitted; a copy is vouched for only if no write
// began meanwhile, and only while the store trusts the board.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "server/store/range_owners.h"
#include "transport/shm_board.h"
#include "transport/wire.h"

namespace shelf::transport {
namespace {

constexpr uint64_t kSegment = 1 << 20;

// A view of `board`, which is trusted for the next hour, as a store that
// heartbeats keeps it.
std::unique_ptr<KeyBoardView> MapOf(KeyBoard& board) {
  board.TrustUntil(MonoMs() + uint64_t{3600} * 1000);
  auto view = KeyBoardView::Map(board.fd(), kSegment);
  EXPECT_TRUE(view.ok()) << view.status();
  return view.ok() ? *std::move(view) : nullptr;
}

TEST(KeyBoardTest, TagsNameKeyAndGenerationAndAreNeverZero) {
  EXPECT_NE(KeyBoardTag("a", 1), 0u);
  EXPECT_NE(KeyBoardTag("", 0), 0u);
  EXPECT_EQ(KeyBoardTag("a", 1), KeyBoardTag("a", 1));
  EXPECT_NE(KeyBoardTag("a", 1), KeyBoardTag("a", 2));
  EXPECT_NE(KeyBoardTag("a", 1), KeyBoardTag("b", 1));
  // The generation is not read as part of the key.
  EXPECT_NE(KeyBoardTag(std::string("a\x01", 2), 0), KeyBoardTag("a", 1));
}

TEST(KeyBoardTest, ClientsMapItReadOnlyAndSeeTheStoresMarks) {
  auto board = KeyBoard::Create(kSegment);
  ASSERT_TRUE(board.ok()) << board.status();
  EXPECT_EQ((*board)->slots(), kSegment / kKeyBoardGranule);
  // Sealed: no one else maps it writable, nor resizes it.
  const int seals = fcntl((*board)->fd(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE);
  EXPECT_EQ(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, (*board)->fd(), 0), MAP_FAILED);
  auto view = MapOf(**board);
  ASSERT_NE(view, nullptr);

  std::string segment(kSegment, 'x');
  std::memcpy(segment.data() + 8192, "hello", 5);
  const uint64_t tag = KeyBoardTag("k", 7);
  char dst[5];
  EXPECT_FALSE(view->CopyIfMarked(segment.data(), 8192, 5, tag, dst));
  (*board)->Mark(8192, tag);
  EXPECT_TRUE(view->Marked(8192, tag));
  EXPECT_FALSE(view->Marked(8192, KeyBoardTag("k", 8)));
  ASSERT_TRUE(view->CopyIfMarked(segment.data(), 8192, 5, tag, dst));
  EXPECT_EQ(std::string(dst, 5), "hello");
  // Any offset within the granule shares its slot; the next granule does not.
  EXPECT_TRUE(view->Marked(8192 + 100, tag));
  EXPECT_FALSE(view->Marked(8192 + kKeyBoardGranule, tag));
  (*board)->Clear(8192);
  EXPECT_FALSE(view->CopyIfMarked(segment.data(), 8192, 5, tag, dst));
  // Past the segment: ignored, never marked.
  (*board)->Mark(kSegment, tag);
  EXPECT_FALSE(view->Marked(kSegment, tag));
  // A range cleared clears every slot it touches, and only those.
  for (uint64_t o = 0; o < 4 * kKeyBoardGranule; o += kKeyBoardGranule) (*board)->Mark(o, tag);
  (*board)->ClearRange(kKeyBoardGranule + 1, kKeyBoardGranule);
  EXPECT_TRUE(view->Marked(0, tag));
  EXPECT_FALSE(view->Marked(kKeyBoardGranule, tag));
  EXPECT_FALSE(view->Marked(2 * kKeyBoardGranule, tag));
  EXPECT_TRUE(view->Marked(3 * kKeyBoardGranule, tag));
}

// A board vouches for nothing until its store trusts it, and stops at once
// when the trust runs out or the store takes it back: a dead store's board
// (its last marks frozen in memory the client still maps) goes quiet by
// itself.
TEST(KeyBoardTest, MarksCountOnlyWhileTheStoreTrustsTheBoard) {
  auto board = KeyBoard::Create(kSegment);
  ASSERT_TRUE(board.ok()) << board.status();
  auto view = KeyBoardView::Map((*board)->fd(), kSegment);
  ASSERT_TRUE(view.ok()) << view.status();
  std::string segment(kSegment, 'x');
  const uint64_t tag = KeyBoardTag("k", 1);
  char dst[16];
  (*board)->Mark(0, tag);
  EXPECT_FALSE((*view)->Trusted());  // never trusted yet
  EXPECT_FALSE((*view)->Marked(0, tag));
  EXPECT_FALSE((*view)->CopyIfMarked(segment.data(), 0, sizeof(dst), tag, dst));

  (*board)->TrustUntil(MonoMs() + 60000);
  EXPECT_TRUE((*view)->Trusted());
  EXPECT_TRUE((*view)->Marked(0, tag));
  EXPECT_TRUE((*view)->CopyIfMarked(segment.data(), 0, sizeof(dst), tag, dst));

  // Run out: the mark is still there, and counts for nothing.
  (*board)->TrustUntil(MonoMs() + 30);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_FALSE((*view)->Trusted());
  EXPECT_FALSE((*view)->Marked(0, tag));
  EXPECT_FALSE((*view)->CopyIfMarked(segment.data(), 0, sizeof(dst), tag, dst));

  // Taken back (a store stopping).
  (*board)->TrustUntil(MonoMs() + 60000);
  ASSERT_TRUE((*view)->Marked(0, tag));
  (*board)->TrustUntil(0);
  EXPECT_FALSE((*view)->Marked(0, tag));
}

// A board whose size is not that of the segment's slots and trust word (a
// store of an older version keeps none) is not mapped: reads ask the store.
TEST(KeyBoardTest, ABoardWithoutItsTrustWordIsNotMapped) {
  auto board = KeyBoard::Create(kSegment);
  ASSERT_TRUE(board.ok()) << board.status();
  EXPECT_EQ(KeyBoardView::Map((*board)->fd(), 2 * kSegment).status().code(),
            absl::StatusCode::kUnavailable);
  int fd = memfd_create("old-board", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(KeyBoardSlots(kSegment) * sizeof(uint64_t))), 0);
  auto old = KeyBoardView::Map(fd, kSegment);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnavailable) << old.status();
  close(fd);
}

// Claims as the store keeps them: block `key` written under allocation `seq`.
absl::Status Write(store::RangeOwners& owners, uint64_t offset, uint64_t length, uint64_t seq,
                   const std::string& key) {
  absl::Status s = owners.BeginWrite(offset, length, seq, wire::KeyDigest(key));
  if (s.ok()) owners.EndWrite(offset, seq);
  return s;
}

TEST(KeyBoardTest, MarksFollowTheRangeClaims) {
  auto board = KeyBoard::Create(kSegment);
  ASSERT_TRUE(board.ok()) << board.status();
  auto view = MapOf(**board);
  ASSERT_NE(view, nullptr);
  store::RangeOwners owners;
  // Without a board, nothing is marked (and nothing fails).
  owners.Publish(0, 64 << 10, wire::KeyDigest("a"), KeyBoardTag("a", 1));
  owners.AttachBoard(board->get());

  // A record with no claim behind it (a store restarted): not marked.
  const uint64_t a = KeyBoardTag("a", 1);
  owners.Publish(0, 64 << 10, wire::KeyDigest("a"), a);
  EXPECT_FALSE(view->Marked(0, a));
  ASSERT_TRUE(Write(owners, 0, 64 << 10, 1, "a").ok());
  // A claim for another key: not marked.
  owners.Publish(0, 64 << 10, wire::KeyDigest("b"), KeyBoardTag("b", 1));
  EXPECT_FALSE(view->Marked(0, KeyBoardTag("b", 1)));
  owners.Publish(0, 64 << 10, wire::KeyDigest("a"), a);
  EXPECT_TRUE(view->Marked(0, a));
  owners.Unpublish(0);
  EXPECT_FALSE(view->Marked(0, a));
  owners.Publish(0, 64 << 10, wire::KeyDigest("a"), a);
  ASSERT_TRUE(view->Marked(0, a));

  // A newer allocation overlapping only the block's tail clears the mark
  // at its start: the reader checks that slot alone.
  ASSERT_TRUE(Write(owners, 48 << 10, 32 << 10, 2, "c").ok());
  EXPECT_FALSE(view->Marked(0, a));
  // The old block's record arriving late finds the range claimed by c.
  owners.Publish(0, 64 << 10, wire::KeyDigest("a"), a);
  EXPECT_FALSE(view->Marked(0, a));

  // The same allocation written again (a retried piece) clears its mark.
  const uint64_t c = KeyBoardTag("c", 1);
  owners.Publish(48 << 10, 32 << 10, wire::KeyDigest("c"), c);
  ASSERT_TRUE(view->Marked(48 << 10, c));
  ASSERT_TRUE(Write(owners, 48 << 10, 32 << 10, 2, "c").ok());
  EXPECT_FALSE(view->Marked(48 << 10, c));

  // A stale write (older allocation) is refused and clears nothing.
  owners.Publish(48 << 10, 32 << 10, wire::KeyDigest("c"), c);
  ASSERT_TRUE(view->Marked(48 << 10, c));
  EXPECT_EQ(Write(owners, 40 << 10, 16 << 10, 1, "a").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(view->Marked(48 << 10, c));
}

// A writer that clears a block's range, rewrites it with another
// generation's bytes and marks it, over and over, while readers copy it:
// every copy the board vouches for holds one generation's bytes whole, the
// one its tag names.
TEST(KeyBoardTest, AVouchedCopyNeverMixesGenerations) {
  auto board = KeyBoard::Create(kSegment);
  ASSERT_TRUE(board.ok()) << board.status();
  auto view = MapOf(**board);
  ASSERT_NE(view, nullptr);
  constexpr uint64_t kOffset = 64 << 10, kLength = 256 << 10;
  // The segment as the store's memory; the readers see it through a
  // second, read-only mapping as a client does.
  int fd = memfd_create("key-board-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kSegment), 0);
  auto* seg =
      static_cast<char*>(mmap(nullptr, kSegment, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  auto* ro = static_cast<const char*>(mmap(nullptr, kSegment, PROT_READ, MAP_SHARED, fd, 0));
  ASSERT_NE(seg, MAP_FAILED);
  ASSERT_NE(ro, MAP_FAILED);
  std::atomic<uint64_t> current{1};
  std::memset(seg + kOffset, 1, kLength);
  (*board)->Mark(kOffset, KeyBoardTag("k", 1));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rewrites{0}, attempts{0};
  constexpr int kReaders = 2;
  // After each mark the writer waits for kReaders + 1 copies to end: at
  // most one per reader began before the mark, so at least one began
  // after it and ran while the block stood still (a copy the board must
  // vouch for); the others straddle the next rewrite.
  std::thread writer([&] {
    for (uint64_t g = 2; !stop.load(); ++g) {
      (*board)->ClearRange(kOffset, kLength);
      std::memset(seg + kOffset, static_cast<int>(g & 0xFF), kLength);
      current.store(g);
      (*board)->Mark(kOffset, KeyBoardTag("k", g));
      rewrites.fetch_add(1);
      const uint64_t seen = attempts.load();
      while (!stop.load() && attempts.load() < seen + kReaders + 1) std::this_thread::yield();
    }
  });
  std::atomic<uint64_t> vouched{0}, refused{0}, mixed{0};
  std::vector<std::thread> readers;
  readers.reserve(kReaders);
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      std::string dst(kLength, '\0');
      for (int i = 0; i < 2000 || rewrites.load() < 500; ++i) {
        const uint64_t g = current.load();
        if (view->CopyIfMarked(ro, kOffset, kLength, KeyBoardTag("k", g), dst.data())) {
          vouched.fetch_add(1);
          const char want = static_cast<char>(g & 0xFF);
          if (dst.find_first_not_of(want) != std::string::npos) mixed.fetch_add(1);
        } else {
          refused.fetch_add(1);
        }
        attempts.fetch_add(1);
      }
    });
  }
  for (std::thread& t : readers) t.join();
  stop.store(true);
  writer.join();
  munmap(seg, kSegment);
  munmap(const_cast<char*>(ro), kSegment);
  close(fd);
  EXPECT_EQ(mixed.load(), 0u);
  EXPECT_GE(rewrites.load(), 500u);
  EXPECT_GE(vouched.load(), 500u);
  std::printf("rewrites %llu, copies vouched %llu, refused %llu\n",
              static_cast<unsigned long long>(rewrites.load()),
              static_cast<unsigned long long>(vouched.load()),
              static_cast<unsigned long long>(refused.load()));
}

}  // namespace
}  // namespace shelf::transport
