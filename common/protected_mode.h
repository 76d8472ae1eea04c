// Protected mode: a daemon that would listen on an address other machines
// can reach, with nothing to authenticate who connects, refuses to start
// unless told --insecure (as Redis' protected mode).
//
//   if (absl::Status s = CheckProtectedMode("shelf-master", {{"--listen", listen}},
//                                           !secret.empty() || !tls.ca.empty(), insecure,
//                                           "give --secret-file (and TLS)");
//       !s.ok()) { ...exit 2 with s.message()... }
#ifndef SHELF_COMMON_PROTECTED_MODE_H_
#define SHELF_COMMON_PROTECTED_MODE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shelf {

// Help text of every daemon's --insecure flag.
inline constexpr char kInsecureHelp[] =
    "listen on a non-loopback address with no credentials (protected mode off; trusted "
    "networks only)";

// True for 127.0.0.0/8, ::1 and "localhost"; false for a wildcard (0.0.0.0,
// ::, empty) and for any other address or host name.
bool IsLoopbackHost(absl::string_view host);
// The host part of "HOST:PORT" / "[V6]:PORT" (the text itself when there is
// no port); an empty listen address or a unix socket path counts as loopback.
bool IsLoopbackListen(absl::string_view listen);

// FAILED_PRECONDITION when one of `listens` (flag name, address) is not
// loopback, `has_credentials` is false and `insecure` is false; the message
// names the flag, the address and `how_to_secure`.
absl::Status CheckProtectedMode(const std::vector<std::pair<std::string, std::string>>& listens,
                                bool has_credentials, bool insecure,
                                absl::string_view how_to_secure);

}  // namespace shelf

#endif  // SHELF_COMMON_PROTECTED_MODE_H_
