// How the client moves between masters, against in-process fake masters:
// an unreachable one is skipped at once, a standby's NOT_LEADER moves the
// call on, and while a leader change is under way the call retries until
// its deadline instead of failing at once.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "common/clock.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"

namespace shelf {
namespace {

// Answers MatchPrefix: NOT_LEADER for the first `refusals` calls, then
// `matched` (a leader), or NOT_LEADER forever when refusals < 0.
class FakeMaster final : public v1::MasterService::Service {
 public:
  FakeMaster(int refusals, uint32_t matched) : refusals_(refusals), matched_(matched) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~FakeMaster() override { server_->Shutdown(); }

  grpc::Status MatchPrefix(grpc::ServerContext*, const v1::MatchPrefixRequest*,
                           v1::MatchPrefixResponse* resp) override {
    int n = calls_.fetch_add(1);
    if (refusals_ < 0 || n < refusals_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "NOT_LEADER: this master is a standby");
    }
    resp->set_matched(matched_);
    return grpc::Status::OK;
  }

  const std::string& address() const { return address_; }
  int calls() const { return calls_.load(); }

 private:
  const int refusals_;
  const uint32_t matched_;
  std::atomic<int> calls_{0};
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

std::unique_ptr<Client> Open(const std::vector<std::string>& masters) {
  ClientOptions o;
  o.masters = masters;
  std::unique_ptr<Client> c;
  EXPECT_TRUE(Client::Open(o, &c).ok());
  return c;
}

TEST(MasterFailoverTest, StandbyAnswersMoveTheCallToTheLeader) {
  FakeMaster standby(-1, 0), leader(0, 3);
  std::unique_ptr<Client> c = Open({standby.address(), leader.address()});
  size_t matched = 0;
  Status s = c->MatchPrefix({"a", "b", "c"}, &matched, 5000);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(matched, 3u);
  // The client stays with the leader it found.
  ASSERT_TRUE(c->MatchPrefix({"a", "b", "c"}, &matched, 5000).ok());
  EXPECT_EQ(standby.calls(), 1);
  EXPECT_EQ(leader.calls(), 2);
}

TEST(MasterFailoverTest, ALeaderChangeIsWaitedOutWithinTheDeadline) {
  // The only master refuses three times (an election in progress), then leads.
  FakeMaster m(3, 2);
  std::unique_ptr<Client> c = Open({m.address()});
  size_t matched = 0;
  Status s = c->MatchPrefix({"a", "b"}, &matched, 5000);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(matched, 2u);
  EXPECT_EQ(m.calls(), 4);
}

TEST(MasterFailoverTest, NoLeaderUntilTheDeadlineIsUnavailableAtTheDeadline) {
  FakeMaster m(-1, 0);
  std::unique_ptr<Client> c = Open({m.address()});
  size_t matched = 0;
  uint64_t t0 = MonoMs();
  Status s = c->MatchPrefix({"a"}, &matched, 400);
  uint64_t took = MonoMs() - t0;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("NOT_LEADER"), std::string::npos) << s.ToString();
  EXPECT_GE(took, 150u) << "gave up long before the deadline";
  EXPECT_LE(took, 2000u);
  EXPECT_GE(m.calls(), 3);
}

TEST(MasterFailoverTest, UnreachableMastersFailAtOnce) {
  std::unique_ptr<Client> c = Open({"127.0.0.1:1", "127.0.0.1:2"});
  size_t matched = 0;
  uint64_t t0 = MonoMs();
  Status s = c->MatchPrefix({"a"}, &matched, 10000);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_LT(MonoMs() - t0, 5000u) << "a cache that is down must not stall the caller";
}

}  // namespace
}  // namespace shelf
