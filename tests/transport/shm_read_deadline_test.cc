// Same-host SSD reads (transport/shm_write.h) under the reader's deadline:
// the reader stops waiting when it passes, not at the socket's 30 s I/O
// timeout, and the store side frees the range of a read that ends past
// it. Both ends run in this process over a socketpair; the SSD tier is a
// fault-injection handler whose reads block until the test lets them end
// (a stalled disk).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "tests/common/memory_handler.h"
#include "transport/shm_write.h"

namespace shelf::transport {
namespace {

// Fault injection: PinSsdKey stalls until Release(), then "reads" the
// block into the first 4 KiB of the segment and pins it as pin 7.
class StallingSsdHandler : public testing::MemoryHandler {
 public:
  StallingSsdHandler() : MemoryHandler(1 << 20, "key", "node") {}

  absl::StatusOr<Pinned> PinSsdKey(absl::string_view key, uint64_t size) override {
    MutexLock lock(&mu_);
    entered_ms_ = MonoMs();
    cv_.SignalAll();
    while (!released_) cv_.Wait(&mu_);
    std::memset(base(), 'x', 4096);
    return Pinned{0, 0, 4096, 7};
  }
  void Unpin(uint64_t pin) override {
    MutexLock lock(&mu_);
    unpinned_.push_back(pin);
    cv_.SignalAll();
  }
  // When the stalled read began (MonoMs); waits for one.
  uint64_t WaitEntered() {
    MutexLock lock(&mu_);
    while (entered_ms_ == 0) cv_.Wait(&mu_);
    return entered_ms_;
  }
  void Release() {
    MutexLock lock(&mu_);
    released_ = true;
    cv_.SignalAll();
  }
  std::vector<uint64_t> WaitUnpinned() {
    MutexLock lock(&mu_);
    while (unpinned_.empty()) cv_.Wait(&mu_);
    return unpinned_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  uint64_t entered_ms_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> unpinned_ ABSL_GUARDED_BY(mu_);
};

TEST(ShmReadDeadlineTest, ReaderStopsAtItsDeadlineAndTheStoreFreesTheRange) {
  StallingSsdHandler handler;
  ASSERT_TRUE(handler.ok());
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::thread server([&] { ServeShmWrites(fds[1], &handler); });
  constexpr uint64_t kBudgetMs = 200;
  {
    ShmWriter reader(fds[0]);  // no socket timeout: only the deadline ends the wait
    bool copied = false;
    absl::Status s =
        reader.ReadSsd("k", 0, "", MonoMs() + kBudgetMs, [&](uint32_t, uint64_t, uint64_t) {
          copied = true;
          return absl::OkStatus();
        });
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_FALSE(copied);
    // The stalled read ends well past the budget it was sent with; the
    // store side unpins it at once rather than when the connection closes.
    const uint64_t entered = handler.WaitEntered();
    while (MonoMs() <= entered + kBudgetMs) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    handler.Release();
    EXPECT_EQ(handler.WaitUnpinned(), std::vector<uint64_t>{7});
    // The connection is not used again: its replies no longer line up.
    s = reader.ReadSsd("k", 0, "", 0,
                       [](uint32_t, uint64_t, uint64_t) { return absl::OkStatus(); });
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
  server.join();
  close(fds[1]);
}

TEST(ShmReadDeadlineTest, ReadWithinItsDeadlineIsServed) {
  StallingSsdHandler handler;
  ASSERT_TRUE(handler.ok());
  handler.Release();
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::thread server([&] { ServeShmWrites(fds[1], &handler); });
  {
    ShmWriter reader(fds[0]);
    std::string got;
    absl::Status s = reader.ReadSsd("k", 4096, "", MonoMs() + 600000,
                                    [&](uint32_t segment, uint64_t offset, uint64_t length) {
                                      got.assign(handler.base() + offset, length);
                                      return absl::OkStatus();
                                    });
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(got, std::string(4096, 'x'));
    // Released by the reader after its copy.
    EXPECT_EQ(handler.WaitUnpinned(), std::vector<uint64_t>{7});
  }
  server.join();
  close(fds[1]);
}

}  // namespace
}  // namespace shelf::transport
