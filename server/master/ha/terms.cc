// The master's side of leadership (docs/ha.md): a term starts with an
// empty index that the stores' inventories refill, a step-down fences at
// once, and every call checks that this master still leads. The etcd side
// is in master_ha.cc; the role's own state in leadership.h.
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/master/master.h"

namespace shelf::master {

absl::Status Master::CheckLeaderLocked(bool write) { return leadership_.Check(write); }

void Master::ResetLocked() {
  // Objects first: the node lists point at them.
  for (Shard& shard : shards_) {
    MutexLock lock(&shard.mu);
    shard.objects.clear();
  }
  puts_.clear();
  put_by_key_.clear();
  deferred_.clear();
  gone_leases_.clear();
  promotes_.clear();
  for (const auto& n : nodes_) n->wake->Notify();  // their long polls end
  nodes_.clear();
  node_by_id_.clear();
  demotions_pending_ = 0;
  quotas_->Reset();
  ++reset_epoch_;  // wakes and invalidates calls waiting on a node
}

void Master::BecomeLeader(uint64_t term, std::vector<std::string> expected, uint64_t grace_ms) {
  WriterMutexLock lock(&mu_);
  ResetLocked();
  // Resync for subscribers: the stores' inventories, as they re-register,
  // come out as BlockStored (AddInventoryLocked), the new index block by
  // block. With --events-node-loss=cleared, whatever an earlier leader
  // published about these nodes is voided first; by default it stands (the
  // blocks outlive the leader), and this term's sequence numbers start
  // above any earlier term's.
  if (options_.events != nullptr) {
    options_.events->BeginTerm(term);
    if (options_.events_node_loss == MasterOptions::NodeLossEvents::kCleared) {
      events_.Cleared(expected);
    }
  }
  leadership_.Lead(term, std::move(expected), clock_->NowMs() + grace_ms);
  SHELF_LOG(INFO) << "leading" << Kv("term", term)
                  << Kv("expected_nodes", leadership_.expected_nodes())
                  << Kv("recovering", leadership_.recovering());
}

void Master::StepDown(const std::string& leader_hint) {
  WriterMutexLock lock(&mu_);
  if (leadership_.StepDown(leader_hint)) {
    SHELF_LOG(WARNING) << "stepped down: no longer the leader" << Kv("term", leadership_.term());
  }
  // The stores and their blocks outlive this master's term: only with
  // --events-node-loss=cleared does its stream void them.
  if (!nodes_.empty() && options_.events_node_loss == MasterOptions::NodeLossEvents::kCleared) {
    std::vector<std::string> ids;
    for (const auto& n : nodes_) ids.push_back(n->endpoint.node_id());
    events_.Cleared(ids);
  }
  ResetLocked();
}

void Master::StartAsStandby() {
  WriterMutexLock lock(&mu_);
  leadership_.Standby();
}

void Master::SetLeaderHint(const std::string& address) {
  WriterMutexLock lock(&mu_);
  leadership_.SetHint(address);
}

bool Master::is_leader() {
  WriterMutexLock lock(&mu_);
  return leadership_.leader();
}

uint64_t Master::term() {
  WriterMutexLock lock(&mu_);
  return leadership_.term();
}

void Master::set_lease_check(std::function<bool()> fn) {
  WriterMutexLock lock(&mu_);
  leadership_.set_lease_check(std::move(fn));
}

void Master::SetLeaderAddress(const std::string& address) {
  WriterMutexLock lock(&mu_);
  leader_address_ = address;
}

}  // namespace shelf::master
