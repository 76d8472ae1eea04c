// Master: puts and removes. Lookups are in master_lookup.cc; registry,
// liveness and eviction in master_nodes.cc; admin calls in master_admin.cc.
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
      metrics_(exposition != nullptr ? *exposition : DefaultExposition()) {
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
      uint64_t cap = 0, use = 0;
      for (const Segment& s : n->segments) {
        cap += s.alloc->capacity();
        use += s.alloc->used();
      }
      out.push_back({{n->endpoint.node_id(), "dram"}, static_cast<double>(used ? use : cap)});
      if (n->ssd_capacity > 0) {
        out.push_back({{n->endpoint.node_id(), "ssd"},
                       static_cast<double>(used ? n->ssd_used : n->ssd_capacity)});
      }
    }
    return out;
  };
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

Master::Shard& Master::ShardOf(absl::string_view key) { return shards_[ShardIndex(key)]; }

Master::ObjectKey::ObjectKey(absl::string_view s) {
  if (s.size() <= kInline) {
    std::memcpy(b_, s.data(), s.size());
    b_[kInline] = static_cast<char>(s.size());
    return;
  }
  char* heap = new char[s.size()];
  std::memcpy(heap, s.data(), s.size());
  uint64_t size = s.size();
  std::memcpy(b_, &heap, sizeof(heap));
  std::memcpy(b_ + 8, &size, sizeof(size));
  b_[kInline] = static_cast<char>(kHeap);
}

Master::ObjectKey::~ObjectKey() {
  if (static_cast<uint8_t>(b_[kInline]) != kHeap) return;
  char* heap;
  std::memcpy(&heap, b_, sizeof(heap));
  delete[] heap;
}

absl::string_view Master::ObjectKey::view() const {
  uint8_t tag = static_cast<uint8_t>(b_[kInline]);
  if (tag != kHeap) return {b_, tag};
  const char* heap;
  uint64_t size;
  std::memcpy(&heap, b_, sizeof(heap));
  std::memcpy(&size, b_ + 8, sizeof(size));
  return {heap, size};
}

Master::Object* Master::FindLocked(const std::string& key) {
  Shard& shard = ShardOf(key);
  MutexLock lock(&shard.mu);
  auto it = shard.objects.find(key);
  return it == shard.objects.end() ? nullptr : &Mut(*it);
}

std::pair<Master::Object*, bool> Master::EmplaceLocked(const std::string& key) {
  Shard& shard = ShardOf(key);
  MutexLock lock(&shard.mu);
  auto [pos, inserted] = shard.objects.emplace(key);
  return {&Mut(*pos), inserted};
}

void Master::EraseIndexLocked(Object* obj) {
  quotas_->ObjectGone(obj->key.view());  // its pin goes with it
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

absl::StatusOr<uint32_t> Master::CheckPutStart(const v1::PutStartRequest& req) const {
  if (absl::Status s = ValidateKey(req.key()); !s.ok()) return s;
  if (req.size() == 0) return absl::InvalidArgumentError("block size is 0");
  if (req.size() > options_.block_bytes_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block of ", req.size(), " bytes exceeds --block-bytes-max ", options_.block_bytes_max));
  }
  if (req.parent_key().size() > kKeyBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("parent key exceeds ", kKeyBytesMax, " bytes"));
  }
  if (req.block_info().token_ids_size() > static_cast<int>(kBlockEventTokenIdsMax)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a put carries at most ", kBlockEventTokenIdsMax, " token ids"));
  }
  if (!req.block_info().model().empty() && !ValidEventModel(req.block_info().model())) {
    return absl::InvalidArgumentError(
        absl::StrCat("block model must be 1..", kEventModelBytesMax,
                     " printable bytes without '@' or spaces (it names an event topic)"));
  }
  uint32_t want = req.options().replicas() == 0 ? 1 : req.options().replicas();
  if (want > kReplicasMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas=", want, " exceeds the limit of ", kReplicasMax));
  }
  return want;
}

absl::Status Master::NoPlacementLocked(uint64_t size) {
  // UNAVAILABLE is for "try again later": only when no store is up. A
  // block no live store can ever hold is a permanent refusal.
  uint64_t largest = 0;
  for (const auto& n : nodes_) {
    if (n->state != v1::NODE_LIVE || n->draining) continue;
    for (const Segment& seg : n->segments) largest = std::max(largest, seg.alloc->capacity());
  }
  if (largest > 0 && largest < size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("block of ", size,
                     " bytes is larger than every live store's DRAM "
                     "segment (the largest holds ",
                     largest, " bytes)"));
  }
  return absl::UnavailableError("no live store accepts placements");
}

absl::StatusOr<bool> Master::PlaceRangesLocked(const v1::PutStartRequest& req,
                                               const std::vector<uint32_t>& candidates,
                                               uint32_t want, PendingPut* put,
                                               v1::PutStartResponse* resp) {
  const uint64_t epoch = reset_epoch_;
  uint64_t now = clock_->NowMs();
  // First try without dropping anything: fill free space, and where a
  // segment is full, order demotions to SSD and wait (bounded) for them to
  // free room. Only then drop least recently used blocks outright.
  absl::Status last = absl::OkStatus();
  uint64_t wait_until = now + options_.demote_wait_ms;
  for (bool allow_drop = false;;) {
    for (uint32_t node : candidates) {
      if (put->ranges.size() == want) break;
      bool used = false;
      for (const Replica& r : put->ranges) used |= r.node == node;
      if (used || nodes_[node]->state != v1::NODE_LIVE || nodes_[node]->draining) continue;
      absl::StatusOr<Replica> r =
          AllocateOnNodeLocked(node, req.size(), now, allow_drop, req.key());
      if (r.ok()) {
        put->ranges.push_back(*r);
      } else {
        last = r.status();
      }
    }
    if (put->ranges.size() == want || allow_drop) break;
    uint64_t t = clock_->NowMs();
    if (demotions_pending_ == 0 || t >= wait_until) {
      allow_drop = true;
      continue;
    }
    // Give back what this attempt took (its nodes may die or re-register
    // while we wait), wait for a demotion (or any free) to return space,
    // then place again from scratch.
    for (const Replica& r : put->ranges) FreeRangeLocked(r.node, r.segment, r.offset, put->size);
    put->ranges.clear();
    const uint64_t seen = frees_.load();
    SHELF_SYNC_POINT("Master::PutStart:WaitForRoom");
    // Off mu_, so the reports that free room can take it; a free after
    // the snapshot above signals room_cv_ under room_mu_, so it is never
    // missed.
    mu_.Unlock();
    {
      MutexLock room(&room_mu_);
      clock_->WaitUntil(&room_mu_, &room_cv_, wait_until, [&] { return frees_.load() != seen; });
    }
    mu_.Lock();
    now = clock_->NowMs();
    if (reset_epoch_ != epoch) {
      // The master stepped down (or began a new term) while this call
      // waited: `candidates` name nodes that no longer exist.
      absl::Status s = CheckLeaderLocked(true);
      return s.ok() ? absl::UnavailableError("the master started a new term; retry the put") : s;
    }
    // (A replace expects the key; the commit decides what it finds.)
    const bool exists = !req.options().replace() && FindLocked(req.key()) != nullptr;
    if (exists || put_by_key_.contains(req.key())) {
      resp->set_state(exists ? v1::PUT_ALREADY_EXISTS : v1::PUT_IN_FLIGHT);
      return false;
    }
  }
  if (put->ranges.size() < want && (put->ranges.empty() || !req.options().best_effort())) {
    for (const Replica& r : put->ranges) FreeRangeLocked(r.node, r.segment, r.offset, put->size);
    if (!last.ok() && last.code() != absl::StatusCode::kResourceExhausted) return last;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot place ", want, " replica(s) of ", req.size(), " bytes: ",
        put->ranges.size() < candidates.size() ? "no evictable space" : "too few live stores",
        last.ok() ? "" : absl::StrCat(" (", last.message(), ")")));
  }
  return true;
}

// Validate, place (waiting for room where demotions will make it), mint
// the write grants.
absl::Status Master::PutStart(const v1::PutStartRequest& req, const std::string& client_host,
                              const std::string& owner, v1::PutStartResponse* resp) {
  absl::StatusOr<uint32_t> want = CheckPutStart(req);
  if (!want.ok()) return want.status();
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(true); !s.ok()) return s;
  if (Object* obj = FindLocked(req.key()); obj != nullptr) {
    if (!req.options().replace() || (obj->size == req.size() && obj->checksum == req.checksum())) {
      metrics_.dedup_hits.Increment();
      TouchLocked(obj, now);
      MoveToBackLocked(&obj, 1);
      resp->set_state(v1::PUT_ALREADY_EXISTS);
      return absl::OkStatus();
    }
    if (PinnedLocked(*obj, now)) return PinnedError();
    // A replace: placed and written as a new key; its commit swaps.
  }
  if (put_by_key_.contains(req.key())) {
    resp->set_state(v1::PUT_IN_FLIGHT);
    return absl::OkStatus();
  }
  std::vector<uint32_t> candidates = PlaceLocked(req.options(), client_host, req.size());
  if (candidates.empty()) return NoPlacementLocked(req.size());
  PendingPut put;
  put.key = req.key();
  put.size = req.size();
  put.checksum = req.checksum();
  put.parent_key = req.parent_key();
  put.owner = owner;
  // Kept only for the event stream: the index keeps the hashes and block
  // size; the token ids go out with the commit's BlockStored.
  if (req.has_block_info() && options_.events != nullptr) {
    put.event_info = std::make_unique<v1::BlockEventInfo>(req.block_info());
  }
  put.replace = req.options().replace();
  put.soft_pin_ttl_ms = req.options().soft_pin_ttl_ms();
  absl::StatusOr<bool> placed = PlaceRangesLocked(req, candidates, *want, &put, resp);
  if (!placed.ok()) return placed.status();
  if (!*placed) return absl::OkStatus();  // answered: the key appeared meanwhile
  // From now, as the grants' expiry below: placement may have waited for
  // room, and the ranges must not be reclaimed before the grants expire.
  put.deadline_ms = clock_->NowMs() + options_.put_timeout_ms;
  uint64_t put_id = NewPutIdLocked();
  uint64_t expires_unix = clock_->UnixMs() + options_.put_timeout_ms;
  resp->set_state(v1::PUT_STARTED);
  resp->set_put_id(put_id);
  resp->set_expires_unix_ms(expires_unix);
  MintGrantsLocked(put_id, expires_unix, put, resp);
  put_by_key_[put.key] = put_id;
  puts_.emplace(put_id, std::move(put));
  metrics_.puts_started.Increment();
  return absl::OkStatus();
}

void Master::PutCommit(const v1::PutCommitRequest& req, const std::string& owner,
                       v1::PutCommitResponse* resp, std::vector<CommitPin>* pinned) {
  SHELF_SYNC_POINT("Master::PutCommit:Start");
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) {
    for (int i = 0; i < req.put_ids_size(); ++i) {
      v1::RpcStatus* st = resp->add_statuses();
      st->set_code(static_cast<int>(s.code()));
      st->set_message(std::string(s.message()));
    }
    return;
  }
  for (uint64_t id : req.put_ids()) {
    v1::RpcStatus* st = resp->add_statuses();
    auto it = puts_.find(id);
    if (it == puts_.end()) {
      st->set_code(static_cast<int>(absl::StatusCode::kNotFound));
      st->set_message(absl::StrCat("put ", id, " is unknown: never started, aborted or expired"));
      continue;
    }
    PendingPut& put = it->second;
    if (put.owner != owner) {
      st->set_code(static_cast<int>(absl::StatusCode::kPermissionDenied));
      st->set_message(absl::StrCat("put ", id, " was started by another principal"));
      continue;
    }
    // Replicas on nodes that died meanwhile were dropped by AbortPutLocked's
    // caller; whatever remains is live.
    if (Object* old = FindLocked(put.key);
        put.replace && old != nullptr && (old->size != put.size || old->checksum != put.checksum)) {
      if (PinnedLocked(*old, now)) {
        // Pinned since the put started: the old value stays.
        AbortPutLocked(id);
        absl::Status refused = PinnedError();
        st->set_code(static_cast<int>(refused.code()));
        st->set_message(std::string(refused.message()));
        continue;
      }
      // The old commit goes as by a Remove (ranges under a read lease are
      // freed when the lease ends), and the new one takes its place below,
      // under the same hold of mu_: no reader sees the key missing. Dead
      // stores' copies of the old value stay out when they return.
      NoteRemovedLocked(put.key);
      EraseObjectLocked(old, now);
      metrics_.replaces.Increment();
    }
    auto [objp, inserted] = EmplaceLocked(put.key);
    Object& obj = *objp;
    if (inserted) {
      // Dead stores' copies of an earlier commit stay out when they return,
      // whatever becomes of this one (master_unheard.cc).
      NoteCommittedLocked(put.key);
      obj.size = put.size;
      obj.checksum = put.checksum;
      // Unique across terms as well: a later leader's put ids start over.
      obj.generation = ((term_ << 40) ^ id) | 1;  // never 0 (unknown)
      obj.writer = quotas_->WriterOf(put.owner);
      if (!put.parent_key.empty() || put.event_info != nullptr) {
        obj.extra = std::make_unique<ObjectExtra>();
        obj.extra->parent_key = std::move(put.parent_key);
        if (const v1::BlockEventInfo* info = put.event_info.get(); info != nullptr) {
          obj.extra->has_engine_hash = info->has_engine_hash();
          obj.extra->engine_hash = info->engine_hash();
          obj.extra->has_engine_parent_hash = info->has_engine_parent_hash();
          obj.extra->engine_parent_hash = info->engine_parent_hash();
          obj.extra->block_tokens = info->block_tokens();
          if (!info->model().empty()) obj.extra->model = ModelIdLocked(info->model());
        }
      }
    } else if (obj.size != put.size || obj.checksum != put.checksum) {
      // A store's inventory brought the key in while the put was open (a
      // store restart, a master failover) and its bytes differ: keys are
      // content addresses, so one copy is wrong. The index keeps what it
      // has; the writer learns its copy was not taken.
      AbortPutLocked(id);
      st->set_code(static_cast<int>(absl::StatusCode::kAlreadyExists));
      st->set_message("the key was registered meanwhile with other size or checksum");
      continue;
    }
    obj.Touch(now);
    for (Replica& r : put.ranges) {
      // The same bytes may already be indexed on this node (its inventory
      // arrived during the put); one replica per node and tier.
      bool have = false;
      for (const Replica& o : obj.replicas) have |= o.node == r.node && o.tier == r.tier;
      if (have || obj.replicas.size() >= kReplicasMax) {
        FreeAfterGrantsLocked(put, r);
        continue;
      }
      LruList& lru = nodes_[r.node]->segments[r.segment].lru;
      r.lru = lru.insert(lru.end(), &obj);
      obj.replicas.push_back(r);
      if (obj.hard_pin) nodes_[r.node]->hard_pinned_bytes += obj.size;
      NoticeLocked(obj, obj.replicas.back(), true);
      EmitStoredLocked(obj, obj.replicas.back(), put.event_info.get());
    }
    if (put.soft_pin_ttl_ms != 0) {
      if (obj.extra == nullptr) obj.extra = std::make_unique<ObjectExtra>();
      // Saturated, as Pin's.
      obj.extra->pin_until_ms =
          put.soft_pin_ttl_ms > UINT64_MAX - now ? UINT64_MAX : now + put.soft_pin_ttl_ms;
      if (pinned != nullptr) pinned->push_back({put.key, put.size, put.soft_pin_ttl_ms});
    }
    put_by_key_.erase(put.key);
    puts_.erase(it);
    metrics_.puts_committed.Increment();
    st->set_code(0);
  }
}

void Master::AbortPutLocked(uint64_t put_id) {
  auto it = puts_.find(put_id);
  if (it == puts_.end()) return;
  for (const Replica& r : it->second.ranges) FreeAfterGrantsLocked(it->second, r);
  put_by_key_.erase(it->second.key);
  puts_.erase(it);
}

void Master::FreeAfterGrantsLocked(const PendingPut& put, const Replica& r) {
  deferred_.push_back(
      {put.deadline_ms + options_.grant_skew_ms, r.node, r.segment, r.offset, put.size});
}

void Master::PutAbort(const v1::PutAbortRequest& req, const std::string& owner,
                      v1::PutAbortResponse* resp) {
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) {
    for (int i = 0; i < req.put_ids_size(); ++i) {
      v1::RpcStatus* st = resp->add_statuses();
      st->set_code(static_cast<int>(s.code()));
      st->set_message(std::string(s.message()));
    }
    return;
  }
  for (uint64_t id : req.put_ids()) {
    v1::RpcStatus* st = resp->add_statuses();
    auto it = puts_.find(id);
    if (it == puts_.end()) {
      st->set_code(static_cast<int>(absl::StatusCode::kNotFound));
      st->set_message(absl::StrCat("put ", id, " is unknown"));
      continue;
    }
    if (it->second.owner != owner) {
      st->set_code(static_cast<int>(absl::StatusCode::kPermissionDenied));
      st->set_message(absl::StrCat("put ", id, " was started by another principal"));
      continue;
    }
    // The put's write grants stay valid at the stores until they expire, so
    // its ranges are not handed to another put before then: a leftover
    // grant can only write bytes nobody will read.
    AbortPutLocked(id);
    metrics_.puts_aborted.Increment();
    st->set_code(0);
  }
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

void Master::FreeRangeLocked(uint32_t node, uint32_t segment, uint64_t offset, uint64_t size) {
  frees_.fetch_add(1);
  {
    MutexLock room(&room_mu_);
    room_cv_.SignalAll();
  }
  absl::Status s = nodes_[node]->segments[segment].alloc->Free(offset, size);
  // The master frees only ranges it allocated or reserved itself: a refusal
  // means its books are wrong, and going on would hand out live bytes.
  SHELF_CHECK(s.ok()) << "node " << node << " segment " << segment << ": " << s.message();
}

void Master::ReleaseReplicaLocked(Object* obj, const Replica& r, uint64_t now) {
  SHELF_CHECK(r.node < nodes_.size() && r.segment < nodes_[r.node]->segments.size());
  EmitRemovedLocked(*obj, r);
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
      deferred_.push_back({obj->lease_until_ms, r.node, r.segment, r.offset, obj->size});
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
  m.set_term(term_);
  m.set_generation(obj.generation);
  QueueNoticeLocked(&n, std::move(m));
}

void Master::EraseObjectLocked(Object* obj, uint64_t now) {
  for (const Replica& r : obj->replicas) ReleaseReplicaLocked(obj, r, now);
  EraseIndexLocked(obj);
}

}  // namespace shelf::master
