// Master: node registry, liveness, placement, eviction and tier moves.
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
  n.ssd_used = 0;
  n.demote_probe_id = 0;
  n.hard_pinned_bytes = 0;
  n.outbox.clear();
  n.notices.clear();
  n.verifies.clear();
  n.answer_cut = false;
  // Orphans first: they are what the index held, while a store's record
  // of a range may be stale (a RECORD for a newer block not yet received).
  // Inventory entries for the same block and range are then no news.
  // Removals it has not heard of stay removed (master_unheard.cc).
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
  resp->set_term(term_);
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
  EmitStoredLocked(obj, obj.replicas.back(), nullptr);
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
  const bool nested = bulk_removed_ != nullptr;
  if (!nested) BeginBulkRemovalLocked();
  for (Object* obj : victims) {
    auto& reps = obj->replicas;
    for (const Replica& r : reps) {
      if (r.node == node && r.demoting) --demotions_pending_;
      if (r.node == node) EmitRemovedLocked(*obj, r);  // counts the bytes as gone
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
  if (!nested) EndBulkRemovalLocked({n.endpoint.node_id()});
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
  n.ssd_used = 0;
  n.demote_probe_id = 0;
  n.hard_pinned_bytes = 0;
  n.outbox.clear();
  n.notices.clear();
  n.verifies.clear();
}

std::vector<uint32_t> Master::PlaceLocked(const v1::PutOptions& opts,
                                          const std::string& client_host, uint64_t size) {
  std::vector<uint32_t> live;
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = *nodes_[i];
    if (n.state != v1::NODE_LIVE || n.draining) continue;
    bool fits = false;
    for (const Segment& s : n.segments) fits |= s.alloc->capacity() >= size;
    if (fits) live.push_back(i);
  }
  // Stores with room for the block first, most free space first. Then
  // the full ones, the one whose least recently used block was used
  // longest ago first: the put evicts there, so the stores together evict
  // as one LRU rather than each its own share. Ties are broken at random
  // so equal stores share load.
  struct Rank {
    bool room = false;
    uint64_t free = 0;
    uint64_t oldest_ms = UINT64_MAX;
    uint32_t node = 0;
  };
  std::vector<Rank> ranked;
  for (uint32_t i : live) {
    Rank r;
    r.node = i;
    for (const Segment& s : nodes_[i]->segments) {
      r.free += s.alloc->free_bytes();
      r.room |= s.alloc->largest_free() >= s.alloc->RoundUp(size);
      if (!s.lru.empty()) r.oldest_ms = std::min(r.oldest_ms, s.lru.front()->last_access_ms());
    }
    ranked.push_back(r);
  }
  // Ties go to a random store (std::rand shares one state across threads).
  static thread_local std::minstd_rand rng(std::random_device{}());
  std::shuffle(ranked.begin(), ranked.end(), rng);
  std::stable_sort(ranked.begin(), ranked.end(), [](const Rank& a, const Rank& b) {
    if (a.room != b.room) return a.room;
    return a.room ? a.free > b.free : a.oldest_ms < b.oldest_ms;
  });
  std::vector<uint32_t> order;
  if (opts.prefer_local()) {
    const std::string& host = opts.client_host_id().empty() ? client_host : opts.client_host_id();
    for (const Rank& r : ranked) {
      if (nodes_[r.node]->endpoint.host_id() == host) order.push_back(r.node);
    }
  }
  for (const Rank& r : ranked) {
    if (std::find(order.begin(), order.end(), r.node) == order.end()) order.push_back(r.node);
  }
  if (!opts.spread_label().empty()) {
    // Distinct label values first, then the rest.
    std::vector<uint32_t> first, rest;
    std::set<std::string> seen;
    for (uint32_t i : order) {
      auto it = nodes_[i]->labels.find(opts.spread_label());
      std::string v = it == nodes_[i]->labels.end() ? "" : it->second;
      (seen.insert(v).second ? first : rest).push_back(i);
    }
    order = first;
    order.insert(order.end(), rest.begin(), rest.end());
  }
  return order;
}

absl::StatusOr<Master::Replica> Master::AllocateOnNodeLocked(uint32_t node, uint64_t size,
                                                             uint64_t now, bool allow_drop,
                                                             absl::string_view key) {
  Node& n = *nodes_[node];
  absl::Status last = absl::ResourceExhaustedError("no segment large enough");
  const std::vector<uint32_t> order = SegmentOrderLocked(n, key, &last);
  for (uint32_t si : order) {
    Segment& seg = n.segments[si];
    if (seg.alloc->capacity() < size) continue;
    absl::StatusOr<uint64_t> off = seg.alloc->Allocate(size);
    if (!off.ok() && !allow_drop) {
      // Full: start demotions (they free room asynchronously).
      DemoteAheadLocked(node, &seg, now);
    }
    if (!off.ok() && allow_drop) {
      // No room and no time left to wait: drop LRU victims here, one at a
      // time, until it fits. Bounded by the segment's object count.
      size_t budget = seg.lru.size();
      while (!off.ok() && budget-- > 0) {
        uint64_t target = seg.alloc->used() > size ? seg.alloc->used() - size : 0;
        if (EvictSegmentLocked(node, &seg, target, EvictMode::kDrop, now, nullptr) == 0) break;
        off = seg.alloc->Allocate(size);
      }
    }
    if (off.ok()) {
      BindArenaLocked(n, &seg, key);
      Replica r;
      r.node = node;
      r.tier = v1::TIER_DRAM;
      r.segment = si;
      r.offset = *off;
      // Short of headroom for the recent put rate: start demotions now
      // rather than at the next tick, so room returns before writers run
      // out of it.
      NotePutBytesLocked(&seg, seg.alloc->RoundUp(size), now);
      DemoteAheadLocked(node, &seg, now);
      return r;
    }
    last = off.status();
  }
  return last;
}

bool Master::EvictableLocked(const Object& obj, uint64_t now, bool allow_soft_pinned,
                             bool for_demotion) const {
  // A demotion copies the block and frees its DRAM range only when the
  // lease ends (deferred free), so a lease does not stop one; a drop would
  // break the lease, so it does.
  if (obj.hard_pin || (!for_demotion && obj.lease_until_ms > now)) return false;
  if (obj.pin_until_ms() > now && !allow_soft_pinned) return false;
  for (const Replica& r : obj.replicas) {
    if (r.demoting) return false;
  }
  return true;
}

bool Master::CanDemoteLocked(const Node& n, uint64_t now) const {
  return n.ssd_capacity > 0 && n.ssd_failing_until_ms <= now;
}

uint64_t Master::EvictSegmentLocked(uint32_t node, Segment* seg, uint64_t target_used,
                                    EvictMode mode, uint64_t now, v1::EvictResponse* stats) {
  Node& n = *nodes_[node];
  const bool demote_ok = mode != EvictMode::kDrop;
  uint64_t freed = 0;
  // The list is in LRU order (lookups move what they find to the back).
  // Pass 0, when tenants have guaranteed DRAM shares, takes only blocks of
  // tenants over theirs; pass 1 skips soft-pinned blocks; pass 2 takes them
  // too, but not in a cluster of tenants, where a soft pin is another
  // tenant's to keep (docs/security.md, "Quotas").
  const bool shares = quotas_->any_guarantee();
  const int passes = options_.tenant_namespaces ? 2 : 3;
  for (int pass = shares ? 0 : 1; pass < passes; ++pass) {
    for (auto it = seg->lru.begin(); it != seg->lru.end();) {
      // Demotions already ordered will free their bytes: count them done,
      // unless this pass must make room now (it drops; a demotion may yet
      // fail).
      if ((demote_ok ? seg->settled_used() : seg->alloc->used()) <= target_used) return freed;
      Object* obj = *it++;
      Replica* rep = nullptr;
      bool has_ssd_here = false;
      for (Replica& r : obj->replicas) {
        if (r.node == node && r.tier == v1::TIER_DRAM && &n.segments[r.segment] == seg) rep = &r;
        if (r.node == node && r.tier == v1::TIER_SSD) has_ssd_here = true;
      }
      if (rep == nullptr) continue;
      if (!EvictableLocked(*obj, now, pass == 2, demote_ok)) continue;
      if (pass == 0 && !quotas_->OverGuarantee(obj->key.view())) continue;
      uint64_t aligned = seg->alloc->RoundUp(obj->size);
      uint64_t ssd_high = static_cast<uint64_t>(options_.ssd_evict_high * n.ssd_capacity);
      bool can_demote =
          demote_ok && !has_ssd_here && obj->size <= ssd_high && n.ssd_failing_until_ms <= now;
      if (can_demote && n.ssd_used + obj->size > ssd_high) {
        // Make room on SSD first: its least recently used go, and this
        // block takes their place (an LRU across both tiers).
        EvictSsdLocked(node, static_cast<uint64_t>(options_.ssd_evict_low * n.ssd_capacity), now);
        can_demote = n.ssd_used + obj->size <= ssd_high;
      }
      if (!can_demote && obj->lease_until_ms > now) continue;  // leased: cannot drop
      // The watermark pass drops only what stays on SSD here; the rest
      // keeps its room until a put needs it.
      if (!can_demote && mode == EvictMode::kDemote && !has_ssd_here) continue;
      if (can_demote) {
        v1::TierMove m;
        m.set_move_id(next_move_id_++);
        m.set_key(obj->key.str());
        m.set_kind(v1::TierMove::DEMOTE);
        m.set_segment_id(seg->id);
        m.set_offset(rep->offset);
        m.set_size(obj->size);
        m.set_checksum(obj->checksum);
        m.set_generation(obj->generation);
        m.set_term(term_);
        NoteDemoteOrderedLocked(&n, m.move_id(), now);
        OrderLocked(&n, std::move(m));
        rep->demoting = true;
        ++demotions_pending_;
        n.ssd_used += obj->size;
        seg->demoting_bytes += aligned;
        if (stats != nullptr) stats->set_demoted_objects(stats->demoted_objects() + 1);
        continue;
      }
      // Drop this replica; the object goes when it was the last one.
      Replica victim = *rep;
      obj->replicas.erase(obj->replicas.begin() + (rep - obj->replicas.data()));
      ReleaseReplicaLocked(obj, victim, now);
      if (obj->replicas.empty()) EraseIndexLocked(obj);
      freed += aligned;
      metrics_.evictions.Increment();
      if (stats != nullptr) {
        stats->set_evicted_objects(stats->evicted_objects() + 1);
        stats->set_evicted_bytes(stats->evicted_bytes() + aligned);
      }
    }
  }
  return freed;
}

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
  EmitStoredLocked(*obj, obj->replicas.back(), nullptr);
  obj->Touch(now);
  metrics_.promotions.Increment();
  return absl::OkStatus();
}

void Master::Tick() {
  SHELF_SYNC_POINT("Master::Tick:Start");
  WriterMutexLock lock(&mu_);
  SHELF_SYNC_POINT("Master::Tick:Locked");
  // Read under the lock: every heartbeat stamp is then no later than `now`.
  const uint64_t now = clock_->NowMs();
  if (!leader_) return;
  if (recovering_) {
    size_t reported = 0;
    for (const std::string& id : expected_nodes_) reported += node_by_id_.contains(id);
    if (reported == expected_nodes_.size() || now >= recovery_deadline_ms_) {
      recovering_ = false;
      SHELF_LOG(INFO) << "recovery done" << Kv("term", term_) << Kv("reported", reported)
                      << Kv("expected", expected_nodes_.size())
                      << Kv("objects", ObjectCountLocked());
    }
  }
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    Node& n = *nodes_[i];
    if (n.state == v1::NODE_DEAD) {
      if (now >= n.orphans_until_ms) n.orphans = {};
      if (ElapsedMs(now, n.dead_since_ms) >= options_.dead_store_memory_ms) {
        LoseUnheardLocked(&n, "dead longer than --dead-store-memory");
      }
      continue;
    }
    const uint64_t silent_ms = ElapsedMs(now, n.last_heartbeat_ms);
    if (silent_ms > options_.node_ttl_ms) {
      SHELF_LOG(WARNING) << "store dead: no heartbeat within the TTL"
                         << Kv("node", n.endpoint.node_id()) << Kv("silent_ms", silent_ms);
      RememberUnheardLocked(i);                    // removals it was not told of yet
      DropNodeReplicasLocked(i, now, &n.orphans);  // empty while live
      n.orphans_until_ms = now + kOrphansKeepTtls * options_.node_ttl_ms;
      n.dead_since_ms = now;
      n.state = v1::NODE_DEAD;
      metrics_.nodes_died.Increment();
    }
  }
  std::vector<uint64_t> expired;
  for (const auto& [id, put] : puts_) {
    if (put.deadline_ms <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    AbortPutLocked(id);
    metrics_.puts_expired.Increment();
  }
  for (auto it = promotes_.begin(); it != promotes_.end();) {
    const PendingPromote& p = it->second;
    if (p.deadline_ms <= now) {
      const Node& n = *nodes_[p.node];
      if (n.incarnation == p.incarnation && n.state != v1::NODE_DEAD) {
        FreeRangeLocked(p.node, p.segment, p.offset, p.size);
      }
      promotes_.erase(it++);
    } else {
      ++it;
    }
  }
  auto due = std::partition(deferred_.begin(), deferred_.end(),
                            [&](const DeferredFree& d) { return d.at_ms > now; });
  for (auto it = due; it != deferred_.end(); ++it) {
    FreeRangeLocked(it->node, it->segment, it->offset, it->size);
  }
  deferred_.erase(due, deferred_.end());
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    Node& n = *nodes_[i];
    if (n.state == v1::NODE_DEAD) continue;
    for (Segment& seg : n.segments) {
      DemoteAheadLocked(i, &seg, now);
    }
    // The SSD tier has its own watermarks: drop its least recently used.
    if (n.ssd_capacity > 0 && n.ssd_used > options_.ssd_evict_high * n.ssd_capacity) {
      EvictSsdLocked(i, static_cast<uint64_t>(options_.ssd_evict_low * n.ssd_capacity), now);
    }
  }
}

void Master::EvictSsdLocked(uint32_t node, uint64_t target_used, uint64_t now) {
  Node& n = *nodes_[node];
  // In LRU order (lookups move what they find to the back).
  for (auto it = n.ssd_lru.begin(); it != n.ssd_lru.end() && n.ssd_used > target_used;) {
    Object* obj = *it++;
    size_t k = 0;
    while (k < obj->replicas.size() &&
           !(obj->replicas[k].node == node && obj->replicas[k].tier == v1::TIER_SSD)) {
      ++k;
    }
    if (k == obj->replicas.size()) continue;
    if (!EvictableLocked(*obj, now, false, false)) continue;
    Replica victim = obj->replicas[k];
    obj->replicas.erase(obj->replicas.begin() + k);
    ReleaseReplicaLocked(obj, victim, now);
    metrics_.evictions.Increment();
    if (obj->replicas.empty()) EraseIndexLocked(obj);
  }
}

void Master::CheckInvariants() {
  WriterMutexLock lock(&mu_);
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> used;
  for (Shard& shard : shards_) {
    MutexLock shard_lock(&shard.mu);
    for (const Object& obj : shard.objects) {
      if (obj.replicas.empty()) std::abort();
      if (&ShardOf(obj.key.view()) != &shard) std::abort();
      for (const Replica& r : obj.replicas) {
        if (r.node >= nodes_.size() || *r.lru != &obj) std::abort();
        if (r.tier == v1::TIER_DRAM) {
          used[{r.node, r.segment}] += nodes_[r.node]->segments[r.segment].alloc->RoundUp(obj.size);
        }
      }
    }
  }
  for (auto& [id, put] : puts_) {
    for (const Replica& r : put.ranges) {
      used[{r.node, r.segment}] += nodes_[r.node]->segments[r.segment].alloc->RoundUp(put.size);
    }
  }
  for (const auto& [id, p] : promotes_) {
    used[{p.node, p.segment}] += nodes_[p.node]->segments[p.segment].alloc->RoundUp(p.size);
  }
  for (const DeferredFree& d : deferred_) {
    used[{d.node, d.segment}] += nodes_[d.node]->segments[d.segment].alloc->RoundUp(d.size);
  }
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    // Orders and notices in their numbers' order, each below next_seq
    // (AnswerOrdersLocked merges them by number).
    for (const auto* moves : {&nodes_[i]->outbox, &nodes_[i]->notices}) {
      uint64_t last = 0;
      for (const v1::TierMove& m : *moves) {
        if (m.seq() <= last || m.seq() >= nodes_[i]->next_seq) std::abort();
        last = m.seq();
      }
    }
    if (nodes_[i]->state == v1::NODE_DEAD) continue;
    for (uint32_t s = 0; s < nodes_[i]->segments.size(); ++s) {
      const storage::RangeAllocator& a = *nodes_[i]->segments[s].alloc;
      a.CheckInvariants();
      if (a.used() != used[{i, s}]) std::abort();
    }
  }
}

}  // namespace shelf::master
