// Electable: the master's role as the etcd side of HA (ha/master_ha.h)
// drives it (docs/ha.md). The Master implements it; MasterHa sees nothing
// else of the Master.
//
// A master without etcd leads from the start at term 1. With etcd, it
// starts as a standby; BecomeLeader starts a term with an empty index in
// the recovering state: stores re-register with their inventories, and
// recovery ends when every node in `expected` has registered or
// `grace_ms` has passed. Puts answer UNAVAILABLE while recovering; lookups
// answer from what is known. StepDown fences at once: every call but
// Status answers UNAVAILABLE "NOT_LEADER", naming `leader_hint` when known.
#ifndef SHELF_SERVER_MASTER_HA_ELECTABLE_H_
#define SHELF_SERVER_MASTER_HA_ELECTABLE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shelf::master {

class Electable {
 public:
  virtual ~Electable() = default;

  virtual void BecomeLeader(uint64_t term, std::vector<std::string> expected,
                            uint64_t grace_ms) = 0;
  virtual void StepDown(const std::string& leader_hint) = 0;
  // Starts as a standby (with etcd, before the first election).
  virtual void StartAsStandby() = 0;
  virtual bool is_leader() = 0;
  virtual uint64_t term() = 0;
  // Where a standby points callers (from the election key).
  virtual void SetLeaderHint(const std::string& address) = 0;
  // The address reported as leader while this master leads (the bound
  // --listen address).
  virtual void SetLeaderAddress(const std::string& address) = 0;
  // Fencing: when set, consulted on every call; false means the leader's
  // lease may have expired, so this master serves nothing until the
  // election confirms (it answers NOT_LEADER meanwhile).
  virtual void set_lease_check(std::function<bool()> fn) = 0;
  // Called (outside the master's lock) with each node id that registers
  // while this master leads, so the HA layer can remember it in etcd.
  virtual void set_on_node_registered(std::function<void(const std::string&)> fn) = 0;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_HA_ELECTABLE_H_
