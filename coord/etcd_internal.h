// Internal to coord/: the endpoint set an EtcdClient shares with its
// keepalive and watch threads (one gRPC channel and stubs per endpoint, the
// endpoint in use, the retry loop), and proto <-> struct conversions.
//
//   auto channels = std::make_shared<internal::EtcdChannels>(addresses, options);
//   absl::Status s = channels->WithRetries("Range", [&](const internal::EtcdEndpoint& ep,
//                                                      grpc::ClientContext* ctx) {
//     return internal::FromGrpc(ep.kv->Range(ctx, request, &response), ep);
//   });
//
// Thread-safe: everything here is constant after construction except the
// index of the endpoint in use, which is atomic, and the auth token, which
// token_mu_ guards.
#ifndef SHELF_COORD_ETCD_INTERNAL_H_
#define SHELF_COORD_ETCD_INTERNAL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "coord/etcd/rpc.grpc.pb.h"
#include "coord/etcd_client.h"

namespace shelf::coord::internal {

// What Connect() made of EtcdOptions' security files.
struct EtcdSecurity {
  bool tls = false;
  std::string ca_pem, cert_pem, key_pem;
  std::string user, password;  // user empty: no authentication
};

// Reads and checks the files EtcdOptions names; `https`: an endpoint said so.
absl::StatusOr<EtcdSecurity> LoadSecurity(const EtcdOptions& options, bool https);

// etcd's answer to a call whose token expired or went stale (re-authenticate
// and retry), as opposed to one the user may not make.
bool TokenRejected(const absl::Status& status);

struct EtcdEndpoint {
  std::string address;  // HOST:PORT
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch;
  std::unique_ptr<etcdserverpb::Auth::Stub> auth;
};

class EtcdChannels {
 public:
  // REQUIRES: !addresses.empty(), options.attempts_max >= 1.
  EtcdChannels(std::vector<std::string> addresses, const EtcdOptions& options,
               EtcdSecurity security = {});
  // Waits for the connectivity thread (at most kConnectivityPollMs).
  ~EtcdChannels();

  // Runs `attempt` with a fresh context whose deadline is call_timeout_ms
  // away, against the endpoint in use; on UNAVAILABLE or DEADLINE_EXCEEDED
  // moves to the next endpoint, backs off and tries again, up to
  // attempts_max attempts. Returns the first OK, the first non-retryable
  // error, or the last error.
  absl::Status WithRetries(
      absl::string_view what,
      const std::function<absl::Status(const EtcdEndpoint&, grpc::ClientContext*)>& attempt);

  // With a user configured: puts the auth token in `ctx` ("token"
  // metadata), first authenticating against endpoint `index` when no token
  // is held; `token` gets the token used (for InvalidateToken). Without a
  // user: OK, nothing added. Authentication errors are etcd's (a wrong
  // password: INVALID_ARGUMENT).
  absl::Status Authorize(size_t index, grpc::ClientContext* ctx, std::string* token);
  // Forgets `token` (when still the one held) after etcd rejected it.
  void InvalidateToken(const std::string& token);
  bool authenticates() const { return !security_.user.empty(); }

  // Index of the endpoint in use, and moving off `index` after it failed
  // (a no-op when another thread already moved).
  size_t current() const { return current_.load(std::memory_order_relaxed); }
  void Failed(size_t index);
  const EtcdEndpoint& endpoint(size_t index) const {
    return *endpoints_[index % endpoints_.size()];
  }

  // Backoff before retry number `retry` (0-based), jittered: see EtcdOptions.
  uint64_t BackoffMs(int retry) const;

  const std::vector<std::string>& addresses() const { return addresses_; }
  const EtcdOptions& options() const { return options_; }

 private:
  // A blocking call fails at once while its channel is in TRANSIENT_FAILURE,
  // and a channel's sockets make progress only while some thread polls
  // them. Without this thread, a channel whose endpoint refused once (etcd
  // restarting) could stay stuck mid-reconnect, every call failing fast. It
  // keeps a connectivity watch armed on every channel, which polls them and
  // asks idle ones to connect.
  void WatchConnectivity();

  // Constant after construction.
  const std::vector<std::string> addresses_;
  const EtcdOptions options_;
  const EtcdSecurity security_;
  std::vector<std::unique_ptr<EtcdEndpoint>> endpoints_;

  // Held across an Authenticate call, so that threads whose token expired
  // together log in once.
  Mutex token_mu_;
  std::string token_ ABSL_GUARDED_BY(token_mu_);

  std::atomic<size_t> current_{0};
  Mutex connectivity_mu_;
  bool stopping_ ABSL_GUARDED_BY(connectivity_mu_) = false;
  grpc::CompletionQueue connectivity_cq_;
  std::thread connectivity_thread_;
};

// How long one connectivity watch stays armed: bounds the destructor, which
// every short-lived process that finds its master through etcd (shelfctl,
// an engine starting) waits for on exit, so it is kept short; re-arming
// costs a wake-up.
inline constexpr int kConnectivityPollMs = 25;

// gRPC codes are the canonical codes; the message gains the endpoint.
absl::Status FromGrpc(const grpc::Status& status, const EtcdEndpoint& endpoint);
bool IsRetryable(const absl::Status& status);

KeyValue FromProto(const mvccpb::KeyValue& kv);

// Sleeps `ms` with the calling thread.
void SleepMs(uint64_t ms);

}  // namespace shelf::coord::internal

#endif  // SHELF_COORD_ETCD_INTERNAL_H_
