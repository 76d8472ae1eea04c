#include "tools/bench/socket_peer.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
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

// Serves one connection's requests until it closes.
void ServeConnection(int fd, std::vector<char>* buf) {
  for (;;) {
    PeerRequest req;
    if (!ReadFull(fd, &req, sizeof(req)).ok()) return;
    if (req.block_bytes > buf->size()) return;
    bool ok = true;
    for (uint32_t i = 0; i < req.blocks && ok; ++i) {
      ok = req.op == kPeerSend ? WriteFull(fd, buf->data(), req.block_bytes).ok()
                               : ReadFull(fd, buf->data(), req.block_bytes).ok();
    }
    char ack = 1;
    if (ok && req.op == kPeerTake) ok = WriteFull(fd, &ack, 1).ok();
    if (!ok) return;
  }
}

// Serves baseline connections on `listen_fd` until killed, each in a
// process of its own, so that several connections move bytes at once (as
// the engine's stripes do). Runs in a forked child that has no other
// threads.
[[noreturn]] void RunBaselinePeer(int listen_fd, uint64_t block_bytes_max) {
  signal(SIGCHLD, SIG_IGN);  // connection processes are reaped by the kernel
  const pid_t peer = getpid();
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != peer) _exit(1);
      close(listen_fd);
      std::vector<char> buf(block_bytes_max, 7);
      ServeConnection(fd, &buf);
      _exit(0);
    }
    close(fd);  // the connection's process holds it (or, if fork failed, nobody)
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
  for (int fd : fds_) close(fd);
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

absl::Status BaselinePeer::Connect(int connections) {
  for (int i = 0; i < connections; ++i) {
    absl::StatusOr<int> fd = TcpConnect(address_, 5000);
    if (!fd.ok()) return fd.status();
    fds_.push_back(*fd);
  }
  return absl::OkStatus();
}

namespace {

// One connection's share of a batch: its stripe [begin, begin + length) of
// each block.
absl::Status ReceiveOn(int fd, const std::vector<char*>& dst, uint64_t begin, uint64_t length) {
  PeerRequest req{kPeerSend, static_cast<uint32_t>(dst.size()), length};
  if (absl::Status s = WriteFull(fd, &req, sizeof(req)); !s.ok()) return s;
  for (char* d : dst) {
    if (absl::Status s = ReadFull(fd, d + begin, length); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SendOn(int fd, const std::vector<char*>& src, uint64_t begin, uint64_t length) {
  PeerRequest req{kPeerTake, static_cast<uint32_t>(src.size()), length};
  if (absl::Status s = WriteFull(fd, &req, sizeof(req)); !s.ok()) return s;
  for (char* d : src) {
    if (absl::Status s = WriteFull(fd, d + begin, length); !s.ok()) return s;
  }
  char ack = 0;
  return ReadFull(fd, &ack, 1);
}

}  // namespace

absl::Status BaselinePeer::Striped(bool receive, const std::vector<char*>& blocks, uint64_t size,
                                   int connections) {
  const int n = std::clamp<int>(connections, 1, static_cast<int>(fds_.size()));
  std::vector<absl::Status> results(n);
  auto move = [&](int k) {
    const uint64_t begin = size * k / n, end = size * (k + 1) / n;
    results[k] = receive ? ReceiveOn(fds_[k], blocks, begin, end - begin)
                         : SendOn(fds_[k], blocks, begin, end - begin);
  };
  std::vector<std::thread> threads;
  for (int k = 1; k < n; ++k) threads.emplace_back(move, k);
  move(0);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace shelf::bench
