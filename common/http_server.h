// A small HTTP/1.1 server for operational endpoints (`/metrics`, `/health`),
// on civetweb. Not for the data plane: two worker threads, one request per
// connection, whole bodies built in memory.
//
//   std::map<std::string, HttpHandler> handlers;
//   handlers["/metrics"] = [](const HttpRequest&) {
//     return HttpResponse{200, prom::Exposition::kContentType, DefaultExposition().Render()};
//   };
//   handlers["/health"] = [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok\n"};
//   }; SHELF_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> http,
//                          HttpServer::Start("0.0.0.0:9100", std::move(handlers)));
//   SHELF_LOG(INFO) << "serving metrics" << Kv("addr", http->bound().ToString());
//
// Thread-safety: handlers run on the server's worker threads, up to
// Options::threads at once, so a handler must be safe to call concurrently
// with itself and with the rest of the process. The HttpServer object itself
// is immutable after Start; bound() may be called from any thread.
#ifndef SHELF_COMMON_HTTP_SERVER_H_
#define SHELF_COMMON_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/net.h"

struct mg_connection;
struct mg_context;

namespace shelf {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"; other methods never reach a handler
  std::string path;    // URL-decoded, without the query ("/metrics")
  std::string query;   // after '?', still encoded; empty when none
};

struct HttpResponse {
  int status = 200;  // 200..599; anything else is sent as 500
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;  // not sent for HEAD (Content-Length still is)
};

using HttpHandler = std::function<HttpResponse(const HttpRequest& request)>;

class HttpServer {
 public:
  struct Options {
    int threads = 2;                      // worker threads, 1..16
    uint64_t request_timeout_ms = 10000;  // per request read/write
  };

  // Listens on `listen` ("HOST:PORT" or "[V6]:PORT"; HOST may be a name,
  // resolved to its first address; port 0 picks a free one) and serves
  // `handlers`, keyed by exact path. A path with no handler answers 404, a
  // method other than GET or HEAD answers 405. INVALID_ARGUMENT on a bad
  // address or options, UNAVAILABLE when the address cannot be bound.
  //
  // Side effect (civetweb's): SIGPIPE is ignored process-wide from then on;
  // the SIGCHLD disposition is left as it was.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      absl::string_view listen, std::map<std::string, HttpHandler> handlers, Options options);
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      absl::string_view listen, std::map<std::string, HttpHandler> handlers) {
    return Start(listen, std::move(handlers), Options());
  }

  // Stops listening and waits for running handlers to return.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The address actually listened on: the resolved numeric host and the
  // real port (never 0).
  const HostPort& bound() const { return bound_; }

 private:
  explicit HttpServer(std::map<std::string, HttpHandler> handlers);
  static int OnRequest(struct mg_connection* conn);
  int Serve(struct mg_connection* conn) const;

  // Constant after Start.
  const std::map<std::string, HttpHandler> handlers_;
  HostPort bound_;
  struct mg_context* ctx_ = nullptr;
};

}  // namespace shelf

#endif  // SHELF_COMMON_HTTP_SERVER_H_
