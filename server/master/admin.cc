// Master: the operator's view (AdminService).
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/master/master.h"

namespace shelf::master {

int Master::FindNodeLocked(const std::string& id_or_address) {
  auto it = node_by_id_.find(id_or_address);
  if (it != node_by_id_.end()) return static_cast<int>(it->second);
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->endpoint.data_address() == id_or_address) return static_cast<int>(i);
  }
  return -1;
}

void Master::FillNodeStatus(uint32_t idx, uint64_t now, v1::NodeStatus* out) {
  const Node& n = *nodes_[idx];
  out->set_node_id(n.endpoint.node_id());
  out->set_address(n.endpoint.data_address());
  out->set_host_id(n.endpoint.host_id());
  out->set_state(n.state == v1::NODE_LIVE && n.draining ? v1::NODE_DRAINING : n.state);
  for (const auto& [k, v] : n.labels) (*out->mutable_labels())[k] = v;
  const Node::DramTotals dram = n.Dram();
  const bool dead = n.state == v1::NODE_DEAD;
  out->set_dram_capacity_bytes(dram.capacity);
  out->set_dram_used_bytes(dead ? 0 : dram.used);
  out->set_dram_clean_bytes(dead ? 0 : dram.clean);
  out->set_dram_demoting_bytes(dead ? 0 : dram.demoting);
  out->set_ssd_capacity_bytes(n.ssd_capacity);
  out->set_ssd_used_bytes(n.ssd_used);
  out->set_objects(dram.objects + n.ssd_lru.size());
  out->set_last_heartbeat_age_ms(ElapsedMs(now, n.last_heartbeat_ms));
  for (int t : n.endpoint.transports()) out->add_transports(static_cast<v1::TransportKind>(t));
}

void Master::Status(v1::StatusResponse* resp) {
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  resp->set_version(SHELF_VERSION);
  std::string self = leader_address_.empty() ? options_.listen_address : leader_address_;
  resp->set_leader(leadership_.leader() ? self : leadership_.hint());
  resp->set_is_leader(leadership_.leader());
  resp->set_term(leadership_.term());
  resp->set_recovering(leadership_.recovering());
  resp->set_objects(ObjectCountLocked());
  resp->set_puts_in_flight(puts_.size());
  resp->set_uptime_ms(now - start_ms_);
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    v1::NodeStatus* ns = resp->add_nodes();
    FillNodeStatus(i, now, ns);
    if (ns->state() == v1::NODE_DEAD) continue;
    resp->set_dram_capacity_bytes(resp->dram_capacity_bytes() + ns->dram_capacity_bytes());
    resp->set_dram_used_bytes(resp->dram_used_bytes() + ns->dram_used_bytes());
    resp->set_dram_clean_bytes(resp->dram_clean_bytes() + ns->dram_clean_bytes());
    resp->set_dram_demoting_bytes(resp->dram_demoting_bytes() + ns->dram_demoting_bytes());
    resp->set_ssd_capacity_bytes(resp->ssd_capacity_bytes() + ns->ssd_capacity_bytes());
    resp->set_ssd_used_bytes(resp->ssd_used_bytes() + ns->ssd_used_bytes());
  }
}

void Master::Segments(v1::SegmentsResponse* resp) {
  WriterMutexLock lock(&mu_);
  for (const auto& n : nodes_) {
    if (n->state == v1::NODE_DEAD) continue;
    for (const Segment& s : n->segments) {
      v1::SegmentStatus* out = resp->add_segments();
      out->set_node_id(n->endpoint.node_id());
      out->set_segment_id(s.id);
      out->set_tier(v1::TIER_DRAM);
      out->set_capacity_bytes(s.alloc->capacity());
      out->set_used_bytes(s.alloc->used());
      out->set_free_extents(s.alloc->free_extents());
      out->set_largest_free_bytes(s.alloc->largest_free());
      out->set_clean_bytes(s.clean_bytes);
      out->set_demoting_bytes(s.demoting_bytes);
    }
    if (n->ssd_capacity > 0) {
      v1::SegmentStatus* out = resp->add_segments();
      out->set_node_id(n->endpoint.node_id());
      out->set_tier(v1::TIER_SSD);
      out->set_capacity_bytes(n->ssd_capacity);
      out->set_used_bytes(n->ssd_used);
    }
  }
}

absl::Status Master::Stat(const v1::StatRequest& req, v1::StatResponse* resp) {
  if (absl::Status s = ValidateKey(req.key()); !s.ok()) return s;
  uint64_t now = clock_->NowMs();
  uint64_t unix_now = clock_->UnixMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  Object* obj = FindLocked(req.key());
  if (obj == nullptr) return absl::NotFoundError("no such key");
  FillLocation(*obj, req.key(), "", false, unix_now, resp->mutable_object());
  resp->set_pinned(obj->hard_pin || obj->pin_until_ms() > now);
  resp->set_hard_pin(obj->hard_pin);
  if (obj->pin_until_ms() > now && obj->pin_until_ms() != UINT64_MAX) {
    resp->set_pin_expires_unix_ms(unix_now + (obj->pin_until_ms() - now));
  }
  resp->set_last_access_unix_ms(unix_now - ElapsedMs(now, obj->last_access_ms()));
  if (obj->extra != nullptr) resp->set_parent_key(obj->extra->parent_key);
  if (obj->lease_until_ms > now) {
    resp->set_lease_expires_unix_ms(unix_now + (obj->lease_until_ms - now));
  }
  return absl::OkStatus();
}

absl::Status Master::Drain(const v1::DrainRequest& req, v1::DrainResponse* resp) {
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  int idx = FindNodeLocked(req.node());
  if (idx < 0) {
    return absl::NotFoundError(absl::StrCat("no node '", req.node(),
                                            "' (use a node id or address "
                                            "from 'shelfctl nodes')"));
  }
  nodes_[idx]->draining = !req.undrain();
  SHELF_LOG(INFO) << (req.undrain() ? "node undrained" : "node draining")
                  << Kv("node", nodes_[idx]->endpoint.node_id());
  FillNodeStatus(static_cast<uint32_t>(idx), now, resp->mutable_node());
  return absl::OkStatus();
}

absl::Status Master::Evict(const v1::EvictRequest& req, v1::EvictResponse* resp) {
  if (req.bytes() == 0) return absl::InvalidArgumentError("evict needs --bytes > 0");
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  int only = -1;
  if (!req.node().empty()) {
    only = FindNodeLocked(req.node());
    if (only < 0) return absl::NotFoundError(absl::StrCat("no node '", req.node(), "'"));
  }
  uint64_t left = req.bytes();
  for (uint32_t i = 0; i < nodes_.size() && left > 0; ++i) {
    if (only >= 0 && static_cast<int>(i) != only) continue;
    if (nodes_[i]->state == v1::NODE_DEAD) continue;
    for (Segment& seg : nodes_[i]->segments) {
      if (left == 0) break;
      if (req.copy()) {
        // Counted in what is left to copy: DRAM-only bytes.
        uint64_t unsettled = UnsettledLocked(seg, /*clean_is_room=*/true);
        uint64_t target = unsettled > left ? unsettled - left : 0;
        EvictSegmentLocked(i, &seg, target, EvictMode::kCopy, now, resp);
        left -= std::min(left, unsettled - std::min(unsettled, UnsettledLocked(seg, true)));
        continue;
      }
      uint64_t used = seg.alloc->used();
      uint64_t target = used > left ? used - left : 0;
      uint64_t freed = EvictSegmentLocked(i, &seg, target, EvictMode::kDemoteOrDrop, now, resp);
      left -= std::min(left, freed);
    }
  }
  return absl::OkStatus();
}

absl::Status Master::Pin(const v1::PinRequest& req) {
  if (absl::Status s = ValidateKey(req.key()); !s.ok()) return s;
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  Object* obj = FindLocked(req.key());
  if (obj == nullptr) return absl::NotFoundError("no such key");
  auto account = [&](bool add) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const Replica& r : obj->replicas) {
      Node& n = *nodes_[r.node];
      if (add) {
        n.hard_pinned_bytes += obj->size;
      } else {
        n.hard_pinned_bytes -= std::min<uint64_t>(n.hard_pinned_bytes, obj->size);
      }
    }
  };
  if (req.unpin()) {
    if (obj->hard_pin) account(false);
    obj->hard_pin = false;
    if (obj->extra != nullptr) obj->extra->pin_until_ms = 0;
    return absl::OkStatus();
  }
  if (req.hard()) {
    if (obj->hard_pin) return absl::OkStatus();
    for (const Replica& r : obj->replicas) {
      const Node& n = *nodes_[r.node];
      uint64_t cap =
          options_.hard_pin_bytes_max != 0 ? options_.hard_pin_bytes_max : n.Dram().capacity / 10;
      if (n.hard_pinned_bytes + obj->size > cap) {
        return absl::ResourceExhaustedError(
            absl::StrCat("hard pins on node ", n.endpoint.node_id(), " would exceed ", cap,
                         " bytes (--hard-pin-max); use a soft pin"));
      }
    }
    account(true);
    obj->hard_pin = true;
    return absl::OkStatus();
  }
  if (obj->extra == nullptr) obj->extra = std::make_unique<ObjectExtra>();
  // Saturated: a huge TTL is "until unpinned", not a time long past.
  obj->extra->pin_until_ms =
      req.ttl_ms() == 0 || req.ttl_ms() > UINT64_MAX - now ? UINT64_MAX : now + req.ttl_ms();
  return absl::OkStatus();
}

}  // namespace shelf::master
