// The master's side of the KV event stream (docs/events.md): which index
// change becomes which event. Every change of a replica set passes here
// with mu_ held exclusively, so the stream follows the index in order.
#include "server/master/master.h"

namespace shelf {
namespace {

const char* MediumOf(v1::Tier tier) { return tier == v1::TIER_DRAM ? kMediumDram : kMediumSsd; }

}  // namespace

void Master::EmitStoredLocked(const Object& obj, const Replica& r,
                              const v1::BlockEventInfo* put_info) {
  if (options_.events == nullptr || events_muted_) return;
  KvEvent e;
  e.type = KvEvent::kBlockStored;
  e.node_id = nodes_[r.node]->endpoint.node_id();
  e.medium = MediumOf(r.tier);
  const v1::BlockEventInfo* info = put_info != nullptr ? put_info : obj.event_info.get();
  e.block_hash = info != nullptr && info->has_engine_hash() ? info->engine_hash()
                                                            : KvEventBlockHash(obj.key->view());
  if (info != nullptr && info->has_engine_parent_hash()) {
    e.has_parent = true;
    e.parent_hash = info->engine_parent_hash();
  } else if (obj.parent_key != nullptr) {
    e.has_parent = true;
    e.parent_hash = KvEventBlockHash(*obj.parent_key);
  }
  if (info != nullptr) {
    e.block_size = info->block_tokens();
    if (put_info != nullptr) e.token_ids.assign(info->token_ids().begin(), info->token_ids().end());
  }
  options_.events->Emit(std::move(e));
}

void Master::EmitRemovedLocked(const Object& obj, const Replica& r) {
  if (options_.events == nullptr || events_muted_) return;
  KvEvent e;
  e.type = KvEvent::kBlockRemoved;
  e.node_id = nodes_[r.node]->endpoint.node_id();
  e.medium = MediumOf(r.tier);
  e.block_hash = obj.event_info != nullptr && obj.event_info->has_engine_hash()
                     ? obj.event_info->engine_hash()
                     : KvEventBlockHash(obj.key->view());
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
