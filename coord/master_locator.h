// MasterLocator: finds the leading master for stores, clients and shelfctl.
//
// A spec is either a static list, "HOST:PORT[,HOST:PORT...]" (the first is
// tried first; a master that answers UNAVAILABLE or "NOT_LEADER: ... the
// leader is X" moves the locator on, to X when named), or an etcd address,
// "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER", where the leader's address is
// read from the election key (coord/election.h).
//
//   auto loc = MasterLocator::Create("etcd://127.0.0.1:2379/prod");
//   std::string addr = (*loc)->Current();
//   ... call; on UNAVAILABLE: (*loc)->Failed(addr, status);
//
// With etcd the locator also watches the leader key, so Current() follows
// a new leader the moment etcd names it, and a listener (SetListener) is
// told: a store sleeping in its backoff after the old leader died retries
// at once instead of after the backoff (docs/ha.md, failover timeline).
//
// Thread-safe.
#ifndef SHELF_COORD_MASTER_LOCATOR_H_
#define SHELF_COORD_MASTER_LOCATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "coord/etcd_client.h"

namespace shelf::coord {

class MasterLocator {
 public:
  // `etcd`: how to reach etcd securely (TLS, user), for an etcd:// spec.
  static absl::StatusOr<std::unique_ptr<MasterLocator>> Create(const std::string& spec,
                                                               const coord::EtcdOptions& etcd = {});
  ~MasterLocator();

  // The address to try now. With etcd, the leader (looked up on first use
  // and after failures); empty when etcd names no leader yet.
  std::string Current();
  // Reports that `address` failed with `status`; the next Current() moves
  // on: to the leader named in a NOT_LEADER message, the next static
  // entry, or a fresh etcd lookup.
  void Failed(const std::string& address, const absl::Status& status);
  // With etcd: OK only when etcd's leader key, unchanged since its election,
  // names `address` with create revision `term`, so a process that merely
  // claims a new term is not followed. PERMISSION_DENIED when it does not,
  // UNAVAILABLE when etcd cannot be read. Static spec: always OK (nothing
  // to check against).
  absl::Status VerifyLeader(const std::string& address, uint64_t term);
  // Every address a static spec names (one entry for etcd: the leader).
  std::vector<std::string> Candidates();
  bool uses_etcd() const { return etcd_ != nullptr; }

  // "the leader is HOST:PORT" inside a NOT_LEADER message; empty if none.
  static std::string LeaderHint(const absl::Status& status);

  // Calls `listener` (from the watch's thread) each time etcd names a new
  // leader; nullptr removes it. When this returns, no call to a previous
  // listener is running. Nothing happens with a static spec.
  void SetListener(std::function<void()> listener);

 private:
  MasterLocator() = default;
  void RefreshFromEtcdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the leader watch if it is not running; false when etcd cannot
  // be read now (Current() then reads the key itself and tries again
  // later).
  bool EnsureWatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnLeaderChange(const std::string& address);

  Mutex mu_;
  std::vector<std::string> static_;  // constant after Create
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::string current_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<coord::EtcdClient> etcd_;
  std::string cluster_;
  uint64_t watch_retry_ms_ ABSL_GUARDED_BY(mu_) = 0;  // MonoMs of the next watch attempt
  Mutex listener_mu_;                                 // held while the listener runs or changes
  std::function<void()> listener_ ABSL_GUARDED_BY(listener_mu_);
  // Declared last: destroyed (cancelled) first, while what its callback
  // touches is still alive.
  std::unique_ptr<coord::EtcdWatch> watch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::coord

#endif  // SHELF_COORD_MASTER_LOCATOR_H_
