// Which change of the index becomes which block event
// (server/master/events/block_events.h): hashes, parents, models and
// tenants in the topic, and bulk removals cut into bounded events. The
// events are taken where the Master hands them to its publisher; the
// publisher's wire formats are tested in tests/python/test_events*.py.
#include "server/master/events/block_events.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shelf::master {
namespace {

struct Recorder {
  std::vector<KvEvent> events;
  BlockEvents::EmitFn fn() {
    return [this](KvEvent e) { events.push_back(std::move(e)); };
  }
};

std::unique_ptr<Object> MakeObject(const std::string& key, uint32_t size = 4096) {
  auto obj = std::make_unique<Object>(key);
  obj->size = size;
  return obj;
}

TEST(BlockEventsTest, WithoutAStreamNothingHappens) {
  BlockEvents events(nullptr, false, false);
  EXPECT_FALSE(events.enabled());
  auto obj = MakeObject("k");
  events.Stored(*obj, "n1", v1::TIER_DRAM, nullptr);
  events.Removed(*obj, "n1", v1::TIER_DRAM);
  events.Cleared({"n1"});
  events.BeginBulkRemoval();
  events.EndBulkRemoval({"n1"});
}

TEST(BlockEventsTest, AStoredBlockCarriesItsHashParentTokensAndMedium) {
  Recorder rec;
  BlockEvents events(rec.fn(), false, false);
  auto obj = MakeObject("child");
  obj->extra = std::make_unique<ObjectExtra>();
  obj->extra->parent_key = "parent";
  obj->extra->block_tokens = 16;
  v1::BlockEventInfo info;
  info.add_token_ids(5);
  info.add_token_ids(6);
  events.Stored(*obj, "n1", v1::TIER_SSD, &info);
  ASSERT_EQ(rec.events.size(), 1u);
  const KvEvent& e = rec.events[0];
  EXPECT_EQ(e.type, KvEvent::kBlockStored);
  EXPECT_EQ(e.node_id, "n1");
  EXPECT_STREQ(e.medium, kMediumSsd);
  EXPECT_EQ(e.block_hash, KvEventBlockHash("child"));
  EXPECT_TRUE(e.has_parent);
  EXPECT_EQ(e.parent_hash, KvEventBlockHash("parent"));
  EXPECT_EQ(e.block_size, 16u);
  EXPECT_EQ(e.token_ids, (std::vector<uint32_t>{5, 6}));
}

TEST(BlockEventsTest, AnEngineHashReplacesTheKeysAndTheTokensComeOnlyAtTheCommit) {
  Recorder rec;
  BlockEvents events(rec.fn(), false, false);
  auto obj = MakeObject("k");
  obj->extra = std::make_unique<ObjectExtra>();
  obj->extra->has_engine_hash = true;
  obj->extra->engine_hash = 0xabc;
  obj->extra->has_engine_parent_hash = true;
  obj->extra->engine_parent_hash = 0xdef;
  obj->extra->parent_key = "ignored: the engine's parent wins";
  events.Stored(*obj, "n1", v1::TIER_DRAM, nullptr);
  ASSERT_EQ(rec.events.size(), 1u);
  EXPECT_EQ(rec.events[0].block_hash, 0xabcu);
  EXPECT_EQ(rec.events[0].parent_hash, 0xdefu);
  EXPECT_TRUE(rec.events[0].token_ids.empty());
  EXPECT_EQ(events.BlockHash(*obj), 0xabcu);
}

TEST(BlockEventsTest, ATenantLeavesTheKeyAndGoesInTheTopic) {
  Recorder rec;
  BlockEvents events(rec.fn(), /*tenant_namespaces=*/true, false);
  auto obj = MakeObject("team-a/key1");
  events.Removed(*obj, "n1", v1::TIER_DRAM);
  ASSERT_EQ(rec.events.size(), 1u);
  EXPECT_EQ(rec.events[0].type, KvEvent::kBlockRemoved);
  EXPECT_EQ(rec.events[0].tenant, "team-a");
  EXPECT_EQ(rec.events[0].block_hash, KvEventBlockHash("key1"));
}

TEST(BlockEventsTest, APutsModelNamesTheTopicAndTheTableIsBounded) {
  Recorder rec;
  BlockEvents events(rec.fn(), false, false);
  uint32_t id = events.ModelId("llama-70b");
  EXPECT_NE(id, 0u);
  EXPECT_EQ(events.ModelId("llama-70b"), id);  // once per model
  auto obj = MakeObject("k");
  obj->extra = std::make_unique<ObjectExtra>();
  obj->extra->model = id;
  events.Stored(*obj, "n1", v1::TIER_DRAM, nullptr);
  EXPECT_EQ(rec.events.back().model, "llama-70b");
  for (size_t i = 0; i < BlockEvents::kModelsMax; ++i) events.ModelId("m" + std::to_string(i));
  EXPECT_EQ(events.ModelId("one-too-many"), 0u);
  EXPECT_EQ(events.ModelId("llama-70b"), id);  // known ones stay
}

TEST(BlockEventsTest, ABulkRemovalPublishesFewEventsPerTopicAndMedium) {
  Recorder rec;
  BlockEvents events(rec.fn(), false, false);
  events.BeginBulkRemoval();
  EXPECT_TRUE(events.in_bulk_removal());
  const size_t n = kKvEventRemovedHashesMax + 10;
  std::vector<uint64_t> want;
  for (size_t i = 0; i < n; ++i) {
    auto obj = MakeObject("k" + std::to_string(i));
    want.push_back(events.BlockHash(*obj));
    events.Removed(*obj, "n1", v1::TIER_DRAM);
  }
  auto ssd = MakeObject("on-disk");
  events.Removed(*ssd, "n1", v1::TIER_SSD);
  EXPECT_TRUE(rec.events.empty());  // collected until the end
  events.EndBulkRemoval({"n1"});
  EXPECT_FALSE(events.in_bulk_removal());
  // Two DRAM events (a full one and the rest) and one SSD event.
  ASSERT_EQ(rec.events.size(), 3u);
  std::vector<uint64_t> got;
  size_t dram_events = 0;
  for (const KvEvent& e : rec.events) {
    EXPECT_EQ(e.type, KvEvent::kBlockRemoved);
    EXPECT_LE(1 + e.more_hashes.size(), kKvEventRemovedHashesMax);
    // By value: a literal's address may differ between translation units.
    if (std::string(e.medium) != kMediumDram) {
      EXPECT_EQ(e.block_hash, events.BlockHash(*ssd));
      continue;
    }
    ++dram_events;
    got.push_back(e.block_hash);
    got.insert(got.end(), e.more_hashes.begin(), e.more_hashes.end());
  }
  EXPECT_EQ(dram_events, 2u);
  EXPECT_EQ(got, want);
}

TEST(BlockEventsTest, NodeLossAsClearedPublishesOneEventPerNode) {
  Recorder rec;
  BlockEvents events(rec.fn(), false, /*node_loss_cleared=*/true);
  events.BeginBulkRemoval();
  auto obj = MakeObject("k");
  events.Removed(*obj, "n1", v1::TIER_DRAM);
  events.EndBulkRemoval({"n1", "n2"});
  ASSERT_EQ(rec.events.size(), 2u);
  EXPECT_EQ(rec.events[0].type, KvEvent::kAllBlocksCleared);
  EXPECT_EQ(rec.events[0].node_id, "n1");
  EXPECT_EQ(rec.events[1].node_id, "n2");
}

}  // namespace
}  // namespace shelf::master
