// Leader election for shelf-master over etcd: one leader per cluster, the
// others standing by.
//
// The leader holds the key <key_prefix>/<cluster>/leader (default
// /shelf/<cluster>/leader), valued with its address and attached to a lease
// it keeps alive. The key's create_revision is the leader's term: etcd's
// revision only grows, so every new leader has a larger term than all before
// it. Standbys watch the key and campaign again when it is deleted (the
// leader resigned, or its lease expired because it crashed or lost etcd).
//
//   coord::ElectionOptions options;
//   options.cluster = "c1";
//   options.address = "10.0.0.5:7000";
//   options.on_elected = [&](int64_t term) { master.BecomeLeader(term); };
//   options.on_lost = [&] { master.StopServingWrites(); };
//   coord::LeaderElection election(etcd.get(), options);
//   SHELF_RETURN_IF_ERROR(election.Start());
//   ...
//   election.Resign();  // orderly shutdown: a standby takes over at once
//
//   // Clients, stores and shelfctl:
//   SHELF_ASSIGN_OR_RETURN(coord::LeaderInfo leader,
//                          coord::LeaderElection::GetLeader(etcd.get(), "c1"));
//
// Fencing: the leader's lease is refreshed every ttl/3 and the local deadline
// is "send time of the last acknowledged refresh + TTL", which etcd cannot
// beat (see LeaseKeepAlive). When refreshes keep failing, on_lost() runs at
// that deadline and is_leader() turns false at it, before etcd can expire
// the key and let a standby win: a leader that stops writes on on_lost() (or
// checks is_leader() before each write) never overlaps with the next one.
// The term lets stores reject a deposed leader's late requests.
//
// Repair: a leader never writes its key after creating it, so a key written
// since (etcd without authentication lets anyone put over it) names nobody
// readers trust, and a put without a lease detaches it from the leader's
// lease, so it would outlive the leader. The leader watches its key: when it
// sees it modified, it ends its term (on_lost), deletes the key in a
// transaction guarded by the mod_revision it read (never a newer key) and
// campaigns again, taking a new term (on_elected). A standby that finds an
// overwritten key waits one lease TTL for a change (a live leader repairs
// sooner), then deletes it the same guarded way and campaigns. Each repair
// is logged at WARNING and counted in shelf_master_leader_key_repairs_total.
//
// Thread-safety: all methods are thread-safe. The callbacks run on the
// election's own thread, one at a time and in order (on_elected, then
// on_lost, then maybe on_elected again with a larger term); they must not
// call Resign() or Stop() (that would wait for itself: it aborts) and should
// return quickly.
#ifndef SHELF_COORD_ELECTION_H_
#define SHELF_COORD_ELECTION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "coord/etcd_client.h"

namespace shelf::coord {

inline constexpr char kDefaultElectionPrefix[] = "/shelf";

struct LeaderInfo {
  std::string address;  // the leader's advertised address
  int64_t term = 0;     // create_revision of the leader key
  int64_t lease_id = 0;
  // The key is as the election wrote it: created once with a lease and
  // never written since (version 1). A leader never rewrites its key, so
  // a key that was overwritten (a later put, e.g. by someone else naming
  // their own address) names no leader to be trusted; readers keep the
  // leader they knew (docs/security.md, "etcd").
  bool intact = false;
};

struct ElectionOptions {
  // Required: [A-Za-z0-9._-]{1,64}.
  std::string cluster;
  // Required: the value of the leader key while this candidate leads.
  std::string address;
  // Lease TTL: how long a crashed leader blocks a takeover. etcd raises
  // values below its minimum (2 s with its default timing).
  int64_t lease_ttl_s = 3;
  std::string key_prefix = kDefaultElectionPrefix;

  // Required. This candidate leads from now on, with this term.
  std::function<void(int64_t term)> on_elected;
  // Required. This candidate no longer leads (its lease is presumed expired,
  // the key was deleted or taken over, or Resign()/Stop() was called): stop
  // serving writes. Called once after each on_elected.
  std::function<void()> on_lost;
  // Optional, only while leading: refreshing the lease failed (non-OK; the
  // leader still holds it until the local deadline) or works again (OK).
  std::function<void(const absl::Status&)> on_health;
};

class LeaderElection {
 public:
  // `client` must outlive this object.
  LeaderElection(EtcdClient* client, ElectionOptions options);
  ~LeaderElection();  // Stop()
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // Validates the options (INVALID_ARGUMENT) and starts campaigning in the
  // background; etcd being unreachable is not an error here: the election
  // keeps trying. FAILED_PRECONDITION when already running.
  absl::Status Start();

  // Stops campaigning (waiting for an etcd call in progress, at most one
  // call's retry budget); if leading, calls on_lost() first. Then deletes the
  // leader key if this candidate still holds it and revokes its lease, so a
  // standby takes over at once. Returns the first etcd error (the lease then
  // still expires after its TTL). Start() may be called again afterwards.
  absl::Status Resign();

  // Stops campaigning and refreshing the lease without touching etcd, as a
  // crash would: if leading, calls on_lost(); the key stays until the lease
  // expires, so a standby takes over after about one TTL. Returns when the
  // election thread has ended (see Resign). Idempotent.
  void Stop();

  // True while this candidate holds the leader key and its lease's local
  // deadline lies in the future. Turns false at that deadline even before
  // on_lost() has run.
  bool is_leader() const;
  // The current term while leading, else 0.
  int64_t term() const;

  // The leader key of `cluster`.
  static std::string LeaderKey(absl::string_view cluster,
                               absl::string_view key_prefix = kDefaultElectionPrefix);

  // The current leader of `cluster`; NOT_FOUND when there is none.
  static absl::StatusOr<LeaderInfo> GetLeader(
      EtcdClient* client, absl::string_view cluster,
      absl::string_view key_prefix = kDefaultElectionPrefix);

  // Calls `on_change` with the current leader (nullopt: none) before it
  // returns, then on the watch's thread at every change, until the returned
  // watch is cancelled. Errors from the first read of the key.
  static absl::StatusOr<std::unique_ptr<EtcdWatch>> WatchLeader(
      EtcdClient* client, absl::string_view cluster,
      std::function<void(const std::optional<LeaderInfo>&)> on_change,
      absl::string_view key_prefix = kDefaultElectionPrefix);

 private:
  enum class Wake { kStop, kSessionLost, kChanged, kTimeout };
  struct Session;

  void Run();
  // Leads until the lease is lost, the key is deleted, replaced or
  // overwritten (then repaired), or Stop/Resign; calls on_elected first and
  // on_lost last.
  Wake Lead(Session* session, const KeyValue& kv, int64_t revision);
  // Waits while someone else leads, until the key changes, a re-check is
  // due, the session is lost or Stop/Resign. A key overwritten since its
  // creation that stays so for one lease TTL is deleted (RepairKey).
  Wake StandBy(Session* session, const KeyValue& holder, int64_t revision);
  // True when `kv` is the key as this candidate created it under `session`.
  bool HeldIntact(const Session& session, const KeyValue& kv) const;
  // Deletes the overwritten key `kv` unless it changed since it was read
  // (guarded by its mod_revision); logs and counts the repair.
  absl::Status RepairKey(const KeyValue& kv, bool leading);
  // Watches the leader key from `revision` + 1; every event wakes the
  // election thread.
  std::unique_ptr<EtcdWatch> WatchKey(int64_t revision);
  // Waits for a wake reason, at most `timeout_ms` (0 = no limit); forwards
  // health reports to on_health while `leading`.
  Wake WaitForWake(Session* session, uint64_t timeout_ms, bool leading);
  // Sleeps with backoff after a failed etcd call; false when stopping.
  bool Backoff(int* failures);
  void Join();

  // Constant after construction.
  EtcdClient* const client_;
  const ElectionOptions options_;
  const std::string key_;

  mutable Mutex mu_;
  CondVar cv_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Set by the keepalive and watch threads, consumed by the election thread.
  bool session_lost_ ABSL_GUARDED_BY(mu_) = false;
  bool key_changed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::Status> health_ ABSL_GUARDED_BY(mu_);
  // What is_leader()/term() report, and what Resign() cleans up.
  int64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lease_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t held_term_ ABSL_GUARDED_BY(mu_) = 0;  // key to delete on Resign, 0 = none
  const LeaseKeepAlive* keepalive_ ABSL_GUARDED_BY(mu_) = nullptr;
  Mutex join_mu_;  // serializes joins of thread_
  std::thread thread_;
};

}  // namespace shelf::coord

#endif  // SHELF_COORD_ELECTION_H_
