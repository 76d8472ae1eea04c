// One master's role (server/master/ha/leadership.h): leading, standing by,
// recovering after an election, and the errors each state answers.
#include "server/master/ha/leadership.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shelf::master {
namespace {

TEST(LeadershipTest, AMasterWithoutEtcdLeadsAtTermOne) {
  Leadership l;
  EXPECT_TRUE(l.leader());
  EXPECT_EQ(l.term(), 1u);
  EXPECT_TRUE(l.Check(/*write=*/true).ok());
}

TEST(LeadershipTest, AStandbyAnswersNotLeaderNamingTheLeaderWhenKnown) {
  Leadership l;
  l.Standby();
  EXPECT_EQ(l.term(), 0u);
  absl::Status s = l.Check(/*write=*/false);
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_EQ(s.message(), "NOT_LEADER: this master is a standby");
  l.SetHint("10.0.0.2:7000");
  EXPECT_EQ(l.Check(false).message(),
            "NOT_LEADER: this master is a standby; the leader is 10.0.0.2:7000");
}

TEST(LeadershipTest, ALeaderIgnoresHints) {
  Leadership l;
  l.SetHint("elsewhere:1");
  EXPECT_EQ(l.hint(), "");
}

TEST(LeadershipTest, ATermRecoversUntilEveryExpectedNodeRegisters) {
  Leadership l;
  l.Standby();
  l.Lead(7, {"a", "b"}, /*recovery_deadline_ms=*/10000);
  EXPECT_EQ(l.term(), 7u);
  EXPECT_TRUE(l.recovering());
  EXPECT_TRUE(l.Check(/*write=*/false).ok());  // lookups answer from what is known
  absl::Status s = l.Check(/*write=*/true);
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_NE(s.message().find("master recovering"), absl::string_view::npos);

  EXPECT_EQ(l.expected(), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(l.EndRecovery(100, /*reported=*/1));
  EXPECT_TRUE(l.recovering());
  EXPECT_TRUE(l.EndRecovery(200, /*reported=*/2));
  EXPECT_FALSE(l.recovering());
  EXPECT_TRUE(l.Check(true).ok());
  EXPECT_FALSE(l.EndRecovery(300, 2));  // ended once
}

TEST(LeadershipTest, RecoveryEndsAtItsDeadlineWhateverIsMissing) {
  Leadership l;
  l.Lead(3, {"a", "b"}, 5000);
  EXPECT_FALSE(l.EndRecovery(4999, /*reported=*/0));
  EXPECT_TRUE(l.EndRecovery(5000, /*reported=*/0));
  EXPECT_FALSE(l.recovering());
}

TEST(LeadershipTest, ATermWithNobodyExpectedDoesNotRecover) {
  Leadership l;
  l.Lead(2, {}, 0);
  EXPECT_FALSE(l.recovering());
  EXPECT_TRUE(l.Check(true).ok());
}

TEST(LeadershipTest, StepDownFencesAtOnce) {
  Leadership l;
  l.Lead(4, {"a"}, 1000);
  EXPECT_TRUE(l.StepDown("10.0.0.3:7000"));
  EXPECT_FALSE(l.leader());
  EXPECT_FALSE(l.recovering());
  EXPECT_EQ(l.Check(false).message(),
            "NOT_LEADER: this master is a standby; the leader is 10.0.0.3:7000");
  EXPECT_FALSE(l.StepDown(""));  // not leading any more
}

TEST(LeadershipTest, ALapsedLeaseServesNothing) {
  Leadership l;
  bool lease = true;
  l.set_lease_check([&] { return lease; });
  EXPECT_TRUE(l.Check(false).ok());
  lease = false;
  absl::Status s = l.Check(false);
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_EQ(s.message().substr(0, 10), "NOT_LEADER");
  EXPECT_TRUE(l.leader());  // still the leader until the election says
}

}  // namespace
}  // namespace shelf::master
