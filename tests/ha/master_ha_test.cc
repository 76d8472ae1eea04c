// MasterHa in-process: two Master + MasterHa pairs campaigning through a
// real etcd (tests/coord/etcd_harness.h), no gRPC and no daemons. One leads,
// the other points callers at it; when the leader's MasterHa stops, the
// other takes over with a larger term and waits for the nodes the first one
// recorded. The process-level failover is tests/ha/ha_failover_test.cc.
#include "server/master/ha/master_ha.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/prom.h"
#include "coord/election.h"
#include "coord/etcd_client.h"
#include "server/master/master.h"
#include "testing/wait_for.h"
#include "tests/coord/etcd_harness.h"

namespace shelf {
namespace {

// Generous: each wait ends as soon as its condition holds; the bound only
// turns a hang into a failure (the CI runs loaded and under ASan).
constexpr uint64_t kWaitMs = 60000;

struct Candidate {
  std::string address;
  std::unique_ptr<prom::Exposition> exposition;  // each master its own metrics
  std::unique_ptr<master::Master> master;
  std::unique_ptr<master::MasterHa> ha;

  v1::StatusResponse Status() const {
    v1::StatusResponse st;
    master->Status(&st);
    return st;
  }
};

class MasterHaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = coord::testing::EtcdProcess::Start();
    if (!etcd.ok() && etcd.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << etcd.status();
    }
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    auto client = coord::EtcdClient::Connect(etcd_->endpoint());
    ASSERT_TRUE(client.ok()) << client.status();
    etcd_client_ = *std::move(client);
  }

  // Built and campaigning, as shelf-master does it after binding.
  std::unique_ptr<Candidate> Start(const std::string& address) {
    auto c = std::make_unique<Candidate>();
    c->address = address;
    c->exposition = std::make_unique<prom::Exposition>();
    master::MasterOptions o;
    o.listen_address = address;
    c->master = std::make_unique<master::Master>(o, c->exposition.get());
    c->master->electable().SetLeaderAddress(address);
    master::MasterHaOptions ho;
    ho.etcd = etcd_->endpoint();
    ho.cluster = kCluster;
    ho.advertise = address;
    ho.election_ttl_ms = 2000;
    // Long enough that a new leader is still recovering when the test
    // looks, unless the nodes it expects have registered.
    ho.recovery_grace_ms = 10 * kWaitMs;
    c->ha = std::make_unique<master::MasterHa>(&c->master->electable(), ho);
    absl::Status s = c->ha->Start();
    EXPECT_TRUE(s.ok()) << s;
    return c;
  }

  static void RegisterNode(master::Master* master, const std::string& id) {
    v1::RegisterStoreRequest req;
    req.set_protocol_version(1);
    req.mutable_endpoint()->set_node_id(id);
    req.mutable_endpoint()->set_data_address(id + ":7100");
    req.mutable_endpoint()->set_host_id(id);
    req.mutable_endpoint()->add_transports(v1::TRANSPORT_TCP);
    req.add_segments()->set_capacity_bytes(1 << 20);
    req.set_incarnation(1);
    v1::RegisterStoreResponse resp;
    absl::Status s = master->RegisterStore(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
  }

  static constexpr char kCluster[] = "mha";
  std::unique_ptr<coord::testing::EtcdProcess> etcd_;
  std::unique_ptr<coord::EtcdClient> etcd_client_;
};

TEST_F(MasterHaTest, OneLeadsTheOtherFollowsAndTakesOverWhenItStops) {
  std::unique_ptr<Candidate> a = Start("10.0.0.1:7000");
  std::unique_ptr<Candidate> b = Start("10.0.0.2:7000");

  // Exactly one leads, and the standby names it (from the leader watch).
  Candidate* leader = nullptr;
  Candidate* standby = nullptr;
  ASSERT_TRUE(WaitFor(
      [&] {
        bool la = a->master->electable().is_leader(), lb = b->master->electable().is_leader();
        if (la == lb) return false;
        leader = la ? a.get() : b.get();
        standby = la ? b.get() : a.get();
        return standby->Status().leader() == leader->address;
      },
      kWaitMs));
  EXPECT_TRUE(leader->master->electable().is_leader());
  EXPECT_FALSE(standby->master->electable().is_leader());
  v1::StatusResponse leader_st = leader->Status();
  v1::StatusResponse standby_st = standby->Status();
  EXPECT_TRUE(leader_st.is_leader());
  EXPECT_EQ(leader_st.leader(), leader->address);
  EXPECT_FALSE(standby_st.is_leader());
  EXPECT_EQ(standby_st.leader(), leader->address);
  // The term is the leader key's, as etcd holds it.
  auto key = coord::LeaderElection::GetLeader(etcd_client_.get(), kCluster);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->address, leader->address);
  const uint64_t first_term = leader_st.term();
  EXPECT_EQ(static_cast<int64_t>(first_term), key->term);
  EXPECT_GT(first_term, 0u);

  // A node that registers with the leader is recorded for the cluster.
  RegisterNode(leader->master.get(), "store-1");
  auto nodes = etcd_client_->GetPrefix(absl::StrCat("/shelf/", kCluster, "/nodes/"));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->kvs.size(), 1u);
  EXPECT_EQ(nodes->kvs[0].key, absl::StrCat("/shelf/", kCluster, "/nodes/store-1"));

  // The leader's MasterHa stops: it steps down at once and the standby
  // takes over with a larger term.
  leader->ha->Stop();
  EXPECT_FALSE(leader->master->electable().is_leader());
  ASSERT_TRUE(WaitFor([&] { return standby->master->electable().is_leader(); }, kWaitMs));
  v1::StatusResponse taken = standby->Status();
  EXPECT_TRUE(taken.is_leader());
  EXPECT_EQ(taken.leader(), standby->address);
  EXPECT_GT(taken.term(), first_term);
  key = coord::LeaderElection::GetLeader(etcd_client_.get(), kCluster);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->address, standby->address);
  EXPECT_EQ(key->term, static_cast<int64_t>(taken.term()));
  // It starts with an empty index and waits for the node the first leader
  // recorded; once that node has re-registered, recovery ends.
  EXPECT_TRUE(taken.recovering());
  RegisterNode(standby->master.get(), "store-1");
  standby->master->Tick();
  EXPECT_FALSE(standby->Status().recovering());
  EXPECT_FALSE(leader->master->electable().is_leader());

  // Stop is idempotent; the destructors stop the other one.
  leader->ha->Stop();
}

TEST(MasterHaStartTest, FailsOnABadEtcdEndpoint) {
  master::MasterOptions o;
  prom::Exposition exposition;
  master::Master master(o, &exposition);
  master::MasterHaOptions ho;
  ho.etcd = "unix:///run/etcd.sock";
  ho.advertise = "10.0.0.1:7000";
  master::MasterHa ha(&master.electable(), ho);
  absl::Status s = ha.Start();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message().substr(0, 8), "--etcd: ") << s;
  ha.Stop();  // no-op: it never campaigned
}

}  // namespace
}  // namespace shelf
