// Leadership: whether this master leads, in which term, and whether its
// term is still recovering (docs/ha.md). The state machine of one master's
// role, without etcd (ha/master_ha.h campaigns) and without the index the
// Master resets at each change of role (ha/terms.cc).
//
//   Leadership l;                        // leads at term 1: no etcd
//   l.Standby();                         // with etcd, before an election
//   l.Lead(7, {"store-a", "store-b"}, now_ms + grace_ms);
//   l.Check(/*write=*/true);             // UNAVAILABLE while recovering
//   l.EndRecovery(now_ms, /*reported=*/2);  // both registered: recovery ends
//   l.StepDown("10.0.0.2:7000");         // fenced: every call names the leader
//
// Not thread-safe: the Master holds it under its lock.
#ifndef SHELF_SERVER_MASTER_HA_LEADERSHIP_H_
#define SHELF_SERVER_MASTER_HA_LEADERSHIP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shelf::master {

class Leadership {
 public:
  // Starts leading at term 1, not recovering (a master without etcd).
  Leadership() = default;

  // Starts term `term` with an empty index: recovering until every node in
  // `expected` has registered or `recovery_deadline_ms` (NowMs) has passed;
  // not recovering at all when `expected` is empty.
  void Lead(uint64_t term, std::vector<std::string> expected, uint64_t recovery_deadline_ms);
  // Fences at once: not leading, calls answer NOT_LEADER naming `hint`
  // (empty: unknown). True when this master was leading.
  bool StepDown(const std::string& hint);
  // A standby before its first election: term 0.
  void Standby();
  // Where a standby points callers (ignored while leading).
  void SetHint(const std::string& address);
  // When set, consulted by Check: false means the leader's lease may have
  // lapsed, so a leader serves nothing until the election confirms.
  void set_lease_check(std::function<bool()> fn) { lease_check_ = std::move(fn); }

  // OK when leading (with a lease that holds) and, for a `write`, not
  // recovering; else UNAVAILABLE, the message starting "NOT_LEADER" for a
  // standby or a lapsed lease, "master recovering" for a write in recovery.
  absl::Status Check(bool write) const;
  // Ends recovery when `reported` (how many of expected() have registered)
  // is all of them or the deadline has passed at `now_ms`. True when it
  // ended by this call.
  bool EndRecovery(uint64_t now_ms, size_t reported);

  bool leader() const { return leader_; }
  uint64_t term() const { return term_; }
  bool recovering() const { return recovering_; }
  const std::string& hint() const { return hint_; }
  // The nodes the term waits for (those recorded in etcd when it began).
  const std::vector<std::string>& expected() const { return expected_; }
  size_t expected_nodes() const { return expected_.size(); }

 private:
  bool leader_ = true;
  uint64_t term_ = 1;
  bool recovering_ = false;
  uint64_t recovery_deadline_ms_ = 0;
  std::vector<std::string> expected_;
  std::string hint_;
  std::function<bool()> lease_check_;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_HA_LEADERSHIP_H_
