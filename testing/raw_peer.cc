#include "testing/raw_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace shelf {

int ConnectFrom(int source, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl((127u << 24) | static_cast<uint32_t>(source));
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  remote.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool PeerClosed(int fd) {
  char buf[256];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

double MetricValue(const std::string& metrics, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, series) || line.size() <= series.size() ||
        line[series.size()] != ' ') {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
  }
  return 0;
}

}  // namespace shelf
