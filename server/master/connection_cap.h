// ConnectionCap: a limit on the TCP connections shelf-master's gRPC server
// holds, and a share of it per source address. gRPC 1.51 (Debian 12) runs
// its own accept loop and has no such limit, so the cap watches the
// process's descriptors instead: every `interval_ms` it lists
// /proc/self/fd, and a socket it has not seen before whose local port is
// the server's is either counted or, past a limit, shut down
// (shutdown(SHUT_RDWR) on a duplicate of the descriptor; gRPC then reads
// EOF and closes its own). Connections are admitted in the order they are
// found, so the newest are the ones refused, as at an accept loop.
//
//   ConnectionCapOptions o;
//   o.port = bound_port;
//   o.max_connections = 16384;
//   std::unique_ptr<ConnectionCap> cap = ConnectionCap::Start(o, &DefaultExposition());
//   ...
//   cap.reset();  // stops the thread
//
// What it bounds and what it does not (docs/security.md, "TLS on gRPC"): a
// connection past the cap lives until the next pass (50 ms by default), so
// a burst can briefly hold more descriptors, up to LimitNOFILE. Sources are
// addresses: clients behind one NAT share one source's share.
//
// Metrics: shelf_master_connections (gauge: connections counted),
// shelf_master_connections_refused_total{rule="max_connections"|"source_share"}.
//
// Thread-safety: Start and the destructor from one thread; the pass runs on
// the cap's own thread, and connections() may be read from any thread.
#ifndef SHELF_SERVER_MASTER_CONNECTION_CAP_H_
#define SHELF_SERVER_MASTER_CONNECTION_CAP_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "common/prom.h"

namespace shelf::master {

struct ConnectionCapOptions {
  uint16_t port = 0;  // the server's listening TCP port
  // Connections counted at most; 0: no cap (the thread does not start).
  int max_connections = 16384;
  // Of them, from one source address; 0: half of max_connections.
  int max_per_source = 0;
  int interval_ms = 50;
};

class ConnectionCap {
 public:
  // Null when options.max_connections is 0.
  static std::unique_ptr<ConnectionCap> Start(const ConnectionCapOptions& options,
                                              prom::Exposition* exposition);
  ~ConnectionCap();
  ConnectionCap(const ConnectionCap&) = delete;
  ConnectionCap& operator=(const ConnectionCap&) = delete;

  // Connections counted at the last pass.
  int64_t connections() const { return admitted_.load(std::memory_order_relaxed); }

 private:
  // What one socket inode was found to be.
  struct Seen {
    bool counted = false;  // a connection to the port, within the limits
    std::string source;    // when counted
    uint64_t pass = 0;     // the last pass that found it
  };

  ConnectionCap(const ConnectionCapOptions& options, prom::Exposition* exposition);
  void Run();
  void Pass();
  // Looks at `fd` (inode `ino`) for the first time: counts, refuses or
  // ignores it.
  void Classify(int fd, ino_t ino);

  const ConnectionCapOptions options_;
  prom::Counter& refused_max_;
  prom::Counter& refused_share_;
  prom::CallbackHandle gauge_;

  // The cap's thread alone touches these.
  absl::flat_hash_map<ino_t, Seen> seen_;
  absl::flat_hash_map<std::string, int> per_source_;
  uint64_t pass_ = 0;

  std::atomic<int64_t> admitted_{0};
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_CONNECTION_CAP_H_
