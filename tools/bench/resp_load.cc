#include "tools/bench/resp_load.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/net.h"
#include "transport/data_tls.h"
#include "transport/session.h"

namespace shelf::bench {

namespace wire = transport::wire;

namespace {

constexpr size_t kStampBytes = 16;
constexpr uint64_t kPoolSlack = 64 << 10;  // values start anywhere in the first 64 KiB
constexpr size_t kLineBytesMax = 1024;
constexpr int kTimeoutSeconds = 120;

// The bytes of key `index`'s value: its stamp, then a window of the pool.
struct Value {
  char stamp[kStampBytes];
  size_t stamp_bytes = 0;
  const char* window = nullptr;
  size_t window_bytes = 0;
};

class ValueMaker {
 public:
  ValueMaker(uint64_t value_bytes, uint64_t seed) : value_bytes_(value_bytes), seed_(seed) {
    pool_.resize(value_bytes + kPoolSlack);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < pool_.size(); i += 8) {
      const uint64_t r = rng();
      std::memcpy(pool_.data() + i, &r, std::min<size_t>(8, pool_.size() - i));
    }
  }
  Value For(uint64_t index) const {
    Value v;
    std::memcpy(v.stamp, &seed_, 8);
    std::memcpy(v.stamp + 8, &index, 8);
    v.stamp_bytes = std::min<size_t>(kStampBytes, value_bytes_);
    v.window = pool_.data() + (index * 4099) % kPoolSlack;
    v.window_bytes = value_bytes_ - v.stamp_bytes;
    return v;
  }
  // Whether `got` (value_bytes long) is key `index`'s value.
  bool Matches(uint64_t index, const char* got) const {
    const Value v = For(index);
    return std::memcmp(got, v.stamp, v.stamp_bytes) == 0 &&
           std::memcmp(got + v.stamp_bytes, v.window, v.window_bytes) == 0;
  }

 private:
  const uint64_t value_bytes_;
  const uint64_t seed_;
  std::vector<char> pool_;
};

// One RESP connection, plain or TLS, with a read buffer.
class Conn {
 public:
  static absl::StatusOr<std::unique_ptr<Conn>> Open(int port, const wire::DataTls* tls) {
    absl::StatusOr<int> fd = TcpConnect(HostPort{"127.0.0.1", static_cast<uint16_t>(port)}, 10000);
    if (!fd.ok()) return fd.status();
    std::unique_ptr<Conn> c(new Conn(*fd));
    int one = 1;
    setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (tls != nullptr) {
      auto state = tls->Handshake(*fd, "127.0.0.1", MonoMs() + 10000);
      if (!state.ok()) return state.status();
      c->session_.tls = *std::move(state);
    }
    timeval tv{kTimeoutSeconds, 0};
    setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(*fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return c;
  }
  ~Conn() {
    session_.tls.reset();
    close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  absl::Status Writev(const std::vector<iovec>& iov) {
    return wire::StreamWritev(fd_, &session_, iov.data(), static_cast<int>(iov.size()));
  }

  // The next line, without its CRLF.
  absl::Status ReadLine(std::string* line) {
    for (;;) {
      const char* begin = buf_.data() + begin_;
      const char* end = buf_.data() + end_;
      const char* cr = std::search(begin, end, kCrlf, kCrlf + 2);
      if (cr != end) {
        line->assign(begin, cr);
        begin_ += static_cast<size_t>(cr - begin) + 2;
        return absl::OkStatus();
      }
      if (end_ - begin_ > kLineBytesMax) return absl::DataLossError("a reply line over 1 KiB");
      if (absl::Status s = Fill(); !s.ok()) return s;
    }
  }

  // Exactly `n` bytes: what the buffer holds, then straight from the stream.
  absl::Status ReadExact(char* dst, size_t n) {
    const size_t have = std::min(n, end_ - begin_);
    std::memcpy(dst, buf_.data() + begin_, have);
    begin_ += have;
    if (have == n) return absl::OkStatus();
    return wire::StreamRead(fd_, &session_, dst + have, n - have);
  }

 private:
  static constexpr char kCrlf[] = "\r\n";
  explicit Conn(int fd) : fd_(fd), buf_(64 << 10) {}

  absl::Status Fill() {
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    char* at = buf_.data() + end_;
    const size_t room = buf_.size() - end_;
    ssize_t n;
    if (session_.tls != nullptr) {
      SSL* ssl = static_cast<SSL*>(session_.tls.get());
      n = SSL_read(ssl, at, static_cast<int>(room));
      if (n <= 0) return absl::UnavailableError("the server closed the TLS connection");
    } else {
      do {
        n = recv(fd_, at, room, 0);
      } while (n < 0 && errno == EINTR);
      if (n == 0) return absl::UnavailableError("the server closed the connection");
      if (n < 0) return absl::UnavailableError(absl::StrCat("recv: ", ErrnoText(errno)));
    }
    end_ += static_cast<size_t>(n);
    return absl::OkStatus();
  }

  const int fd_;
  wire::Session session_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
};

struct Tally {
  uint64_t sets = 0, gets = 0, misses = 0, mismatches = 0;
  std::string error;
};

std::string BulkHeader(absl::string_view command, absl::string_view key, int args) {
  return absl::StrCat("*", args, "\r\n$", command.size(), "\r\n", command, "\r\n$", key.size(),
                      "\r\n", key, "\r\n");
}

// One connection's share of a phase: keys first, first + step, ...
void RunShare(Conn* c, const RespLoadOptions& o, const ValueMaker& values, bool set, uint64_t first,
              uint64_t step, Tally* t) {
  std::vector<uint64_t> mine;
  for (uint64_t i = first; i < o.requests; i += step) mine.push_back(i);
  std::vector<std::string> headers;
  std::vector<Value> stamps;
  std::vector<iovec> iov;
  std::vector<char> got(o.value_bytes + 2);
  static const char kCrlf[] = "\r\n";
  std::string line;
  for (size_t at = 0; at < mine.size(); at += static_cast<size_t>(o.pipeline)) {
    const size_t n = std::min(mine.size() - at, static_cast<size_t>(o.pipeline));
    headers.clear();
    stamps.clear();
    iov.clear();
    headers.reserve(n);
    stamps.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      const std::string key = absl::StrCat(o.key_prefix, mine[at + k]);
      if (set) {
        headers.push_back(absl::StrCat(BulkHeader("SET", key, 3), "$", o.value_bytes, "\r\n"));
        stamps.push_back(values.For(mine[at + k]));
        const Value& v = stamps.back();
        iov.push_back({headers.back().data(), headers.back().size()});
        iov.push_back({const_cast<char*>(v.stamp), v.stamp_bytes});
        iov.push_back({const_cast<char*>(v.window), v.window_bytes});
        iov.push_back({const_cast<char*>(kCrlf), 2});
      } else {
        headers.push_back(BulkHeader("GET", key, 2));
        iov.push_back({headers.back().data(), headers.back().size()});
      }
    }
    if (absl::Status s = c->Writev(iov); !s.ok()) {
      t->error = std::string(s.message());
      return;
    }
    for (size_t k = 0; k < n; ++k) {
      if (absl::Status s = c->ReadLine(&line); !s.ok()) {
        t->error = std::string(s.message());
        return;
      }
      if (!line.empty() && line[0] == '-') {
        t->error = absl::StrCat(set ? "SET" : "GET", " answered ", line);
        return;
      }
      if (set) {
        if (line != "+OK") {
          t->error = absl::StrCat("SET answered ", line);
          return;
        }
        ++t->sets;
        continue;
      }
      int64_t len = 0;
      if (line.empty() || line[0] != '$' || !absl::SimpleAtoi(line.substr(1), &len) || len < -1) {
        t->error = absl::StrCat("GET answered ", line);
        return;
      }
      if (len == -1) {
        ++t->misses;
        continue;
      }
      got.resize(static_cast<size_t>(len) + 2);
      if (absl::Status s = c->ReadExact(got.data(), got.size()); !s.ok()) {
        t->error = std::string(s.message());
        return;
      }
      if (static_cast<uint64_t>(len) == o.value_bytes && values.Matches(mine[at + k], got.data())) {
        ++t->gets;
      } else {
        ++t->mismatches;
      }
    }
  }
}

// Runs one phase on every connection at once; its wall time in seconds.
double RunPhase(std::vector<std::unique_ptr<Conn>>& conns, const RespLoadOptions& o,
                const ValueMaker& values, bool set, std::vector<Tally>* tallies) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < conns.size(); ++i) {
    threads.emplace_back(
        [&, i] { RunShare(conns[i].get(), o, values, set, i, conns.size(), &(*tallies)[i]); });
  }
  for (std::thread& t : threads) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RespLoadResult RunRespLoad(const RespLoadOptions& o) {
  RespLoadResult r;
  if (o.clients < 1 || o.pipeline < 1 || o.requests == 0 || o.value_bytes == 0) {
    r.error = "clients, pipeline, requests and value bytes must be positive";
    return r;
  }
  std::shared_ptr<wire::DataTls> tls;
  if (!o.tls_ca.empty()) {
    wire::DataTls::Files files;
    files.ca = o.tls_ca;
    auto made = wire::DataTls::ForClient(files);
    if (!made.ok()) {
      r.error = std::string(made.status().message());
      return r;
    }
    tls = *std::move(made);
  }
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < o.clients; ++i) {
    auto c = Conn::Open(o.port, tls.get());
    if (!c.ok()) {
      r.error = std::string(c.status().message());
      return r;
    }
    if (!o.password.empty()) {
      std::string auth =
          absl::StrCat("*2\r\n$4\r\nAUTH\r\n$", o.password.size(), "\r\n", o.password, "\r\n");
      std::string line;
      absl::Status s = (*c)->Writev({{auth.data(), auth.size()}});
      if (s.ok()) s = (*c)->ReadLine(&line);
      if (!s.ok() || line != "+OK") {
        r.error = s.ok() ? absl::StrCat("AUTH answered ", line) : std::string(s.message());
        return r;
      }
    }
    conns.push_back(*std::move(c));
  }
  const ValueMaker values(o.value_bytes, o.seed);
  for (bool set : {true, false}) {
    std::vector<Tally> tallies(conns.size());
    const double seconds = RunPhase(conns, o, values, set, &tallies);
    for (const Tally& t : tallies) {
      r.sets += t.sets;
      r.gets += t.gets;
      r.misses += t.misses;
      r.mismatches += t.mismatches;
      if (r.error.empty()) r.error = t.error;
    }
    const double rate = static_cast<double>(o.requests) / std::max(seconds, 1e-9);
    (set ? r.set_per_s : r.get_per_s) = rate;
    if (!r.error.empty()) break;
  }
  return r;
}

}  // namespace shelf::bench
