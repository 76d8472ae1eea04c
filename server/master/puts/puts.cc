// Two-phase puts: PutStart checks the request, places the replicas and
// mints the write grants; the client writes the bytes to the stores;
// PutCommit indexes the block (or PutAbort frees the ranges). Nothing is
// indexed before its bytes are written.
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
  bool waited = false;
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
    // Backpressure, counted: a writer faster than the SSD tier waits here.
    if (!waited) metrics_.room_waits.Increment();
    waited = true;
    metrics_.room_wait_seconds.Increment(static_cast<double>(now - std::min(now, t)) / 1000.0);
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

namespace {

// Every put id of a call answers `s` (this master does not lead).
void FailEveryPut(int n, const absl::Status& s,
                  google::protobuf::RepeatedPtrField<v1::RpcStatus>* statuses) {
  for (int i = 0; i < n; ++i) {
    v1::RpcStatus* st = statuses->Add();
    st->set_code(static_cast<int>(s.code()));
    st->set_message(std::string(s.message()));
  }
}

}  // namespace

PendingPut* Master::OwnedPutLocked(uint64_t id, const std::string& owner, v1::RpcStatus* st) {
  auto it = puts_.find(id);
  if (it == puts_.end()) {
    st->set_code(static_cast<int>(absl::StatusCode::kNotFound));
    st->set_message(absl::StrCat("put ", id, " is unknown: never started, aborted or expired"));
    return nullptr;
  }
  if (it->second.owner != owner) {
    st->set_code(static_cast<int>(absl::StatusCode::kPermissionDenied));
    st->set_message(absl::StrCat("put ", id, " was started by another principal"));
    return nullptr;
  }
  return &it->second;
}

void Master::PutCommit(const v1::PutCommitRequest& req, const std::string& owner,
                       v1::PutCommitResponse* resp, std::vector<CommitPin>* pinned) {
  SHELF_SYNC_POINT("Master::PutCommit:Start");
  uint64_t now = clock_->NowMs();
  const uint64_t now_unix = clock_->UnixMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) {
    FailEveryPut(req.put_ids_size(), s, resp->mutable_statuses());
    return;
  }
  for (uint64_t id : req.put_ids()) {
    v1::RpcStatus* st = resp->add_statuses();
    // Filled below once the put commits; left not found otherwise.
    v1::ObjectLocation* located = req.locations() ? resp->add_locations() : nullptr;
    PendingPut* found = OwnedPutLocked(id, owner, st);
    if (found == nullptr) continue;
    PendingPut& put = *found;
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
      // whatever becomes of this one (registry/unheard.cc).
      NoteCommittedLocked(put.key);
      obj.size = put.size;
      obj.checksum = put.checksum;
      // Unique across terms as well: a later leader's put ids start over.
      obj.generation = ((leadership_.term() << 40) ^ id) | 1;  // never 0 (unknown)
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
          if (!info->model().empty()) obj.extra->model = events_.ModelId(info->model());
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
      ReplicaAddedLocked(&obj, &obj.replicas.back(), put.event_info.get());
    }
    if (put.soft_pin_ttl_ms != 0) {
      if (obj.extra == nullptr) obj.extra = std::make_unique<ObjectExtra>();
      // Saturated, as Pin's.
      obj.extra->pin_until_ms =
          put.soft_pin_ttl_ms > UINT64_MAX - now ? UINT64_MAX : now + put.soft_pin_ttl_ms;
      if (pinned != nullptr) pinned->push_back({put.key, put.size, put.soft_pin_ttl_ms});
    }
    if (located != nullptr) {
      FillLocation(obj, put.key, req.client_host_id(), /*lease=*/false, now_unix, located);
    }
    put_by_key_.erase(put.key);
    puts_.erase(id);  // last: `put` refers into it
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
    FailEveryPut(req.put_ids_size(), s, resp->mutable_statuses());
    return;
  }
  for (uint64_t id : req.put_ids()) {
    v1::RpcStatus* st = resp->add_statuses();
    if (OwnedPutLocked(id, owner, st) == nullptr) continue;
    // The put's write grants stay valid at the stores until they expire, so
    // its ranges are not handed to another put before then: a leftover
    // grant can only write bytes nobody will read.
    AbortPutLocked(id);
    metrics_.puts_aborted.Increment();
    st->set_code(0);
  }
}

}  // namespace shelf::master
