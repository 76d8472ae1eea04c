// The parts of coord/ that need no etcd: endpoint parsing, prefix ranges,
// key names and argument checks (none of which may touch the network).
#include <gtest/gtest.h>

#include <string>

#include "coord/election.h"
#include "coord/etcd_client.h"

namespace shelf::coord {
namespace {

TEST(ParseEtcdEndpointsTest, AcceptsPlainAndHttpLists) {
  auto one = ParseEtcdEndpoints("127.0.0.1:2379");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<std::string>{"127.0.0.1:2379"});

  auto many = ParseEtcdEndpoints(" http://10.0.0.1:2379/, etcd-2.local:2379,,[::1]:2380 ");
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(*many, (std::vector<std::string>{"10.0.0.1:2379", "etcd-2.local:2379", "[::1]:2380"}));
}

TEST(ParseEtcdEndpointsTest, RejectsWhatItCannotUse) {
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEtcdEndpoints("").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEtcdEndpoints(" , ").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEtcdEndpoints("127.0.0.1").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEtcdEndpoints("127.0.0.1:99999").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEtcdEndpoints("unix:///run/etcd.sock").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEtcdEndpoints("http://h:1/v3").status()));
  // TLS or not, for every endpoint alike.
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEtcdEndpoints("https://h:1,http://h:2").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEtcdEndpoints("https://h:1,h:2").status()));
}

TEST(ParseEtcdEndpointsTest, HttpsTurnsTlsOn) {
  bool tls = false;
  auto both = ParseEtcdEndpoints("https://10.0.0.1:2379, https://10.0.0.2:2379", &tls);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(tls);
  EXPECT_EQ(*both, (std::vector<std::string>{"10.0.0.1:2379", "10.0.0.2:2379"}));
  ASSERT_TRUE(ParseEtcdEndpoints("http://10.0.0.1:2379", &tls).ok());
  EXPECT_FALSE(tls);
}

TEST(EtcdConnectTest, RefusesSecurityFilesItCannotUse) {
  // A client certificate without its key, or without TLS.
  EtcdOptions half;
  half.tls_ca_file = "/nonexistent-ca.pem";
  half.tls_cert_file = "/nonexistent.pem";
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Connect("h:1", half).status()));
  EtcdOptions plain;
  plain.tls_cert_file = "/nonexistent.pem";
  plain.tls_key_file = "/nonexistent.key";
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Connect("h:1", plain).status()));
  EtcdOptions missing;
  missing.user_file = "/nonexistent-etcd-user";
  EXPECT_FALSE(EtcdClient::Connect("h:1", missing).ok());
}

TEST(PrefixRangeEndTest, IncrementsTheLastByteThatCan) {
  EXPECT_EQ(PrefixRangeEnd("/shelf/"), "/shelf0");
  EXPECT_EQ(PrefixRangeEnd("a"), "b");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixRangeEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
  EXPECT_EQ(PrefixRangeEnd(""), std::string(1, '\0'));
}

TEST(EtcdClientArgsTest, RejectsBadArgumentsWithoutIo) {
  EtcdOptions bad;
  bad.attempts_max = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Connect("127.0.0.1:1", bad).status()));

  // Port 1 on loopback: any call that did reach the network would fail with
  // UNAVAILABLE, not INVALID_ARGUMENT.
  auto client = EtcdClient::Connect("127.0.0.1:1");
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*client)->LeaseGrant(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument((*client)->Watch("/k", WatchOptions()).status()));
  WatchOptions negative;
  negative.start_revision = -1;
  negative.on_events = [](const std::vector<WatchEvent>&, int64_t) {};
  EXPECT_TRUE(absl::IsInvalidArgument((*client)->Watch("/k", negative).status()));
  Lease lease;
  lease.id = 7;
  lease.ttl_s = 2;
  EXPECT_TRUE(absl::IsInvalidArgument((*client)->KeepAlive(lease, KeepAliveCallbacks()).status()));
  KeepAliveCallbacks callbacks;
  callbacks.on_lost = [](const absl::Status&) {};
  EXPECT_TRUE(absl::IsInvalidArgument((*client)->KeepAlive(Lease(), callbacks).status()));
}

TEST(LeaderElectionTest, LeaderKeyLayout) {
  EXPECT_EQ(LeaderElection::LeaderKey("c1"), "/shelf/c1/leader");
  EXPECT_EQ(LeaderElection::LeaderKey("prod-a", "/x"), "/x/prod-a/leader");
}

TEST(LeaderElectionTest, ValidatesOptionsBeforeCampaigning) {
  auto client = EtcdClient::Connect("127.0.0.1:1");
  ASSERT_TRUE(client.ok());
  auto options = [] {
    ElectionOptions o;
    o.cluster = "c1";
    o.address = "10.0.0.5:7000";
    o.on_elected = [](int64_t) {};
    o.on_lost = [] {};
    return o;
  };
  {
    ElectionOptions o = options();
    o.cluster = "a/b";
    LeaderElection e(client->get(), o);
    EXPECT_TRUE(absl::IsInvalidArgument(e.Start()));
  }
  {
    ElectionOptions o = options();
    o.cluster = "";
    LeaderElection e(client->get(), o);
    EXPECT_TRUE(absl::IsInvalidArgument(e.Start()));
  }
  {
    ElectionOptions o = options();
    o.address = "";
    LeaderElection e(client->get(), o);
    EXPECT_TRUE(absl::IsInvalidArgument(e.Start()));
  }
  {
    ElectionOptions o = options();
    o.lease_ttl_s = 0;
    LeaderElection e(client->get(), o);
    EXPECT_TRUE(absl::IsInvalidArgument(e.Start()));
  }
  {
    ElectionOptions o = options();
    o.on_lost = nullptr;
    LeaderElection e(client->get(), o);
    EXPECT_TRUE(absl::IsInvalidArgument(e.Start()));
  }
  {
    // Valid options start a campaign that keeps retrying; Stop() ends it
    // promptly and a second Start() while running is refused.
    LeaderElection e(client->get(), options());
    ASSERT_TRUE(e.Start().ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(e.Start()));
    EXPECT_FALSE(e.is_leader());
    EXPECT_EQ(e.term(), 0);
    e.Stop();
    EXPECT_TRUE(e.Start().ok());
  }
  EXPECT_TRUE(absl::IsInvalidArgument(LeaderElection::GetLeader(client->get(), "a b").status()));
}

}  // namespace
}  // namespace shelf::coord
