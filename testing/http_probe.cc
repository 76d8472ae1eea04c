#include "testing/http_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/net.h"

namespace shelf {

uint16_t FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
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
  if (status != nullptr && sp != std::string::npos) *status = std::atoi(resp.c_str() + sp + 1);
  size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

}  // namespace shelf
