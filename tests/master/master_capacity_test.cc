// What the capacity holds (docs/storage.md): a segment's clean bytes (DRAM
// replicas whose store also holds the block on SSD) as Status, Segments and
// the metric report them, following the replicas as they come and go.
// CheckInvariants (TearDown, and after each step here) recounts them.
#include <gtest/gtest.h>

#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

struct Shares {
  uint64_t used = 0, clean = 0, demoting = 0;
};

class CapacityTest : public MasterFixture {
 protected:
  Shares StatusShares() {
    v1::StatusResponse st;
    master_->Status(&st);
    return {st.dram_used_bytes(), st.dram_clean_bytes(), st.dram_demoting_bytes()};
  }
  Shares SegmentShares() {
    v1::SegmentsResponse r;
    master_->Segments(&r);
    Shares s;
    for (const auto& seg : r.segments()) {
      if (seg.tier() != v1::TIER_DRAM) continue;
      s.used += seg.used_bytes();
      s.clean += seg.clean_bytes();
      s.demoting += seg.demoting_bytes();
    }
    return s;
  }
  void PromoteCold(const std::string& key, uint64_t checksum) {
    uint64_t id = Promote("a", 1, key, kMiB, checksum);
    ASSERT_NE(id, 0u);
    ASSERT_TRUE(CommitPromotion("a", id).ok());
  }
};

TEST_F(CapacityTest, APutIsDramOnly) {
  Register("a", 8 * kMiB, 64 * kMiB);
  ASSERT_TRUE(Put("hot", kMiB).ok());
  Shares s = StatusShares();
  EXPECT_EQ(s.used, kMiB);
  EXPECT_EQ(s.clean, 0u);
  EXPECT_EQ(s.demoting, 0u);
  master_->CheckInvariants();
}

TEST_F(CapacityTest, APromotedBlockIsCleanUntilItsSsdCopyGoes) {
  // SSD capacity of exactly one block: over --ssd-evict-high once full.
  Register("a", 8 * kMiB, kMiB, "h", 1, {}, {SsdEntry("cold", kMiB, 9)});
  PromoteCold("cold", 9);
  Shares s = StatusShares();
  EXPECT_EQ(s.used, kMiB);
  EXPECT_EQ(s.clean, kMiB);
  Shares seg = SegmentShares();
  EXPECT_EQ(seg.used, kMiB);
  EXPECT_EQ(seg.clean, kMiB);
  master_->CheckInvariants();
  // The SSD tier's own eviction takes the SSD copy: the DRAM one is left
  // the only copy, DRAM-only again.
  master_->Tick();
  v1::ObjectLocation loc = Lookup("cold", false);
  ASSERT_TRUE(loc.found());
  ASSERT_EQ(loc.replicas_size(), 1);
  EXPECT_EQ(loc.replicas(0).tier(), v1::TIER_DRAM);
  EXPECT_EQ(StatusShares().clean, 0u);
  EXPECT_EQ(SegmentShares().clean, 0u);
  master_->CheckInvariants();
}

TEST_F(CapacityTest, RemovingACleanBlockCountsItsBytesOnce) {
  Register("a", 8 * kMiB, 64 * kMiB, "h", 1, {},
           {SsdEntry("c1", kMiB, 1), SsdEntry("c2", kMiB, 2)});
  PromoteCold("c1", 1);
  PromoteCold("c2", 2);
  EXPECT_EQ(StatusShares().clean, 2 * kMiB);
  v1::RemoveRequest rm;
  rm.add_keys("c1");
  v1::RemoveResponse resp;
  ASSERT_TRUE(master_->Remove(rm, &resp).ok());
  EXPECT_EQ(StatusShares().clean, kMiB);
  master_->CheckInvariants();
}

TEST_F(CapacityTest, AStoreThatDiesTakesItsCleanBytesAlong) {
  Register("a", 8 * kMiB, 64 * kMiB, "h", 1, {}, {SsdEntry("c1", kMiB, 1)});
  PromoteCold("c1", 1);
  EXPECT_EQ(SegmentShares().clean, kMiB);
  // Registered anew (a restart): the new registration starts from its
  // inventory, here the SSD copy alone.
  clock_.Advance(301);
  Register("a", 8 * kMiB, 64 * kMiB, "h", 2, {}, {SsdEntry("c1", kMiB, 1)});
  EXPECT_EQ(SegmentShares().clean, 0u);
  EXPECT_EQ(StatusShares().used, 0u);
  master_->CheckInvariants();
}

}  // namespace
}  // namespace shelf::master
