#include "testing/http_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/net.h"

namespace shelf {

uint16_t FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  return bound ? ntohs(a.sin_port) : 0;
}

std::string HttpGet(uint16_t port, const std::string& path, int* status) {
  if (status != nullptr) *status = 0;
  absl::StatusOr<int> fd = TcpConnect(HostPort{"127.0.0.1", port}, 2000);
  if (!fd.ok()) return "";
  SetIoTimeoutMs(*fd, 5000);
  std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  WriteFull(*fd, req.data(), req.size()).IgnoreError();
  std::string resp;
  char buf[65536];
  ssize_t n;
  while ((n = read(*fd, buf, sizeof(buf))) > 0) resp.append(buf, n);
  close(*fd);
  size_t sp = resp.find(' ');
  if (status != nullptr && sp != std::string::npos &&
      !absl::SimpleAtoi(absl::string_view(resp).substr(sp + 1, 3), status)) {
    *status = 0;
  }
  size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

}  // namespace shelf
