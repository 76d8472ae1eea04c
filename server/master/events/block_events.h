// BlockEvents: which change of the object index becomes which block event
// (docs/events.md), and the topic each goes under.
//
//   BlockEvents events([pub](KvEvent e) { pub->Emit(std::move(e)); },
//                      /*tenant_namespaces=*/false, /*node_loss_cleared=*/false);
//   events.Stored(obj, "node-a", v1::TIER_DRAM, &put.block_info());
//   events.BeginBulkRemoval();            // a node lost, a flush
//   events.Removed(obj, "node-a", v1::TIER_DRAM);   // collected ...
//   events.EndBulkRemoval({"node-a"});    // ... and published as few events
//
// A block's hash is its engine's (the put's BlockEventInfo) or one derived
// from its key, without the tenant of a namespace; its model is the put's,
// else its key's format's, else none. The Master calls it under its lock,
// for every change of a replica set, so the stream follows the index in
// order. Not thread-safe on its own.
#ifndef SHELF_SERVER_MASTER_EVENTS_BLOCK_EVENTS_H_
#define SHELF_SERVER_MASTER_EVENTS_BLOCK_EVENTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "proto/shelf.pb.h"
#include "server/master/events/kv_events.h"
#include "server/master/index/object.h"

namespace shelf::master {

class BlockEvents {
 public:
  // Takes each event; null: no stream, every call is a no-op.
  using EmitFn = std::function<void(KvEvent)>;
  // Distinct models kept for topics; a put naming one more is published
  // under its key's model or the namespace (and logged once).
  static constexpr size_t kModelsMax = 4096;

  // `tenant_namespaces`: keys are kept as TENANT/KEY (the tenant leaves
  // the key before hashing and goes in the topic). `node_loss_cleared`: a
  // bulk removal publishes AllBlocksCleared per node instead of the blocks.
  BlockEvents(EmitFn emit, bool tenant_namespaces, bool node_loss_cleared);

  bool enabled() const { return emit_ != nullptr; }

  // The id of `model` for ObjectExtra::model (added when new); 0 (none)
  // when the table is full.
  uint32_t ModelId(absl::string_view model);
  // The hash `obj` is published under: its engine hash, else its key's.
  uint64_t BlockHash(const Object& obj) const;

  // A replica of `obj` on `node_id` entered the index. `put_info` (what
  // the committing put carried; null for any other way in) adds the token
  // ids, which the index does not keep.
  void Stored(const Object& obj, const std::string& node_id, v1::Tier tier,
              const v1::BlockEventInfo* put_info);
  // A replica of `obj` on `node_id` left the index.
  void Removed(const Object& obj, const std::string& node_id, v1::Tier tier);
  // AllBlocksCleared on each node's topic.
  void Cleared(const std::vector<std::string>& node_ids);
  // Between Begin and End, removals are collected; End publishes them as
  // BlockRemoved events listing up to kKvEventRemovedHashesMax blocks
  // each, per topic and medium, or, with node_loss_cleared,
  // AllBlocksCleared on each of `node_ids` instead.
  void BeginBulkRemoval();
  void EndBulkRemoval(const std::vector<std::string>& node_ids);
  // Between BeginBulkRemoval and EndBulkRemoval (a flush that drops a
  // node's blocks nests in it).
  bool in_bulk_removal() const { return bulk_removed_ != nullptr; }

 private:
  // The topic fields of `obj`'s events.
  void FillTopic(const Object& obj, KvEvent* e) const;
  // An event of `type` about `obj`'s replica on `node_id` in `tier`: its
  // topic, medium and hash.
  KvEvent BlockEvent(KvEvent::Type type, const Object& obj, const std::string& node_id,
                     v1::Tier tier) const;

  const EmitFn emit_;
  const bool tenant_namespaces_;
  const bool node_loss_cleared_;
  // Models named by puts (docs/events.md, "Topics and models"); index 0 is "none".
  std::vector<std::string> models_ = {""};
  absl::flat_hash_map<std::string, uint32_t> model_ids_;
  // Set between BeginBulkRemoval and EndBulkRemoval: the removals
  // collected per topic (node, model, tenant) and medium (one of
  // kMediumDram, kMediumSsd: compared as pointers).
  using BulkTopic = std::tuple<std::string, std::string, std::string, const char*>;
  std::unique_ptr<std::map<BulkTopic, std::vector<uint64_t>>> bulk_removed_;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_EVENTS_BLOCK_EVENTS_H_
