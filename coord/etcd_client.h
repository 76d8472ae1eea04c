// A small etcd v3 client over etcd's gRPC API: the key-value calls, leases
// with a background keepalive, and watches. Shelf uses it for master leader
// election (coord/election.h) and for finding the leader; nothing on the data
// path talks to etcd.
//
//   SHELF_ASSIGN_OR_RETURN(std::unique_ptr<coord::EtcdClient> etcd,
//                          coord::EtcdClient::Connect("http://10.0.0.1:2379,10.0.0.2:2379"));
//   SHELF_ASSIGN_OR_RETURN(coord::Lease lease, etcd->LeaseGrant(/*ttl_s=*/3));
//   coord::KeepAliveCallbacks callbacks;
//   callbacks.on_lost = [](const absl::Status& why) { /* stop what the lease guards */ };
//   SHELF_ASSIGN_OR_RETURN(auto keepalive, etcd->KeepAlive(lease, callbacks));
//   SHELF_ASSIGN_OR_RETURN(coord::CreateResult r,
//                          etcd->CreateIfAbsent("/shelf/c1/leader", "10.0.0.5:7000", lease.id));
//
//   coord::WatchOptions watch;
//   watch.prefix = true;
//   watch.on_events = [](const std::vector<coord::WatchEvent>& events, int64_t revision) {};
//   SHELF_ASSIGN_OR_RETURN(auto watcher, etcd->Watch("/shelf/c1/", watch));
//
// Security (EtcdOptions): TLS with a CA, a client certificate, and etcd's
// user authentication, whose token every call, keepalive and watch carries
// and which is renewed when etcd rejects it (coord/etcd_auth.cc).
//
// Thread-safety: EtcdClient is safe to use from any number of threads.
// A LeaseKeepAlive and an EtcdWatch each run their own thread and call their
// callbacks from it, one at a time. Their Stop()/Cancel() (and destructors)
// may be called from any thread except from inside their own callbacks (that
// would wait for itself: it aborts), and no callback runs after they return.
// They may outlive the client that made them.
//
// Failures: every call has a deadline (EtcdOptions::call_timeout_ms per
// attempt). A call that fails with UNAVAILABLE or DEADLINE_EXCEEDED is
// retried on the next endpoint, at most EtcdOptions::attempts_max attempts in
// all, with exponential backoff and jitter between them; any other error is
// returned at once. Errors keep etcd's gRPC code (canonical codes map 1:1) and
// name the endpoint. Because a retried write may have been applied before its
// answer was lost, Put and Delete are at-least-once; CreateIfAbsent
// recognises its own earlier write by the lease it carries.
#ifndef SHELF_COORD_ETCD_CLIENT_H_
#define SHELF_COORD_ETCD_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shelf::coord {

struct EtcdOptions {
  // Deadline of one attempt of one call.
  uint64_t call_timeout_ms = 2000;
  // Attempts per call, across endpoints (>= 1).
  int attempts_max = 3;
  // Backoff before the k-th retry: min(max, initial * 2^k), then a random
  // value in [half, full] of that.
  uint64_t backoff_initial_ms = 50;
  uint64_t backoff_max_ms = 1000;

  // Securing the connection (docs/security.md, "etcd"). Files are read
  // once, by Connect().
  //
  // TLS is on when tls_ca_file is set or an endpoint says https:// (then
  // every endpoint must; without a CA file the system's roots verify
  // etcd). The server certificate must name the endpoint's host.
  std::string tls_ca_file;  // PEM CA bundle that signed etcd's certificate
  // PEM client certificate and key for etcd's --client-cert-auth; both or
  // neither. The key file is refused when others may read it.
  std::string tls_cert_file;
  std::string tls_key_file;
  // One line "USER:PASSWORD" for etcd's user authentication (etcdctl auth
  // enable). Refused when others may read it. The client authenticates
  // before its first call and again whenever etcd says its token is no
  // longer valid (simple tokens expire after --auth-token-ttl idle).
  std::string user_file;
};

// One key as etcd stores it.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // revision of the key's creation
  int64_t mod_revision = 0;     // revision of its last change
  int64_t version = 0;          // changes since creation (1 after a create)
  int64_t lease = 0;            // attached lease, 0 = none
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // sorted by key
  int64_t revision = 0;       // store revision the read saw
};

struct CreateResult {
  bool created = false;  // true: this call created the key
  KeyValue kv;           // the key now: ours when created, the holder's otherwise
  int64_t revision = 0;  // store revision after the transaction
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // as granted: etcd raises a TTL below its minimum
  // Local monotonic time the grant was sent. etcd cannot expire the lease
  // before granted_mono_ms + ttl_s * 1000 (its clock starts later).
  uint64_t granted_mono_ms = 0;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  // For kDelete: key and mod_revision (the revision of the deletion) only.
  KeyValue kv;
};

// Keeps one lease alive from its own thread until Stop(), or until the lease
// is lost. Made by EtcdClient::KeepAlive.
//
// The lease is refreshed every ttl/3. The thread keeps a conservative local
// deadline: the send time of the last refresh that etcd acknowledged, plus
// the TTL it answered. etcd cannot expire the lease before that deadline, so
// a holder that stops acting on the lease when on_lost runs never overlaps
// with the next holder (fencing). on_lost runs once: right at that deadline
// when refreshes keep failing (DEADLINE_EXCEEDED), or as soon as etcd says
// the lease no longer exists (NOT_FOUND).
struct KeepAliveCallbacks {
  // Required. Then the thread ends; the lease is not revoked.
  std::function<void(const absl::Status&)> on_lost;
  // Optional: a refresh failed (non-OK) while the deadline still holds, or
  // refreshes work again (OK) after such a failure.
  std::function<void(const absl::Status&)> on_health;
};

class LeaseKeepAlive {
 public:
  virtual ~LeaseKeepAlive() = default;  // implementations Stop()

  // Stops refreshing and returns when the thread has ended. Does not revoke
  // the lease (EtcdClient::LeaseRevoke does): it expires after its TTL, as
  // after a crash. Idempotent.
  virtual void Stop() = 0;

  virtual int64_t lease_id() const = 0;
  // The local deadline described above; 0 once on_lost is decided.
  virtual uint64_t expiry_mono_ms() const = 0;
  // True while the local deadline lies in the future.
  virtual bool alive() const = 0;
};

struct WatchOptions {
  // Watch every key with `key` as prefix, not only `key`.
  bool prefix = false;
  // First revision to report (inclusive). 0 = changes after the watch is
  // created; Watch() then returns only once etcd has confirmed it. With a
  // revision > 0, Watch() returns at once and nothing is missed.
  int64_t start_revision = 0;
  // Required. Events in revision order; `revision` is the store revision of
  // the response that carried them.
  std::function<void(const std::vector<WatchEvent>& events, int64_t revision)> on_events;
  // Optional. The watch ended for good: OUT_OF_RANGE when the revision to
  // resume from was compacted, or the code etcd gave when it cancelled the
  // watch. Not called on Cancel().
  std::function<void(const absl::Status&)> on_error;
};

// A watch, run from its own thread until Cancel(). A broken stream (etcd
// restarting, an endpoint failing) is re-created on the next endpoint from
// the revision after the last event seen, with capped backoff and no limit
// on attempts, so no event is lost or repeated.
class EtcdWatch {
 public:
  virtual ~EtcdWatch() = default;  // implementations Cancel()
  // Ends the watch; returns when its thread has ended. Idempotent.
  virtual void Cancel() = 0;
};

namespace internal {
class EtcdChannels;
}  // namespace internal

class EtcdClient {
 public:
  // `endpoints`: comma-separated, each "HOST:PORT", "http://HOST:PORT" or
  // "https://HOST:PORT". INVALID_ARGUMENT on an empty or malformed list,
  // http and https mixed, options out of range or a malformed user file;
  // the error of reading a security file (NOT_FOUND, PERMISSION_DENIED
  // when a key or user file is readable by others). Returns without
  // waiting (a wrong password shows on the first call): a background
  // thread connects to every endpoint and keeps reconnecting those that
  // fail (backoff 0.1 s growing to 1 s).
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Connect(absl::string_view endpoints,
                                                             const EtcdOptions& options = {});
  // Returns within about 0.2 s (the connection thread's poll interval);
  // keepalives and watches it made keep their connections until they end.
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Keys in [key, range_end); an empty range_end means `key` alone.
  absl::StatusOr<RangeResult> Range(absl::string_view key, absl::string_view range_end = "");
  // NOT_FOUND when the key is absent.
  absl::StatusOr<KeyValue> Get(absl::string_view key);
  absl::StatusOr<RangeResult> GetPrefix(absl::string_view prefix);

  // Writes key = value attached to lease_id (0 = none); returns the new
  // store revision. NOT_FOUND when the lease does not exist.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value, int64_t lease_id = 0);
  // Returns how many keys were deleted (0 when absent).
  absl::StatusOr<int64_t> Delete(absl::string_view key);
  absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix);
  // Deletes `key` only while its create_revision is `create_revision` (the
  // key one created, not a later one); true when deleted.
  absl::StatusOr<bool> DeleteIfCreateRevision(absl::string_view key, int64_t create_revision);
  // Deletes `key` only while its mod_revision is `mod_revision` (the
  // version one read, not a later write); true when deleted.
  absl::StatusOr<bool> DeleteIfModRevision(absl::string_view key, int64_t mod_revision);
  // One transaction: if `key` is absent, put it with `lease_id`; else read
  // it. A retried call that finds the key holding `lease_id` (non-zero)
  // reports it as created.
  absl::StatusOr<CreateResult> CreateIfAbsent(absl::string_view key, absl::string_view value,
                                              int64_t lease_id);

  // A lease of ttl_s seconds (>= 1; INVALID_ARGUMENT otherwise).
  absl::StatusOr<Lease> LeaseGrant(int64_t ttl_s);
  // Revokes the lease and deletes its keys. NOT_FOUND when already gone.
  absl::Status LeaseRevoke(int64_t lease_id);
  // Starts a keepalive thread for `lease` (see LeaseKeepAlive).
  // INVALID_ARGUMENT without on_lost or with an empty lease.
  absl::StatusOr<std::unique_ptr<LeaseKeepAlive>> KeepAlive(const Lease& lease,
                                                            KeepAliveCallbacks callbacks);

  // Watches `key` (or the prefix `key`, see WatchOptions). INVALID_ARGUMENT
  // without on_events; with start_revision 0, the error of the last attempt
  // when etcd could not confirm the watch within the call budget.
  absl::StatusOr<std::unique_ptr<EtcdWatch>> Watch(absl::string_view key, WatchOptions options);

  // "HOST:PORT" per endpoint, in the order given.
  const std::vector<std::string>& endpoints() const;
  const EtcdOptions& options() const;

 private:
  explicit EtcdClient(std::shared_ptr<internal::EtcdChannels> channels);

  // Shared with the keepalive and watch threads, which may outlive the client.
  const std::shared_ptr<internal::EtcdChannels> channels_;
};

// Splits an endpoint list as Connect() does: "HOST:PORT" per entry. `tls`
// (optional) tells whether the entries said https://; INVALID_ARGUMENT when
// http and https are mixed.
absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view endpoints,
                                                            bool* tls = nullptr);

// The smallest key greater than every key with prefix `prefix` (etcd's
// range_end for a prefix); "\0" for an empty prefix or one of all 0xff bytes.
std::string PrefixRangeEnd(absl::string_view prefix);

}  // namespace shelf::coord

#endif  // SHELF_COORD_ETCD_CLIENT_H_
