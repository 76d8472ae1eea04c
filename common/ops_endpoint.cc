#include "common/ops_endpoint.h"

#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/prom.h"

namespace shelf {

absl::StatusOr<std::unique_ptr<HttpServer>> StartOpsEndpoint(absl::string_view flag,
                                                             absl::string_view listen,
                                                             HttpHandler health) {
  std::map<std::string, HttpHandler> handlers;
  handlers["/metrics"] = [](const HttpRequest&) {
    return HttpResponse{200, prom::Exposition::kContentType, DefaultExposition().Render()};
  };
  handlers["/health"] = std::move(health);
  absl::StatusOr<std::unique_ptr<HttpServer>> started =
      HttpServer::Start(listen, std::move(handlers));
  if (!started.ok()) {
    return absl::Status(started.status().code(),
                        absl::StrCat(flag, ": ", started.status().message()));
  }
  SHELF_LOG(INFO) << "metrics served" << Kv("listen", (*started)->bound().ToString());
  return started;
}

}  // namespace shelf
