// RespServer: the network side of shelf-resp. One thread runs a
// level-triggered epoll loop over the listening sockets (TCP and optionally
// a unix socket) and every client connection: it reads, parses (bounded:
// RespParser) and writes. Whole commands go to a small worker pool, which
// runs each connection's commands one at a time, in arrival order, so
// pipelined replies come back in order while distinct connections run in
// parallel.
//
//   RespServerOptions o;  o.listen = "0.0.0.0:6379";
//   auto server = RespServer::Start(o, &handler, &stats);
//   (*server)->Run();    // until Stop() from another thread
//
// Memory is bounded by --max-inflight-bytes: the bytes all parsers hold
// plus the bytes announced by bulk headers being received plus queued
// commands. A connection whose input would pass it gets -OOM and is closed.
//
// Thread-safety: Stop() may be called from any thread; the rest from one.
#ifndef SHELF_SERVER_RESP_RESP_SERVER_H_
#define SHELF_SERVER_RESP_RESP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "server/resp/resp_commands.h"
#include "server/resp/resp_parser.h"

namespace shelf::resp {

struct RespServerOptions {
  std::string listen = "127.0.0.1:6379";  // HOST:PORT; port 0 picks one
  std::string unix_socket;                // path; empty: none
  size_t max_clients = 10000;
  uint64_t max_inflight_bytes = 2ull << 30;
  size_t threads = 16;  // workers running commands (blocking libshelf calls)
  RespLimits limits;
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

  // The TCP address listened on (the real port).
  const std::string& address() const { return address_; }
  // Serves until Stop().
  void Run();
  void Stop();

 private:
  RespServer(const RespServerOptions& options, CommandHandler* handler, ServerStats* stats);
  void Accept(int listen_fd);
  void OnReadable(const std::shared_ptr<Connection>& conn);
  void Flush(const std::shared_ptr<Connection>& conn);
  void Close(const std::shared_ptr<Connection>& conn);
  void Schedule(const std::shared_ptr<Connection>& conn);
  void Work(std::shared_ptr<Connection> conn);
  void Notify(const std::shared_ptr<Connection>& conn);
  void DrainNotified();
  void UpdateEvents(Connection* conn);
  void FailConnection(const std::shared_ptr<Connection>& conn, const std::string& error);
  void ChargeParser(Connection* conn);

  // Constant after Start.
  const RespServerOptions options_;
  CommandHandler* const handler_;
  ServerStats* const stats_;
  std::string address_;
  int epoll_fd_ = -1;
  int event_fd_ = -1;  // workers wake the loop through it
  std::vector<int> listen_fds_;
  std::unique_ptr<ThreadPool> pool_;

  // Loop thread only.
  std::unordered_map<int, std::shared_ptr<Connection>> conns_;
  uint64_t next_id_ = 1;

  std::atomic<bool> stop_{false};
  absl::Mutex notify_mu_;
  std::vector<std::shared_ptr<Connection>> notified_ ABSL_GUARDED_BY(notify_mu_);
};

}  // namespace shelf::resp

#endif  // SHELF_SERVER_RESP_RESP_SERVER_H_
