// Read grants as the master mints them (transport::wire::MintReadGrant, written in
// place for every replica of every lookup hit) are exactly EncodeReadGrant
// of ReadGrantMac, and verify only for their own key, store incarnation,
// range and time. And descriptors passed with the shared-memory requests
// (fd_passing.h): one per message, extras closed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/hmac.h"
#include "transport/fd_passing.h"
#include "transport/wire.h"

namespace shelf::transport::wire {
namespace {

constexpr char kGrantKey[] = "0123456789abcdef0123456789abcdef";

ReadGrant Fields() {
  ReadGrant g;
  g.segment_id = 3;
  g.offset = 1 << 20;
  g.length = 64 << 10;
  g.expires_unix_ms = 1'800'000'000'000;
  return g;
}

TEST(ReadGrantTest, AMintedGrantIsTheEncodedGrantWithItsMac) {
  const HmacKey key(kGrantKey);
  for (const std::string& block_key : {std::string("k"), std::string(17, 'c'), std::string(40, 'x'),
                                       std::string(kKeyBytesMax, 'z')}) {
    ReadGrant g = Fields();
    char minted[kReadGrantBytes];
    MintReadGrant(key, 9, block_key, g, minted);
    g.mac = ReadGrantMac(key, "node", 9, block_key, g);
    EXPECT_EQ(std::string(minted, sizeof(minted)), EncodeReadGrant(g)) << block_key.size();
    EXPECT_EQ(g.mac, ReadGrantMac(kGrantKey, "node", 9, block_key, g));

    // decoded_key views the credential: it must outlive the checks.
    const std::string credential = std::string(minted, sizeof(minted)) + block_key;
    absl::string_view decoded_key;
    absl::StatusOr<ReadGrant> back = DecodeReadCredential(credential, &decoded_key);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(decoded_key, block_key);
    const uint64_t now = g.expires_unix_ms - 1;
    EXPECT_TRUE(
        VerifyReadGrant(key, "node", 9, block_key, *back, true, 3, g.offset, g.length, now).ok());
    // Another key, incarnation, store key, range or a later time: refused.
    EXPECT_FALSE(VerifyReadGrant(key, "node", 9, block_key + "!", *back, false, 0, 0, 0, now).ok());
    EXPECT_FALSE(VerifyReadGrant(key, "node", 10, block_key, *back, false, 0, 0, 0, now).ok());
    EXPECT_FALSE(VerifyReadGrant(HmacKey("another store's key"), "node", 9, block_key, *back, false,
                                 0, 0, 0, now)
                     .ok());
    EXPECT_FALSE(
        VerifyReadGrant(key, "node", 9, block_key, *back, true, 4, g.offset, g.length, now).ok());
    EXPECT_FALSE(
        VerifyReadGrant(key, "node", 9, block_key, *back, true, 3, g.offset + 4096, g.length, now)
            .ok());
    EXPECT_FALSE(
        VerifyReadGrant(key, "node", 9, block_key, *back, false, 0, 0, 0, g.expires_unix_ms + 1)
            .ok());
    // Any changed field breaks the MAC.
    ReadGrant longer = *back;
    longer.length += 1;
    EXPECT_FALSE(VerifyReadGrant(key, "node", 9, block_key, longer, false, 0, 0, 0, now).ok());
    ReadGrant later = *back;
    later.expires_unix_ms += 1;
    EXPECT_FALSE(VerifyReadGrant(key, "node", 9, block_key, later, false, 0, 0, 0, now).ok());
  }
}

// An SSD replica's grant (kReadGrantNoRange) verifies for its key alone
// (READ_KEY), never for a range, whatever its offset and length.
TEST(ReadGrantTest, AnSsdReplicasGrantVerifiesForNoRange) {
  const HmacKey key(kGrantKey);
  ReadGrant g = Fields();
  g.segment_id = kReadGrantNoRange;
  g.offset = 0;
  char minted[kReadGrantBytes];
  MintReadGrant(key, 9, "k", g, minted);
  const std::string credential = std::string(minted, sizeof(minted)) + "k";
  absl::string_view decoded_key;
  absl::StatusOr<ReadGrant> back = DecodeReadCredential(credential, &decoded_key);
  ASSERT_TRUE(back.ok());
  const uint64_t now = g.expires_unix_ms - 1;
  EXPECT_TRUE(VerifyReadGrant(key, "node", 9, "k", *back, false, 0, 0, 0, now).ok());
  for (uint32_t segment : {0u, kReadGrantNoRange}) {
    EXPECT_EQ(VerifyReadGrant(key, "node", 9, "k", *back, true, segment, 0, g.length, now).code(),
              absl::StatusCode::kPermissionDenied);
  }
}

// A message carrying more than one descriptor is refused, and every
// descriptor that arrived is closed: none leaks into the receiver.
TEST(FdPassingTest, ExtraDescriptorsAreClosed) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  auto open_fds = [] {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += (void(e), 1);
    return n;
  };
  const size_t before = open_fds();
  for (int round = 0; round < 20; ++round) {
    int a = open("/dev/null", O_RDONLY), b = open("/dev/null", O_RDONLY);
    char byte = 'x';
    struct iovec iov = {&byte, 1};
    struct msghdr msg;
    std::memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(struct cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    std::memcpy(CMSG_DATA(c), &a, sizeof(int));
    std::memcpy(CMSG_DATA(c) + sizeof(int), &b, sizeof(int));
    ASSERT_EQ(sendmsg(sv[0], &msg, 0), 1);
    close(a);
    close(b);
    char got = 0;
    int fd = 99;
    EXPECT_EQ(RecvWithFd(sv[1], &got, 1, &fd), -1);
    EXPECT_EQ(errno, EMSGSIZE);
    EXPECT_EQ(fd, -1);
  }
  EXPECT_EQ(open_fds(), before);
  // One descriptor still comes through.
  int a = open("/dev/null", O_RDONLY);
  char byte = 'y';
  struct iovec iov = {&byte, 1};
  ASSERT_EQ(SendWithFd(sv[0], &iov, 1, a), 1);
  close(a);
  char got = 0;
  int fd = -1;
  EXPECT_EQ(RecvWithFd(sv[1], &got, 1, &fd), 1);
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace shelf::transport::wire
