// Promotion: a block read from a store's SSD tier is copied back into that
// store's DRAM when there is free room (promotion never evicts), in two
// halves like a put: Promote reserves the range, PromoteCommit indexes the
// new replica if the block's commit is still the same.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/sync_point.h"
#include "server/master/master.h"

namespace shelf::master {

absl::Status Master::Promote(const v1::PromoteRequest& req, v1::PromoteResponse* resp) {
  if (absl::Status s = ValidateKey(req.key()); !s.ok()) return s;
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(true); !s.ok()) return s;
  auto it = node_by_id_.find(req.node_id());
  if (it == node_by_id_.end() || nodes_[it->second]->incarnation != req.incarnation() ||
      nodes_[it->second]->state == v1::NODE_DEAD) {
    return absl::FailedPreconditionError("unknown node or stale incarnation: register again");
  }
  uint32_t node = it->second;
  Object* obj = FindLocked(req.key());
  if (obj == nullptr || obj->size != req.size() || obj->checksum != req.checksum())
    return absl::OkStatus();
  bool ssd_here = false;
  for (const Replica& r : obj->replicas) {
    if (r.node != node) continue;
    if (r.tier == v1::TIER_DRAM) return absl::OkStatus();  // already promoted
    ssd_here = true;
  }
  if (!ssd_here) return absl::OkStatus();
  for (const auto& [id, p] : promotes_) {
    if (p.node == node && p.key == req.key()) return absl::OkStatus();  // one at a time
  }
  // Room as for a put, but never by dropping blocks: a full segment orders
  // demotions of its least recently used and this promotion is skipped.
  Node& n = *nodes_[node];
  absl::StatusOr<Replica> r =
      AllocateOnNodeLocked(node, req.size(), now, /*allow_drop=*/false, req.key());
  if (!r.ok()) return r.status();
  uint64_t id = next_promote_id_++;
  promotes_[id] = PendingPromote{req.key(),
                                 node,
                                 n.incarnation,
                                 r->segment,
                                 r->offset,
                                 req.size(),
                                 req.checksum(),
                                 obj->generation,
                                 now + options_.put_timeout_ms};
  resp->set_promote_id(id);
  resp->set_segment_id(n.segments[r->segment].id);
  resp->set_offset(r->offset);
  resp->set_generation(obj->generation);
  resp->set_range_seq(++n.range_seq);
  return absl::OkStatus();
}

absl::Status Master::PromoteCommit(const v1::PromoteCommitRequest& req) {
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  auto it = promotes_.find(req.promote_id());
  if (it == promotes_.end()) return absl::NotFoundError("unknown or expired promotion");
  PendingPromote p = it->second;
  Node& n = *nodes_[p.node];
  // Ids count from 1 in every master: one from a store that began its
  // promotion under another leader may name another store's.
  if (n.endpoint.node_id() != req.node_id()) {
    return absl::NotFoundError("unknown or expired promotion");
  }
  promotes_.erase(it);
  if (n.incarnation != p.incarnation || n.state == v1::NODE_DEAD) {
    return absl::FailedPreconditionError("the store restarted since the promotion began");
  }
  Object* obj = FindLocked(p.key);
  // The same commit: the store recorded the range with its generation.
  bool usable = req.ok() && obj != nullptr && obj->generation == p.generation &&
                obj->checksum == p.checksum && obj->size == p.size;
  if (usable) {
    for (const Replica& r : obj->replicas) usable &= !(r.node == p.node && r.tier == v1::TIER_DRAM);
  }
  if (!usable) {
    FreeRangeLocked(p.node, p.segment, p.offset, p.size);
    return absl::OkStatus();
  }
  Replica r;
  r.node = p.node;
  r.tier = v1::TIER_DRAM;
  r.segment = p.segment;
  r.offset = p.offset;
  LruList& lru = n.segments[p.segment].lru;
  r.lru = lru.insert(lru.end(), obj);
  obj->replicas.push_back(r);
  if (obj->hard_pin) n.hard_pinned_bytes += obj->size;
  ReplicaAddedLocked(obj, &obj->replicas.back(), nullptr);
  obj->Touch(now);
  metrics_.promotions.Increment();
  return absl::OkStatus();
}

}  // namespace shelf::master
