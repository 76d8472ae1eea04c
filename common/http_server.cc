#include "common/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace shelf {
namespace {

constexpr int kThreadsMax = 16;
constexpr uint64_t kPokeTimeoutMs = 100;
constexpr int kPokeIntervalMs = 10;

// civetweb wants mg_init_library once before any server starts; it is not
// thread-safe itself.
void InitCivetwebOnce() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

// Resolves `host` to one numeric address; `v6` tells the family.
absl::StatusOr<std::string> NumericHost(const std::string& host, bool* v6) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  struct addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  char text[INET6_ADDRSTRLEN] = {0};
  if (res->ai_family == AF_INET6) {
    auto* sin6 = reinterpret_cast<struct sockaddr_in6*>(res->ai_addr);
    inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
    *v6 = true;
  } else {
    auto* sin = reinterpret_cast<struct sockaddr_in*>(res->ai_addr);
    inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
    *v6 = false;
  }
  freeaddrinfo(res);
  return std::string(text);
}

int LogMessage(const struct mg_connection*, const char* message) {
  SHELF_LOG(WARNING) << "http: " << message;
  return 1;  // handled: civetweb prints nothing itself
}

void Send(struct mg_connection* conn, int status, absl::string_view content_type,
          absl::string_view body, bool head, absl::string_view extra_headers) {
  const char* reason = mg_get_response_code_text(conn, status);
  std::string header =
      absl::StrCat("HTTP/1.1 ", status, " ", reason == nullptr ? "" : reason,
                   "\r\nContent-Type: ", content_type, "\r\nContent-Length: ", body.size(),
                   "\r\nCache-Control: no-store\r\nConnection: close\r\n", extra_headers, "\r\n");
  // A short write means the peer went away; nothing to do about it.
  if (mg_write(conn, header.data(), header.size()) <= 0) return;
  if (!head && !body.empty()) mg_write(conn, body.data(), body.size());
}

}  // namespace

HttpServer::HttpServer(std::map<std::string, HttpHandler> handlers)
    : handlers_(std::move(handlers)) {}

HttpServer::~HttpServer() {
  if (ctx_ == nullptr) return;
  // civetweb's accept loop notices the stop flag only when poll() returns,
  // which without traffic takes its whole 2 s quantum. Connecting to the
  // listener wakes it, so shutdown takes milliseconds; keep poking until
  // mg_stop returns, since the flag may be set after the first poke.
  HostPort self = bound_;
  if (self.host == "0.0.0.0") self.host = "127.0.0.1";
  if (self.host == "::") self.host = "::1";
  std::atomic<bool> stopped{false};
  std::thread poker([&stopped, self] {
    while (!stopped.load()) {
      absl::StatusOr<int> fd = TcpConnect(self, kPokeTimeoutMs);
      if (fd.ok()) close(*fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(kPokeIntervalMs));
    }
  });
  mg_stop(ctx_);
  stopped.store(true);
  poker.join();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    absl::string_view listen, std::map<std::string, HttpHandler> handlers, Options options) {
  if (options.threads < 1 || options.threads > kThreadsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: threads must be 1..", kThreadsMax, ", got ", options.threads));
  }
  for (const auto& [path, handler] : handlers) {
    if (path.empty() || path[0] != '/' || !handler) {
      return absl::InvalidArgumentError(absl::StrCat("http: bad handler path '", path, "'"));
    }
  }
  absl::StatusOr<HostPort> addr = ParseHostPort(listen);
  if (!addr.ok()) return addr.status();
  bool v6 = false;
  absl::StatusOr<std::string> host = NumericHost(addr->host, &v6);
  if (!host.ok()) return host.status();
  std::string ports =
      v6 ? absl::StrCat("[", *host, "]:", addr->port) : absl::StrCat(*host, ":", addr->port);
  std::string threads = absl::StrCat(options.threads);
  std::string timeout = absl::StrCat(options.request_timeout_ms);
  const char* config[] = {
      "listening_ports", ports.c_str(),       "num_threads", threads.c_str(), "request_timeout_ms",
      timeout.c_str(),   "enable_keep_alive", "no",          nullptr};

  struct mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.begin_request = &HttpServer::OnRequest;
  callbacks.log_message = &LogMessage;

  std::unique_ptr<HttpServer> server(new HttpServer(std::move(handlers)));
  InitCivetwebOnce();
  char error_text[256] = {0};
  unsigned error_code = 0;
  struct mg_error_data error;
  std::memset(&error, 0, sizeof(error));
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  struct mg_init_data init;
  std::memset(&init, 0, sizeof(init));
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = config;

  // civetweb may set SIGCHLD to SIG_IGN, which would make a parent's
  // waitpid() fail; keep whatever the process had.
  struct sigaction old_chld;
  sigaction(SIGCHLD, nullptr, &old_chld);
  server->ctx_ = mg_start2(&init, &error);
  sigaction(SIGCHLD, &old_chld, nullptr);
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("http: cannot listen on ", ports, ": ", error_text));
  }

  struct mg_server_port bound_ports[4];
  std::memset(bound_ports, 0, sizeof(bound_ports));
  int n = mg_get_server_ports(server->ctx_, 4, bound_ports);
  if (n < 1 || bound_ports[0].port <= 0) {
    return absl::InternalError(absl::StrCat("http: no bound port for ", ports));
  }
  server->bound_.host = *host;
  server->bound_.port = static_cast<uint16_t>(bound_ports[0].port);
  return server;
}

int HttpServer::OnRequest(struct mg_connection* conn) {
  const struct mg_request_info* info = mg_get_request_info(conn);
  const auto* server = static_cast<const HttpServer*>(info->user_data);
  return server->Serve(conn);
}

int HttpServer::Serve(struct mg_connection* conn) const {
  const struct mg_request_info* info = mg_get_request_info(conn);
  HttpRequest request;
  request.method = info->request_method == nullptr ? "" : info->request_method;
  request.path = info->local_uri == nullptr ? "" : info->local_uri;
  request.query = info->query_string == nullptr ? "" : info->query_string;
  const bool head = request.method == "HEAD";

  if (request.method != "GET" && !head) {
    Send(conn, 405, "text/plain; charset=utf-8", "method not allowed\n", false,
         "Allow: GET, HEAD\r\n");
    return 405;
  }
  auto it = handlers_.find(request.path);
  if (it == handlers_.end()) {
    Send(conn, 404, "text/plain; charset=utf-8", "not found\n", head, "");
    return 404;
  }
  HttpResponse response = it->second(request);
  if (response.status < 200 || response.status > 599) {
    SHELF_LOG(ERROR) << "http: handler returned a bad status" << Kv("path", request.path)
                     << Kv("status", response.status);
    Send(conn, 500, "text/plain; charset=utf-8", "internal error\n", head, "");
    return 500;
  }
  Send(conn, response.status, response.content_type, response.body, head, "");
  return response.status;
}

}  // namespace shelf
