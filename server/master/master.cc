// Master: construction and metrics, the index's access, removals, the
// periodic Tick (liveness, put timeouts, deferred frees, watermarks) and
// the invariants. Each concern's calls are in its subfolder (master.h).
#include "server/master/master.h"

#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/sync_point.h"
#include "transport/wire.h"

namespace shelf::master {

Master::Master(MasterOptions options, prom::Exposition* exposition)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      start_ms_(clock_->NowMs()),
      metrics_(exposition != nullptr ? *exposition : DefaultExposition()),
      events_(
          options_.events == nullptr
              ? BlockEvents::EmitFn()
              : [pub = options_.events](KvEvent e) { pub->Emit(std::move(e)); },
          options_.tenant_namespaces,
          options_.events_node_loss == MasterOptions::NodeLossEvents::kCleared) {
  SHELF_CHECK(options_.block_bytes_max <= kBlockBytesLimit)
      << "block_bytes_max " << options_.block_bytes_max << " over " << kBlockBytesLimit;
  prom::Exposition& r = exposition != nullptr ? *exposition : DefaultExposition();
  // The SSD tier writes whole 4 KiB blocks; DRAM ranges start aligned.
  quotas_ = std::make_unique<QuotaBook>(options_.credentials, options_.tenant_namespaces,
                                        std::max<uint64_t>(options_.alignment, 4096), clock_, r);
  gauges_.push_back(
      r.AddCallbackGauge("shelf_master_objects", "Committed objects in the index", [this] {
        ReaderMutexLock lock(&mu_);
        return static_cast<double>(ObjectCountLocked());
      }));
  gauges_.push_back(
      r.AddCallbackGauge("shelf_master_puts_in_flight", "Puts started, not committed", [this] {
        WriterMutexLock lock(&mu_);
        return static_cast<double>(puts_.size());
      }));
  gauges_.push_back(r.AddCallbackGauge("shelf_master_is_leader", "1 when this master leads",
                                       [this] { return is_leader() ? 1.0 : 0.0; }));
  gauges_.push_back(r.AddCallbackGauge("shelf_master_term", "Leader term",
                                       [this] { return static_cast<double>(term()); }));
  gauges_.push_back(r.AddCallbackGauge("shelf_master_nodes", "Stores by state", {"state"}, [this] {
    WriterMutexLock lock(&mu_);
    double live = 0, draining = 0, dead = 0;
    for (const auto& n : nodes_) {
      if (n->state == v1::NODE_DEAD) {
        ++dead;
      } else if (n->draining) {
        ++draining;
      } else {
        ++live;
      }
    }
    return std::vector<prom::GaugeSample>{
        {{"live"}, live}, {{"draining"}, draining}, {{"dead"}, dead}};
  }));
  auto per_node = [this](bool used) {
    WriterMutexLock lock(&mu_);
    std::vector<prom::GaugeSample> out;
    for (const auto& n : nodes_) {
      if (n->state == v1::NODE_DEAD) continue;
      const Node::DramTotals dram = n->Dram();
      out.push_back(
          {{n->endpoint.node_id(), "dram"}, static_cast<double>(used ? dram.used : dram.capacity)});
      if (n->ssd_capacity > 0) {
        out.push_back({{n->endpoint.node_id(), "ssd"},
                       static_cast<double>(used ? n->ssd_used : n->ssd_capacity)});
      }
    }
    return out;
  };
  gauges_.push_back(r.AddCallbackGauge(
      "shelf_master_dram_bytes",
      "DRAM by node and what it holds: free, dram_only (blocks on no other tier of the store, "
      "puts in flight, ranges held for a lease), clean (also on the store's SSD), demoting",
      {"node", "state"}, [this] {
        WriterMutexLock lock(&mu_);
        std::vector<prom::GaugeSample> out;
        for (const auto& n : nodes_) {
          if (n->state == v1::NODE_DEAD) continue;
          const Node::DramTotals dram = n->Dram();
          const std::string& id = n->endpoint.node_id();
          out.push_back({{id, "free"}, static_cast<double>(dram.capacity - dram.used)});
          out.push_back({{id, "dram_only"}, static_cast<double>(dram.dram_only())});
          out.push_back({{id, "clean"}, static_cast<double>(dram.clean)});
          out.push_back({{id, "demoting"}, static_cast<double>(dram.demoting)});
        }
        return out;
      }));
  gauges_.push_back(r.AddCallbackGauge("shelf_master_capacity_bytes", "Capacity by node and tier",
                                       {"node", "tier"}, [per_node] { return per_node(false); }));
  gauges_.push_back(r.AddCallbackGauge("shelf_master_used_bytes", "Used bytes by node and tier",
                                       {"node", "tier"}, [per_node] { return per_node(true); }));
}

Master::~Master() {
  // Unregister the callbacks before the state they read goes away.
  gauges_.clear();
}

absl::Status Master::ValidateKey(const std::string& key) const {
  if (std::string why = KeyLengthError(key.size()); !why.empty()) {
    return absl::InvalidArgumentError(why);
  }
  return absl::OkStatus();
}

absl::Status Master::ValidateKeys(const google::protobuf::RepeatedPtrField<std::string>& keys,
                                  absl::string_view what) const {
  if (keys.empty() || static_cast<size_t>(keys.size()) > kBatchItemsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " takes 1..", kBatchItemsMax, " keys, got ", keys.size()));
  }
  for (const std::string& key : keys) {
    if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  }
  return absl::OkStatus();
}

Shard& Master::ShardOf(absl::string_view key) { return shards_[ShardIndex(key)]; }

Object* Master::FindLocked(const std::string& key) {
  Shard& shard = ShardOf(key);
  MutexLock lock(&shard.mu);
  auto it = shard.objects.find(key);
  return it == shard.objects.end() ? nullptr : &Mut(*it);
}

std::pair<Object*, bool> Master::EmplaceLocked(const std::string& key) {
  Shard& shard = ShardOf(key);
  MutexLock lock(&shard.mu);
  auto [pos, inserted] = shard.objects.emplace(key);
  return {&Mut(*pos), inserted};
}

void Master::EraseIndexLocked(Object* obj) {
  quotas_->ObjectGone(obj->key.view());  // its pin goes with it
  if (!gone_leases_.empty()) {
    // Ranges it lost earlier under its lease (a demotion, a dropped copy)
    // now wait for the releases of the holders it has as it goes.
    const std::pair<std::string, uint64_t> key{obj->key.str(), obj->generation};
    if (gone_leases_.contains(key)) {
      if (obj->lease_holders == 0) {
        FreeGoneLeaseLocked(key);  // every reader gave it back
      } else if (GoneLeaseLocked(*obj) == 0) {
        gone_leases_.erase(key);  // uncounted: the lease's end frees them
      }
    }
  }
  Shard& shard = ShardOf(obj->key.view());
  MutexLock lock(&shard.mu);
  // Found by address: the object's key goes with it.
  auto it = shard.objects.find(obj->key.view());
  shard.objects.erase(it);
}

size_t Master::ObjectCountLocked() {
  size_t n = 0;
  for (Shard& shard : shards_) {
    MutexLock lock(&shard.mu);
    n += shard.objects.size();
  }
  return n;
}

absl::Status Master::Remove(const v1::RemoveRequest& req, v1::RemoveResponse* resp) {
  if (absl::Status s = ValidateKeys(req.keys(), "a remove"); !s.ok()) return s;
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  // Not while recovering: a store not registered yet would bring the key
  // back (the client retries UNAVAILABLE).
  if (absl::Status s = CheckLeaderLocked(true); !s.ok()) return s;
  for (const std::string& key : req.keys()) {
    v1::RpcStatus* st = resp->add_statuses();
    NoteRemovedLocked(key);
    Object* obj = FindLocked(key);
    if (obj == nullptr) {
      st->set_code(static_cast<int>(absl::StatusCode::kNotFound));
      st->set_message("no such key");
      continue;
    }
    if (PinnedLocked(*obj, now) && !req.force()) {
      absl::Status pinned = PinnedError();
      st->set_code(static_cast<int>(pinned.code()));
      st->set_message(absl::StrCat(pinned.message(), " or remove with force"));
      continue;
    }
    // The key disappears now; ranges under a read lease are freed when the
    // lease ends (EraseObjectLocked defers them).
    EraseObjectLocked(obj, now);
    metrics_.removes.Increment();
    st->set_code(0);
  }
  return absl::OkStatus();
}

uint64_t Master::DramBytesOf(const std::string& key) {
  ReaderMutexLock lock(&mu_);
  const Object* obj = FindSharedLocked(Hashed(key));
  if (obj == nullptr) return 0;
  uint64_t bytes = 0;
  for (const Replica& r : obj->replicas) bytes += r.tier == v1::TIER_DRAM ? obj->size : 0;
  return bytes;
}

bool Master::PinnedLocked(const Object& obj, uint64_t now) const {
  return obj.hard_pin || obj.pin_until_ms() > now;
}

absl::Status Master::PinnedError() {
  return absl::FailedPreconditionError("key is pinned: unpin it");
}

void Master::RoomMadeLocked() {
  frees_.fetch_add(1);
  MutexLock room(&room_mu_);
  room_cv_.SignalAll();
}

void Master::FreeRangeLocked(uint32_t node, uint32_t segment, uint64_t offset, uint64_t size) {
  RoomMadeLocked();
  absl::Status s = nodes_[node]->segments[segment].alloc->Free(offset, size);
  // The master frees only ranges it allocated or reserved itself: a refusal
  // means its books are wrong, and going on would hand out live bytes.
  SHELF_CHECK(s.ok()) << "node " << node << " segment " << segment << ": " << s.message();
}

void Master::ReleaseReplicaLocked(Object* obj, const Replica& r, uint64_t now) {
  SHELF_CHECK(r.node < nodes_.size() && r.segment < nodes_[r.node]->segments.size());
  ReplicaRemovedLocked(obj, r);
  Node& n = *nodes_[r.node];
  if (r.demoting) {
    // Its demotion is still out: undo the reservations made for it. The
    // store's report will find no object and drop the SSD copy. Paired with
    // the order that counted it (EvictSegmentLocked).
    SHELF_CHECK(demotions_pending_ > 0) << "a demoting replica with no demotion pending";
    --demotions_pending_;
    Segment& seg = n.segments[r.segment];
    seg.demoting_bytes -= std::min(seg.demoting_bytes, seg.alloc->RoundUp(obj->size));
    n.ssd_used -= std::min<uint64_t>(n.ssd_used, obj->size);
  }
  if (r.tier == v1::TIER_DRAM) {
    n.segments[r.segment].lru.erase(r.lru);
    if (n.state == v1::NODE_DEAD) return;  // its allocators were reset
    NoticeLocked(*obj, r, false);
    if (obj->lease_until_ms > now) {
      // Its readers' releases, arriving after the remove, end the wait
      // early (ReleaseGoneLeasesLocked): a reader that removes what it has
      // just read would otherwise hold the range for a whole lease.
      deferred_.push_back(
          {obj->lease_until_ms, r.node, r.segment, r.offset, obj->size, GoneLeaseLocked(*obj)});
    } else {
      FreeRangeLocked(r.node, r.segment, r.offset, obj->size);
    }
  } else {
    n.ssd_lru.erase(r.lru);
    n.ssd_used -= std::min<uint64_t>(n.ssd_used, obj->size);
    if (n.state != v1::NODE_DEAD) OrderDropSsdLocked(&n, obj->key.str());
  }
  if (obj->hard_pin) n.hard_pinned_bytes -= std::min<uint64_t>(n.hard_pinned_bytes, obj->size);
}

void Master::NoticeLocked(const Object& obj, const Replica& r, bool record) {
  Node& n = *nodes_[r.node];
  v1::TierMove m;
  m.set_kind(record ? v1::TierMove::RECORD : v1::TierMove::FORGET);
  m.set_key(obj.key.str());
  m.set_segment_id(n.segments[r.segment].id);
  m.set_offset(r.offset);
  m.set_size(obj.size);
  m.set_checksum(obj.checksum);
  m.set_term(leadership_.term());
  m.set_generation(obj.generation);
  QueueNoticeLocked(&n, std::move(m));
}

uint64_t Master::GoneLeaseLocked(const Object& obj) {
  if (obj.lease_holders == 0 || obj.lease_holders == kLeaseHoldersMax) return 0;
  GoneLease& g = gone_leases_[{obj.key.str(), obj.generation}];
  if (g.id == 0) g.id = next_gone_lease_++;
  // The count now: every holder of this commit's lease, whichever of its
  // ranges it read.
  g.holders = static_cast<uint32_t>(obj.lease_holders);
  g.until_ms = std::max(g.until_ms, obj.lease_until_ms);
  return g.id;
}

void Master::FreeGoneLeaseLocked(const std::pair<std::string, uint64_t>& key) {
  auto it = gone_leases_.find(key);
  if (it == gone_leases_.end()) return;
  const uint64_t id = it->second.id;
  gone_leases_.erase(it);
  auto freed = std::partition(deferred_.begin(), deferred_.end(),
                              [&](const DeferredFree& d) { return d.gone_lease != id; });
  for (auto d = freed; d != deferred_.end(); ++d) {
    FreeRangeLocked(d->node, d->segment, d->offset, d->size);
  }
  deferred_.erase(freed, deferred_.end());
}

void Master::ReleaseGoneLeasesLocked(const std::vector<std::pair<std::string, uint64_t>>& gone) {
  for (const auto& key : gone) {
    auto it = gone_leases_.find(key);
    if (it == gone_leases_.end() || --it->second.holders > 0) continue;
    FreeGoneLeaseLocked(key);
    metrics_.removed_leases_released.Increment();
  }
}

void Master::EndGoneLeasesLocked(const std::vector<std::pair<std::string, uint64_t>>& ended) {
  for (const auto& key : ended) {
    if (!gone_leases_.contains(key)) continue;  // run out meanwhile
    // Leased again, or removed, since the count reached 0: a later remove
    // may have left its own ranges under the same lease, which its
    // holders' releases end.
    const Object* obj = FindLocked(key.first);
    if (obj == nullptr || obj->generation != key.second || obj->lease_holders != 0) continue;
    FreeGoneLeaseLocked(key);
    metrics_.moved_leases_released.Increment();
  }
}

void Master::EraseObjectLocked(Object* obj, uint64_t now) {
  for (const Replica& r : obj->replicas) ReleaseReplicaLocked(obj, r, now);
  EraseIndexLocked(obj);
}

void Master::Tick() {
  SHELF_SYNC_POINT("Master::Tick:Start");
  WriterMutexLock lock(&mu_);
  SHELF_SYNC_POINT("Master::Tick:Locked");
  // Read under the lock: every heartbeat stamp is then no later than `now`.
  const uint64_t now = clock_->NowMs();
  if (!leadership_.leader()) return;
  if (leadership_.recovering()) {
    size_t reported = 0;
    for (const std::string& id : leadership_.expected()) reported += node_by_id_.contains(id);
    if (leadership_.EndRecovery(now, reported)) {
      SHELF_LOG(INFO) << "recovery done" << Kv("term", leadership_.term())
                      << Kv("reported", reported) << Kv("expected", leadership_.expected_nodes())
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
  absl::erase_if(gone_leases_, [&](const auto& g) { return g.second.until_ms <= now; });
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

void Master::CheckInvariants() {
  WriterMutexLock lock(&mu_);
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> used, clean;
  for (Shard& shard : shards_) {
    MutexLock shard_lock(&shard.mu);
    for (const Object& obj : shard.objects) {
      if (obj.replicas.empty()) std::abort();
      if (&ShardOf(obj.key.view()) != &shard) std::abort();
      for (const Replica& r : obj.replicas) {
        if (r.node >= nodes_.size() || *r.lru != &obj) std::abort();
        if (r.tier == v1::TIER_DRAM) {
          uint64_t aligned = nodes_[r.node]->segments[r.segment].alloc->RoundUp(obj.size);
          used[{r.node, r.segment}] += aligned;
          bool ssd_here = false;
          for (const Replica& s : obj.replicas) {
            ssd_here |= s.node == r.node && s.tier == v1::TIER_SSD;
          }
          if (r.clean != ssd_here) std::abort();  // clean: an SSD copy on its store
          if (r.clean) clean[{r.node, r.segment}] += aligned;
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
      if (nodes_[i]->segments[s].clean_bytes != clean[{i, s}]) std::abort();
    }
  }
}

void Master::ReplicaAddedLocked(Object* obj, Replica* r, const v1::BlockEventInfo* put_info) {
  quotas_->Stored(obj->key.view(), obj->writer, r->tier, obj->size, /*added=*/true);
  events_.Stored(*obj, nodes_[r->node]->endpoint.node_id(), r->tier, put_info);
  // A DRAM replica with an SSD copy on its store is clean: dropping it
  // loses nothing (docs/storage.md, "What the capacity holds").
  Node& n = *nodes_[r->node];
  for (Replica& d : obj->replicas) {
    if (d.node != r->node || d.tier != v1::TIER_DRAM || d.clean) continue;
    bool ssd_here = false;
    for (const Replica& s : obj->replicas) ssd_here |= s.node == d.node && s.tier == v1::TIER_SSD;
    if (!ssd_here) continue;
    d.clean = true;
    Segment& seg = n.segments[d.segment];
    seg.clean_bytes += seg.alloc->RoundUp(obj->size);
  }
}

void Master::ReplicaRemovedLocked(Object* obj, const Replica& r) {
  quotas_->Stored(obj->key.view(), obj->writer, r.tier, obj->size, /*added=*/false);
  events_.Removed(*obj, nodes_[r.node]->endpoint.node_id(), r.tier);
  // `r` is one of obj->replicas or a copy of one taken out: a DRAM replica
  // going counts its clean bytes once (its flag cleared where it still
  // stands); an SSD copy going leaves its store's DRAM replicas dirty.
  Node& n = *nodes_[r.node];
  const bool dram = r.tier == v1::TIER_DRAM;
  if (dram && !r.clean) return;
  bool counted = false;
  for (Replica& d : obj->replicas) {
    if (d.node != r.node || d.tier != v1::TIER_DRAM || !d.clean) continue;
    if (dram && (d.segment != r.segment || d.offset != r.offset)) continue;
    d.clean = false;
    Segment& seg = n.segments[d.segment];
    seg.clean_bytes -= std::min(seg.clean_bytes, seg.alloc->RoundUp(obj->size));
    counted = true;
  }
  if (dram && !counted) {  // a copy taken out of the vector
    Segment& seg = n.segments[r.segment];
    seg.clean_bytes -= std::min(seg.clean_bytes, seg.alloc->RoundUp(obj->size));
  }
}

}  // namespace shelf::master
