#include "server/resp/resp_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/log.h"
#include "common/net.h"
#include "server/resp/resp_value_arena.h"

namespace shelf::resp {

namespace {
constexpr size_t kReadChunkBytes = 1 << 20;
constexpr size_t kReadPerEventBytes = 16 << 20;  // then let other connections run
constexpr size_t kNotifyOutBytes = 256 << 10;    // flush a long pipeline's replies early
// A connection's replies not yet sent; beyond it its commands wait until
// the client reads (a pipeline of large GETs must not fill memory).
constexpr size_t kUnsentBytesMax = 64 << 20;
// A connection's commands read but not yet run; beyond it the server stops
// reading it until they run down to half (the client waits in TCP).
constexpr int64_t kQueuedBytesMax = 64 << 20;
// What a queued command costs besides its arguments.
constexpr int64_t kCommandOverheadBytes = 128;
constexpr int kIovMax = 64;
constexpr size_t kDrainBytesMax = 8 << 20;  // then close anyway
// TLS: replies smaller than this are copied together into one record (one
// SSL_write per tiny reply would cost a record and a syscall each); larger
// ones are encrypted straight from the queue, this much per call at most.
constexpr size_t kTlsCoalesceBytes = 16 << 10;
constexpr size_t kTlsWriteBytesMax = 4 << 20;
// How long a worker waits for a slow client's socket to take a reply sent
// from where its values lie, before it queues the rest, copied.
constexpr uint64_t kDirectSendWaitMs = 20;
}  // namespace

struct Connection {
  struct Pending {
    std::vector<std::string> args;
    std::string error;   // set: reply it and close (protocol error, -OOM)
    int64_t bytes = 0;   // charged to ServerStats::inflight_bytes
    bool gated = false;  // parsed before the connection authenticated
    PlacedValue value;   // a SET's value the parser placed (args[2] then empty)
  };

  Connection(int fd_in, uint64_t id_in, RespParser parser_in)
      : fd(fd_in), parser(std::move(parser_in)) {
    session.id = id_in;
  }
  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
  }

  const int fd;
  // TLS (loop thread only): null on the plain listeners.
  SSL* ssl = nullptr;
  bool handshake_done = false;
  bool handshake_wants_write = false;
  bool read_wants_write = false;  // SSL_read needs the socket writable
  bool write_wants_read = false;  // SSL_write needs the socket readable
  size_t tls_retry_len = 0;       // an SSL_write to repeat from wq's front
  std::string tls_stage;          // small replies copied into one record
  // Worker side (one worker at a time, see `running`).
  Session session;

  // Loop thread only.
  RespParser parser;
  int64_t parser_charge = 0;
  std::deque<std::string> wq;  // replies being written
  size_t wq_off = 0;           // bytes of wq.front() already written
  bool reading = true;
  bool want_write = false;
  // After an error reply: our side is shut down and what the client still
  // sends is read and dropped until it closes, so the reply is not lost to
  // a reset (closing with unread input sends RST).
  bool draining = false;
  // The client shut its sending side down (or went away) with commands
  // still to run: they run, their replies are sent, then it is closed.
  std::atomic<bool> peer_closed{false};
  size_t drained_bytes = 0;
  uint32_t events = 0;

  // Not reading while queued_bytes is over kQueuedBytesMax, or while an
  // unauthenticated command waits to run (loop thread).
  bool paused = false;
  // The session has authenticated, as of the last command run (the worker
  // stores it before gated_pending drops).
  std::atomic<bool> authenticated{false};
  // Commands parsed before authentication and not yet run: the next one is
  // parsed only once this is 0, under limits its outcome decides.
  std::atomic<int> gated_pending{0};

  std::atomic<bool> closed{false};
  Mutex mu;
  // A worker is writing replies to fd itself (RespServer::SendDirect):
  // Close waits for it before closing fd.
  bool direct_writing ABSL_GUARDED_BY(mu) = false;
  CondVar direct_done;
  std::deque<Pending> queue ABSL_GUARDED_BY(mu);
  // The charges (Pending::bytes) of the commands queued or running.
  std::atomic<int64_t> queued_bytes{0};
  bool running ABSL_GUARDED_BY(mu) = false;
  std::deque<std::string> out ABSL_GUARDED_BY(mu);
  size_t out_bytes ABSL_GUARDED_BY(mu) = 0;
  // Bytes of replies in `out` and `wq` together.
  std::atomic<size_t> unsent_bytes{0};
  bool close_after ABSL_GUARDED_BY(mu) = false;
};

// Drops conn's queued commands and their charges.
static void DropQueueLocked(Connection* conn, ServerStats* stats)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(conn->mu) {
  for (const Connection::Pending& q : conn->queue) {
    stats->inflight_bytes.fetch_sub(q.bytes);
    conn->queued_bytes.fetch_sub(q.bytes);
  }
  conn->queue.clear();
}

// The socket of one plain connection, for the command a worker runs, or
// for the GETs the event loop serves itself (`wait` false: what the socket
// does not take at once is queued, as the loop must not block).
class RespServer::ConnectionSink final : public DirectSink {
 public:
  ConnectionSink(RespServer* server, Connection* conn, bool wait = true)
      : server_(server), conn_(conn), wait_(wait) {}
  size_t Send(const iovec* iov, int iovcnt, uint64_t until_mono_ms) override {
    return server_->SendDirect(conn_, iov, iovcnt, wait_ ? until_mono_ms : 0);
  }

 private:
  RespServer* const server_;
  Connection* const conn_;
  const bool wait_;
};

RespServer::RespServer(const RespServerOptions& options, CommandHandler* handler,
                       ServerStats* stats)
    : options_(options), handler_(handler), stats_(stats) {}

RespServer::~RespServer() {
  Stop();
  if (pool_ != nullptr) pool_->Shutdown();
  for (auto& [fd, conn] : conns_) close(fd);
  conns_.clear();
  for (int fd : listen_fds_) close(fd);
  if (!options_.unix_socket.empty()) unlink(options_.unix_socket.c_str());
  if (event_fd_ >= 0) close(event_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

absl::StatusOr<std::unique_ptr<RespServer>> RespServer::Start(const RespServerOptions& options,
                                                              CommandHandler* handler,
                                                              ServerStats* stats) {
  if (options.threads < 1 || options.max_clients < 1) {
    return absl::InvalidArgumentError("threads and max_clients must be at least 1");
  }
  std::unique_ptr<RespServer> s(new RespServer(options, handler, stats));
  s->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  s->spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  s->event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->epoll_fd_ < 0 || s->event_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll/eventfd: ", ErrnoText(errno)));
  }
  if (options.listen.empty() && options.tls_listen.empty() && options.unix_socket.empty()) {
    return absl::InvalidArgumentError(
        "nothing to listen on: give --listen, --tls-listen or "
        "--unix-socket");
  }
  if (!options.tls_listen.empty() && options.tls == nullptr) {
    return absl::InvalidArgumentError("--tls-listen needs --tls-cert and --tls-key");
  }
  for (bool tls : {false, true}) {
    const std::string& spec = tls ? options.tls_listen : options.listen;
    if (spec.empty()) continue;
    absl::StatusOr<HostPort> hp = ParseHostPort(spec);
    if (!hp.ok()) return hp.status();
    HostPort bound;
    absl::StatusOr<int> fd = TcpListen(*hp, &bound, 1024);
    if (!fd.ok()) return fd.status();
    s->listen_fds_.push_back(*fd);
    (tls ? s->tls_address_ : s->address_) = bound.ToString();
    if (tls) s->tls_listen_fd_ = *fd;
  }
  if (!options.unix_socket.empty()) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (options.unix_socket.size() >= sizeof(addr.sun_path)) {
      return absl::InvalidArgumentError("--unix-socket path too long");
    }
    std::memcpy(addr.sun_path, options.unix_socket.data(), options.unix_socket.size());
    int ufd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unlink(options.unix_socket.c_str());
    if (ufd < 0 || bind(ufd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(ufd, 1024) != 0) {
      std::string err = ErrnoText(errno);
      if (ufd >= 0) close(ufd);
      return absl::UnavailableError(
          absl::StrCat("cannot listen on unix socket ", options.unix_socket, ": ", err));
    }
    s->listen_fds_.push_back(ufd);
  }
  for (int lfd : s->listen_fds_) {
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, lfd, &ev);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s->event_fd_;
  epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->event_fd_, &ev);
  if (options.value_arena_bytes > 0) {
    absl::StatusOr<std::shared_ptr<ValueArena>> arena =
        ValueArena::Create(options.value_arena_bytes);
    if (arena.ok()) {
      s->placer_ = [arena = *std::move(arena), stats](size_t capacity) {
        PlacedValue v = arena->Allocate(capacity);
        (v ? stats->placed_values : stats->unplaced_values).Increment(1);
        return v;
      };
    } else {
      // Served all the same: each large SET's put costs one more copy.
      SHELF_LOG(WARNING) << "no value arena; SET values go to heap memory"
                         << Kv("error", arena.status().ToString());
    }
  }
  // A connection has at most one task queued or running.
  s->pool_ = std::make_unique<ThreadPool>(options.threads, options.max_clients + 64);
  return s;
}

void RespServer::Stop() {
  stop_.store(true);
  uint64_t one = 1;
  ssize_t unused = write(event_fd_, &one, sizeof(one));
  (void)unused;
}

void RespServer::Run() {
  std::vector<epoll_event> events(256);
  while (!stop_.load()) {
    int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                       tls_pending_.empty() ? 1000 : 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      SHELF_LOG(ERROR) << "epoll_wait failed" << Kv("error", ErrnoText(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      uint32_t ev = events[i].events;
      if (fd == event_fd_) {
        uint64_t v;
        while (read(event_fd_, &v, sizeof(v)) > 0) {
        }
        DrainNotified();
        continue;
      }
      bool is_listen = false;
      for (int lfd : listen_fds_) is_listen |= (fd == lfd);
      if (is_listen) {
        Accept(fd);
        continue;
      }
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;
      std::shared_ptr<Connection> conn = it->second;
      if (conn->paused && (ev & (EPOLLHUP | EPOLLERR))) {
        Close(conn);  // gone while not read: no reply can reach it
        continue;
      }
      if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        // Not reading, an SSL_write waits for input (a key update): only
        // the write goes on.
        if (conn->write_wants_read && !conn->reading && !(ev & (EPOLLHUP | EPOLLERR))) {
          Flush(conn);
        } else {
          OnReadable(conn);
          if (!conn->closed.load() && conn->write_wants_read) Flush(conn);
        }
      }
      if (!conn->closed.load() && (ev & EPOLLOUT)) {
        // The TLS handshake, or an SSL_read, waited for the socket to drain.
        if (conn->reading && (conn->handshake_wants_write || conn->read_wants_write)) {
          OnReadable(conn);
        }
        if (!conn->closed.load()) Flush(conn);
      }
    }
    if (!handshakes_.empty()) ExpireHandshakes();
    if (!tls_pending_.empty()) {
      std::vector<std::shared_ptr<Connection>> pending;
      pending.swap(tls_pending_);
      for (const std::shared_ptr<Connection>& conn : pending) {
        if (!conn->closed.load() && conn->reading) OnReadable(conn);
      }
    }
  }
}

void RespServer::Accept(int listen_fd) {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd =
        accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    bool full = conns_.size() >= options_.max_clients;
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
      // Out of descriptors: the level-triggered listener would wake the loop
      // forever. The spare descriptor makes room to take it and refuse it.
      close(spare_fd_);
      fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
      full = true;
      if (MonoMs() >= fd_warned_ms_ + 10000) {  // at most every 10 s
        fd_warned_ms_ = MonoMs();
        SHELF_LOG(WARNING) << "out of file descriptors: refusing clients" << Kv("n", conns_.size());
      }
    }
    if (fd < 0) return;  // EAGAIN, or a transient error: retried on the next event
    if (full) {
      static const char kFull[] = "-ERR max number of clients reached\r\n";
      ssize_t unused = write(fd, kFull, sizeof(kFull) - 1);
      (void)unused;
      close(fd);
      stats_->rejected_connections.Increment(1);
      continue;
    }
    std::string peer = "unix";
    if (addr.ss_family == AF_INET || addr.ss_family == AF_INET6) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      char host[INET6_ADDRSTRLEN] = {0};
      uint16_t port = 0;
      if (addr.ss_family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(&addr);
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
      } else {
        auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
      }
      peer = absl::StrCat(host, ":", port);
    }
    auto conn = std::make_shared<Connection>(fd, next_id_++, NewParser());
    if (listen_fd == tls_listen_fd_) {
      conn->ssl = options_.tls->NewSession(fd);
      if (conn->ssl == nullptr) {
        close(fd);
        stats_->tls_handshake_failures.Increment(1);
        continue;
      }
      handshakes_.push_back({MonoMs() + options_.tls_handshake_timeout_ms, conn});
    }
    conn->session.peer = peer;
    conn->session.created_unix_s = std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count();
    conns_[fd] = conn;
    stats_->connected_clients.fetch_add(1);
    stats_->total_connections.Increment(1);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    conn->events = EPOLLIN;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

void RespServer::UpdateEvents(Connection* conn) {
  bool in = (conn->reading && !conn->paused) || conn->write_wants_read;
  bool out = conn->want_write || conn->handshake_wants_write || conn->read_wants_write;
  uint32_t want = (in ? uint32_t{EPOLLIN} : 0u) | (out ? uint32_t{EPOLLOUT} : 0u);
  if (want == conn->events) return;
  conn->events = want;
  epoll_event ev{};
  ev.events = want;
  ev.data.fd = conn->fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn->fd, &ev);
}

void RespServer::ChargeParser(Connection* conn) {
  int64_t charge =
      static_cast<int64_t>(conn->parser.buffered_bytes() + conn->parser.announced_bytes());
  stats_->inflight_bytes.fetch_add(charge - conn->parser_charge);
  conn->parser_charge = charge;
}

void RespServer::OnReadable(const std::shared_ptr<Connection>& conn) {
  static thread_local std::vector<char> buf(kReadChunkBytes);
  if (conn->draining) {
    for (;;) {
      ssize_t n = read(conn->fd, buf.data(), buf.size());
      if (n > 0) {
        conn->drained_bytes += static_cast<size_t>(n);
        if (conn->drained_bytes <= kDrainBytesMax) continue;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      }
      Close(conn);
      return;
    }
  }
  if (!conn->reading) {  // a hang-up or error while not reading
    Close(conn);
    return;
  }
  if (conn->ssl != nullptr && !conn->handshake_done && !Handshake(conn)) return;
  size_t total = 0;
  bool eof = false;
  bool more = false;    // stopped with input left
  bool queued = false;  // a command (or a failure) was queued to run
  while (conn->reading && !conn->paused) {
    if (total >= kReadPerEventBytes) {
      more = true;
      break;
    }
    size_t want = buf.size();
    if (Gated(*conn)) {
      // Unauthenticated: read ahead kUnauthenticatedBufferBytes at most.
      const size_t held = conn->parser.buffered_bytes();
      if (held >= kUnauthenticatedBufferBytes) break;
      want = std::min(want, kUnauthenticatedBufferBytes - held);
    }
    if (conn->ssl == nullptr && conn->parser.WantsBulkFill()) {
      // A large value arriving: read it straight into its argument, as
      // much as the socket holds now (what is zero-filled ahead of the
      // read is then all overwritten).
      int ready = 0;
      size_t room = 0;
      char* into = nullptr;
      if (ioctl(conn->fd, FIONREAD, &ready) == 0 && ready > 0) {
        into = conn->parser.BeginBulkFill(std::min(want, static_cast<size_t>(ready)), &room);
      }
      if (into != nullptr) {
        ssize_t n = ReadSome(conn.get(), into, room);
        conn->parser.EndBulkFill(n > 0 ? static_cast<size_t>(n) : 0);
        if (n > 0) {
          total += static_cast<size_t>(n);
          stats_->direct_received_bytes.Increment(static_cast<double>(n));
          queued |= ParseInput(conn);  // the value may be whole now
          continue;
        }
        if (n < 0) break;
        eof = true;
        break;
      }
    }
    ssize_t n = ReadSome(conn.get(), buf.data(), want);
    if (n > 0) {
      total += static_cast<size_t>(n);
      conn->parser.Feed(buf.data(), static_cast<size_t>(n));
      // Parsed as it comes: a large value's header, once parsed, lets the
      // rest of the value be read straight into its argument (above).
      queued |= ParseInput(conn);
      // A short plain read emptied the socket; SSL_read returns one record
      // at a time, so TLS reads on until OpenSSL wants more input.
      if (conn->ssl == nullptr && static_cast<size_t>(n) < want) break;
      continue;
    }
    if (n < 0) break;
    eof = true;  // closed by the peer, or reset
    break;
  }
  // The socket may show nothing while OpenSSL holds the rest.
  if (more && conn->ssl != nullptr && TlsHasPending(conn->ssl)) tls_pending_.push_back(conn);
  stats_->bytes_in.Increment(total);
  // What was left unparsed before (a connection resumed after a pause).
  queued |= ParseInput(conn);
  if (conn->reading && !conn->paused && Gated(*conn) &&
      conn->parser.buffered_bytes() >= kUnauthenticatedBufferBytes) {
    // Cannot happen with whole commands under kUnauthenticatedLimits; were
    // it to, the socket would be readable for ever with nothing read.
    FailConnection(conn, "ERR Protocol error: unauthenticated request too large");
    queued = true;
  }
  if (stats_->inflight_bytes.load() > static_cast<int64_t>(options_.max_inflight_bytes)) {
    // Over the budget: the connection holding the most gets -OOM and is
    // closed, not whichever one was caught mid-value.
    std::shared_ptr<Connection> largest;
    int64_t most = 0;
    for (const auto& [fd, c] : conns_) {
      const int64_t held = c->reading ? c->parser_charge + c->queued_bytes.load() : 0;
      if (held > most) {
        most = held;
        largest = c;
      }
    }
    if (largest != nullptr) {
      stats_->inflight_rejections.Increment(1);
      FailConnection(largest,
                     absl::StrCat("OOM command not allowed: requests in flight are over "
                                  "--max-inflight-bytes (",
                                  options_.max_inflight_bytes, " bytes)"),
                     /*drop_queued=*/true);
      if (largest == conn) {
        queued = true;
      } else {
        Schedule(largest);
      }
    }
  }
  if (eof) {
    bool busy = !conn->wq.empty();
    {
      MutexLock l(&conn->mu);
      busy = busy || conn->running || !conn->queue.empty() || !conn->out.empty();
    }
    if (!busy) {
      Close(conn);
      return;
    }
    conn->peer_closed.store(true);
    if (conn->reading) {
      conn->reading = false;
      conn->parser = NewParser();  // a partial command never runs
      ChargeParser(conn.get());
      UpdateEvents(conn.get());
    }
    queued = true;
  }
  if (!queued) return;
  if (ServeCached(conn)) {
    Flush(conn);  // writes the replies, and schedules what is left
    return;
  }
  Schedule(conn);
}

bool RespServer::ServeCached(const std::shared_ptr<Connection>& conn) {
  std::vector<std::string> keys;
  {
    MutexLock l(&conn->mu);
    if (conn->running || conn->closed.load() || conn->close_after ||
        conn->unsent_bytes.load() > kUnsentBytesMax) {
      return false;
    }
    for (const Connection::Pending& p : conn->queue) {
      if (!p.error.empty() || p.gated || keys.size() == CommandHandler::kGetRunCommandsMax ||
          handler_->Batchable(conn->session, p.args) != CommandHandler::BatchKind::kGet) {
        break;
      }
      keys.push_back(p.args[1]);
    }
    if (keys.empty()) return false;
    conn->running = true;  // the session is this thread's meanwhile
  }
  // The values' copies go to the socket from where they lie when nothing
  // of the connection's waits to be sent; the rest is queued, copied.
  ReplyChunks reply;
  ConnectionSink sink(this, conn.get(), /*wait=*/false);
  if (conn->ssl == nullptr) reply.direct = &sink;
  const bool served = handler_->ReplyCachedGets(conn->session, keys, &reply);
  int64_t bytes = 0;
  {
    MutexLock l(&conn->mu);
    conn->running = false;
    if (!served) return false;
    for (size_t i = 0; i < keys.size(); ++i) {
      bytes += conn->queue.front().bytes;
      conn->queue.pop_front();
    }
    for (std::string& chunk : reply.chunks) {
      if (chunk.empty()) continue;
      conn->out_bytes += chunk.size();
      conn->unsent_bytes.fetch_add(chunk.size());
      conn->out.push_back(std::move(chunk));
    }
  }
  stats_->inflight_bytes.fetch_sub(bytes);
  conn->queued_bytes.fetch_sub(bytes);
  // A connection paused for its queue's bytes reads again (DrainNotified).
  if (conn->paused && conn->queued_bytes.load() < kQueuedBytesMax / 2) Notify(conn);
  return true;
}

bool RespServer::ParseInput(const std::shared_ptr<Connection>& conn) {
  std::vector<std::string> args;
  PlacedValue value;
  std::string error;
  bool queued = false;
  while (conn->reading) {
    if (conn->queued_bytes.load() > kQueuedBytesMax) {
      // The rest stays unparsed (counted at its size) and the socket unread
      // until they run down to half (DrainNotified).
      Pause(conn.get());
      ChargeParser(conn.get());
      break;
    }
    const bool gated = Gated(*conn);
    if (gated && conn->gated_pending.load() > 0) {
      // The command before decides the limits of the next: wait for it
      // (DrainNotified resumes once it has run).
      Pause(conn.get());
      break;
    }
    conn->parser.set_limits(gated ? kUnauthenticatedLimits : options_.limits);
    RespParser::Result r = conn->parser.Next(&args, &value, &error);
    if (r == RespParser::Result::kCommand) {
      int64_t bytes = kCommandOverheadBytes + static_cast<int64_t>(value.capacity);
      for (const std::string& a : args) {
        bytes += static_cast<int64_t>(a.capacity() + kArgOverheadBytes);
      }
      stats_->inflight_bytes.fetch_add(bytes);
      conn->queued_bytes.fetch_add(bytes);
      if (gated) conn->gated_pending.fetch_add(1);
      {
        MutexLock l(&conn->mu);
        conn->queue.push_back(
            Connection::Pending{std::move(args), "", bytes, gated, std::move(value)});
      }
      args = {};
      queued = true;
      continue;
    }
    ChargeParser(conn.get());
    if (r == RespParser::Result::kError) {
      FailConnection(conn, "ERR " + error);
      queued = true;
    }
    break;
  }
  return queued;
}

bool RespServer::Handshake(const std::shared_ptr<Connection>& conn) {
  std::string error;
  TlsIo r = TlsHandshake(conn->ssl, &error);
  conn->handshake_wants_write = (r == TlsIo::kWantWrite);
  if (r == TlsIo::kOk) {
    conn->handshake_done = true;
    stats_->tls_handshakes.Increment(1);
    UpdateEvents(conn.get());
    return true;
  }
  if (r == TlsIo::kWantRead || r == TlsIo::kWantWrite) {
    UpdateEvents(conn.get());
    return false;
  }
  // A plaintext client, a scanner or a bad certificate: this connection
  // alone goes.
  stats_->tls_handshake_failures.Increment(1);
  SHELF_LOG(DEBUG) << "TLS handshake failed" << Kv("peer", conn->session.peer)
                   << Kv("error", error);
  Close(conn);
  return false;
}

void RespServer::ExpireHandshakes() {
  uint64_t now = MonoMs();
  while (!handshakes_.empty() && handshakes_.front().deadline_ms <= now) {
    std::shared_ptr<Connection> conn = handshakes_.front().conn.lock();
    handshakes_.pop_front();
    if (conn == nullptr || conn->closed.load() || conn->handshake_done) continue;
    stats_->tls_handshake_failures.Increment(1);
    SHELF_LOG(DEBUG) << "TLS handshake timed out" << Kv("peer", conn->session.peer)
                     << Kv("timeout_ms", options_.tls_handshake_timeout_ms);
    Close(conn);
  }
}

ssize_t RespServer::ReadSome(Connection* conn, char* buf, size_t len) {
  if (conn->ssl == nullptr) {
    for (;;) {
      ssize_t n = read(conn->fd, buf, len);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      return (errno == EAGAIN || errno == EWOULDBLOCK) ? -1 : 0;
    }
  }
  size_t n = 0;
  TlsIo r = TlsRead(conn->ssl, buf, len, &n);
  bool wants_write = (r == TlsIo::kWantWrite);
  if (wants_write != conn->read_wants_write) {
    conn->read_wants_write = wants_write;
    UpdateEvents(conn);
  }
  if (r == TlsIo::kOk) return static_cast<ssize_t>(n);
  if (r == TlsIo::kWantRead || r == TlsIo::kWantWrite) return -1;
  return 0;
}

void RespServer::FailConnection(const std::shared_ptr<Connection>& conn, const std::string& error,
                                bool drop_queued) {
  conn->reading = false;
  conn->paused = false;        // not reading for good: nothing to resume
  conn->parser = NewParser();  // drops what it held
  ChargeParser(conn.get());
  UpdateEvents(conn.get());
  MutexLock l(&conn->mu);
  if (drop_queued) DropQueueLocked(conn.get(), stats_);
  conn->queue.push_back(Connection::Pending{{}, error, 0});
}

void RespServer::Schedule(const std::shared_ptr<Connection>& conn) {
  {
    MutexLock l(&conn->mu);
    if (conn->running || conn->queue.empty()) return;
    conn->running = true;
  }
  if (!pool_->TrySubmit([this, conn] { Work(conn); })) {
    MutexLock l(&conn->mu);
    conn->running = false;
  }
}

void RespServer::Work(const std::shared_ptr<Connection>& conn) {
  for (;;) {
    Connection::Pending p;
    // Consecutive GETs (or SETs) of a pipeline run as one batch.
    std::vector<std::vector<std::string>> run;
    std::vector<PlacedValue> run_values;  // the run's placed SET values, one per command
    CommandHandler::BatchKind kind = CommandHandler::BatchKind::kNone;
    {
      ReleasableMutexLock l(&conn->mu);
      if (conn->closed.load() || conn->queue.empty() || conn->close_after ||
          conn->unsent_bytes.load() > kUnsentBytesMax) {
        conn->running = false;  // Flush schedules it again once the client has read
        if (conn->peer_closed.load()) {
          l.Release();
          Notify(conn);  // the loop closes it once the replies are out
        }
        return;
      }
      p = std::move(conn->queue.front());
      conn->queue.pop_front();
      if (p.error.empty()) kind = handler_->Batchable(conn->session, p.args, p.value.size);
      while (kind != CommandHandler::BatchKind::kNone && !conn->queue.empty() &&
             run.size() + 1 < (kind == CommandHandler::BatchKind::kGet
                                   ? CommandHandler::kGetRunCommandsMax
                                   : CommandHandler::kSetRunCommandsMax) &&
             conn->queue.front().error.empty() &&
             handler_->Batchable(conn->session, conn->queue.front().args,
                                 conn->queue.front().value.size) == kind) {
        if (run.empty()) {
          run.push_back(std::move(p.args));
          run_values.push_back(std::move(p.value));
        }
        p.bytes += conn->queue.front().bytes;
        run.push_back(std::move(conn->queue.front().args));
        run_values.push_back(std::move(conn->queue.front().value));
        conn->queue.pop_front();
      }
    }
    ReplyChunks reply;
    ConnectionSink sink(this, conn.get());
    if (conn->ssl == nullptr) reply.direct = &sink;  // set at accept, before any command
    bool close = false;
    if (!p.error.empty()) {
      RespWriter(reply.tail(), conn->session.protocol).Error(p.error);
      close = true;
    } else if (!run.empty()) {
      handler_->ExecuteRun(&conn->session, kind, &run, &reply, &run_values);
      run.clear();
      run_values.clear();  // their room goes back to the arena
    } else {
      handler_->Execute(&conn->session, &p.args, &reply, &close, &p.value);
    }
    p.args.clear();
    p.value = PlacedValue();
    if (reply.direct != nullptr && !close) {
      // The reply to the last command the connection has sent so far, with
      // nothing of it waiting to be sent (SendDirect checks): written here
      // and now rather than handed to the loop, which would be woken to
      // write it (one wake-up and hand-off less per command of a client
      // that waits for each reply). A pipeline's replies still go out
      // together from the loop.
      bool last;
      {
        MutexLock l(&conn->mu);
        last = conn->queue.empty();
      }
      if (last) SendReplyNow(&reply);
    }
    conn->authenticated.store(conn->session.authenticated);
    if (p.gated) conn->gated_pending.fetch_sub(1);
    stats_->inflight_bytes.fetch_sub(p.bytes);
    // Crossing half of kQueuedBytesMax: a paused connection reads again.
    const int64_t before = conn->queued_bytes.fetch_sub(p.bytes);
    const bool resume = before >= kQueuedBytesMax / 2 && before - p.bytes < kQueuedBytesMax / 2;
    bool notify;
    {
      MutexLock l(&conn->mu);
      for (std::string& chunk : reply.chunks) {
        if (chunk.empty()) continue;
        conn->out_bytes += chunk.size();
        conn->unsent_bytes.fetch_add(chunk.size());
        conn->out.push_back(std::move(chunk));
      }
      if (close) {
        conn->close_after = true;
        DropQueueLocked(conn.get(), stats_);
      }
      // A reply sent whole by the worker (SendDirect) leaves the loop
      // nothing to do.
      notify = (conn->queue.empty() && !conn->out.empty()) || conn->out_bytes >= kNotifyOutBytes ||
               close || resume || p.gated;
    }
    if (notify) Notify(conn);
  }
}

void RespServer::SendReplyNow(ReplyChunks* reply) {
  iovec iov[kIovMax];
  int n = 0;
  for (const std::string& chunk : reply->chunks) {
    if (chunk.empty()) continue;
    if (n == kIovMax) break;
    iov[n++] = iovec{const_cast<char*>(chunk.data()), chunk.size()};
  }
  if (n == 0) return;
  size_t sent = reply->direct->Send(iov, n, /*until_mono_ms=*/0);
  // What the socket did not take stays in the chunks, to be queued.
  for (std::string& chunk : reply->chunks) {
    if (sent == 0) break;
    const size_t cut = std::min(sent, chunk.size());
    chunk.erase(0, cut);
    sent -= cut;
  }
}

size_t RespServer::SendDirect(Connection* conn, const iovec* iov, int iovcnt,
                              uint64_t until_mono_ms) {
  {
    // Nothing of the connection's may be waiting to be sent: these bytes
    // must follow every earlier reply. The loop writes only what is queued
    // (none now, and only this worker queues for this connection), so the
    // socket is this thread's until it is done.
    MutexLock l(&conn->mu);
    if (conn->closed.load() || conn->close_after || !conn->out.empty() ||
        conn->unsent_bytes.load() != 0) {
      return 0;
    }
    conn->direct_writing = true;
  }
  until_mono_ms = std::min(until_mono_ms, MonoMs() + kDirectSendWaitMs);
  std::vector<iovec> rest(iov, iov + iovcnt);
  size_t first = 0;  // rest[first] is the next to send
  size_t sent = 0;
  while (first < rest.size()) {
    msghdr msg{};
    msg.msg_iov = &rest[first];
    msg.msg_iovlen = std::min<size_t>(rest.size() - first, IOV_MAX);
    ssize_t w = sendmsg(conn->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      sent += static_cast<size_t>(w);
      size_t left = static_cast<size_t>(w);
      while (first < rest.size() && left >= rest[first].iov_len) left -= rest[first++].iov_len;
      if (left > 0) {
        rest[first].iov_base = static_cast<char*>(rest[first].iov_base) + left;
        rest[first].iov_len -= left;
      }
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const uint64_t now = MonoMs();
      if (now >= until_mono_ms) break;
      pollfd pfd{conn->fd, POLLOUT, 0};
      if (poll(&pfd, 1, static_cast<int>(until_mono_ms - now)) > 0 &&
          (pfd.revents & (POLLERR | POLLHUP)) == 0) {
        continue;
      }
      break;
    }
    break;  // the peer is gone: the rest is queued, and the loop's write closes it
  }
  stats_->bytes_out.Increment(static_cast<double>(sent));
  stats_->direct_sent_bytes.Increment(static_cast<double>(sent));
  MutexLock l(&conn->mu);
  conn->direct_writing = false;
  conn->direct_done.SignalAll();
  return sent;
}

void RespServer::Notify(const std::shared_ptr<Connection>& conn) {
  {
    MutexLock l(&notify_mu_);
    notified_.push_back(conn);
  }
  uint64_t one = 1;
  ssize_t unused = write(event_fd_, &one, sizeof(one));
  (void)unused;
}

bool RespServer::Gated(const Connection& conn) const {
  return options_.auth_required && !conn.authenticated.load();
}

void RespServer::Pause(Connection* conn) {
  if (conn->paused) return;
  conn->paused = true;
  UpdateEvents(conn);
}

void RespServer::DrainNotified() {
  std::vector<std::shared_ptr<Connection>> batch;
  {
    MutexLock l(&notify_mu_);
    batch.swap(notified_);
  }
  for (const std::shared_ptr<Connection>& conn : batch) {
    if (conn->closed.load()) continue;
    if (conn->paused && conn->reading && conn->queued_bytes.load() < kQueuedBytesMax / 2) {
      conn->paused = false;
      UpdateEvents(conn.get());
      OnReadable(conn);  // parse what was left, read on (OpenSSL may hold more)
      if (conn->closed.load()) continue;
    }
    Flush(conn);
  }
}

void RespServer::Flush(const std::shared_ptr<Connection>& conn) {
  bool close_after;
  {
    MutexLock l(&conn->mu);
    for (std::string& chunk : conn->out) conn->wq.push_back(std::move(chunk));
    conn->out.clear();
    conn->out_bytes = 0;
    close_after = conn->close_after;
  }
  if (!(conn->ssl != nullptr ? WriteTls(conn) : WritePlain(conn))) return;
  conn->want_write = !conn->wq.empty();
  if (!conn->want_write && close_after && !conn->draining) {
    if (conn->ssl != nullptr && conn->handshake_done) SSL_shutdown(conn->ssl);  // close_notify
    shutdown(conn->fd, SHUT_WR);
    conn->draining = true;
    conn->reading = true;  // to see the client's close
  }
  if (!close_after && conn->unsent_bytes.load() <= kUnsentBytesMax) Schedule(conn);
  if (conn->peer_closed.load() && conn->wq.empty()) {
    bool idle;
    {
      MutexLock l(&conn->mu);
      idle = !conn->running && conn->queue.empty() && conn->out.empty();
    }
    if (idle) {
      Close(conn);
      return;
    }
  }
  UpdateEvents(conn.get());
}

void RespServer::Consume(Connection* conn, size_t bytes) {
  stats_->bytes_out.Increment(bytes);
  conn->unsent_bytes.fetch_sub(bytes);
  while (bytes > 0) {
    size_t in_front = conn->wq.front().size() - conn->wq_off;
    if (bytes >= in_front) {
      bytes -= in_front;
      conn->wq.pop_front();
      conn->wq_off = 0;
    } else {
      conn->wq_off += bytes;
      bytes = 0;
    }
  }
}

bool RespServer::WriteTls(const std::shared_ptr<Connection>& conn) {
  bool wanted_read = conn->write_wants_read;
  conn->write_wants_read = false;
  while (!conn->wq.empty()) {
    const char* p;
    size_t len;
    if (!conn->tls_stage.empty()) {  // a staged record to repeat
      p = conn->tls_stage.data();
      len = conn->tls_stage.size();
    } else if (conn->tls_retry_len > 0) {  // a direct write to repeat
      p = conn->wq.front().data() + conn->wq_off;
      len = conn->tls_retry_len;
    } else if (conn->wq.front().size() - conn->wq_off >= kTlsCoalesceBytes ||
               conn->wq.size() == 1) {
      p = conn->wq.front().data() + conn->wq_off;
      len = std::min(conn->wq.front().size() - conn->wq_off, kTlsWriteBytesMax);
    } else {
      size_t off = conn->wq_off;
      for (auto it = conn->wq.begin();
           it != conn->wq.end() && conn->tls_stage.size() < kTlsCoalesceBytes; ++it) {
        size_t take = std::min(it->size() - off, kTlsCoalesceBytes - conn->tls_stage.size());
        conn->tls_stage.append(it->data() + off, take);
        off = 0;
      }
      p = conn->tls_stage.data();
      len = conn->tls_stage.size();
    }
    size_t w = 0;
    TlsIo r = TlsWrite(conn->ssl, p, len, &w);
    if (r == TlsIo::kOk) {
      // A partial write of the stage: the rest is restaged from wq.
      conn->tls_stage.clear();
      conn->tls_retry_len = 0;
      Consume(conn.get(), w);
      continue;
    }
    if (r == TlsIo::kWantWrite || r == TlsIo::kWantRead) {
      if (conn->tls_stage.empty()) conn->tls_retry_len = len;
      conn->write_wants_read = (r == TlsIo::kWantRead);
      break;
    }
    Close(conn);  // the peer is gone
    return false;
  }
  if (wanted_read != conn->write_wants_read) UpdateEvents(conn.get());
  return true;
}

bool RespServer::WritePlain(const std::shared_ptr<Connection>& conn) {
  while (!conn->wq.empty()) {
    iovec iov[kIovMax];
    int n = 0;
    size_t off = conn->wq_off;
    for (auto it = conn->wq.begin(); it != conn->wq.end() && n < kIovMax; ++it, ++n) {
      iov[n].iov_base = const_cast<char*>(it->data()) + off;
      iov[n].iov_len = it->size() - off;
      off = 0;
    }
    // sendmsg, not writev: a client gone away is EPIPE, never SIGPIPE,
    // whatever the embedding process does with the signal.
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = sendmsg(conn->fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Close(conn);  // the peer is gone
      return false;
    }
    Consume(conn.get(), static_cast<size_t>(w));
  }
  return true;
}

void RespServer::Close(const std::shared_ptr<Connection>& conn) {
  if (conn->closed.exchange(true)) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd, nullptr);
  conns_.erase(conn->fd);
  {
    // A worker sending to the socket itself is stopped (its send fails at
    // once) and waited for: fd must not be closed, and perhaps reused for
    // another client, under it.
    MutexLock l(&conn->mu);
    if (conn->direct_writing) shutdown(conn->fd, SHUT_RDWR);
    while (conn->direct_writing) conn->direct_done.Wait(&conn->mu);
  }
  close(conn->fd);
  stats_->inflight_bytes.fetch_sub(conn->parser_charge);
  conn->parser_charge = 0;
  conn->parser = NewParser();
  conn->wq.clear();
  conn->tls_stage.clear();
  {
    MutexLock l(&conn->mu);
    DropQueueLocked(conn.get(), stats_);
    conn->out.clear();
  }
  stats_->connected_clients.fetch_sub(1);
}

}  // namespace shelf::resp
