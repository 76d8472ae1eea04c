// The etcd side of a shelf-master (docs/ha.md): it campaigns for the
// cluster's leadership and drives the Master through its terms.
//
//   MasterHaOptions o;
//   o.etcd = "http://10.0.0.9:2379";
//   o.cluster = "c1";
//   o.advertise = "10.0.0.5:7000";
//   MasterHa ha(&master.electable(), o);
//   if (absl::Status s = ha.Start(); !s.ok()) ...  // the master stands by until elected
//   ...
//   ha.Stop();  // orderly shutdown: a standby takes over at once
//
// While running, MasterHa:
//   - keeps the master a standby until elected, then calls BecomeLeader with
//     the term and the nodes recorded for the cluster (the index is soft
//     state: every known store re-registers with its inventory), and
//     StepDown when the leadership is lost;
//   - fences the master on the election's lease (Electable::set_lease_check);
//   - records each node that registers with the leader under
//     /shelf/<cluster>/nodes/<id>, so the next leader knows whom to wait for;
//   - watches the leader key and points a standby's callers at the leader
//     (Electable::SetLeaderHint);
//   - reports whether etcd answers the leader's lease refreshes (degraded()).
//
// Thread-safety: Start and Stop are called from one thread; degraded() from
// any. The master must outlive this object, and must serve no call after
// it is destroyed (the callbacks it installs in the master point here).
#ifndef SHELF_SERVER_MASTER_HA_MASTER_HA_H_
#define SHELF_SERVER_MASTER_HA_MASTER_HA_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "coord/election.h"
#include "coord/etcd_client.h"
#include "server/master/ha/electable.h"

namespace shelf::master {

struct MasterHaOptions {
  // Required: etcd endpoints, http[s]://HOST:PORT[,...].
  std::string etcd;
  coord::EtcdOptions etcd_options;
  // Masters of one cluster elect one leader.
  std::string cluster = "default";
  // Required: the address others reach this master at (the leader key's
  // value while it leads).
  std::string advertise;
  // Leader lease TTL, rounded up to whole seconds (at least 1).
  uint64_t election_ttl_ms = 3000;
  // A new leader waits this long at most for known stores to re-register.
  uint64_t recovery_grace_ms = 5000;
};

class MasterHa {
 public:
  // `master` must outlive this object.
  MasterHa(Electable* master, MasterHaOptions options);
  ~MasterHa();  // Stop()
  MasterHa(const MasterHa&) = delete;
  MasterHa& operator=(const MasterHa&) = delete;

  // Connects to etcd, puts the master in standby and starts campaigning
  // and watching the leader in the background (etcd being unreachable
  // later is not an error: the election keeps trying). Errors: a bad
  // --etcd or etcd option ("--etcd: ..."), invalid election options.
  // Call at most once.
  absl::Status Start();

  // Stops watching the leader and resigns: if leading, the master steps
  // down and the leader key is deleted, so a standby takes over at once.
  // Idempotent; a no-op unless Start succeeded.
  void Stop();

  // True while the leader's lease refreshes fail (it serves on its current
  // lease until the local deadline).
  bool degraded() const { return degraded_.load(); }

 private:
  void OnElected(int64_t term);
  void OnHealth(const absl::Status& status);

  // Constant after construction.
  Electable* const master_;
  const MasterHaOptions options_;
  const std::string nodes_prefix_;  // /shelf/<cluster>/nodes/

  std::atomic<bool> degraded_{false};
  // Set by Start, released by the destructor (the election, then the
  // client it uses); the master's lease check reads election_ until then.
  std::unique_ptr<coord::EtcdClient> client_;
  std::unique_ptr<coord::LeaderElection> election_;
  std::unique_ptr<coord::EtcdWatch> leader_watch_;
  bool campaigning_ = false;  // between a successful Start and Stop
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_HA_MASTER_HA_H_
