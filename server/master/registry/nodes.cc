// The node registry: a store registers (with the inventory of what it
// holds, which re-enters the index), and a store's replicas leave the index
// when it is declared dead or registers anew. Liveness itself is judged in
// Master::Tick (master.cc); the heartbeat's orders are in heartbeat.cc.
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

absl::Status Master::RegisterStore(const v1::RegisterStoreRequest& req,
                                   v1::RegisterStoreResponse* resp) {
  if (req.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat("store speaks protocol ",
                                                      req.protocol_version(),
                                                      "; this master speaks ", kProtocolVersion));
  }
  const v1::StoreEndpoint& ep = req.endpoint();
  if (ep.node_id().empty() || ep.node_id().size() > 128) {
    return absl::InvalidArgumentError("node id must be 1..128 bytes");
  }
  if (ep.data_address().empty()) return absl::InvalidArgumentError("store has no data address");
  if (req.segments_size() == 0 || req.segments_size() > 64) {
    return absl::InvalidArgumentError("a store registers 1..64 DRAM segments");
  }
  for (const v1::SegmentInfo& s : req.segments()) {
    if (s.capacity_bytes() < options_.alignment) {
      return absl::InvalidArgumentError("DRAM segment smaller than the allocation alignment");
    }
  }
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  uint32_t idx;
  std::vector<v1::InventoryEntry> orphans;
  Unheard unheard;
  bool same_process = false;
  auto it = node_by_id_.find(ep.node_id());
  if (it != node_by_id_.end()) {
    idx = it->second;
    // Another incarnation still heartbeating holds this node id: a second
    // process (or one that only holds the cluster secret) must not take
    // its place, its replicas and its grants. The old one has to fall
    // silent for the node timeout first; the store retries meanwhile.
    const Node& held = *nodes_[idx];
    if (held.incarnation != req.incarnation() && held.state != v1::NODE_DEAD &&
        now - held.last_heartbeat_ms < options_.node_ttl_ms) {
      SHELF_LOG(WARNING) << "registration refused: node id held by a live incarnation"
                         << Kv("node", ep.node_id()) << Kv("addr", ep.data_address());
      return absl::AlreadyExistsError(
          absl::StrCat("node id ", ep.node_id(),
                       " is held by another incarnation that heartbeated within the node "
                       "timeout: register again once it is silent"));
    }
    // A known node registering again (restart, master failover, or a
    // heartbeat that found us forgetful): its old replicas leave, and its
    // inventory below brings back whatever it still holds. The same
    // process (same incarnation) still holds every DRAM block the index
    // gave it, including those whose RECORD notice it never got: those
    // come back as orphans.
    Node& old = *nodes_[idx];
    same_process = old.incarnation == req.incarnation();
    unheard = UnheardRemovalsLocked(&old);
    orphans = std::exchange(old.orphans, {});
    if (!same_process) orphans.clear();
    DropNodeReplicasLocked(idx, now, same_process ? &orphans : nullptr);
    SHELF_LOG(INFO) << "store re-registered" << Kv("node", ep.node_id())
                    << Kv("addr", ep.data_address()) << Kv("orphans", orphans.size());
  } else {
    idx = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back(std::make_unique<Node>());
    node_by_id_[ep.node_id()] = idx;
    SHELF_LOG(INFO) << "store registered" << Kv("node", ep.node_id())
                    << Kv("addr", ep.data_address());
  }
  Node& n = *nodes_[idx];
  n.endpoint = ep;
  n.endpoint.set_incarnation(req.incarnation());
  n.admin_address = req.admin_address();
  n.labels = std::map<std::string, std::string>(req.labels().begin(), req.labels().end());
  n.state = v1::NODE_LIVE;
  n.draining = false;
  n.incarnation = req.incarnation();
  // A new key at every registration: grants minted for an earlier one (or
  // an earlier incarnation, or by an earlier master) no longer verify.
  n.grant_key = RandomBytes(32);
  do {
    const std::string id = RandomBytes(sizeof(uint64_t));
    std::memcpy(&n.registration_id, id.data(), sizeof(uint64_t));
  } while (n.registration_id == 0);
  n.grant_mac = std::make_unique<const HmacKey>(n.grant_key);
  // The store refuses a write grant numbered at or below one it has taken
  // for the same range: a master new to it (a failover) numbers on from
  // what it has taken.
  n.range_seq = std::max(n.range_seq, req.range_seq_floor());
  n.last_heartbeat_ms = now;
  // The same process keeps its arenas' tenants: their memory is the same,
  // and clients of those tenants may map it still.
  std::vector<Segment> before = std::move(n.segments);
  n.segments.clear();
  for (const v1::SegmentInfo& s : req.segments()) {
    Segment seg;
    seg.id = s.segment_id();
    seg.alloc = std::make_unique<storage::RangeAllocator>(s.capacity_bytes(), options_.alignment);
    for (const Segment& b : before) {
      if (same_process && b.id == seg.id && b.bound) {
        seg.bound = true;
        seg.tenant = b.tenant;
      }
    }
    // What the store says the arena held: a new master learns it here,
    // even for an arena whose blocks have all gone.
    if (!seg.bound && s.bound()) {
      seg.bound = true;
      seg.tenant = s.tenant();
    }
    n.segments.push_back(std::move(seg));
  }
  n.ssd_capacity = req.ssd_capacity_bytes();
  n.ForgetReplicaState();
  n.answer_cut = false;
  // Orphans first: they are what the index held, while a store's record
  // of a range may be stale (a RECORD for a newer block not yet received).
  // Inventory entries for the same block and range are then no news.
  // Removals it has not heard of stay removed (unheard.cc).
  for (const v1::InventoryEntry& e : orphans) {
    if (!UnheardCoversLocked(unheard, e)) AddInventoryLocked(idx, e, now);
  }
  for (const v1::InventoryEntry& e : req.inventory()) {
    if (UnheardCoversLocked(unheard, e)) {
      TellAgainLocked(&n, e);
    } else {
      AddInventoryLocked(idx, e, now);
    }
  }
  if (same_process && !unheard.drops_unreported.empty()) {
    // The same process keeps the drops it took and has not run yet (and
    // leaves their keys out of its inventory): they stay counted as not
    // run until it reports them, or it dies before.
    absl::flat_hash_set<std::string> on_ssd;
    for (const v1::InventoryEntry& e : req.inventory()) {
      if (e.tier() == v1::TIER_SSD) on_ssd.insert(e.key());
    }
    for (auto& [move_id, key] : unheard.drops_unreported) {
      if (!on_ssd.contains(key)) n.drops_unreported.emplace(move_id, std::move(key));
    }
  }
  if (unheard.all && req.inventory_size() > 0) {
    SHELF_LOG(WARNING) << "store registered after its record of removals was lost: what it "
                          "holds is dropped"
                       << Kv("node", ep.node_id()) << Kv("blocks", req.inventory_size());
  }
  resp->set_grant_key(n.grant_key);
  resp->set_registration_id(n.registration_id);
  resp->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  resp->set_node_ttl_ms(options_.node_ttl_ms);
  resp->set_term(leadership_.term());
  if (on_node_registered_) {
    // Outside the lock: the HA layer writes to etcd. (`ep` is the caller's
    // request, not state under mu_.)
    const std::string& id = ep.node_id();
    mu_.Unlock();
    on_node_registered_(id);
    mu_.Lock();
  }
  return absl::OkStatus();
}

void Master::AddInventoryLocked(uint32_t node, const v1::InventoryEntry& e, uint64_t now) {
  if (ValidateKey(e.key()).ok() == false || e.size() == 0 || e.size() > options_.block_bytes_max) {
    return;
  }
  // One replica per node and tier: an entry the index already holds here
  // (restored as an orphan, or listed twice) is no news.
  Object* known = FindLocked(e.key());
  if (known != nullptr) {
    for (const Replica& have : known->replicas) {
      if (have.node == node && have.tier == e.tier()) return;
    }
  }
  Node& n = *nodes_[node];
  Replica r;
  r.node = node;
  r.tier = e.tier();
  if (e.tier() == v1::TIER_DRAM) {
    int seg = -1;
    for (size_t i = 0; i < n.segments.size(); ++i) {
      if (n.segments[i].id == e.segment_id()) seg = static_cast<int>(i);
    }
    if (seg < 0 || !n.segments[seg].alloc->Reserve(e.offset(), e.size()).ok()) {
      SHELF_LOG(WARNING) << "inventory entry ignored: range not reservable"
                         << Kv("node", n.endpoint.node_id()) << Kv("offset", e.offset());
      return;
    }
    r.segment = static_cast<uint32_t>(seg);
    r.offset = e.offset();
    // A store of arenas that held a block before this registration: its
    // arena is that block's tenant's (a new master learns it here).
    BindArenaLocked(n, &n.segments[seg], e.key());
  } else if (e.tier() != v1::TIER_SSD) {
    return;
  }
  if (known == nullptr) {
    known = EmplaceLocked(e.key()).first;
    known->size = e.size();
    known->checksum = e.checksum();
    known->generation = e.generation();
    known->Touch(now);
  } else if (known->size != e.size() || known->checksum != e.checksum()) {
    // Same key, other bytes: keys are content addresses, so one copy is
    // wrong. Keep what the index has; the store's copy is not served.
    SHELF_LOG(WARNING) << "inventory entry disagrees with the index; ignored"
                       << Kv("node", n.endpoint.node_id());
    if (r.tier == v1::TIER_DRAM) FreeRangeLocked(node, r.segment, r.offset, e.size());
    // A replaced commit's copy (the store missed the news): it goes, so
    // that no read by key finds it there.
    TellAgainLocked(&n, e);
    return;
  }
  Object& obj = *known;
  LruList& lru = r.tier == v1::TIER_DRAM ? n.segments[r.segment].lru : n.ssd_lru;
  r.lru = lru.insert(lru.end(), &obj);
  if (r.tier == v1::TIER_SSD) n.ssd_used += e.size();
  // Counted as the pin counted the replicas it found (Pin); each leaves
  // the count with its replica (ReleaseReplicaLocked).
  if (obj.hard_pin) n.hard_pinned_bytes += obj.size;
  obj.replicas.push_back(r);
  ReplicaAddedLocked(&obj, &obj.replicas.back(), nullptr);
}

void Master::DropNodeReplicasLocked(uint32_t node, uint64_t now,
                                    std::vector<v1::InventoryEntry>* orphans) {
  Node& n = *nodes_[node];
  // One object can sit in two of this node's lists (a DRAM replica and an
  // SSD one: a promoted block keeps its SSD copy), so collect every object
  // once before touching any: erasing the object on its first list would
  // leave a dangling pointer in the second (found by the master fuzzer).
  std::vector<Object*> victims;
  auto take = [&victims](LruList& lru) {
    victims.insert(victims.end(), lru.begin(), lru.end());
    lru.clear();
  };
  for (Segment& seg : n.segments) take(seg.lru);
  take(n.ssd_lru);
  std::sort(victims.begin(), victims.end());
  victims.erase(std::unique(victims.begin(), victims.end()), victims.end());
  // Every block of the node goes: removals listing thousands of blocks
  // each (a million single ones would overflow the event queue), or
  // AllBlocksCleared on its topic (--events-node-loss).
  const bool nested = events_.in_bulk_removal();
  if (!nested) events_.BeginBulkRemoval();
  for (Object* obj : victims) {
    auto& reps = obj->replicas;
    for (const Replica& r : reps) {
      if (r.node == node && r.demoting) --demotions_pending_;
      if (r.node == node) ReplicaRemovedLocked(obj, r);  // counts the bytes as gone
      if (r.node == node && r.tier == v1::TIER_DRAM && orphans != nullptr) {
        v1::InventoryEntry& e = orphans->emplace_back();
        e.set_key(obj->key.str());
        e.set_tier(v1::TIER_DRAM);
        e.set_segment_id(n.segments[r.segment].id);
        e.set_offset(r.offset);
        e.set_size(obj->size);
        e.set_checksum(obj->checksum);
        e.set_generation(obj->generation);
      }
    }
    reps.erase(
        std::remove_if(reps.begin(), reps.end(), [&](const Replica& r) { return r.node == node; }),
        reps.end());
    if (reps.empty()) EraseIndexLocked(obj);
  }
  if (!nested) events_.EndBulkRemoval({n.endpoint.node_id()});
  // Puts in flight with a range on this node are aborted: the writer's
  // commit answers NOT_FOUND and it retries elsewhere.
  std::vector<uint64_t> doomed;
  for (const auto& [id, put] : puts_) {
    for (const Replica& r : put.ranges) {
      if (r.node == node) doomed.push_back(id);
    }
  }
  for (uint64_t id : doomed) {
    auto it = puts_.find(id);
    if (it == puts_.end()) continue;
    // Ranges on this node need no free (its allocators are reset); others do.
    for (const Replica& r : it->second.ranges) {
      if (r.node != node) FreeAfterGrantsLocked(it->second, r);
    }
    put_by_key_.erase(it->second.key);
    puts_.erase(it);
    metrics_.puts_aborted.Increment();
  }
  deferred_.erase(std::remove_if(deferred_.begin(), deferred_.end(),
                                 [&](const DeferredFree& d) { return d.node == node; }),
                  deferred_.end());
  for (auto it = promotes_.begin(); it != promotes_.end();) {
    if (it->second.node == node) {
      promotes_.erase(it++);
    } else {
      ++it;
    }
  }
  for (Segment& seg : n.segments) {
    seg.alloc =
        std::make_unique<storage::RangeAllocator>(seg.alloc->capacity(), options_.alignment);
    seg.demoting_bytes = 0;
  }
  n.ForgetReplicaState();
}

}  // namespace shelf::master
