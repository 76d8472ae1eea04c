#include "server/master/connection_cap.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "common/errno_text.h"
#include "common/log.h"

namespace shelf::master {
namespace {

constexpr char kSocketPrefix[] = "socket:[";

// The inode of a "socket:[123]" link target; 0 for anything else.
ino_t SocketInode(const char* target) {
  if (std::strncmp(target, kSocketPrefix, sizeof(kSocketPrefix) - 1) != 0) return 0;
  return static_cast<ino_t>(std::strtoull(target + sizeof(kSocketPrefix) - 1, nullptr, 10));
}

// The port of an IPv4 or IPv6 address; 0 for any other family.
uint16_t PortOf(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

// The address without its port (an IPv4-mapped IPv6 address as IPv4).
std::string AddressOf(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, text, sizeof(text));
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof(text));
    } else {
      inet_ntop(AF_INET6, &a, text, sizeof(text));
    }
  }
  return text;
}

prom::Family<prom::Counter>& RefusedFamily(prom::Exposition* exposition) {
  return prom::AddCounter(exposition->registry(), "shelf_master_connections_refused_total",
                          "gRPC connections shut down at once because of --max-connections "
                          "(rule max_connections) or --max-connections-per-source "
                          "(rule source_share)");
}

}  // namespace

std::unique_ptr<ConnectionCap> ConnectionCap::Start(const ConnectionCapOptions& options,
                                                    prom::Exposition* exposition) {
  if (options.max_connections <= 0) return nullptr;
  std::unique_ptr<ConnectionCap> cap(new ConnectionCap(options, exposition));
  cap->thread_ = std::thread([c = cap.get()] { c->Run(); });
  return cap;
}

ConnectionCap::ConnectionCap(const ConnectionCapOptions& options, prom::Exposition* exposition)
    : options_([&] {
        ConnectionCapOptions o = options;
        if (o.max_per_source <= 0) o.max_per_source = std::max(1, o.max_connections / 2);
        return o;
      }()),
      refused_max_(prom::Child(RefusedFamily(exposition), {{"rule", "max_connections"}})),
      refused_share_(prom::Child(RefusedFamily(exposition), {{"rule", "source_share"}})),
      gauge_(exposition->AddCallbackGauge("shelf_master_connections",
                                          "gRPC connections counted against --max-connections",
                                          [this] { return static_cast<double>(connections()); })) {}

ConnectionCap::~ConnectionCap() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  gauge_.Reset();
}

void ConnectionCap::Run() {
  MutexLock lock(&mu_);
  while (!stop_) {
    mu_.Unlock();
    Pass();
    mu_.Lock();
    if (stop_) break;
    cv_.WaitFor(&mu_, std::chrono::milliseconds(options_.interval_ms));
  }
}

void ConnectionCap::Pass() {
  ++pass_;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) {
    // Without /proc there is nothing to cap: said once, then quiet.
    if (pass_ == 1) {
      SHELF_LOG(WARNING) << "connection cap off: cannot list /proc/self/fd: " << ErrnoText(errno);
    }
    return;
  }
  const int dir_fd = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == dir_fd) continue;  // ".", ".."
    char target[64];
    const ssize_t n = ::readlinkat(dir_fd, entry->d_name, target, sizeof(target) - 1);
    if (n <= 0) continue;  // closed since the listing
    target[n] = '\0';
    const ino_t ino = SocketInode(target);
    if (ino == 0) continue;
    auto it = seen_.find(ino);
    if (it != seen_.end()) {
      it->second.pass = pass_;
    } else {
      Classify(fd, ino);
    }
  }
  ::closedir(dir);
  // Sockets gone since the last pass give their place back.
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (it->second.pass == pass_) {
      ++it;
      continue;
    }
    if (it->second.counted) {
      admitted_.fetch_sub(1, std::memory_order_relaxed);
      if (--per_source_[it->second.source] == 0) per_source_.erase(it->second.source);
    }
    seen_.erase(it++);
  }
}

void ConnectionCap::Classify(int fd, ino_t ino) {
  // A duplicate pins the socket the rest looks at: `fd` itself may be
  // closed and its number reused by gRPC meanwhile.
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return;  // closed since the listing: not seen, looked at again
  Seen seen;
  seen.pass = pass_;
  struct stat st;
  int listening = 0;
  socklen_t len = sizeof(listening);
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (::fstat(dup, &st) != 0 || st.st_ino != ino) {
    ::close(dup);  // another socket took the number: the next pass sees it
    return;
  }
  const bool connection =
      ::getsockopt(dup, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening == 0 &&
      ::getsockname(dup, reinterpret_cast<sockaddr*>(&local), &local_len) == 0 &&
      PortOf(local) == options_.port &&
      ::getpeername(dup, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0;
  if (connection) {
    const std::string source = AddressOf(peer);
    int& from_source = per_source_[source];
    if (admitted_.load(std::memory_order_relaxed) >= options_.max_connections) {
      ::shutdown(dup, SHUT_RDWR);
      refused_max_.Increment();
    } else if (from_source >= options_.max_per_source) {
      ::shutdown(dup, SHUT_RDWR);
      refused_share_.Increment();
    } else {
      ++from_source;
      admitted_.fetch_add(1, std::memory_order_relaxed);
      seen.counted = true;
      seen.source = source;
    }
    if (from_source == 0) per_source_.erase(source);
  }
  ::close(dup);
  seen_.emplace(ino, std::move(seen));
}

}  // namespace shelf::master
