// BlockEvents (block_events.h). The Master calls it with its lock held
// exclusively, beside each tenant's count of stored bytes (quotas.h).
#include "server/master/events/block_events.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace shelf::master {
namespace {

const char* MediumOf(v1::Tier tier) { return tier == v1::TIER_DRAM ? kMediumDram : kMediumSsd; }

// The key as its engine names it: without the tenant of a namespace.
absl::string_view EngineKey(absl::string_view kept, bool tenant_namespaces) {
  if (!tenant_namespaces) return kept;
  size_t sep = kept.find('/');
  return sep == absl::string_view::npos ? kept : kept.substr(sep + 1);
}

absl::string_view TenantOf(absl::string_view kept, bool tenant_namespaces) {
  if (!tenant_namespaces) return {};
  size_t sep = kept.find('/');
  return sep == absl::string_view::npos ? absl::string_view() : kept.substr(0, sep);
}

}  // namespace

BlockEvents::BlockEvents(EmitFn emit, bool tenant_namespaces, bool node_loss_cleared)
    : emit_(std::move(emit)),
      tenant_namespaces_(tenant_namespaces),
      node_loss_cleared_(node_loss_cleared) {}

uint64_t BlockEvents::BlockHash(const Object& obj) const {
  const ObjectExtra* x = obj.extra.get();
  return x != nullptr && x->has_engine_hash
             ? x->engine_hash
             : KvEventBlockHash(EngineKey(obj.key.view(), tenant_namespaces_));
}

uint32_t BlockEvents::ModelId(absl::string_view model) {
  auto it = model_ids_.find(model);
  if (it != model_ids_.end()) return it->second;
  if (models_.size() >= kModelsMax) {
    static bool logged = false;
    if (!std::exchange(logged, true)) {
      SHELF_LOG(WARNING) << "more distinct models than the event stream keeps; further ones are "
                            "published under their key's model or --events-namespace"
                         << Kv("models_max", kModelsMax);
    }
    return 0;
  }
  uint32_t id = static_cast<uint32_t>(models_.size());
  models_.emplace_back(model);
  model_ids_.emplace(std::string(model), id);
  return id;
}

void BlockEvents::FillTopic(const Object& obj, KvEvent* e) const {
  const ObjectExtra* x = obj.extra.get();
  absl::string_view engine_key = EngineKey(obj.key.view(), tenant_namespaces_);
  if (x != nullptr && x->model != 0) {
    e->model = models_[x->model];
  } else {
    e->model = std::string(KvEventKeyModel(engine_key));
  }
  e->tenant = std::string(TenantOf(obj.key.view(), tenant_namespaces_));
}

KvEvent BlockEvents::BlockEvent(KvEvent::Type type, const Object& obj, const std::string& node_id,
                                v1::Tier tier) const {
  KvEvent e;
  e.type = type;
  e.node_id = node_id;
  FillTopic(obj, &e);
  e.medium = MediumOf(tier);
  e.block_hash = BlockHash(obj);
  return e;
}

void BlockEvents::Stored(const Object& obj, const std::string& node_id, v1::Tier tier,
                         const v1::BlockEventInfo* put_info) {
  if (emit_ == nullptr) return;
  KvEvent e = BlockEvent(KvEvent::kBlockStored, obj, node_id, tier);
  const ObjectExtra* x = obj.extra.get();
  if (x != nullptr && x->has_engine_parent_hash) {
    e.has_parent = true;
    e.parent_hash = x->engine_parent_hash;
  } else if (x != nullptr && !x->parent_key.empty()) {
    e.has_parent = true;
    e.parent_hash = KvEventBlockHash(EngineKey(x->parent_key, tenant_namespaces_));
  }
  if (x != nullptr) e.block_size = x->block_tokens;
  // The token ids only at the commit: the index does not keep them.
  if (put_info != nullptr) {
    e.token_ids.assign(put_info->token_ids().begin(), put_info->token_ids().end());
  }
  emit_(std::move(e));
}

void BlockEvents::Removed(const Object& obj, const std::string& node_id, v1::Tier tier) {
  if (emit_ == nullptr) return;
  KvEvent e = BlockEvent(KvEvent::kBlockRemoved, obj, node_id, tier);
  if (bulk_removed_ != nullptr) {
    (*bulk_removed_)[BulkTopic(e.node_id, e.model, e.tenant, e.medium)].push_back(e.block_hash);
    return;
  }
  emit_(std::move(e));
}

void BlockEvents::Cleared(const std::vector<std::string>& node_ids) {
  if (emit_ == nullptr) return;
  for (const std::string& id : node_ids) {
    KvEvent e;
    e.type = KvEvent::kAllBlocksCleared;
    e.node_id = id;
    emit_(std::move(e));
  }
}

void BlockEvents::BeginBulkRemoval() {
  bulk_removed_ = std::make_unique<std::map<BulkTopic, std::vector<uint64_t>>>();
}

void BlockEvents::EndBulkRemoval(const std::vector<std::string>& node_ids) {
  std::unique_ptr<std::map<BulkTopic, std::vector<uint64_t>>> bulk = std::move(bulk_removed_);
  if (emit_ == nullptr || bulk == nullptr || bulk->empty()) return;
  if (node_loss_cleared_) {
    Cleared(node_ids);
    return;
  }
  // One event lists at most kKvEventRemovedHashesMax blocks: a million
  // removals take a few hundred queue slots and batches of bounded size.
  for (const auto& [topic, hashes] : *bulk) {
    const auto& [node_id, model, tenant, medium] = topic;
    for (size_t i = 0; i < hashes.size(); i += kKvEventRemovedHashesMax) {
      KvEvent e;
      e.type = KvEvent::kBlockRemoved;
      e.node_id = node_id;
      e.model = model;
      e.tenant = tenant;
      e.medium = medium;
      e.block_hash = hashes[i];
      size_t end = std::min(hashes.size(), i + kKvEventRemovedHashesMax);
      e.more_hashes.assign(hashes.begin() + static_cast<ptrdiff_t>(i) + 1,
                           hashes.begin() + static_cast<ptrdiff_t>(end));
      emit_(std::move(e));
    }
  }
}

}  // namespace shelf::master
