// The read half of the master: Lookup, MatchPrefix and ReleaseLeases,
// and how an answer is filled (docs/master.md, "Locking").
#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/sync_point.h"
#include "server/master/master.h"
#include "transport/wire.h"

namespace shelf::master {

template <typename Fn>
void Master::ForEachByShardLocked(const HashedKey* keys, Object* const* found, int n, Fn fn) {
  uint8_t shard_of[kBatchItemsMax];
  uint16_t by_shard[kBatchItemsMax];
  uint16_t first[kShards + 1] = {};
  int m = 0;  // keys found, numbered in by_shard
  for (int i = 0; i < n; ++i) {
    if (found[i] == nullptr) continue;
    shard_of[i] = static_cast<uint8_t>(ShardOfHash(keys[i].hash));
    ++first[shard_of[i] + 1];
    ++m;
  }
  if (m == 0) return;
  for (size_t sh = 0; sh < kShards; ++sh) first[sh + 1] += first[sh];
  uint16_t next[kShards];
  std::copy(first, first + kShards, next);
  for (int i = 0; i < n; ++i) {
    if (found[i] != nullptr) by_shard[next[shard_of[i]]++] = static_cast<uint16_t>(i);
  }
  for (size_t sh = 0; sh < kShards; ++sh) {
    if (first[sh] == first[sh + 1]) continue;
    Shard& shard = shards_[sh];
    MutexLock lock(&shard.mu);
    for (uint16_t j = first[sh]; j < first[sh + 1]; ++j) fn(found[by_shard[j]]);
  }
}

void Master::PrefetchSlot(const HashedKey& key) {
  // Reads only the table's own pointers, which change only under mu_ held
  // exclusively; the caller holds it shared. A prefetch is a hint besides.
  shards_[ShardOfHash(key.hash)].objects.prefetch(key);
}

void Master::PrefetchObject(const HashedKey& key) {
  // Reads the slot, as PrefetchSlot does, and compares no key.
  shards_[ShardOfHash(key.hash)].objects.find(PrefetchProbe{key.hash});
}

Object* Master::FindSharedLocked(const HashedKey& key) {
  // What a find reads, the table and the objects' keys, changes only under
  // mu_ held exclusively (an insert, an erase), and the caller holds it
  // shared: the shard's lock orders only what lookups change in an object
  // (its lease and access time), which a find does not read.
  Shard& shard = shards_[ShardOfHash(key.hash)];
  auto it = shard.objects.find(key);
  return it == shard.objects.end() ? nullptr : &Mut(*it);
}

void Master::FindBatchLocked(const google::protobuf::RepeatedPtrField<std::string>& keys,
                             bool stop_at_miss, bool lease, bool touch, uint64_t now,
                             Object** found, LookupCounts* counts) {
  const int n = keys.size();
  // Each key is hashed once, for its shard, its prefetches and its find.
  HashedKey hashed[kBatchItemsMax];
  // The finds, in order (a prefix match stops at its first miss), take no
  // lock: a lock is a barrier, and the cache misses of one find should
  // overlap the next ones'. Those misses are the table slot, then the
  // object the slot points to: each is started ahead of the find, the
  // slot kPrefetchSlotAhead keys ahead, the object kPrefetchObjectAhead.
  for (int j = 0; j < std::min(n, kPrefetchSlotAhead); ++j) {
    hashed[j] = Hashed(keys[j]);
    PrefetchSlot(hashed[j]);
    if (j < kPrefetchObjectAhead) PrefetchObject(hashed[j]);
  }
  int i = 0;
  for (; i < n; ++i) {
    if (i + kPrefetchSlotAhead < n) {
      hashed[i + kPrefetchSlotAhead] = Hashed(keys[i + kPrefetchSlotAhead]);
      PrefetchSlot(hashed[i + kPrefetchSlotAhead]);
    }
    if (i + kPrefetchObjectAhead < n) PrefetchObject(hashed[i + kPrefetchObjectAhead]);
    found[i] = FindSharedLocked(hashed[i]);
    if (found[i] == nullptr && stop_at_miss) break;
  }
  for (int j = i; j < n; ++j) found[j] = nullptr;
  if (!touch) return;
  // Then the marks, shard by shard: each shard locked once per call.
  ForEachByShardLocked(hashed, found, std::min(i + 1, n),
                       [&](Object* obj) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                         MarkLookupLocked(obj, lease, now, counts);
                       });
  MoveToBackLocked(found, n);
}

void Master::MarkLookupLocked(Object* obj, bool lease, uint64_t now, LookupCounts* counts) {
  // The fields lookups change; the shard orders lookups of one object.
  if (lease) {
    if (obj->lease_until_ms <= now) obj->lease_holders = 0;
    obj->SetLeaseUntil(std::max<uint64_t>(obj->lease_until_ms, now + options_.lease_ms));
    if (obj->lease_holders != kLeaseHoldersMax) ++obj->lease_holders;
    ++counts->leases;
  }
  TouchLocked(obj, now);
}

void Master::TouchLocked(Object* obj, uint64_t now) { obj->Touch(now); }

void Master::MoveToBackLocked(Object* const* objs, int n) {
  // Replicas and list positions change only under mu_ held exclusively, so
  // reading them under mu_ shared is safe; the splices race only with
  // other lookups, which lru_mu_ orders.
  // The list nodes are fetched first, outside lru_mu_, so that their
  // misses overlap one another and not the lock's hold time.
  for (int i = 0; i < n; ++i) {
    if (objs[i] == nullptr) continue;
    for (const Replica& r : objs[i]->replicas) __builtin_prefetch(&*r.lru, 1);
  }
  MutexLock lock(&lru_mu_);
  for (int i = 0; i < n; ++i) {
    if (objs[i] == nullptr) continue;
    for (const Replica& r : objs[i]->replicas) {
      Node& node = *nodes_[r.node];
      LruList& lru = r.tier == v1::TIER_DRAM ? node.segments[r.segment].lru : node.ssd_lru;
      lru.splice(lru.end(), lru, r.lru);
    }
  }
}

void Master::CountHitLocked(const Object& obj, const std::string& client_host,
                            LookupCounts* counts) {
  // The tier of the replica FillLocation would list first: the best rank.
  int best = 4;
  for (const Replica& r : obj.replicas) {
    const Node& n = *nodes_[r.node];
    if (n.state == v1::NODE_DEAD) continue;
    best = std::min(
        best, (n.endpoint.host_id() == client_host ? 0 : 2) + (r.tier == v1::TIER_DRAM ? 0 : 1));
  }
  if (best % 2 == 1) {
    ++counts->ssd;
  } else {
    ++counts->dram;
  }
}

void Master::FillFoundLocked(const Object& obj, const std::string& key,
                             const std::string& client_host, bool lease, uint64_t now_unix,
                             StoreTable* table, v1::ObjectLocation* out, LookupCounts* counts) {
  FillLocation(obj, key, client_host, lease, now_unix, out, table);
  if (out->replicas_size() > 0 && out->replicas(0).tier() == v1::TIER_SSD) {
    ++counts->ssd;
  } else {
    ++counts->dram;
  }
}

void Master::LookupCounts::AddTo(MasterMetrics& m) const {
  // Once per call, not per key: lookups run in parallel, and a shared
  // counter bumped per key is a cache line every core fights over.
  if (leases != 0) m.leases_granted.Increment(leases);
  if (ssd != 0) m.hits_ssd.Increment(ssd);
  if (dram != 0) m.hits_dram.Increment(dram);
}

void Master::FillReplica(const Replica& r, uint64_t size, v1::Replica* out, StoreTable* table) {
  const Node& n = *nodes_[r.node];
  if (table == nullptr || table->out == nullptr) {
    *out->mutable_store() = n.endpoint;
  } else {
    // A handful of stores per answer: a linear search beats a map.
    size_t i = 0;
    while (i < table->nodes.size() && table->nodes[i] != r.node) ++i;
    if (i == table->nodes.size()) {
      table->nodes.push_back(r.node);
      *table->out->Add() = n.endpoint;
    }
    out->set_store_index(static_cast<uint32_t>(i));
  }
  out->set_tier(r.tier);
  out->set_segment_id(r.tier == v1::TIER_DRAM ? n.segments[r.segment].id : 0);
  out->set_offset(r.tier == v1::TIER_DRAM ? r.offset : 0);
  out->set_length(size);
}

void Master::FillLocation(const Object& obj, const std::string& key, const std::string& client_host,
                          bool lease, uint64_t now_unix, v1::ObjectLocation* out,
                          StoreTable* table) {
  out->set_key(key);
  out->set_found(true);
  out->set_size(obj.size);
  out->set_checksum(obj.checksum);
  out->set_generation(obj.generation);
  // Order: same host first, then DRAM before SSD (stable among equals).
  absl::InlinedVector<std::pair<int, const Replica*>, 4> order;
  for (const Replica& r : obj.replicas) {
    const Node& n = *nodes_[r.node];
    if (n.state == v1::NODE_DEAD) continue;
    int rank = (n.endpoint.host_id() == client_host ? 0 : 2) + (r.tier == v1::TIER_DRAM ? 0 : 1);
    order.emplace_back(rank, &r);
  }
  // Insertion sort, stable: a handful of replicas at most (kReplicasMax),
  // and std::stable_sort allocates a buffer per call, per key of a lookup.
  for (size_t i = 1; i < order.size(); ++i) {
    for (size_t j = i; j > 0 && order[j].first < order[j - 1].first; --j) {
      std::swap(order[j], order[j - 1]);
    }
  }
  for (const auto& [rank, r] : order) {
    v1::Replica* rep = out->add_replicas();
    FillReplica(*r, obj.size, rep, table);
    if (options_.read_grants)
      MintReadGrant(*r, key, obj.size, now_unix + options_.read_grant_ms, rep);
  }
  if (lease) out->set_lease_expires_unix_ms(now_unix + options_.lease_ms);
}

absl::Status Master::Lookup(const v1::LookupRequest& req, v1::LookupResponse* resp) {
  if (absl::Status s = ValidateKeys(req.keys(), "a lookup"); !s.ok()) return s;
  uint64_t now = clock_->NowMs();
  const uint64_t now_unix = clock_->UnixMs();
  ReaderMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  metrics_.lookups_lookup.Increment(req.keys_size());
  LookupCounts counts;
  Object* found[kBatchItemsMax];
  const bool lease = !req.no_lease() && !req.peek();
  FindBatchLocked(req.keys(), false, lease, !req.peek(), now, found, &counts);
  StoreTable table;
  if (req.store_table()) table.out = resp->mutable_stores();
  for (int i = 0; i < req.keys_size(); ++i) {
    v1::ObjectLocation* loc = resp->add_objects();
    if (found[i] == nullptr) {
      loc->set_key(req.keys(i));
    } else {
      FillFoundLocked(*found[i], req.keys(i), req.client_host_id(), lease, now_unix, &table, loc,
                      &counts);
    }
  }
  if (!req.peek()) counts.AddTo(metrics_);
  return absl::OkStatus();
}

absl::Status Master::MatchPrefix(const v1::MatchPrefixRequest& req, v1::MatchPrefixResponse* resp) {
  if (absl::Status s = ValidateKeys(req.keys(), "a prefix match"); !s.ok()) return s;
  uint64_t now = clock_->NowMs();
  const uint64_t now_unix = clock_->UnixMs();
  ReaderMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  uint32_t matched = 0;
  LookupCounts counts;
  Object* found[kBatchItemsMax];
  const bool lease = !req.no_lease() && !req.count_only();
  FindBatchLocked(req.keys(), true, lease, true, now, found, &counts);
  StoreTable table;
  if (req.store_table()) table.out = resp->mutable_stores();
  for (int i = 0; i < req.keys_size() && found[i] != nullptr; ++i) {
    if (req.count_only()) {
      CountHitLocked(*found[i], req.client_host_id(), &counts);
    } else {
      FillFoundLocked(*found[i], req.keys(i), req.client_host_id(), lease, now_unix, &table,
                      resp->add_objects(), &counts);
    }
    ++matched;
  }
  // Keys examined: the matched run and the miss that ended it.
  metrics_.lookups_match.Increment(std::min<uint64_t>(matched + 1, req.keys_size()));
  counts.AddTo(metrics_);
  resp->set_matched(matched);
  return absl::OkStatus();
}

absl::Status Master::ReleaseLeases(const v1::ReleaseLeasesRequest& req) {
  if (static_cast<size_t>(req.keys_size()) > kBatchItemsMax) {
    return absl::InvalidArgumentError(absl::StrCat("a lease release takes at most ", kBatchItemsMax,
                                                   " keys, got ", req.keys_size()));
  }
  for (const std::string& key : req.keys()) {
    if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  }
  uint64_t now = clock_->NowMs();
  uint64_t released = 0;
  // Keys whose commit is no longer in the index (removed or replaced
  // while read): their releases may free the space the remove left
  // waiting for the lease (ReleaseGoneLeasesLocked), under mu_ exclusive.
  std::vector<std::pair<std::string, uint64_t>> gone;
  // Keys still in the index whose lease this call ended and which left a
  // DRAM range waiting for it (a demotion, a dropped copy): freed now
  // (EndGoneLeasesLocked).
  std::vector<std::pair<std::string, uint64_t>> ended;
  {
    // Shared, like a lookup: only the lease fields change, under the shard.
    ReaderMutexLock lock(&mu_);
    if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
    const bool named = req.generations_size() == req.keys_size();
    const bool any_left = !gone_leases_.empty();
    const bool any_gone = named && any_left;
    for (int i = 0; i < req.keys_size(); ++i) {
      const std::string& key = req.keys(i);
      const uint64_t generation = named ? req.generations(i) : 0;
      Shard& shard = ShardOf(key);
      MutexLock shard_lock(&shard.mu);
      auto it = shard.objects.find(key);
      if (it == shard.objects.end() || (generation != 0 && generation != it->generation)) {
        if (any_gone && generation != 0 && gone_leases_.contains({key, generation})) {
          gone.emplace_back(key, generation);
        }
        continue;
      }
      Object& obj = Mut(*it);
      if (obj.lease_until_ms <= now || obj.lease_holders == 0 ||
          obj.lease_holders == kLeaseHoldersMax) {
        continue;  // run out, or too many holders counted: it runs out
      }
      if (--obj.lease_holders == 0) {
        obj.lease_until_ms = 0;
        ++released;
        if (any_left && gone_leases_.contains({key, obj.generation})) {
          ended.emplace_back(key, obj.generation);
        }
      }
    }
  }
  if (!gone.empty() || !ended.empty()) {
    WriterMutexLock lock(&mu_);
    if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
    ReleaseGoneLeasesLocked(gone);
    EndGoneLeasesLocked(ended);
  }
  if (released != 0) metrics_.leases_released.Increment(released);
  return absl::OkStatus();
}

}  // namespace shelf::master
