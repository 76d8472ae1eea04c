// Puts belong to the principal that started them: another principal's
// commit or abort is PERMISSION_DENIED and changes nothing; an aborted
// put's ranges are not handed out again while its write grants live.
#include <gtest/gtest.h>

#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

class MasterOwnerTest : public MasterFixture {};

TEST_F(MasterOwnerTest, AnotherOwnersCommitOrAbortIsDeniedAndChangesNothing) {
  Register("n1", 1 << 20);
  v1::PutStartRequest req;
  req.set_key("k");
  req.set_size(4096);
  req.set_checksum(1);
  v1::PutStartResponse started;
  ASSERT_TRUE(master_->PutStart(req, "", "alice", &started).ok());
  ASSERT_EQ(started.state(), v1::PUT_STARTED);
  const uint64_t used = DramUsed();

  v1::PutCommitRequest commit;
  commit.add_put_ids(started.put_id());
  v1::PutCommitResponse committed;
  master_->PutCommit(commit, "mallory", &committed);
  EXPECT_EQ(committed.statuses(0).code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  v1::PutAbortRequest abort;
  abort.add_put_ids(started.put_id());
  v1::PutAbortResponse aborted;
  master_->PutAbort(abort, "mallory", &aborted);
  EXPECT_EQ(aborted.statuses(0).code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_FALSE(Peek("k").found());
  EXPECT_EQ(DramUsed(), used);
  v1::StatusResponse st;
  master_->Status(&st);
  EXPECT_EQ(st.puts_in_flight(), 1u);

  // The owner commits.
  committed.Clear();
  master_->PutCommit(commit, "alice", &committed);
  EXPECT_EQ(committed.statuses(0).code(), 0);
  EXPECT_TRUE(Peek("k").found());
}

TEST_F(MasterOwnerTest, AnAbortedPutsRangeWaitsForItsGrantsToExpire) {
  Register("n1", 1 << 20);
  v1::PutStartRequest req;
  req.set_key("k");
  req.set_size(4096);
  req.set_checksum(1);
  v1::PutStartResponse started;
  ASSERT_TRUE(master_->PutStart(req, "", "alice", &started).ok());
  const uint64_t used = DramUsed();
  v1::PutAbortRequest abort;
  abort.add_put_ids(started.put_id());
  v1::PutAbortResponse aborted;
  master_->PutAbort(abort, "alice", &aborted);
  EXPECT_EQ(aborted.statuses(0).code(), 0);
  // The range stays taken until the put's deadline, then comes back.
  EXPECT_EQ(DramUsed(), used);
  clock_.Advance(1000);
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("n1", 1, {}, &hb).ok());
  master_->Tick();
  EXPECT_LT(DramUsed(), used);
}

TEST_F(MasterOwnerTest, PutIdsAreNotSequential) {
  Register("n1", 1 << 20);
  uint64_t last = 0;
  int sequential = 0;
  for (int i = 0; i < 8; ++i) {
    v1::PutStartResponse r = Start("k" + std::to_string(i), 4096);
    ASSERT_EQ(r.state(), v1::PUT_STARTED);
    EXPECT_NE(r.put_id(), 0u);
    sequential += r.put_id() == last + 1;
    last = r.put_id();
  }
  EXPECT_LT(sequential, 2);
}

TEST_F(MasterOwnerTest, EachRegistrationGetsItsOwnGrantKey) {
  v1::RegisterStoreRequest req;
  req.set_protocol_version(1);
  req.mutable_endpoint()->set_node_id("n1");
  req.mutable_endpoint()->set_data_address("n1:7100");
  req.add_segments()->set_capacity_bytes(1 << 20);
  req.set_incarnation(1);
  v1::RegisterStoreResponse a, b, c;
  ASSERT_TRUE(master_->RegisterStore(req, &a).ok());
  ASSERT_TRUE(master_->RegisterStore(req, &b).ok());  // the same incarnation again
  req.mutable_endpoint()->set_node_id("n2");
  req.mutable_endpoint()->set_data_address("n2:7100");
  ASSERT_TRUE(master_->RegisterStore(req, &c).ok());
  EXPECT_EQ(a.grant_key().size(), 32u);
  EXPECT_NE(a.grant_key(), b.grant_key());
  EXPECT_NE(a.grant_key(), c.grant_key());
  EXPECT_NE(b.grant_key(), c.grant_key());
  // Another incarnation may not take n1 while it heartbeats; once it has
  // been silent for the node timeout, it may.
  req.mutable_endpoint()->set_node_id("n1");
  req.set_incarnation(2);
  v1::RegisterStoreResponse d;
  EXPECT_EQ(master_->RegisterStore(req, &d).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(d.grant_key().empty());
  clock_.Advance(1000);
  EXPECT_TRUE(master_->RegisterStore(req, &d).ok());
}

}  // namespace
}  // namespace shelf::master
