#include "tools/bench/socket_peer.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace shelf::bench {

namespace {

// The baseline peer's 16-byte request: op (1 = send me, 2 = take these),
// blocks, block bytes.
struct PeerRequest {
  uint32_t op;
  uint32_t blocks;
  uint64_t block_bytes;
};
static_assert(sizeof(PeerRequest) == 16, "the request is 16 bytes on the wire");
constexpr uint32_t kPeerSend = 1;
constexpr uint32_t kPeerTake = 2;

// Serves baseline requests on `listen_fd` until killed. Runs in a forked
// child that has no other threads.
[[noreturn]] void RunBaselinePeer(int listen_fd, uint64_t block_bytes_max) {
  std::vector<char> buf(block_bytes_max, 7);
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    for (;;) {
      PeerRequest req;
      if (!ReadFull(fd, &req, sizeof(req)).ok()) break;
      if (req.block_bytes > block_bytes_max) break;
      bool ok = true;
      for (uint32_t i = 0; i < req.blocks && ok; ++i) {
        ok = req.op == kPeerSend ? WriteFull(fd, buf.data(), req.block_bytes).ok()
                                 : ReadFull(fd, buf.data(), req.block_bytes).ok();
      }
      char ack = 1;
      if (ok && req.op == kPeerTake) ok = WriteFull(fd, &ack, 1).ok();
      if (!ok) break;
    }
    close(fd);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<BaselinePeer>> BaselinePeer::Start(uint64_t block_bytes_max) {
  HostPort bound;
  absl::StatusOr<int> lfd = TcpListen(HostPort{"127.0.0.1", 0}, &bound, 4);
  if (!lfd.ok()) return lfd.status();
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(*lfd);
    return absl::ResourceExhaustedError("fork failed");
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    RunBaselinePeer(*lfd, block_bytes_max);
  }
  close(*lfd);
  return std::unique_ptr<BaselinePeer>(new BaselinePeer(pid, bound));
}

BaselinePeer::~BaselinePeer() {
  if (fd_ >= 0) close(fd_);
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

absl::Status BaselinePeer::Connect() {
  absl::StatusOr<int> fd = TcpConnect(address_, 5000);
  if (!fd.ok()) return fd.status();
  fd_ = *fd;
  return absl::OkStatus();
}

absl::Status BaselinePeer::Receive(const std::vector<char*>& dst, uint64_t size) {
  PeerRequest req{kPeerSend, static_cast<uint32_t>(dst.size()), size};
  if (absl::Status s = WriteFull(fd_, &req, sizeof(req)); !s.ok()) return s;
  for (char* d : dst) {
    if (absl::Status s = ReadFull(fd_, d, size); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status BaselinePeer::Send(const std::vector<char*>& src, uint64_t size) {
  PeerRequest req{kPeerTake, static_cast<uint32_t>(src.size()), size};
  if (absl::Status s = WriteFull(fd_, &req, sizeof(req)); !s.ok()) return s;
  for (char* d : src) {
    if (absl::Status s = WriteFull(fd_, d, size); !s.ok()) return s;
  }
  char ack = 0;
  return ReadFull(fd_, &ack, 1);
}

}  // namespace shelf::bench
