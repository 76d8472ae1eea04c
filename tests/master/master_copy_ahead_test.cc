// Room without emptiness (docs/storage.md): demotion ahead of need copies a
// block to SSD and keeps its DRAM copy, clean; a put takes a clean copy's
// room at once; the watermark pass leaves clean copies where they are; an
// admin's Evict still moves, and copies when asked; a store that does not echo keep_dram moved
// the block. CheckInvariants (TearDown, and after each step here) recounts
// the clean bytes from the index.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class CopyAheadTest : public MasterFixture {
 protected:
  // Answers every DEMOTE order of one heartbeat as a store does: written,
  // synced, keep_dram echoed (unless `echo` is false: an older store).
  // Returns the keys demoted.
  std::vector<std::string> DemoteAll(bool echo = true, bool* kept = nullptr) {
    v1::HeartbeatResponse hb;
    EXPECT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
    std::vector<v1::TierMoveResult> results;
    std::vector<std::string> keys;
    for (const v1::TierMove& m : hb.moves()) {
      if (m.kind() != v1::TierMove::DEMOTE) continue;
      if (kept != nullptr) *kept = m.keep_dram();
      v1::TierMoveResult r;
      r.set_move_id(m.move_id());
      r.set_key(m.key());
      r.set_generation(m.generation());
      r.set_kind(m.kind());
      r.set_ok(true);
      r.set_keep_dram(echo && m.keep_dram());
      results.push_back(r);
      keys.push_back(m.key());
    }
    v1::HeartbeatResponse hb2;
    EXPECT_TRUE(Heartbeat("a", 1, results, &hb2).ok());
    return keys;
  }
  uint64_t Clean() {
    v1::StatusResponse st;
    master_->Status(&st);
    return st.dram_clean_bytes();
  }
  // The tiers `key` is indexed on, in replica order.
  std::vector<int> Tiers(const std::string& key) {
    std::vector<int> tiers;
    v1::ObjectLocation loc = Peek(key);
    for (const auto& r : loc.replicas()) tiers.push_back(r.tier());
    return tiers;
  }
  // Four 1 MiB blocks in a 4 MiB segment, then a tick: over the line, so
  // demotions ahead of need are ordered.
  void Fill() {
    Register("a", 4 * kMiB, 64 * kMiB);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
    master_->Tick();
  }
};

TEST_F(CopyAheadTest, ADemotionAheadOfNeedKeepsTheDramCopyClean) {
  Fill();
  const uint64_t used = DramUsed();
  bool kept = false;
  std::vector<std::string> demoted = DemoteAll(true, &kept);
  ASSERT_FALSE(demoted.empty());
  EXPECT_TRUE(kept) << "the order asks the store to keep its DRAM copy";
  EXPECT_EQ(DramUsed(), used) << "nothing left DRAM";
  EXPECT_EQ(Clean(), demoted.size() * kMiB);
  for (const std::string& k : demoted) {
    EXPECT_EQ(Tiers(k), (std::vector<int>{v1::TIER_DRAM, v1::TIER_SSD})) << k;
  }
  EXPECT_EQ(master_->metrics().demotions_ok.Value(), demoted.size());
  master_->CheckInvariants();
  // The next tick orders nothing more: clean copies are room already, and
  // the watermark pass leaves them in DRAM.
  master_->Tick();
  EXPECT_TRUE(DemoteAll().empty());
  EXPECT_EQ(DramUsed(), used);
  EXPECT_EQ(Clean(), demoted.size() * kMiB);
}

TEST_F(CopyAheadTest, APutTakesACleanCopysRoomWithoutWaiting) {
  Fill();
  std::vector<std::string> demoted = DemoteAll();
  ASSERT_FALSE(demoted.empty());
  // The segment is full: the put drops the least recently used clean copy
  // (its block stays on SSD) instead of waiting for a demotion. A wait
  // would block on the test's clock, which never moves here.
  ASSERT_TRUE(Put("new", kMiB).ok());
  EXPECT_EQ(master_->metrics().room_waits.Value(), 0u);
  EXPECT_EQ(master_->metrics().put_drops.Value(), 0u) << "the block stays on SSD";
  EXPECT_EQ(Tiers(demoted[0]), (std::vector<int>{v1::TIER_SSD}));
  EXPECT_EQ(Clean(), (demoted.size() - 1) * kMiB);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(Peek("k" + std::to_string(i)).found()) << "nothing lost: k" << i;
  }
  master_->CheckInvariants();
}

TEST_F(CopyAheadTest, WithItsCleanCopiesLeasedAPutWaitsForABlockMovedForIt) {
  Fill();
  std::vector<std::string> demoted = DemoteAll();
  ASSERT_EQ(demoted, (std::vector<std::string>{"k0"})) << "the least recently used, copied";
  Lookup("k0", /*lease=*/true);
  // The only clean copy is leased: the put cannot take its room, so it
  // orders a DRAM-only block moved (no copy kept) and waits for it.
  absl::Status s;
  v1::PutStartResponse r;
  std::thread writer([&] { r = Start("new", kMiB, 1, &s); });
  clock_.WaitForWaiters(1);
  bool kept = true;
  EXPECT_EQ(DemoteAll(true, &kept), (std::vector<std::string>{"k1"}));
  EXPECT_FALSE(kept);
  writer.join();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  EXPECT_EQ(master_->metrics().room_waits.Value(), 1u);
  EXPECT_EQ(master_->metrics().evictions.Value(), 0u) << "nothing dropped";
  EXPECT_EQ(master_->metrics().put_drops.Value(), 0u);
  EXPECT_EQ(Tiers("k0"), (std::vector<int>{v1::TIER_DRAM, v1::TIER_SSD}));
  EXPECT_EQ(Tiers("k1"), (std::vector<int>{v1::TIER_SSD}));
  for (const char* k : {"k2", "k3", "new"}) {
    EXPECT_EQ(Tiers(k), (std::vector<int>{v1::TIER_DRAM})) << k;
  }
}

TEST_F(CopyAheadTest, AnAdminEvictStillMovesBlocks) {
  Register("a", 4 * kMiB, 64 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  v1::EvictRequest req;
  req.set_bytes(kMiB);
  v1::EvictResponse resp;
  ASSERT_TRUE(master_->Evict(req, &resp).ok());
  EXPECT_EQ(resp.demoted_objects(), 1u);
  bool kept = true;
  ASSERT_EQ(DemoteAll(true, &kept), (std::vector<std::string>{"k"}));
  EXPECT_FALSE(kept) << "an Evict frees the room: the order moves the block";
  EXPECT_EQ(DramUsed(), 0u);
  EXPECT_EQ(Tiers("k"), (std::vector<int>{v1::TIER_SSD}));
}

TEST_F(CopyAheadTest, AnAdminCopyCopiesDramOnlyBlocksAndDropsNothing) {
  Register("a", 8 * kMiB, 64 * kMiB);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  v1::EvictRequest req;
  req.set_bytes(2 * kMiB);
  req.set_copy(true);
  v1::EvictResponse resp;
  ASSERT_TRUE(master_->Evict(req, &resp).ok());
  EXPECT_EQ(resp.demoted_objects(), 2u);
  EXPECT_EQ(resp.evicted_objects(), 0u);
  bool kept = false;
  EXPECT_EQ(DemoteAll(true, &kept), (std::vector<std::string>{"k0", "k1"}));
  EXPECT_TRUE(kept);
  EXPECT_EQ(DramUsed(), 3 * kMiB);
  EXPECT_EQ(Clean(), 2 * kMiB);
  // Again: the clean copies are skipped, the DRAM-only one is copied.
  ASSERT_TRUE(master_->Evict(req, &resp).ok());
  EXPECT_EQ(DemoteAll(), (std::vector<std::string>{"k2"}));
  EXPECT_EQ(Clean(), 3 * kMiB);
  master_->CheckInvariants();
}

TEST_F(CopyAheadTest, AStoreThatDoesNotEchoKeepDramMovedTheBlock) {
  Fill();
  const uint64_t used = DramUsed();
  std::vector<std::string> demoted = DemoteAll(/*echo=*/false);
  ASSERT_FALSE(demoted.empty());
  // An older store ignores keep_dram and drops its DRAM record: the
  // master frees the range, as it did before copies were kept.
  EXPECT_EQ(DramUsed(), used - demoted.size() * kMiB);
  EXPECT_EQ(Clean(), 0u);
  for (const std::string& k : demoted) {
    EXPECT_EQ(Tiers(k), (std::vector<int>{v1::TIER_SSD})) << k;
  }
}

TEST_F(CopyAheadTest, MovedWhenCopiesAreOff) {
  MasterOptions o = TestOptions();
  o.demote_keep_dram = false;
  Make(o);
  Fill();
  const uint64_t used = DramUsed();
  bool kept = true;
  std::vector<std::string> demoted = DemoteAll(true, &kept);
  ASSERT_FALSE(demoted.empty());
  EXPECT_FALSE(kept);
  EXPECT_EQ(DramUsed(), used - demoted.size() * kMiB);
  EXPECT_EQ(Clean(), 0u);
}

}  // namespace
}  // namespace shelf::master
