// Bugs the master fuzzer found, written out as plain call sequences so each
// reads without a fuzzer; they stay as regression tests. A test is DISABLED
// while its bug is open (the fuzzer's input is then
// corpus/master_fuzzer/known-bug-<name>); enable it with the fix.
#include <gtest/gtest.h>

#include "common/manual_clock.h"
#include "common/prom.h"
#include "proto/shelf.pb.h"
#include "server/master/master.h"

namespace shelf {
namespace {

v1::RegisterStoreRequest Store(const std::string& id, uint64_t incarnation) {
  v1::RegisterStoreRequest req;
  req.set_protocol_version(1);
  req.mutable_endpoint()->set_node_id(id);
  req.mutable_endpoint()->set_data_address("127.0.0.1:1");
  req.mutable_endpoint()->set_host_id("host");
  v1::SegmentInfo* seg = req.add_segments();
  seg->set_segment_id(0);
  seg->set_capacity_bytes(1 << 20);
  req.set_incarnation(incarnation);
  return req;
}

class MasterKnownBugsTest : public ::testing::Test {
 protected:
  MasterKnownBugsTest() {
    master::MasterOptions o;
    o.demote_wait_ms = 0;
    o.clock = &clock_;
    master_ = std::make_unique<master::Master>(o, &registry_);
  }

  // A put of "k" is open on store "a" when store "b" registers (a restart,
  // or a re-registration after a master failover) with "k" in its
  // inventory; then the writer commits.
  uint64_t CommitOverInventory() {
    v1::RegisterStoreResponse reg;
    EXPECT_TRUE(master_->RegisterStore(Store("a", 1), &reg).ok());
    v1::PutStartRequest put;
    put.set_key("k");
    put.set_size(65536);
    put.set_checksum(1);
    v1::PutStartResponse started;
    EXPECT_TRUE(master_->PutStart(put, "host", "test", &started).ok());
    EXPECT_EQ(started.state(), v1::PUT_STARTED);
    v1::RegisterStoreRequest b = Store("b", 1);
    v1::InventoryEntry* e = b.add_inventory();
    e->set_key("k");
    e->set_size(65536);
    e->set_checksum(1);
    e->set_tier(v1::TIER_DRAM);
    e->set_segment_id(0);
    e->set_offset(0);
    EXPECT_TRUE(master_->RegisterStore(b, &reg).ok());
    v1::PutCommitRequest commit;
    commit.add_put_ids(started.put_id());
    v1::PutCommitResponse committed;
    master_->PutCommit(commit, "test", &committed);
    return started.put_id();
  }

  ManualClock clock_;  // outlives master_
  prom::Exposition registry_;
  std::unique_ptr<master::Master> master_;
};

// Master::PutCommit (server/master/puts/puts.cc) assumes the key is not in
// the index (`assert(inserted)`, compiled out with NDEBUG) and overwrites
// the object that the inventory created: store b's replica leaves the
// object but its range stays allocated and its LRU entry stays linked
// (CheckInvariants aborts: "used" of b's segment disagrees).
TEST_F(MasterKnownBugsTest, CommitOverAnInventoryEntryKeepsTheIndexConsistent) {
  CommitOverInventory();
  master_->CheckInvariants();
}

// The consequence: b's LRU list keeps a pointer to the object; once the
// key is removed, evicting b's segment reads freed memory (AddressSanitizer
// reports heap-use-after-free in Master::EvictSegmentLocked).
TEST_F(MasterKnownBugsTest, EvictionAfterCommitOverInventoryReadsNoFreedMemory) {
  CommitOverInventory();
  v1::RemoveRequest rm;
  rm.add_keys("k");
  rm.set_force(true);
  v1::RemoveResponse removed;
  ASSERT_TRUE(master_->Remove(rm, &removed).ok());
  v1::EvictRequest evict;
  evict.set_bytes(1 << 20);
  evict.set_node("b");
  v1::EvictResponse evicted;
  EXPECT_TRUE(master_->Evict(evict, &evicted).ok());
  v1::StatusResponse st;
  master_->Status(&st);
  for (const v1::NodeStatus& n : st.nodes()) {
    EXPECT_EQ(n.dram_used_bytes(), 0u) << n.node_id() << " leaks the range";
  }
}

// A node whose inventory holds one block twice, in DRAM and on SSD (a
// promoted block keeps its SSD copy), and then re-registers (or dies):
// dropping the node's replicas visited the object once per list and, having
// erased it on the first, read freed memory on the second (AddressSanitizer:
// heap-use-after-free in Master::DropNodeReplicasLocked).
TEST_F(MasterKnownBugsTest, NodeHoldingABlockInBothTiersDropsItOnce) {
  v1::RegisterStoreRequest a = Store("a", 1);
  for (v1::Tier tier : {v1::TIER_DRAM, v1::TIER_SSD}) {
    v1::InventoryEntry* e = a.add_inventory();
    e->set_key("k");
    e->set_size(65536);
    e->set_checksum(1);
    e->set_tier(tier);
    e->set_segment_id(0);
    e->set_offset(0);
  }
  v1::RegisterStoreResponse reg;
  ASSERT_TRUE(master_->RegisterStore(a, &reg).ok());
  v1::StatRequest stat;
  stat.set_key("k");
  v1::StatResponse found;
  ASSERT_TRUE(master_->Stat(stat, &found).ok());
  ASSERT_EQ(found.object().replicas_size(), 2);
  // The store restarts: everything it held leaves the index, once. (The
  // new incarnation registers once the old one has been silent for the
  // node timeout.)
  clock_.Advance(master::MasterOptions().node_ttl_ms + 1);
  ASSERT_TRUE(master_->RegisterStore(Store("a", 2), &reg).ok());
  master_->CheckInvariants();
  v1::StatResponse gone;
  EXPECT_EQ(master_->Stat(stat, &gone).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shelf
