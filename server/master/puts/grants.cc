// Master: write and read grants, put ids, and reports of corrupt replicas
// (docs/security.md, "Grants").
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/log.h"
#include "server/master/master.h"
#include "transport/wire.h"

namespace shelf::master {

namespace wire = transport::wire;

namespace {

// VERIFY orders out on one store at once: reports past it are refused
// (RESOURCE_EXHAUSTED) until the store has answered some.
constexpr size_t kVerifiesPerNodeMax = 1024;

}  // namespace

uint64_t Master::NewPutIdLocked() {
  // Unguessable: a put id is all a commit or an abort names. Random 64
  // bits, drawn again on the (unlikely) clash with a live one or 0.
  for (;;) {
    std::string bytes = RandomBytes(sizeof(uint64_t));
    uint64_t id = 0;
    std::memcpy(&id, bytes.data(), sizeof(id));
    if (id != 0 && !puts_.contains(id)) return id;
  }
}

void Master::MintGrantsLocked(uint64_t put_id, uint64_t expires_unix, const PendingPut& put,
                              v1::PutStartResponse* resp) {
  const std::string digest = wire::KeyDigest(put.key);
  for (const Replica& r : put.ranges) {
    FillReplica(r, put.size, resp->add_replicas());
    Node& n = *nodes_[r.node];
    wire::Grant g;
    g.put_id = put_id;
    g.segment_id = n.segments[r.segment].id;
    g.offset = r.offset;
    g.length = put.size;
    g.expires_unix_ms = expires_unix;
    g.range_seq = ++n.range_seq;
    g.key_digest = digest;
    const wire::GrantScope scope{n.endpoint.node_id(), n.incarnation, leadership_.term()};
    g.mac = wire::GrantMac(*n.grant_mac, scope, g);
    // Paired with the store's VerifyGrant: a grant the master cannot verify
    // itself would fail every write of this put.
    SHELF_CHECK(wire::VerifyGrant(*n.grant_mac, scope, g, g.segment_id, g.offset, g.length,
                                  g.expires_unix_ms)
                    .ok());
    v1::WriteGrant* wg = resp->add_grants();
    wg->set_put_id(put_id);
    wg->set_node_id(n.endpoint.node_id());
    wg->set_segment_id(g.segment_id);
    wg->set_offset(g.offset);
    wg->set_length(g.length);
    wg->set_expires_unix_ms(g.expires_unix_ms);
    wg->set_mac(g.mac);
    wg->set_range_seq(g.range_seq);
    wg->set_key_digest(g.key_digest);
  }
}

void Master::MintReadGrant(const Replica& r, const std::string& key, uint64_t size,
                           uint64_t expires_unix, v1::Replica* out) {
  const Node& n = *nodes_[r.node];
  wire::ReadGrant g;
  g.segment_id = r.tier == v1::TIER_DRAM ? n.segments[r.segment].id : wire::kReadGrantNoRange;
  g.offset = r.tier == v1::TIER_DRAM ? r.offset : 0;
  g.length = size;
  g.expires_unix_ms = expires_unix;
  char encoded[wire::kReadGrantBytes];
  wire::MintReadGrant(*n.grant_mac, n.incarnation, key, g, encoded);
  out->set_read_grant(encoded, sizeof(encoded));
}

absl::Status Master::ReportDataLoss(const v1::ReportDataLossRequest& req,
                                    v1::ReportDataLossResponse* resp) {
  if (absl::Status s = ValidateKey(req.key()); !s.ok()) return s;
  const v1::Replica& rep = req.replica();
  if (rep.read_grant().size() != wire::kReadGrantBytes) {
    return absl::PermissionDeniedError("a data loss report needs the replica's read grant");
  }
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(true); !s.ok()) return s;
  auto it = node_by_id_.find(rep.store().node_id());
  if (it == node_by_id_.end() || nodes_[it->second]->incarnation != rep.store().incarnation()) {
    return absl::NotFoundError("the replica's store incarnation is gone");
  }
  const uint32_t node = it->second;
  Node& n = *nodes_[node];
  absl::string_view grant_key;
  std::string credential = absl::StrCat(rep.read_grant(), req.key());
  absl::StatusOr<wire::ReadGrant> g = wire::DecodeReadCredential(credential, &grant_key);
  if (!g.ok()) return absl::PermissionDeniedError(g.status().message());
  // The grant names the range it was minted for (a DRAM replica's), or
  // none (an SSD replica's); the replica must be there.
  const bool dram = rep.tier() == v1::TIER_DRAM;
  absl::Status v = wire::VerifyReadGrant(*n.grant_mac, n.endpoint.node_id(), n.incarnation,
                                         req.key(), *g, dram, dram ? rep.segment_id() : 0,
                                         dram ? rep.offset() : 0, g->length, clock_->UnixMs());
  if (v.ok() && !dram && g->segment_id != wire::kReadGrantNoRange) {
    v = absl::PermissionDeniedError("a DRAM replica's read grant for an SSD replica");
  }
  if (!v.ok()) {
    SHELF_LOG(WARNING) << "data loss report refused" << Kv("node", n.endpoint.node_id())
                       << Kv("error", v.message());
    return v;
  }
  Object* obj = FindLocked(req.key());
  if (obj == nullptr) return absl::NotFoundError("the key is no longer indexed");
  if (req.generation() != 0 && obj->generation != 0 && req.generation() != obj->generation) {
    return absl::FailedPreconditionError("the key was replaced since the reader's lookup");
  }
  for (const Replica& r : obj->replicas) {
    if (r.node != node || r.tier != rep.tier()) continue;
    if (dram && (n.segments[r.segment].id != rep.segment_id() || r.offset != rep.offset())) {
      continue;
    }
    // The reader's word is not proof: the store checks the bytes against
    // the block's checksum, and the replica leaves the index only if they
    // are bad (VerifyResultLocked). One order per reported replica.
    Node::Verify check{req.key(), obj->generation, r.tier, dram ? rep.segment_id() : 0,
                       dram ? rep.offset() : 0};
    for (const auto& [id, out] : n.verifies) {
      if (out.key == check.key && out.generation == check.generation && out.tier == check.tier &&
          out.segment_id == check.segment_id && out.offset == check.offset) {
        return absl::OkStatus();
      }
    }
    if (n.verifies.size() >= kVerifiesPerNodeMax) {
      return absl::ResourceExhaustedError(
          "too many corrupt-replica reports on this store are being verified");
    }
    v1::TierMove verify;
    verify.set_move_id(next_move_id_++);
    verify.set_key(req.key());
    verify.set_kind(v1::TierMove::VERIFY);
    verify.set_tier(static_cast<v1::Tier>(r.tier));
    verify.set_segment_id(check.segment_id);
    verify.set_offset(check.offset);
    verify.set_size(obj->size);
    verify.set_checksum(obj->checksum);
    verify.set_generation(obj->generation);
    verify.set_term(leadership_.term());
    n.verifies.emplace(verify.move_id(), std::move(check));
    SHELF_LOG(WARNING) << "replica reported corrupt: its store verifies it"
                       << Kv("node", n.endpoint.node_id()) << Kv("tier", dram ? "dram" : "ssd");
    OrderLocked(&n, std::move(verify));
    return absl::OkStatus();
  }
  return absl::NotFoundError("the replica is no longer indexed");
}

void Master::VerifyResultLocked(uint32_t node, const v1::TierMoveResult& result, uint64_t now) {
  Node& n = *nodes_[node];
  auto it = n.verifies.find(result.move_id());
  if (it == n.verifies.end() || it->second.key != result.key()) return;
  const Node::Verify v = std::move(it->second);
  n.verifies.erase(it);
  if (result.ok()) {
    metrics_.data_loss_refuted.Increment();
    SHELF_LOG(WARNING) << "corrupt-replica report refuted: the store found the bytes intact"
                       << Kv("node", n.endpoint.node_id());
    return;
  }
  if (!absl::StartsWith(result.error(), "corrupt:")) {
    // Not checked (an I/O error, a store that cannot verify): kept.
    SHELF_LOG(WARNING) << "corrupt-replica report not verified: replica kept"
                       << Kv("node", n.endpoint.node_id()) << Kv("error", result.error());
    return;
  }
  Object* obj = FindLocked(v.key);
  if (obj == nullptr || (v.generation != 0 && obj->generation != v.generation)) return;
  for (size_t k = 0; k < obj->replicas.size(); ++k) {
    const Replica& r = obj->replicas[k];
    if (r.node != node || r.tier != v.tier) continue;
    if (v.tier == v1::TIER_DRAM &&
        (n.segments[r.segment].id != v.segment_id || r.offset != v.offset)) {
      continue;
    }
    Replica victim = r;
    obj->replicas.erase(obj->replicas.begin() + static_cast<std::ptrdiff_t>(k));
    ReleaseReplicaLocked(obj, victim, now);
    if (obj->replicas.empty()) EraseIndexLocked(obj);
    metrics_.data_loss_reports.Increment();
    SHELF_LOG(WARNING) << "replica confirmed corrupt by its store: dropped from the index"
                       << Kv("node", n.endpoint.node_id())
                       << Kv("tier", v.tier == v1::TIER_DRAM ? "dram" : "ssd")
                       << Kv("error", result.error());
    return;
  }
}

}  // namespace shelf::master
