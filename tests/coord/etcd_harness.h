// Test support for coord/: a real etcd server on loopback, and a TCP proxy
// that can cut one client off from it.
//
//   auto etcd = EtcdProcess::Start();   // skips the test when etcd is missing
//   ASSERT_TRUE(etcd.ok()) << etcd.status();
//   auto client = coord::EtcdClient::Connect((*etcd)->endpoint());
//   (*etcd)->Kill();  ...  ASSERT_TRUE((*etcd)->Restart().ok());
//
// Each EtcdProcess picks its own free client and peer ports and data
// directory, so tests run in parallel. The server dies with the test: the
// destructor kills it, and it gets SIGKILL if the test process dies first.
// Not thread-safe: drive each object from one thread.
#ifndef SHELF_TESTS_COORD_ETCD_HARNESS_H_
#define SHELF_TESTS_COORD_ETCD_HARNESS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coord/etcd_client.h"

namespace shelf::coord::testing {

// The etcd binary: $SHELF_ETCD_BIN, else /usr/bin/etcd, else "etcd" on PATH.
// Empty when none is found.
std::string FindEtcdBinary();

// TLS on etcd's client port: its certificate and key, and, with
// client_cert_auth, the CA that must have signed every client's certificate.
// `client` is what the harness's own readiness check connects with.
struct EtcdTls {
  std::string cert_file, key_file, ca_file;
  bool client_cert_auth = false;
  EtcdOptions client;
};

class EtcdProcess {
 public:
  // Starts etcd and returns once it answers reads (at most ~15 s).
  // NOT_FOUND when no etcd binary exists; UNAVAILABLE when it does not come up
  // (its log is quoted). With `tls`, the client port speaks TLS.
  // `extra_args` go to etcd as they are (e.g. "--auth-token-ttl=1").
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(
      const EtcdTls* tls = nullptr, std::vector<std::string> extra_args = {});
  ~EtcdProcess();  // kills etcd, removes the data directory

  // "http://127.0.0.1:PORT" ("https://" with TLS).
  std::string endpoint() const;
  uint16_t client_port() const { return client_port_; }

  // SIGKILL and wait: a crash, no graceful shutdown.
  void Kill();
  // Starts it again on the same ports and data; returns once it serves.
  absl::Status Restart();

 private:
  EtcdProcess() = default;
  absl::Status Spawn();
  absl::Status WaitReady(uint64_t timeout_ms);
  std::string LogTail() const;

  std::string binary_;
  std::string dir_;
  bool tls_on_ = false;
  EtcdTls tls_;
  std::vector<std::string> extra_args_;
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
  pid_t pid_ = -1;
};

// Forwards 127.0.0.1:port() to 127.0.0.1:target_port until Cut().
class TcpProxy {
 public:
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(uint16_t target_port);
  ~TcpProxy();

  uint16_t port() const { return port_; }
  // Closes every forwarded connection and, until Heal(), every new one as
  // soon as it is accepted: the client sees its peer vanish.
  void Cut();
  void Heal();

 private:
  TcpProxy() = default;
  void Run();
  void Wake();

  uint16_t target_port_ = 0;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> cut_{false};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace shelf::coord::testing

#endif  // SHELF_TESTS_COORD_ETCD_HARNESS_H_
