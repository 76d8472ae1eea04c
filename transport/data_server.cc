#include "transport/data_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/io_buffer.h"
#include "common/log.h"
#include "transport/data_tls.h"
#include "transport/session.h"

namespace shelf::transport {

absl::StatusOr<std::unique_ptr<DataServer>> DataServer::Start(const Options& options,
                                                              DataHandler* handler) {
  HostPort bound;
  absl::StatusOr<int> fd = TcpListen(options.listen, &bound);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<DataServer> server(new DataServer(options, handler, *fd, bound));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

DataServer::DataServer(const Options& options, DataHandler* handler, int listen_fd, HostPort bound)
    : options_(options),
      handler_(handler),
      listen_fd_(listen_fd),
      bound_(std::move(bound)),
      node_id_(options.node_id),
      incarnation_(options.incarnation) {}

DataServer::~DataServer() { Stop(); }

void DataServer::Stop() {
  if (stopping_.exchange(true)) return;
  shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  close(listen_fd_);
  MutexLock lock(&mu_);
  for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  while (!fds_.empty()) cv_.Wait(&mu_);
}

const char* DataServer::RuleName(Rule rule) {
  switch (rule) {
    case Rule::kMaxConnections:
      return "max_connections";
    case Rule::kUnauthenticatedCap:
      return "unauthenticated_cap";
    case Rule::kPerSourceCap:
      return "per_source_cap";
    case Rule::kHandshakeDeadline:
      return "handshake_deadline";
    case Rule::kBadHandshake:
      return "bad_handshake";
    case Rule::kUnauthenticated:
      return "unauthenticated";
    case Rule::kIdle:
      return "idle";
    case Rule::kBadTag:
      return "bad_tag";
    case Rule::kSourceShare:
      return "source_share";
    case Rule::kCount:
      break;
  }
  return "unknown";
}

void DataServer::CountClosed(Rule rule) {
  closed_[static_cast<int>(rule)].fetch_add(1);
  handler_->OnClosedByRule(RuleName(rule));
}

namespace {

// The source address of a connection, without its port.
std::string SourceOf(const struct sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const struct sockaddr_in*>(&ss)->sin_addr, text,
              sizeof(text));
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const struct sockaddr_in6*>(&ss)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

}  // namespace

void DataServer::AcceptLoop() {
  while (!stopping_.load()) {
    struct sockaddr_storage peer;
    socklen_t peer_len = sizeof(peer);
    std::memset(&peer, 0, sizeof(peer));
    int fd =
        accept4(listen_fd_, reinterpret_cast<struct sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) break;
      if (errno != EINTR && errno != ECONNABORTED) PauseAfterAcceptError(errno, "data");
      continue;
    }
    // Answers are small frames written back to back when a client
    // pipelines: Nagle would hold each behind the last one's ACK.
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    MutexLock lock(&mu_);
    // Evicted connections are on their way out: they do not count.
    if (static_cast<int>(fds_.size() - evicted_.size()) >= options_.max_connections) {
      SHELF_LOG(WARNING) << "connection refused: limit reached"
                         << Kv("max_connections", options_.max_connections);
      close(fd);
      CountClosed(Rule::kMaxConnections);
      continue;
    }
    std::string source = SourceOf(peer);
    const int share = options_.max_connections_per_source > 0
                          ? options_.max_connections_per_source
                          : std::max(1, options_.max_connections / 2);
    if (auto it = per_source_.find(source); it != per_source_.end() && it->second >= share) {
      SHELF_LOG(WARNING) << "connection refused: its source holds its share" << Kv("source", source)
                         << Kv("max_connections_per_source", share);
      close(fd);
      CountClosed(Rule::kSourceShare);
      continue;
    }
    AdmitLocked(fd, source);
    ++per_source_[source];
    source_of_[fd] = std::move(source);
    fds_.insert(fd);
    live_.fetch_add(1);
    const uint64_t deadline_ms = MonoMs() + options_.handshake_timeout_ms;
    try {
      // Serve waits for mu_ (held here) before it touches fds_.
      std::thread([this, fd, deadline_ms] { Serve(fd, deadline_ms); }).detach();
    } catch (const std::system_error& e) {  // out of threads or memory
      SHELF_LOG(WARNING) << "connection refused: no thread to serve it" << Kv("error", e.what());
      pending_.erase(fd);
      ReleaseSourceLocked(fd);
      fds_.erase(fd);
      live_.fetch_sub(1);
      close(fd);
    }
  }
}

void DataServer::ReleaseSourceLocked(int fd) {
  auto it = source_of_.find(fd);
  if (it == source_of_.end()) return;
  auto count = per_source_.find(it->second);
  if (count != per_source_.end() && --count->second <= 0) per_source_.erase(count);
  source_of_.erase(it);
}

void DataServer::EvictOldestLocked(const std::string* source, Rule rule) {
  auto oldest = pending_.end();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (source != nullptr && it->second.source != *source) continue;
    if (oldest == pending_.end() || it->second.order < oldest->second.order) oldest = it;
  }
  if (oldest == pending_.end()) return;
  // Its thread sees the socket fail and closes it; fd stays open (in
  // fds_) until then, so it cannot be reused under us.
  shutdown(oldest->first, SHUT_RDWR);
  evicted_.insert(oldest->first);
  // On its way out: counted against neither max_connections nor its
  // source's share.
  ReleaseSourceLocked(oldest->first);
  pending_.erase(oldest);
  CountClosed(rule);
}

void DataServer::AdmitLocked(int fd, const std::string& source) {
  // Past a cap, the oldest connection still in its handshake goes: a real
  // client needs one round trip, a trickling one holds its place for
  // handshake_timeout_ms, so the newest is the likeliest to be real.
  const int cap = std::max(1, std::min(options_.max_unauthenticated, options_.max_connections / 2));
  const int per_source = std::max(1, options_.max_unauthenticated_per_source);
  int from_source = 0;
  for (const auto& [pfd, p] : pending_) from_source += p.source == source ? 1 : 0;
  if (from_source >= per_source) EvictOldestLocked(&source, Rule::kPerSourceCap);
  if (static_cast<int>(pending_.size()) >= cap)
    EvictOldestLocked(nullptr, Rule::kUnauthenticatedCap);
  pending_[fd] = Pending{source, admitted_++};
}

bool DataServer::Authenticated(int fd) {
  MutexLock lock(&mu_);
  return pending_.erase(fd) == 1;
}

void DataServer::SetIdentity(const std::string& node_id, uint64_t incarnation) {
  MutexLock lock(&mu_);
  node_id_ = node_id;
  incarnation_ = incarnation;
}

absl::Status DataServer::Handshake(int fd, uint64_t deadline_ms, wire::Session* session) {
  std::string store_nonce = RandomBytes(wire::kNonceBytes);
  char head[wire::kHeaderBytes];
  wire::Header hello;
  hello.op = wire::Op::kHello;
  hello.extra_len = static_cast<uint32_t>(store_nonce.size());
  wire::EncodeHeader(hello, head);
  struct iovec iov[2] = {{head, sizeof(head)}, {store_nonce.data(), store_nonce.size()}};
  if (absl::Status s = wire::StreamWritevBefore(fd, session, iov, 2, deadline_ms); !s.ok()) {
    return s;
  }
  char in[wire::kHeaderBytes];
  if (absl::Status s = wire::StreamReadBefore(fd, session, in, sizeof(in), deadline_ms); !s.ok())
    return s;
  wire::Header reply;
  reply.op = wire::Op::kAuth;
  absl::Status verdict = absl::OkStatus();
  const uint8_t version = static_cast<uint8_t>(in[4]);
  std::string client_nonce, mac;
  uint32_t flags = options_.session_tag_payload ? wire::kAuthTagPayload : 0;
  if (absl::little_endian::Load32(in) == wire::kMagic && version != wire::kVersion) {
    // Another release's client: told so in a frame of its version (the
    // header layout is the same), then closed.
    verdict = absl::FailedPreconditionError(
        absl::StrCat("this store speaks data-plane protocol version ", wire::kVersion,
                     ", the client version ", version, ": run the same Shelf release on both"));
    reply.version = version;
  } else {
    absl::StatusOr<wire::Header> auth = wire::DecodeHeader(in);
    if (!auth.ok()) return auth.status();
    // AUTH is exactly its size: the client's nonce and a MAC with a
    // secret, the nonce alone without (a client without the secret sends
    // that, and is told so below).
    const uint32_t bare = static_cast<uint32_t>(wire::kNonceBytes);
    const uint32_t full = bare + static_cast<uint32_t>(kMacBytes);
    if (auth->op != wire::Op::kAuth || (auth->extra_len != full && auth->extra_len != bare) ||
        auth->length != 0) {
      return absl::InvalidArgumentError(absl::StrCat("expected an AUTH frame of ", full, " bytes"));
    }
    reply.request_id = auth->request_id;
    flags |= auth->segment_id & wire::kAuthTagPayload;  // the client asks for payload tags
    std::string extra(auth->extra_len, '\0');
    if (absl::Status s =
            wire::StreamReadBefore(fd, session, extra.data(), extra.size(), deadline_ms);
        !s.ok()) {
      return s;
    }
    client_nonce = extra.substr(0, bare);
    mac = extra.substr(bare);
    if (!options_.secret.empty() &&
        !ConstantTimeEqual(mac, wire::ClientProof(options_.secret, store_nonce, client_nonce))) {
      verdict = absl::UnauthenticatedError("data-plane handshake: wrong or missing cluster secret");
    }
  }
  std::string answer(verdict.message());
  if (verdict.ok()) {
    std::string node_id;
    uint64_t incarnation = 0;
    {
      MutexLock lock(&mu_);
      node_id = node_id_;
      incarnation = incarnation_;
    }
    std::string inc(8, '\0');
    absl::little_endian::Store64(inc.data(), incarnation);
    answer = absl::StrCat(
        wire::StoreProof(options_.secret, store_nonce, client_nonce, node_id, incarnation, flags),
        inc, node_id);
    wire::DeriveSession(options_.secret, store_nonce, client_nonce, node_id, incarnation, flags,
                        nullptr, session);
    reply.segment_id = flags;
  }
  reply.status = static_cast<uint16_t>(verdict.code());
  reply.extra_len = static_cast<uint32_t>(answer.size());
  wire::EncodeHeader(reply, head);
  head[4] = static_cast<char>(reply.version);
  struct iovec out[2] = {{head, sizeof(head)}, {answer.data(), answer.size()}};
  if (absl::Status s = wire::StreamWritevBefore(fd, session, out, 2, deadline_ms); !s.ok()) {
    return s;
  }
  return verdict;
}

void DataServer::Serve(int fd, uint64_t deadline_ms) {
  ServeConnection(fd, deadline_ms);  // everything the connection held is gone when it returns
  // Stop() waits for fds_ to empty and may then destroy this server, so
  // this thread (detached) touches nothing of it after unlocking: the
  // notify happens under the lock.
  MutexLock lock(&mu_);
  pending_.erase(fd);
  evicted_.erase(fd);
  ReleaseSourceLocked(fd);
  fds_.erase(fd);
  close(fd);
  live_.fetch_sub(1);
  cv_.SignalAll();
}

void DataServer::ServeConnection(int fd, uint64_t deadline_ms) {
  Connection conn;
  absl::Status hs = absl::OkStatus();
  if (options_.tls != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> tls = options_.tls->Handshake(fd, "", deadline_ms);
    if (tls.ok()) {
      conn.session.tls = *std::move(tls);
    } else {
      hs = tls.status();
      if (hs.code() == absl::StatusCode::kUnavailable) {
        SHELF_LOG(WARNING) << "data-plane TLS handshake failed" << Kv("error", hs.message());
        hs = absl::InvalidArgumentError(hs.message());  // counted as a bad handshake
      }
    }
  }
  if (hs.ok()) hs = Handshake(fd, deadline_ms, &conn.session);
  // Evicted meanwhile (its socket shut down, the eviction counted): done.
  const bool admitted = Authenticated(fd);
  if (hs.ok() && !admitted) hs = absl::UnavailableError("evicted during the handshake");
  if (hs.ok()) {
    SetIoTimeoutMs(fd, options_.io_timeout_ms);
    // A plain connection reads ahead (wire::ReadAhead): a frame's header,
    // extra bytes and tag in one receive.
    conn.session.read_ahead = conn.session.tls == nullptr;
    // Idle connections wait in poll, up to idle_timeout_ms (the socket's
    // timeouts stay io_timeout_ms, no system call to change them per
    // frame); a frame, once started, must arrive within io_timeout_ms.
    const int idle_ms =
        options_.idle_timeout_ms == 0
            ? -1
            : static_cast<int>(std::min<uint64_t>(options_.idle_timeout_ms, INT32_MAX));
    while (!stopping_.load()) {
      char head[wire::kHeaderBytes];
      // A pipelining client has the next frame waiting, decrypted already
      // (TLS) or in the socket (poll returns at once).
      if (wire::StreamPending(&conn.session) == 0) {
        struct pollfd p = {fd, POLLIN, 0};
        const int r = poll(&p, 1, idle_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        if (r == 0) {
          CountClosed(Rule::kIdle);
          break;
        }
        // Readable, closed or failed: the read below tells which.
      }
      if (!wire::StreamRead(fd, &conn.session, head, sizeof(head)).ok()) break;
      absl::StatusOr<wire::Header> h = wire::DecodeHeader(head);
      if (!h.ok()) {
        SHELF_LOG(WARNING) << "closing connection: malformed frame"
                           << Kv("error", h.status().message());
        break;
      }
      if (!HandleFrame(fd, head, *h, &conn)) break;
    }
  } else if (admitted && !stopping_.load()) {
    if (hs.code() == absl::StatusCode::kUnauthenticated) {
      SHELF_LOG(WARNING) << "data-plane connection rejected" << Kv("error", hs.message());
      CountClosed(Rule::kUnauthenticated);
    } else if (hs.code() == absl::StatusCode::kDeadlineExceeded) {
      CountClosed(Rule::kHandshakeDeadline);
    } else if (hs.code() == absl::StatusCode::kInvalidArgument ||
               hs.code() == absl::StatusCode::kFailedPrecondition) {
      SHELF_LOG(DEBUG) << "data-plane handshake malformed" << Kv("error", hs.message());
      CountClosed(Rule::kBadHandshake);
    }
  }
  conn.rdma.reset();  // before the socket: the peer sees the QP gone first
}

namespace {

// READ_KEY answers of up to this many bytes go through a per-thread
// buffer (DataHandler::ReadKeyInto); larger ones through ReadKey.
constexpr uint64_t kReadKeyBufferMax = 16ull << 20;

// This thread's 4 KiB aligned buffer of at least `bytes` (rounded up to
// 4 KiB); null when memory runs out. Kept for the thread's life (a
// connection's), grown as needed.
char* ReadKeyBuffer(uint64_t bytes) {
  struct Buffer {
    char* data = nullptr;
    uint64_t bytes = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buf;
  const uint64_t want = (bytes + 4095) & ~4095ull;
  if (buf.bytes < want) {
    char* p = AllocIoBuffer(want);
    if (p == nullptr) return nullptr;
    std::free(buf.data);
    buf.data = p;
    buf.bytes = want;
  }
  // The analyzer does not follow a thread_local across calls: it pairs the
  // free of one call's buffer with the next call's return.
  return buf.data;  // NOLINT(clang-analyzer-unix.Malloc)
}

// Sends a response header, optional error text, and optional payload,
// tagged under the session.
bool Reply(int fd, wire::Session* mac, const wire::Header& req, const absl::Status& status,
           const char* payload, uint64_t payload_len) {
  wire::Header h;
  h.op = req.op;
  h.request_id = req.request_id;
  h.segment_id = req.segment_id;
  h.offset = req.offset;
  h.status = static_cast<uint16_t>(status.code());
  std::string msg(status.message().substr(0, 1024));
  h.extra_len = static_cast<uint32_t>(msg.size());
  h.length = status.ok() ? payload_len : 0;
  struct iovec rest[2] = {{msg.data(), msg.size()},
                          {const_cast<char*>(payload), status.ok() ? payload_len : 0}};
  return wire::SendFrame(fd, mac, h, rest, 2).ok();
}

// After the reply refusing a write: the store sends nothing more, and reads
// and drops the payload the client is still sending (up to `length` bytes
// and some slack for tags and TLS records; at most kRejectDrainBytesMax,
// for at most kRejectDrainMs) before the caller closes the connection.
// Closing with that input unread would reset the connection, and the
// client, still sending, would see the reset instead of the verdict.
constexpr uint64_t kRejectDrainBytesMax = 64ull << 20;
constexpr uint64_t kRejectDrainMs = 2000;

void DrainRejectedPayload(int fd, uint64_t length) {
  shutdown(fd, SHUT_WR);
  uint64_t left = std::min(length + length / 512 + 4096, kRejectDrainBytesMax);
  const uint64_t deadline = MonoMs() + kRejectDrainMs;
  char buf[64 << 10];
  while (left > 0) {
    const uint64_t now = MonoMs();
    if (now >= deadline) return;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(deadline - now)) <= 0) return;
    ssize_t n = recv(fd, buf, std::min<uint64_t>(left, sizeof(buf)), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;  // the client closed, or an error
    left -= static_cast<uint64_t>(n);
  }
}

}  // namespace

bool DataServer::HandleFrame(int fd, const char* head, const wire::Header& h, Connection* conn) {
  std::string extra(h.extra_len, '\0');
  if (!wire::StreamRead(fd, &conn->session, extra.data(), extra.size()).ok()) return false;
  wire::Session* mac = &conn->session;  // Reply sends under it
  wire::FrameMac* in = &conn->session.recv;
  in->Begin(h.op);
  in->Add(head, wire::kHeaderBytes);
  in->Add(extra.data(), extra.size());
  // A frame is acted on only once its tag verifies (a WRITE's payload
  // lands in its granted range first: a bad tag then closes the connection
  // without an answer, so that put never commits from it).
  auto tagged = [&] {
    absl::Status s = in->ReadAndCheck(fd, &conn->session);
    if (s.code() == absl::StatusCode::kPermissionDenied) {
      SHELF_LOG(WARNING) << "closing connection: bad frame tag" << Kv("op", static_cast<int>(h.op));
      CountClosed(Rule::kBadTag);
    }
    return s.ok();
  };
  switch (h.op) {
    case wire::Op::kPing:
      return h.length == 0 && tagged() && Reply(fd, mac, h, absl::OkStatus(), nullptr, 0);
    case wire::Op::kRead: {
      if (!tagged()) return false;
      absl::StatusOr<DataHandler::Region> seg = handler_->Segment(h.segment_id);
      if (!seg.ok()) return Reply(fd, mac, h, seg.status(), nullptr, 0);
      if (h.offset > seg->size || h.length > seg->size - h.offset) {
        return Reply(fd, mac, h,
                     absl::OutOfRangeError(absl::StrCat("read [", h.offset, ", +", h.length,
                                                        ") outside segment of ", seg->size)),
                     nullptr, 0);
      }
      if (absl::Status s = handler_->CheckRead(extra, "", true, h.segment_id, h.offset, h.length);
          !s.ok()) {
        return Reply(fd, mac, h, s, nullptr, 0);
      }
      handler_->OnRead(h.length);
      return Reply(fd, mac, h, absl::OkStatus(), seg->base + h.offset, h.length);
    }
    case wire::Op::kWrite: {
      // A rejected write closes the connection: its payload is not parsed
      // (only drained, so the verdict reaches the client).
      absl::StatusOr<DataHandler::Region> seg = handler_->Segment(h.segment_id);
      absl::Status verdict = seg.status();
      if (verdict.ok() && (h.offset > seg->size || h.length > seg->size - h.offset)) {
        verdict = absl::OutOfRangeError(
            absl::StrCat("write [", h.offset, ", +", h.length, ") outside segment of ", seg->size));
      }
      absl::StatusOr<wire::Grant> grant = wire::DecodeGrant(extra);
      if (verdict.ok()) {
        verdict = grant.ok() ? handler_->CheckWrite(*grant, h.segment_id, h.offset, h.length)
                             : grant.status();
      }
      if (!verdict.ok()) {
        SHELF_LOG(WARNING) << "write rejected" << Kv("error", verdict.message());
        if (Reply(fd, mac, h, verdict, nullptr, 0)) DrainRejectedPayload(fd, h.length);
        return false;
      }
      const AdmittedWrite admitted(handler_, *grant);
      // No byte lands after the grant expires: the range may be another
      // put's by then (a frame trickled in, a byte at a time).
      absl::Status payload = wire::ReadPayload(fd, &conn->session, seg->base + h.offset, h.length,
                                               WriteDeadline(*grant));
      SetIoTimeoutMs(fd, options_.io_timeout_ms);
      if (!payload.ok()) {
        SHELF_LOG(WARNING) << "write payload not taken" << Kv("error", payload.message());
        return false;
      }
      if (!tagged()) return false;
      handler_->OnWrite(h.length);
      return Reply(fd, mac, h, absl::OkStatus(), nullptr, 0);
    }
    case wire::Op::kReadKey: {
      if (!tagged()) return false;
      if (h.segment_id &
          ~(wire::kReadKeyCheckOnly | wire::kReadKeyGranted | wire::kReadKeyAtRange)) {
        return Reply(fd, mac, h, absl::InvalidArgumentError("READ_KEY: unknown flags"), nullptr, 0);
      }
      // With a range to check, extra ends with it.
      absl::string_view body = extra;
      std::optional<wire::KeyRange> at;
      if (h.segment_id & wire::kReadKeyAtRange) {
        absl::StatusOr<wire::KeyRange> range =
            (h.segment_id & wire::kReadKeyCheckOnly) && body.size() >= wire::kKeyRangeBytes
                ? wire::DecodeKeyRange(body.substr(body.size() - wire::kKeyRangeBytes))
                : absl::InvalidArgumentError("READ_KEY: a range is checked only, and sent");
        if (!range.ok()) return Reply(fd, mac, h, range.status(), nullptr, 0);
        at = *range;
        body.remove_suffix(wire::kKeyRangeBytes);
      }
      // With a grant, the rest is the read credential: the grant, then the key.
      const bool granted = (h.segment_id & wire::kReadKeyGranted) != 0;
      absl::string_view key = body;
      if (granted) {
        key = key.size() > wire::kReadGrantBytes ? key.substr(wire::kReadGrantBytes) : "";
      }
      if (std::string why = KeyLengthError(key.size()); !why.empty()) {
        return Reply(fd, mac, h, absl::InvalidArgumentError("READ_KEY: " + why), nullptr, 0);
      }
      if (absl::Status s = handler_->CheckRead(granted ? body : "", key, false, 0, 0, h.length);
          !s.ok()) {
        return Reply(fd, mac, h, s, nullptr, 0);
      }
      // DRAM first: a block with a DRAM record is sent from the segment,
      // like a READ, after its generation is checked.
      absl::StatusOr<DataHandler::Region> dram = handler_->DramKey(key, h.offset);
      if (dram.ok() && h.length != 0 && dram->size != h.length) {
        dram = absl::FailedPreconditionError(
            absl::StrCat("DRAM block is ", dram->size, " bytes, expected ", h.length));
      }
      if (dram.ok() && at.has_value()) {
        absl::StatusOr<DataHandler::Region> seg = handler_->Segment(at->segment_id);
        if (!seg.ok() || at->offset >= seg->size || dram->base != seg->base + at->offset) {
          dram = absl::FailedPreconditionError("the key's block is at another range");
        }
      }
      if (h.segment_id & wire::kReadKeyCheckOnly) {
        return Reply(fd, mac, h, dram.status(), nullptr, 0);
      }
      if (dram.ok()) {
        handler_->OnRead(dram->size);
        return Reply(fd, mac, h, absl::OkStatus(), dram->base, dram->size);
      }
      if (dram.status().code() != absl::StatusCode::kNotFound) {
        return Reply(fd, mac, h, dram.status(), nullptr, 0);
      }
      // A block of known size up to kReadKeyBufferMax is read straight into
      // this connection thread's aligned buffer (O_DIRECT, no copy) and
      // sent from there.
      if (h.length != 0 && h.length <= kReadKeyBufferMax) {
        char* buf = ReadKeyBuffer(h.length);
        uint64_t size = 0;
        absl::Status s = buf == nullptr
                             ? absl::UnimplementedError("no buffer")
                             : handler_->ReadKeyInto(key, buf, (h.length + 4095) & ~4095ull, &size);
        if (s.code() != absl::StatusCode::kUnimplemented &&
            s.code() != absl::StatusCode::kOutOfRange) {
          // Another size is another commit of the key (replaced since the
          // reader's lookup), not a corrupt one: the reader asks again.
          if (s.ok() && size != h.length) {
            s = absl::FailedPreconditionError(
                absl::StrCat("SSD block is ", size, " bytes, expected ", h.length));
          }
          return Reply(fd, mac, h, s, buf, s.ok() ? size : 0);
        }
      }
      std::string value;
      absl::Status s = handler_->ReadKey(key, &value);
      if (s.ok() && h.length != 0 && value.size() != h.length) {
        s = absl::FailedPreconditionError(
            absl::StrCat("SSD block is ", value.size(), " bytes, expected ", h.length));
      }
      return Reply(fd, mac, h, s, value.data(), value.size());
    }
    case wire::Op::kRdmaConnect: {
      if (h.length != 0 || !tagged()) return false;
      if (options_.rdma == nullptr) {
        return Reply(fd, mac, h,
                     absl::FailedPreconditionError("this store offers no rdma transport"), nullptr,
                     0);
      }
      conn->rdma.reset();  // a reconnect replaces the old queue pair
      // extra: the client's connection info, then (optionally) the read
      // credential that lets it learn the segment's rkey.
      const absl::string_view info = absl::string_view(extra).substr(
          0, std::min(extra.size(), wire::kRdmaConnectionInfoBytes));
      const absl::string_view credential = absl::string_view(extra).substr(info.size());
      absl::StatusOr<RdmaExposure> exposure = handler_->RdmaExposes(credential, h.segment_id);
      std::string store_info;
      absl::StatusOr<std::shared_ptr<void>> qp =
          exposure.ok() ? options_.rdma->Accept(h.segment_id, info, *exposure, &store_info)
                        : exposure.status();
      if (!qp.ok()) {
        SHELF_LOG(WARNING) << "rdma connection refused" << Kv("error", qp.status().message());
        return Reply(fd, mac, h, qp.status(), nullptr, 0);
      }
      conn->rdma = *std::move(qp);
      return Reply(fd, mac, h, absl::OkStatus(), store_info.data(), store_info.size());
    }
    case wire::Op::kRdmaPull:
      // No payload travels: `length` is the range the store pulls.
      return tagged() && HandlePull(fd, h, extra, conn);
    case wire::Op::kHello:
    case wire::Op::kAuth:
      break;
  }
  SHELF_LOG(WARNING) << "closing connection: unexpected opcode" << Kv("op", static_cast<int>(h.op));
  return false;
}

uint64_t DataServer::WriteDeadline(const wire::Grant& grant) {
  const uint64_t left = handler_->WriteMsLeft(grant);
  if (left == UINT64_MAX) return 0;
  // At least 1: 0 would mean no bound. A grant that expires before the
  // next byte takes none.
  return std::max<uint64_t>(MonoMs() + left, 1);
}

bool DataServer::HandlePull(int fd, const wire::Header& h, const std::string& extra,
                            Connection* conn) {
  // A refused pull moved nothing and carries no payload: the connection
  // stays open either way.
  absl::StatusOr<DataHandler::Region> seg = handler_->Segment(h.segment_id);
  absl::Status verdict = seg.status();
  uint64_t deadline_ms = MonoMs() + options_.io_timeout_ms;
  if (verdict.ok() && (options_.rdma == nullptr || conn->rdma == nullptr)) {
    verdict = absl::FailedPreconditionError("RDMA_PULL before RDMA_CONNECT on this connection");
  }
  if (verdict.ok() && (h.length == 0 || h.offset > seg->size || h.length > seg->size - h.offset)) {
    verdict = absl::OutOfRangeError(
        absl::StrCat("pull [", h.offset, ", +", h.length, ") outside segment of ", seg->size));
  }
  absl::StatusOr<wire::RdmaSource> source = wire::DecodeRdmaSource(extra);
  if (verdict.ok()) verdict = source.status();
  absl::StatusOr<wire::Grant> grant = absl::InternalError("unchecked");
  if (verdict.ok()) {
    // The same check as a WRITE frame's: only a granted range is written.
    grant = wire::DecodeGrant(absl::string_view(extra).substr(wire::kRdmaSourceBytes));
    verdict = grant.ok() ? handler_->CheckWrite(*grant, h.segment_id, h.offset, h.length)
                         : grant.status();
    const uint64_t grant_deadline = verdict.ok() ? WriteDeadline(*grant) : 0;
    if (grant_deadline != 0) deadline_ms = std::min(deadline_ms, grant_deadline);
  }
  if (!verdict.ok()) {
    SHELF_LOG(WARNING) << "rdma pull refused" << Kv("error", verdict.message());
    return Reply(fd, &conn->session, h, verdict, nullptr, 0);
  }
  const AdmittedWrite admitted(handler_, *grant);
  verdict =
      options_.rdma->Pull(conn->rdma.get(), seg->base + h.offset, h.length, *source, deadline_ms);
  if (verdict.ok()) handler_->OnPull(h.length);
  return Reply(fd, &conn->session, h, verdict, nullptr, 0);
}

}  // namespace shelf::transport
