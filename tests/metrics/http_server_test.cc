// Tests of HttpServer over real sockets on 127.0.0.1, port 0 (so parallel
// runs never collide): /metrics and /health, 404, 405, HEAD, bind errors and
// shutdown.
#include "common/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/prom.h"
#include "gtest/gtest.h"

namespace shelf {
namespace {

constexpr uint64_t kTimeoutMs = 5000;

struct Reply {
  int status = 0;
  std::string headers;  // the header block, lower-cased names untouched
  std::string body;
};

// Sends `request` raw and reads until the server closes the connection.
absl::StatusOr<Reply> Fetch(const HostPort& addr, const std::string& request) {
  absl::StatusOr<int> fd = TcpConnect(HostPort{"127.0.0.1", addr.port}, kTimeoutMs);
  if (!fd.ok()) return fd.status();
  SetIoTimeoutMs(*fd, kTimeoutMs);
  absl::Status st = WriteFull(*fd, request.data(), request.size());
  std::string raw;
  char buf[4096];
  while (st.ok()) {
    ssize_t n = recv(*fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) st = absl::DeadlineExceededError("recv failed or timed out");
    if (n > 0) raw.append(buf, n);
  }
  close(*fd);
  if (!st.ok()) return st;
  size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) {
    return absl::InternalError("not an HTTP response: " + raw);
  }
  Reply reply;
  reply.status = std::stoi(raw.substr(9, 3));
  reply.headers = raw.substr(0, end);
  reply.body = raw.substr(end + 4);
  return reply;
}

absl::StatusOr<Reply> Get(const HostPort& addr, const std::string& path) {
  return Fetch(addr, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: test\r\n\r\n"));
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prom::AddUnlabelledCounter(registry_.registry(), "test_scrapes_total", "Scrapes.").Increment(7);
    std::map<std::string, HttpHandler> handlers;
    handlers["/metrics"] = [this](const HttpRequest&) {
      return HttpResponse{200, prom::Exposition::kContentType, registry_.Render()};
    };
    handlers["/health"] = [this](const HttpRequest& request) {
      MutexLock lock(&mu_);
      last_query_ = request.query;
      return HttpResponse{healthy_ ? 200 : 503, "text/plain; charset=utf-8",
                          healthy_ ? "ok\n" : "not leader\n"};
    };
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start("127.0.0.1:0", std::move(handlers));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  prom::Exposition registry_;
  std::atomic<bool> healthy_{true};
  Mutex mu_;
  std::string last_query_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, ServesMetrics) {
  EXPECT_EQ(server_->bound().host, "127.0.0.1");
  ASSERT_NE(server_->bound().port, 0);
  absl::StatusOr<Reply> r = Get(server_->bound(), "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(absl::StrContains(r->headers, "Content-Type: text/plain; version=0.0.4"))
      << r->headers;
  EXPECT_TRUE(absl::StrContains(r->headers, absl::StrCat("Content-Length: ", r->body.size())))
      << r->headers;
  EXPECT_EQ(r->body, registry_.Render());
  EXPECT_TRUE(absl::StrContains(r->body, "test_scrapes_total 7\n")) << r->body;
}

TEST_F(HttpServerTest, HealthStatusComesFromHandler) {
  absl::StatusOr<Reply> r = Get(server_->bound(), "/health?verbose=1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
  {
    MutexLock lock(&mu_);
    EXPECT_EQ(last_query_, "verbose=1");
  }
  healthy_ = false;
  r = Get(server_->bound(), "/health");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "not leader\n");
}

TEST_F(HttpServerTest, UnknownPathIs404) {
  for (const char* path : {"/", "/nope", "/metrics/extra", "/metricsx"}) {
    absl::StatusOr<Reply> r = Get(server_->bound(), path);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 404) << path;
  }
}

TEST_F(HttpServerTest, OnlyGetAndHead) {
  absl::StatusOr<Reply> r =
      Fetch(server_->bound(), "POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 405);
  EXPECT_TRUE(absl::StrContains(r->headers, "Allow: GET, HEAD")) << r->headers;

  r = Fetch(server_->bound(), "HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->body.empty()) << r->body;
  EXPECT_TRUE(absl::StrContains(r->headers, "Content-Length: ")) << r->headers;
}

TEST_F(HttpServerTest, ConcurrentScrapes) {
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        absl::StatusOr<Reply> r = Get(server_->bound(), "/metrics");
        if (r.ok() && r->status == 200) ++ok;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 40);
}

TEST_F(HttpServerTest, StopsOnDestruction) {
  HostPort addr = server_->bound();
  ASSERT_TRUE(Get(addr, "/health").ok());
  // Prompt, not civetweb's 2 s accept-poll quantum: daemons and tests stop
  // servers often.
  auto start = std::chrono::steady_clock::now();
  server_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  absl::StatusOr<Reply> r = Get(addr, "/health");
  EXPECT_FALSE(r.ok());
}

TEST(HttpServerStartTest, RejectsBadAddressesAndBusyPorts) {
  std::map<std::string, HttpHandler> none;
  EXPECT_EQ(HttpServer::Start("no-port", none).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpServer::Start("127.0.0.1:99999", none).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpServer::Start("127.0.0.1:0", none, HttpServer::Options{0, 1000}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::map<std::string, HttpHandler> relative;
  relative["metrics"] = [](const HttpRequest&) { return HttpResponse{}; };
  EXPECT_EQ(HttpServer::Start("127.0.0.1:0", relative).status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<std::unique_ptr<HttpServer>> first = HttpServer::Start("127.0.0.1:0", none);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start((*first)->bound().ToString(), none);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(HttpServerStartTest, ResolvesHostNames) {
  std::map<std::string, HttpHandler> handlers;
  handlers["/health"] = [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok\n"}; };
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("localhost:0", std::move(handlers));
  ASSERT_TRUE(server.ok()) << server.status();
  // localhost may resolve to ::1 first; only check the IPv4 case by fetch.
  if ((*server)->bound().host == "127.0.0.1") {
    absl::StatusOr<Reply> r = Get((*server)->bound(), "/health");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
  } else {
    EXPECT_EQ((*server)->bound().host, "::1");
  }
}

}  // namespace
}  // namespace shelf
