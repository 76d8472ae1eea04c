// The operational HTTP endpoint every daemon serves on request: /metrics
// (the process-wide Prometheus exposition) and /health (the daemon's own
// body), one definition for shelf-master, shelf-store and shelf-resp.
//
//   auto http = StartOpsEndpoint("--metrics-listen", metrics_listen,
//                                [](const HttpRequest&) { return HttpResponse{...}; });
//   if (!http.ok()) {
//     std::fprintf(stderr, "shelf-x: %s\n", std::string(http.status().message()).c_str());
//     return 1;
//   }
//
// /health is unauthenticated: a body says only what a probe needs
// (docs/security.md, "Reflection and health").
//
// Thread-safety: `health` runs on the server's worker threads (see
// common/http_server.h), so it must be safe to call concurrently.
#ifndef SHELF_COMMON_OPS_ENDPOINT_H_
#define SHELF_COMMON_OPS_ENDPOINT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/http_server.h"

namespace shelf {

// Serves /metrics and /health on `listen` (HOST:PORT; port 0 picks one) and
// logs the bound address ("metrics served", listen=...). On failure, the
// HttpServer::Start error with its code, the message prefixed by `flag`
// (the option that named `listen`, e.g. "--metrics-listen: ...").
absl::StatusOr<std::unique_ptr<HttpServer>> StartOpsEndpoint(absl::string_view flag,
                                                             absl::string_view listen,
                                                             HttpHandler health);

}  // namespace shelf

#endif  // SHELF_COMMON_OPS_ENDPOINT_H_
