// The master's side of the KV event stream (docs/events.md): which index
// change becomes which event. Every change of a replica set passes here
// with mu_ held exclusively, so the stream follows the index in order, and
// so does each tenant's count of stored bytes (quotas.h).
#include "server/master/master.h"

namespace shelf {
namespace {

const char* MediumOf(v1::Tier tier) { return tier == v1::TIER_DRAM ? kMediumDram : kMediumSsd; }

// The key as its engine names it: without the tenant of a namespace.
absl::string_view EngineKey(absl::string_view kept, bool tenant_namespaces) {
  if (!tenant_namespaces) return kept;
  size_t sep = kept.find('/');
  return sep == absl::string_view::npos ? kept : kept.substr(sep + 1);
}

}  // namespace

uint64_t Master::BlockHashLocked(const Object& obj) {
  const ObjectExtra* x = obj.extra.get();
  return x != nullptr && x->has_engine_hash
             ? x->engine_hash
             : KvEventBlockHash(EngineKey(obj.key.view(), options_.tenant_namespaces));
}

void Master::EmitStoredLocked(const Object& obj, const Replica& r,
                              const v1::BlockEventInfo* put_info) {
  quotas_->Stored(obj.key.view(), obj.writer, r.tier, obj.size, /*added=*/true);
  if (options_.events == nullptr || events_muted_) return;
  KvEvent e;
  e.type = KvEvent::kBlockStored;
  e.node_id = nodes_[r.node]->endpoint.node_id();
  e.medium = MediumOf(r.tier);
  const ObjectExtra* x = obj.extra.get();
  e.block_hash = BlockHashLocked(obj);
  if (x != nullptr && x->has_engine_parent_hash) {
    e.has_parent = true;
    e.parent_hash = x->engine_parent_hash;
  } else if (x != nullptr && !x->parent_key.empty()) {
    e.has_parent = true;
    e.parent_hash = KvEventBlockHash(EngineKey(x->parent_key, options_.tenant_namespaces));
  }
  if (x != nullptr) e.block_size = x->block_tokens;
  // The token ids only at the commit: the index does not keep them.
  if (put_info != nullptr) {
    e.token_ids.assign(put_info->token_ids().begin(), put_info->token_ids().end());
  }
  options_.events->Emit(std::move(e));
}

void Master::EmitRemovedLocked(const Object& obj, const Replica& r) {
  quotas_->Stored(obj.key.view(), obj.writer, r.tier, obj.size, /*added=*/false);
  if (options_.events == nullptr || events_muted_) return;
  KvEvent e;
  e.type = KvEvent::kBlockRemoved;
  e.node_id = nodes_[r.node]->endpoint.node_id();
  e.medium = MediumOf(r.tier);
  e.block_hash = BlockHashLocked(obj);
  options_.events->Emit(std::move(e));
}

void Master::EmitClearedLocked(const std::vector<std::string>& node_ids) {
  if (options_.events == nullptr) return;
  for (const std::string& id : node_ids) {
    KvEvent e;
    e.type = KvEvent::kAllBlocksCleared;
    e.node_id = id;
    options_.events->Emit(std::move(e));
  }
}

}  // namespace shelf
