#include "common/protected_mode.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shelf {

bool IsLoopbackHost(absl::string_view host) {
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (absl::AsciiStrToLower(h) == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
    return false;
  }
  return false;
}

bool IsLoopbackListen(absl::string_view listen) {
  if (listen.empty()) return true;
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "/")) return true;
  absl::string_view host = listen;
  if (absl::StartsWith(listen, "[")) {
    size_t end = listen.find(']');
    if (end == absl::string_view::npos) return false;
    host = listen.substr(0, end + 1);
  } else {
    size_t colon = listen.rfind(':');
    if (colon != absl::string_view::npos && listen.find(':') == colon) {
      host = listen.substr(0, colon);
    }
  }
  return IsLoopbackHost(host);
}

absl::Status CheckProtectedMode(const std::vector<std::pair<std::string, std::string>>& listens,
                                bool has_credentials, bool insecure,
                                absl::string_view how_to_secure) {
  if (has_credentials || insecure) return absl::OkStatus();
  for (const auto& [flag, address] : listens) {
    if (IsLoopbackListen(address)) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "protected mode: ", flag, " ", address,
        " is reachable from other machines but no credentials are configured, so anyone "
        "who can connect could read and write the cluster. Either ",
        how_to_secure,
        ", or listen on loopback (127.0.0.1), or pass --insecure to run open "
        "on a network you trust"));
  }
  return absl::OkStatus();
}

}  // namespace shelf
