// Puts with PutOptions.replace (docs/master.md, "Replacing a key"): the new
// bytes are placed and written like a new key, and the commit swaps them in
// for the old ones in one step; until then, and when the put fails, the
// key keeps its old value.
#include <gtest/gtest.h>

#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class ReplaceTest : public MasterFixture {
 protected:
  void Pin(const std::string& key) {
    v1::PinRequest pin;
    pin.set_key(key);
    ASSERT_TRUE(master_->Pin(pin).ok());
  }
};

TEST_F(ReplaceTest, TheCommitSwapsTheValueInOneStep) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());  // checksum 42
  const v1::ObjectLocation before = Peek("k");
  v1::PutStartResponse r = StartReplace("k", 2 * kMiB, 7);
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  // Written but not committed: readers get the old value.
  EXPECT_EQ(Peek("k").checksum(), 42u);
  EXPECT_EQ(DramUsed(), 3 * kMiB);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  const v1::ObjectLocation after = Peek("k");
  ASSERT_TRUE(after.found());
  EXPECT_EQ(after.checksum(), 7u);
  EXPECT_EQ(after.size(), 2 * kMiB);
  EXPECT_NE(after.generation(), before.generation());
  EXPECT_EQ(after.replicas_size(), 1);
  EXPECT_EQ(DramUsed(), 2 * kMiB);  // the old range is free
  EXPECT_EQ(master_->metrics().replaces.Value(), 1u);
  master_->CheckInvariants();
}

TEST_F(ReplaceTest, AFailedReplaceLeavesTheOldValue) {
  MasterOptions o = TestOptions();
  o.node_ttl_ms = 60000;  // the store outlives the put's expiry
  Make(o);
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  const uint64_t generation = Peek("k").generation();
  // Aborted by the writer.
  v1::PutStartResponse r = StartReplace("k", kMiB, 7);
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  v1::PutAbortRequest abort;
  abort.add_put_ids(r.put_id());
  v1::PutAbortResponse aborted;
  master_->PutAbort(abort, "test", &aborted);
  EXPECT_EQ(Peek("k").checksum(), 42u);
  EXPECT_EQ(Peek("k").generation(), generation);
  // Never committed: reclaimed when it expires.
  r = StartReplace("k", kMiB, 8);
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  clock_.Advance(TestOptions().put_timeout_ms + 1);
  master_->Tick();
  EXPECT_EQ(Commit(r.put_id()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Peek("k").checksum(), 42u);
  EXPECT_EQ(DramUsed(), kMiB);
  EXPECT_EQ(master_->metrics().replaces.Value(), 0u);
  master_->CheckInvariants();
}

TEST_F(ReplaceTest, TheSameBytesAreNotWrittenAgain) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  EXPECT_EQ(StartReplace("k", kMiB, 42).state(), v1::PUT_ALREADY_EXISTS);
  // Without replace, other bytes of an existing key are not written either.
  EXPECT_EQ(Start("k", 2 * kMiB).state(), v1::PUT_ALREADY_EXISTS);
  EXPECT_EQ(DramUsed(), kMiB);
}

TEST_F(ReplaceTest, APinnedKeyKeepsItsValue) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  ASSERT_TRUE(Put("j", kMiB).ok());
  Pin("k");
  absl::Status s;
  StartReplace("k", kMiB, 7, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  // Pinned after the replace started: its commit is refused, and its range
  // given back.
  v1::PutStartResponse r = StartReplace("j", kMiB, 7);
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  Pin("j");
  EXPECT_EQ(Commit(r.put_id()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Peek("j").checksum(), 42u);
  // Its write grant stays valid at the store: the range waits for it.
  EXPECT_EQ(DramUsed(), 3 * kMiB);
  clock_.Advance(TestOptions().put_timeout_ms);
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
  master_->Tick();
  EXPECT_EQ(DramUsed(), 2 * kMiB);
  master_->CheckInvariants();
}

// A reader holding a lease on the old value keeps its range until the
// lease ends: the replace frees it then, as a remove would.
TEST_F(ReplaceTest, ALeasedOldValueIsFreedWhenItsLeaseEnds) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  ASSERT_TRUE(Lookup("k", /*lease=*/true).found());
  v1::PutStartResponse r = StartReplace("k", kMiB, 7);
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  EXPECT_EQ(Peek("k").checksum(), 7u);
  EXPECT_EQ(DramUsed(), 2 * kMiB);  // the leased range waits
  clock_.Advance(TestOptions().lease_ms + 1);
  master_->Tick();
  EXPECT_EQ(DramUsed(), kMiB);
  master_->CheckInvariants();
}

// A reader whose bytes did not match the checksum it looked up, because
// the key was replaced meanwhile (with a block of the same size), reports
// the commit it read for: the new commit's replica stays.
TEST_F(ReplaceTest, ADataLossReportOfAReplacedCommitDropsNothing) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  const v1::ObjectLocation old = Lookup("k", /*lease=*/true);
  ASSERT_EQ(old.replicas_size(), 1);
  ASSERT_FALSE(old.replicas(0).read_grant().empty());
  v1::PutStartResponse r = StartReplace("k", kMiB, 7);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  v1::ReportDataLossRequest report;
  report.set_key("k");
  *report.mutable_replica() = old.replicas(0);
  report.set_generation(old.generation());
  v1::ReportDataLossResponse resp;
  EXPECT_EQ(master_->ReportDataLoss(report, &resp).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Peek("k").replicas_size(), 1);
  // A report of the current commit is heard: the store is told to check
  // the replica, which stays until it answers.
  const v1::ObjectLocation now = Lookup("k", /*lease=*/true);
  *report.mutable_replica() = now.replicas(0);
  report.set_generation(now.generation());
  EXPECT_TRUE(master_->ReportDataLoss(report, &resp).ok());
  EXPECT_TRUE(master_->ReportDataLoss(report, &resp).ok());  // the same: one order
  EXPECT_EQ(Peek("k").replicas_size(), 1);
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
  std::vector<v1::TierMove> verifies;
  for (const v1::TierMove& m : hb.moves()) {
    if (m.kind() == v1::TierMove::VERIFY) verifies.push_back(m);
  }
  ASSERT_EQ(verifies.size(), 1u);
  const v1::TierMove& order = verifies[0];
  EXPECT_EQ(order.key(), "k");
  EXPECT_EQ(order.tier(), v1::TIER_DRAM);
  EXPECT_EQ(order.offset(), now.replicas(0).offset());
  EXPECT_EQ(order.size(), kMiB);
  EXPECT_EQ(order.checksum(), 7u);
  EXPECT_EQ(order.generation(), now.generation());
  // The store finds the bytes intact: nothing is dropped.
  v1::TierMoveResult intact;
  intact.set_move_id(order.move_id());
  intact.set_key("k");
  intact.set_kind(v1::TierMove::VERIFY);
  intact.set_generation(order.generation());
  intact.set_ok(true);
  hb.Clear();
  ASSERT_TRUE(Heartbeat("a", 1, {intact}, &hb).ok());
  EXPECT_EQ(Peek("k").replicas_size(), 1);
  // Reported again, and found corrupt this time: dropped.
  EXPECT_TRUE(master_->ReportDataLoss(report, &resp).ok());
  hb.Clear();
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
  verifies.clear();
  for (const v1::TierMove& m : hb.moves()) {
    if (m.kind() == v1::TierMove::VERIFY) verifies.push_back(m);
  }
  ASSERT_EQ(verifies.size(), 1u);
  v1::TierMoveResult corrupt = intact;
  corrupt.set_move_id(verifies[0].move_id());
  corrupt.set_ok(false);
  corrupt.set_error("corrupt: the DRAM bytes do not match their checksum");
  // An answer the master did not ask for changes nothing.
  v1::TierMoveResult unasked = corrupt;
  unasked.set_move_id(corrupt.move_id() + 1000);
  ASSERT_TRUE(Heartbeat("a", 1, {unasked}, &hb).ok());
  EXPECT_EQ(Peek("k").replicas_size(), 1);
  ASSERT_TRUE(Heartbeat("a", 1, {corrupt}, &hb).ok());
  EXPECT_FALSE(Peek("k").found());
}

// A reader of the replaced commit giving its lease back releases nothing
// of the new commit's lease, which another reader holds: releases name the
// commit they leased.
TEST_F(ReplaceTest, ALeaseOnTheOldCommitReleasesNothingOfTheNew) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  const uint64_t old_generation = Lookup("k", /*lease=*/true).generation();
  v1::PutStartResponse r = StartReplace("k", kMiB, 7);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  const uint64_t new_generation = Lookup("k", /*lease=*/true).generation();
  ASSERT_NE(old_generation, new_generation);
  auto release = [&](uint64_t generation) {
    v1::ReleaseLeasesRequest req;
    req.add_keys("k");
    req.add_generations(generation);
    ASSERT_TRUE(master_->ReleaseLeases(req).ok());
  };
  release(old_generation);
  EXPECT_EQ(master_->metrics().leases_released.Value(), 0u);
  release(new_generation);
  EXPECT_EQ(master_->metrics().leases_released.Value(), 1u);
}

}  // namespace
}  // namespace shelf::master
