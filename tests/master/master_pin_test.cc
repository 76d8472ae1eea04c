// Hard pins are counted per node against --hard-pin-max, for every replica
// of a pinned key: those it had when pinned, and those it gains later (a
// store's inventory, a promotion).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class PinTest : public MasterFixture {
 protected:
  absl::Status HardPin(const std::string& key) {
    v1::PinRequest pin;
    pin.set_key(key);
    pin.set_hard(true);
    return master_->Pin(pin);
  }
  // `key` as a store's SSD tier would list it in its inventory.
  v1::InventoryEntry Entry(const std::string& key) {
    v1::ObjectLocation loc = Peek(key);
    v1::InventoryEntry e;
    e.set_key(key);
    e.set_size(loc.size());
    e.set_checksum(loc.checksum());
    e.set_tier(v1::TIER_SSD);
    return e;
  }
};

// Store b lists two hard-pinned keys when it registers: they count against
// b's cap as they would have, had b held them when they were pinned.
TEST_F(PinTest, ReplicasAddedAfterAHardPinCountAgainstTheirNode) {
  MasterOptions o = TestOptions();
  o.hard_pin_bytes_max = 2 * kMiB;
  Make(o);
  Register("a", 16 * kMiB, 0, "ha");
  ASSERT_TRUE(Put("j", kMiB).ok());
  ASSERT_TRUE(Put("k", kMiB).ok());
  ASSERT_TRUE(HardPin("j").ok());
  ASSERT_TRUE(HardPin("k").ok());
  Register("b", 16 * kMiB, 64 * kMiB, "hb", 1, {}, {Entry("j"), Entry("k")});
  ASSERT_EQ(Peek("j").replicas_size(), 2);
  // A third key on b alone: b is at its cap already.
  v1::PutOptions local;
  local.set_prefer_local(true);
  local.set_client_host_id("hb");
  absl::Status s;
  v1::PutStartResponse r = Start("m", kMiB, 1, &s, local);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(Commit(r.put_id()).ok());
  ASSERT_EQ(Peek("m").replicas(0).store().node_id(), "b");
  EXPECT_EQ(HardPin("m").code(), absl::StatusCode::kResourceExhausted);
}

// PutOptions.soft_pin_ttl_ms pins at the commit, as Pin with that TTL
// would: Remove refuses the key until the pin expires, unless forced.
TEST_F(PinTest, APutPinsAtItsCommitForItsTtl) {
  Register("a", 16 * kMiB);
  v1::PutOptions pin;
  pin.set_soft_pin_ttl_ms(5000);
  absl::Status s;
  v1::PutStartResponse r = Start("pinned", kMiB, 1, &s, pin);
  ASSERT_TRUE(s.ok()) << s;
  // Nothing is pinned before the commit.
  v1::StatRequest stat;
  stat.set_key("pinned");
  v1::StatResponse before;
  EXPECT_EQ(master_->Stat(stat, &before).code(), absl::StatusCode::kNotFound);
  std::vector<Master::CommitPin> pinned;
  v1::PutCommitRequest commit;
  commit.add_put_ids(r.put_id());
  v1::PutCommitResponse committed;
  master_->PutCommit(commit, "test", &committed, &pinned);
  ASSERT_EQ(committed.statuses(0).code(), 0) << committed.statuses(0).message();
  ASSERT_EQ(pinned.size(), 1u);
  EXPECT_EQ(pinned[0].key, "pinned");
  EXPECT_EQ(pinned[0].size, kMiB);
  EXPECT_EQ(pinned[0].ttl_ms, 5000u);
  v1::StatResponse after;
  ASSERT_TRUE(master_->Stat(stat, &after).ok());
  EXPECT_TRUE(after.pinned());
  EXPECT_FALSE(after.hard_pin());
  EXPECT_EQ(after.pin_expires_unix_ms(), clock_.UnixMs() + 5000);
  v1::RemoveRequest rm;
  rm.add_keys("pinned");
  v1::RemoveResponse refused;
  ASSERT_TRUE(master_->Remove(rm, &refused).ok());
  EXPECT_EQ(refused.statuses(0).code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  // Expired, the pin holds nothing; a put without one pins nothing.
  clock_.Advance(5000);
  ASSERT_TRUE(master_->Stat(stat, &after).ok());
  EXPECT_FALSE(after.pinned());
  ASSERT_TRUE(Put("plain", kMiB).ok());
  stat.set_key("plain");
  ASSERT_TRUE(master_->Stat(stat, &after).ok());
  EXPECT_FALSE(after.pinned());
}

}  // namespace
}  // namespace shelf::master
