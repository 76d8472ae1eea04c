#include "common/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/log.h"
#include "common/secret_file.h"

namespace shelf {

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text) {
  HostPort out;
  size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("expected HOST:PORT, got '", text, "'"));
  }
  absl::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in '", text, "'"));
  }
  out.host = std::string(host);
  out.port = static_cast<uint16_t>(port);
  return out;
}

namespace {

absl::Status Errno(const char* what, const std::string& peer) {
  int e = errno;
  std::string msg = absl::StrCat(what, " ", peer, ": ", ErrnoText(e));
  if (e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT) return absl::DeadlineExceededError(msg);
  return absl::UnavailableError(msg);
}

absl::StatusOr<struct addrinfo*> Resolve(const HostPort& addr, bool passive) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  struct addrinfo* res = nullptr;
  std::string port = std::to_string(addr.port);
  int rc = getaddrinfo(addr.host.empty() ? nullptr : addr.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", addr.ToString(), ": ", gai_strerror(rc)));
  }
  return res;
}

void TuneSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

}  // namespace

absl::StatusOr<int> TcpListen(const HostPort& addr, HostPort* bound, int backlog) {
  auto res = Resolve(addr, true);
  if (!res.ok()) return res.status();
  absl::Status last = absl::UnavailableError("no address");
  for (struct addrinfo* ai = *res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
      last = Errno("cannot listen on", addr.ToString());
      close(fd);
      continue;
    }
    freeaddrinfo(*res);
    if (bound != nullptr) {
      struct sockaddr_storage ss;
      socklen_t len = sizeof(ss);
      getsockname(fd, reinterpret_cast<struct sockaddr*>(&ss), &len);
      char host[INET6_ADDRSTRLEN] = {0};
      uint16_t port = 0;
      if (ss.ss_family == AF_INET) {
        auto* sin = reinterpret_cast<struct sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
        port = ntohs(sin->sin_port);
      } else {
        auto* sin6 = reinterpret_cast<struct sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
        port = ntohs(sin6->sin6_port);
      }
      bound->host = addr.host.empty() ? host : addr.host;
      bound->port = port;
    }
    return fd;
  }
  freeaddrinfo(*res);
  return last;
}

absl::StatusOr<int> TcpConnect(const HostPort& addr, uint64_t timeout_ms) {
  auto res = Resolve(addr, false);
  if (!res.ok()) return res.status();
  absl::Status last = absl::UnavailableError(absl::StrCat("cannot connect to ", addr.ToString()));
  for (struct addrinfo* ai = *res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    TuneSocket(fd);
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};
      rc = poll(&p, 1, static_cast<int>(timeout_ms == 0 ? -1 : timeout_ms));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      } else {
        if (rc == 0) errno = ETIMEDOUT;
        rc = -1;
      }
    }
    if (rc != 0) {
      last = Errno("cannot connect to", addr.ToString());
      close(fd);
      continue;
    }
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    freeaddrinfo(*res);
    return fd;
  }
  freeaddrinfo(*res);
  return last;
}

void PauseAfterAcceptError(int err, const char* listener) {
  static std::atomic<uint64_t> logged_ms{0};
  const uint64_t now = MonoMs();
  uint64_t last = logged_ms.load();
  if ((last == 0 || now - last >= 10000) && logged_ms.compare_exchange_strong(last, now)) {
    SHELF_LOG(WARNING) << "accept failed; accepting again"
                       << (err == EMFILE || err == ENFILE ? " (out of file descriptors)" : "")
                       << Kv("listener", listener) << Kv("error", ErrnoText(err));
  }
  usleep(10000);
}

void SetIoTimeoutMs(int fd, uint64_t timeout_ms) {
  struct timeval tv;
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

namespace {

// Advances `iov` past `n` bytes. Returns the new count of non-empty entries.
void Advance(struct iovec*& iov, int& iovcnt, size_t n) {
  while (n > 0 && iovcnt > 0) {
    if (n >= iov->iov_len) {
      n -= iov->iov_len;
      ++iov;
      --iovcnt;
    } else {
      iov->iov_base = static_cast<char*>(iov->iov_base) + n;
      iov->iov_len -= n;
      n = 0;
    }
  }
  while (iovcnt > 0 && iov->iov_len == 0) {
    ++iov;
    --iovcnt;
  }
}

}  // namespace

absl::Status WriteFullv(int fd, struct iovec* iov, int iovcnt) {
  Advance(iov, iovcnt, 0);
  while (iovcnt > 0) {
    struct msghdr msg;
    std::memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt > IOV_MAX ? IOV_MAX : iovcnt;
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write to", "peer");
    }
    Advance(iov, iovcnt, static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status ReadFullv(int fd, struct iovec* iov, int iovcnt) {
  Advance(iov, iovcnt, 0);
  while (iovcnt > 0) {
    ssize_t n = readv(fd, iov, iovcnt > IOV_MAX ? IOV_MAX : iovcnt);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("read from", "peer");
    }
    if (n == 0) return absl::UnavailableError("connection closed by peer");
    Advance(iov, iovcnt, static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, const void* data, size_t size) {
  struct iovec iov = {const_cast<void*>(data), size};
  return WriteFullv(fd, &iov, 1);
}

absl::Status ReadFull(int fd, void* data, size_t size) {
  struct iovec iov = {data, size};
  return ReadFullv(fd, &iov, 1);
}

const std::string& HostId() {
  static const std::string id = [] {
    std::string boot;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, boot);
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    return absl::StrCat(host, "/", absl::StripAsciiWhitespace(boot));
  }();
  return id;
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadPrivateFile(path, "secret file");
  if (!text.ok()) return text.status();
  std::string secret(absl::StripAsciiWhitespace(*text));
  if (secret.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat("secret file '", path, "' holds ", secret.size(),
                                                   " bytes; at least 16 are required"));
  }
  return secret;
}

}  // namespace shelf
