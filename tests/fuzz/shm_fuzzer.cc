// Fuzzes both sides of the shared-memory handshake (transport/shm.h) over
// a real Unix socket:
//   - client side: a fake store answers ShmAttachments::Get with fuzzed
//     hello bytes, a fuzzed reply, and optionally a memfd of a fuzzed size;
//   - store side: a real ShmServer receives a fuzzed MAC (possibly short),
//     or the one ShmMac (transport/shm_handshake.h) computes.
// Properties, beyond "does not crash or hang": the store hands out its
// segment only for the right MAC; a client mapping is never larger than
// the descriptor it maps (touching past a memfd's end raises SIGBUS in the
// engine process), and is only ever of a descriptor sealed against resizing.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/base/internal/endian.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/net.h"
#include "tests/fuzz/fuzz_input.h"
#include "transport/fd_passing.h"
#include "transport/shm.h"
#include "transport/shm_handshake.h"

namespace shelf {
namespace {

constexpr char kSecret[] = "shm-fuzz-secret-0123456789";

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "shm_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

const std::string& Dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/shelf-shm-fuzz-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    return std::string(tmpl);
  }();
  return dir;
}

int Listen(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 4) != 0) {
    std::abort();
  }
  return fd;
}

// A fake store: sends `hello`, reads what the client sends (bounded), then
// `reply` with a memfd of `fd_size` bytes when `attach`, and closes.
void FuzzClientSide(fuzz::FuzzInput& in) {
  const bool secret = in.Bool();
  const bool attach = in.Bool();
  const uint64_t fd_size = in.Pick(4) == 0 ? in.U32() % (1 << 20) : 4096 * (in.U8() % 4);
  std::string hello = in.Bytes(in.Pick(3) == 0 ? in.Pick(24) : transport::kShmHelloBytes);
  std::string reply = in.Bytes(in.Pick(3) == 0 ? in.Pick(24) : 16);
  // Last, so that older corpus entries keep their meaning (they seal: the
  // client maps only a descriptor sealed against resizing and writes).
  const bool seal = !in.Bool();
  const std::string path = Dir() + "/client.sock";
  int listener = Listen(path);
  std::thread store([&] {
    int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    SetIoTimeoutMs(fd, 2000);
    WriteFull(fd, hello.data(), hello.size()).IgnoreError();
    if (hello.size() == transport::kShmHelloBytes) {
      char mac[kMacBytes];
      ReadFull(fd, mac, sizeof(mac)).IgnoreError();
    }
    struct iovec iov = {reply.data(), reply.size()};
    int memfd = -1;
    if (attach) {
      memfd = memfd_create("shm-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      if (memfd < 0 || ftruncate(memfd, static_cast<off_t>(fd_size)) != 0) std::abort();
      if (seal &&
          fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) != 0) {
        std::abort();
      }
    }
    transport::SendWithFd(fd, &iov, 1, memfd);
    if (memfd >= 0) close(memfd);
    close(fd);
  });
  transport::ShmAttachments attachments(secret ? kSecret : "");
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = attachments.Get(path);
  store.join();
  close(listener);
  unlink(path.c_str());
  if (!m.ok()) return;
  Check(reply.size() == 16 && absl::little_endian::Load32(reply.data()) == 0,
        "a mapping from a refusal");
  if (absl::little_endian::Load32(reply.data() + 4) == transport::kShmArenas) {
    // A store of tenant arenas hands over no descriptor at the handshake:
    // each arena is asked for later, with a read grant.
    Check(!attach, "a mapping of arenas from a reply that carried a descriptor");
    Check((*m)->arenas && (*m)->base == nullptr, "a mapping of arenas that maps memory at once");
    Check((*m)->size > 0, "a mapping of arenas of 0 bytes");
    return;
  }
  Check(attach, "a mapping without a descriptor");
  Check(seal, "a mapping of a descriptor that can be resized or written through");
  // The engine memcpy's anywhere inside [base, base + size): that must be
  // backed by the descriptor.
  Check((*m)->size <= fd_size, "a client mapping is never larger than its descriptor");
}

// A real store side: fuzzed bytes as the client's MAC.
void FuzzStoreSide(fuzz::FuzzInput& in) {
  const bool secret = in.Bool();
  const bool sign = in.Bool();
  std::string mac = in.Bytes(in.Pick(3) == 0 ? in.Pick(40) : kMacBytes);
  const std::string path = Dir() + "/store.sock";
  int memfd = memfd_create("shm-fuzz-store", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0 || ftruncate(memfd, 1 << 16) != 0) std::abort();
  if (fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) !=
      0)
    std::abort();
  auto server = transport::ShmServer::Start(path, memfd, 7, 1 << 16, secret ? kSecret : "");
  Check(server.ok(), "ShmServer starts");
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m;
  {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr;
    std::memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
    SetIoTimeoutMs(fd, 3000);
    char hello[transport::kShmHelloBytes];
    Check(ReadFull(fd, hello, sizeof(hello)).ok(), "the store says hello");
    Check(absl::little_endian::Load32(hello) == transport::kShmMagic, "hello magic");
    // The MAC the product's client side would send.
    const std::string right_mac =
        transport::ShmMac(kSecret, absl::string_view(hello + 4, transport::kShmNonceBytes));
    if (sign && secret) mac = right_mac;
    WriteFull(fd, mac.data(), mac.size()).IgnoreError();
    if (mac.size() < kMacBytes) shutdown(fd, SHUT_WR);
    char reply[16];
    int got_fd = -1;
    ssize_t n = transport::RecvWithFd(fd, reply, sizeof(reply), &got_fd);
    if (mac.size() < kMacBytes) {
      Check(n <= 0 && got_fd < 0, "a short MAC gets nothing");
    } else if (n == 16) {
      bool granted = absl::little_endian::Load32(reply) == 0;
      // Without a secret any kMacBytes bytes pass; with one, only the right MAC.
      bool correct = !secret || mac == right_mac;
      Check(granted == correct, "the segment is handed out only for the right MAC");
      Check(granted == (got_fd >= 0), "a descriptor comes only with OK");
    }
    if (got_fd >= 0) close(got_fd);
    close(fd);
  }
  server->reset();
  close(memfd);
}

}  // namespace
}  // namespace shelf

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    shelf::SetLogLevel(shelf::LogLevel::kError);  // every wrong MAC logs a warning
    return true;
  }();
  (void)quiet;
  shelf::fuzz::FuzzInput in(data, size);
  if (in.Bool()) {
    shelf::FuzzStoreSide(in);
  } else {
    shelf::FuzzClientSide(in);
  }
  return 0;
}
