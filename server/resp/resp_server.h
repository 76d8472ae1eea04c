// RespServer: the network side of shelf-resp. One thread runs a
// level-triggered epoll loop over the listening sockets (TCP and optionally
// a unix socket) and every client connection: it reads, parses (bounded:
// RespParser) and writes. Whole commands go to a small worker pool, which
// runs each connection's commands one at a time, in arrival order, so
// pipelined replies come back in order while distinct connections run in
// parallel. A worker answering GETs on a plain connection with nothing
// left to send writes the reply itself, values from where they lie in a
// store's mapped segment (DirectSink, SendDirect); Close waits for such a
// write before it closes the socket. GETs whose values this host's stores
// vouch for without a round trip (a cached location, the store's key
// board) run on the loop itself when no worker holds their connection.
//
//   RespServerOptions o;  o.listen = "0.0.0.0:6379";
//   auto server = RespServer::Start(o, &handler, &stats);
//   (*server)->Run();    // until Stop() from another thread
//
// With options.tls a second TCP listener (--tls-listen) speaks RESP over
// TLS: the handshake, reads and writes are non-blocking on the same loop
// (resp_tls.h); a failed handshake closes that connection alone. An empty
// options.listen turns the plain listener off.
//
// Memory is bounded by --max-inflight-bytes: the bytes all parsers hold
// plus the bytes announced by bulk headers being received plus queued
// commands. A connection whose input would pass it gets -OOM and is closed.
//
// Thread-safety: Stop() may be called from any thread; the rest from one.
#ifndef SHELF_SERVER_RESP_RESP_SERVER_H_
#define SHELF_SERVER_RESP_RESP_SERVER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "server/resp/resp_commands.h"
#include "server/resp/resp_parser.h"
#include "server/resp/resp_tls.h"

namespace shelf::resp {

// While a password is required (RespServerOptions::auth_required) and a
// connection has not authenticated, its commands are parsed one at a time,
// each only after the previous one ran, under these limits (enough for
// HELLO 3 AUTH user password SETNAME name), and at most
// kUnauthenticatedBufferBytes of its input is read ahead: an unauthenticated
// socket holds kilobytes, never a value.
inline constexpr RespLimits kUnauthenticatedLimits{/*args_max=*/10, /*bulk_bytes_max=*/4096,
                                                   /*line_bytes_max=*/4096,
                                                   /*unauthenticated=*/true};
inline constexpr size_t kUnauthenticatedBufferBytes = 64 << 10;

struct RespServerOptions {
  std::string listen = "127.0.0.1:6379";  // HOST:PORT; port 0 picks one; empty: none
  std::string tls_listen;                 // HOST:PORT served over TLS; empty: none
  std::shared_ptr<const TlsContext> tls;  // required with tls_listen
  std::string unix_socket;                // path; empty: none
  size_t max_clients = 10000;
  uint64_t max_inflight_bytes = 2ull << 30;
  size_t threads = 16;  // workers running commands (blocking libshelf calls)
  // A TLS connection that has not finished its handshake this long after
  // accept is closed: a peer that sends part of a record and waits would
  // otherwise hold its connection (and a --max-clients slot) for ever.
  uint64_t tls_handshake_timeout_ms = 10000;
  RespLimits limits;
  // A password is required (--requirepass-file): unauthenticated
  // connections are read under kUnauthenticatedLimits.
  bool auth_required = false;
  // Shared host memory large SET values are read into (--value-arena-size,
  // resp_value_arena.h); 0: none, every value in heap memory.
  size_t value_arena_bytes = size_t{64} << 20;
};

struct Connection;

class RespServer {
 public:
  static absl::StatusOr<std::unique_ptr<RespServer>> Start(const RespServerOptions& options,
                                                           CommandHandler* handler,
                                                           ServerStats* stats);
  ~RespServer();
  RespServer(const RespServer&) = delete;
  RespServer& operator=(const RespServer&) = delete;

  // The plain TCP address listened on (the real port); empty when off.
  const std::string& address() const { return address_; }
  // The TLS address listened on; empty when off.
  const std::string& tls_address() const { return tls_address_; }
  // Serves until Stop().
  void Run();
  void Stop();

 private:
  RespServer(const RespServerOptions& options, CommandHandler* handler, ServerStats* stats);
  void Accept(int listen_fd);
  void OnReadable(const std::shared_ptr<Connection>& conn);
  // Queues the whole commands conn's parser holds (or a failure); pauses
  // reading past the queue's bound. True when anything was queued.
  bool ParseInput(const std::shared_ptr<Connection>& conn);
  void Flush(const std::shared_ptr<Connection>& conn);
  void Close(const std::shared_ptr<Connection>& conn);
  void Schedule(const std::shared_ptr<Connection>& conn);
  // Runs conn's leading plain GETs here, on the loop, when none needs a
  // round trip to read (CommandHandler::ReplyCachedGets): no hand-off to a
  // worker and back. True when it ran any.
  bool ServeCached(const std::shared_ptr<Connection>& conn);
  void Work(const std::shared_ptr<Connection>& conn);
  void Notify(const std::shared_ptr<Connection>& conn);
  // DirectSink::Send for `conn`, from the worker running its command.
  class ConnectionSink;
  size_t SendDirect(Connection* conn, const iovec* iov, int iovcnt, uint64_t until_mono_ms);
  // Sends what the socket takes now of `reply` through reply->direct (which
  // writes nothing while earlier replies wait), leaving the rest in its
  // chunks.
  void SendReplyNow(ReplyChunks* reply);
  void DrainNotified();
  void UpdateEvents(Connection* conn);
  // Whether `conn` is read under kUnauthenticatedLimits.
  bool Gated(const Connection& conn) const;
  // Stops reading `conn` until DrainNotified resumes it.
  void Pause(Connection* conn);
  // Replies `error` after what already ran, then closes; stops reading.
  // `drop_queued`: the commands read but not yet run are dropped, not run.
  void FailConnection(const std::shared_ptr<Connection>& conn, const std::string& error,
                      bool drop_queued = false);
  void ChargeParser(Connection* conn);
  bool Handshake(const std::shared_ptr<Connection>& conn);
  // One read: > 0 bytes, 0 at EOF (or a reset), -1 when nothing more now.
  ssize_t ReadSome(Connection* conn, char* buf, size_t len);
  // Writes what it can of conn->wq; false when it closed the connection.
  bool WritePlain(const std::shared_ptr<Connection>& conn);
  bool WriteTls(const std::shared_ptr<Connection>& conn);
  void Consume(Connection* conn, size_t bytes);
  // Closes TLS connections past their handshake deadline.
  void ExpireHandshakes();
  // A parser for a connection (new, or reset after an error).
  RespParser NewParser() const { return RespParser(options_.limits, placer_); }

  // Constant after Start.
  const RespServerOptions options_;
  ValuePlacer placer_;  // null without a value arena
  CommandHandler* const handler_;
  ServerStats* const stats_;
  std::string address_;
  std::string tls_address_;
  int tls_listen_fd_ = -1;
  int epoll_fd_ = -1;
  int event_fd_ = -1;          // workers wake the loop through it
  int spare_fd_ = -1;          // given up to refuse a connection when out of descriptors
  uint64_t fd_warned_ms_ = 0;  // the last "out of file descriptors" warning (loop thread)
  std::vector<int> listen_fds_;
  std::unique_ptr<ThreadPool> pool_;

  // Loop thread only.
  std::unordered_map<int, std::shared_ptr<Connection>> conns_;
  uint64_t next_id_ = 1;
  // TLS connections with input OpenSSL holds but the socket no longer
  // shows: read again without waiting for epoll.
  std::vector<std::shared_ptr<Connection>> tls_pending_;
  // TLS connections in their handshake, by deadline (accept order: the
  // timeout is one for all, so the front expires first).
  struct HandshakeDeadline {
    uint64_t deadline_ms;
    std::weak_ptr<Connection> conn;
  };
  std::deque<HandshakeDeadline> handshakes_;

  std::atomic<bool> stop_{false};
  Mutex notify_mu_;
  std::vector<std::shared_ptr<Connection>> notified_ ABSL_GUARDED_BY(notify_mu_);
};

}  // namespace shelf::resp

#endif  // SHELF_SERVER_RESP_RESP_SERVER_H_
