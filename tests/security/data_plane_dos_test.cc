// Denial of service on the data plane, against a real shelf-store: a
// slowloris attack (200 connections from ten source addresses, each
// trickling a byte at a time and reconnecting when closed) on a store with
// --max-connections 64. Real clients still connect and are served during
// the attack, and once it stops reconnecting, every connection it holds is
// closed at the handshake deadline. The store's
// shelf_store_data_connections_closed_total says which rule closed what.
//
// The intervals are short (--handshake-timeout-ms 1500, a byte every 200 ms)
// so the test takes seconds; nothing here asserts a duration.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/net.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/http_probe.h"
#include "testing/local_cluster.h"
#include "testing/raw_peer.h"
#include "testing/wait_for.h"
#include "transport/tcp_client.h"

namespace shelf {
namespace {

constexpr char kSecret[] = "dos-test-secret-0123456789abcdef";
constexpr int kAttackers = 200;
constexpr int kSources = 10;  // 127.0.0.10 .. 127.0.0.19

// shelf_store_data_connections_closed_total{rule="<rule>"} from /metrics.
double ClosedBy(const std::string& metrics, const std::string& rule) {
  return MetricValue(
      metrics, absl::StrCat("shelf_store_data_connections_closed_total{rule=\"", rule, "\"}"));
}

// Half the attack comes from 127.0.0.10 (the per-source cap), the rest
// from nine more addresses (the cap on all connections in their handshake).
int SourceOf(int attacker) {
  return attacker < kAttackers / 2 ? 10 : 11 + attacker % (kSources - 1);
}

class DataPlaneDosTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.stores = 1;
    o.dram_bytes = 32ull << 20;
    o.secret = kSecret;
    // Half the attack comes from one source: without a share of its own
    // (DataPlaneShareTest takes that), the handshake caps are what holds.
    o.store_args = {"--max-connections",
                    "64",
                    "--max-connections-per-source",
                    "64",
                    "--handshake-timeout-ms",
                    "1500",
                    "--metrics-listen",
                    "127.0.0.1:0"};
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.allow_shm = false;  // the TCP data plane is what is attacked
    return co;
  }
  // Its real port, from the ready file: --metrics-listen asks for any.
  uint16_t metrics_port() const { return cluster_->store_metrics_port(0); }
};

TEST_F(DataPlaneDosTest, SlowlorisNeitherStarvesClientsNorHoldsItsSlots) {
  uint16_t port = 0;
  {
    absl::StatusOr<HostPort> hp = ParseHostPort(cluster_->store_address(0));
    ASSERT_TRUE(hp.ok());
    port = hp->port;
  }
  // The attack: every 200 ms each connection sends one more byte of an
  // AUTH header it never finishes; a closed one reconnects while
  // `reconnect` holds.
  std::vector<int> fds(kAttackers, -1);
  std::atomic<bool> reconnect{true}, stop{false};
  std::atomic<int> open{0}, closes{0}, connects{0};
  std::thread attacker([&] {
    while (!stop.load()) {
      int live = 0;
      for (int i = 0; i < kAttackers; ++i) {
        if (fds[i] >= 0 && PeerClosed(fds[i])) {
          close(fds[i]);
          fds[i] = -1;
          closes.fetch_add(1);
        }
        if (fds[i] < 0 && reconnect.load()) {
          fds[i] = ConnectFrom(SourceOf(i), port);
          if (fds[i] >= 0) connects.fetch_add(1);
        }
        if (fds[i] < 0) continue;
        ++live;
        char byte = 'S';
        if (send(fds[i], &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN) {
          close(fds[i]);
          fds[i] = -1;
          closes.fetch_add(1);
          --live;
        }
      }
      open.store(live);
      usleep(200 * 1000);
    }
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
    }
  });
  // Wait for the attack to be at full strength before a client comes.
  for (int i = 0; i < 600 && connects.load() < kAttackers; ++i) usleep(50 * 1000);
  ASSERT_GE(connects.load(), kAttackers);

  // Real clients, each with fresh connections, during the attack: each
  // call once, with no retry but the library's own. A burst of more new
  // connections than the cap on handshakes, within one real client's
  // handshake, can evict it too (the oldest goes), and its call fails
  // UNAVAILABLE. What holds (docs/security.md, "Denial of service"): at
  // least 90% of real clients' calls succeed at their first try while the
  // attack runs (here about 39 of 40 do), and no call gets anything but
  // its bytes or UNAVAILABLE.
  std::string block(256 << 10, 'q');
  constexpr int kRealCalls = 60;
  int served = 0;
  for (int round = 0; round < kRealCalls; ++round) {
    std::string key = absl::StrCat("during-attack-", round);
    std::unique_ptr<Client> client = OpenClient(DefaultClientOptions());
    ASSERT_NE(client, nullptr);
    Status put = client->Put(key, block.data(), block.size());
    std::string got;
    Status get = put.ok() ? client->Get(key, &got) : put;
    if (put.ok() && get.ok() && got == block) {
      ++served;
      continue;
    }
    // What the attack may cost is a refused or closed connection, nothing
    // else (no wrong bytes, no other error).
    ASSERT_TRUE(put.code() == StatusCode::kUnavailable || get.code() == StatusCode::kUnavailable)
        << put.ToString() << " / " << get.ToString();
  }
  std::printf("real clients' put+get pairs served during the attack: %d of %d\n", served,
              kRealCalls);
  EXPECT_GE(served * 100, 90 * kRealCalls) << served << " of " << kRealCalls;
  EXPECT_TRUE(reconnect.load());
  std::printf("attack while clients were served: %d connects, %d closed by the store\n",
              connects.load(), closes.load());

  // The attack stops reconnecting: what it still holds must be closed by
  // the store's handshake deadline, however it trickles.
  reconnect.store(false);
  usleep(300 * 1000);
  const int held = open.load();
  for (int i = 0; i < 600 && open.load() > 0; ++i) usleep(50 * 1000);
  EXPECT_EQ(open.load(), 0) << "trickling connections outlived the handshake deadline";
  stop.store(true);
  attacker.join();

  std::string metrics = HttpGet(metrics_port(), "/metrics");
  const double deadline = ClosedBy(metrics, "handshake_deadline");
  const double per_source = ClosedBy(metrics, "per_source_cap");
  const double cap = ClosedBy(metrics, "unauthenticated_cap");
  const double limit = ClosedBy(metrics, "max_connections");
  std::printf(
      "held when the attack stopped: %d; closed by rule: handshake_deadline %.0f, "
      "per_source_cap %.0f, unauthenticated_cap %.0f, max_connections %.0f\n",
      held, deadline, per_source, cap, limit);
  EXPECT_GE(deadline, 1);
  EXPECT_GE(per_source, 1);
  EXPECT_GE(cap, 1);
  EXPECT_GE(deadline + per_source + cap + limit, kAttackers);

  // And the store still serves: a block put after the attack reads back.
  // (A block put during it may be missing: its call may be one of the 10%
  // the attack is allowed to refuse.)
  std::string got;
  ASSERT_TRUE(client_->Put("after-attack", block.data(), block.size()).ok());
  ASSERT_TRUE(client_->Get("after-attack", &got).ok());
  EXPECT_EQ(got, block);
}

// The attack of held connections: a holder of the cluster secret opens
// every connection --max-connections allows, authenticates each and then
// sends nothing. New clients are refused at accept for as long as they
// are held, unless the store closes idle ones: with --idle-timeout 1s a
// real client's put goes through once a second has passed.
//
// One small store on the cluster secret, its data plane reached over TCP
// alone, with the flags StoreArgs() adds.
class OneStoreDataPlaneTest : public ClusterFixture {
 protected:
  static constexpr int kMaxConnections = 8;
  virtual std::vector<std::string> StoreArgs() const = 0;
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.stores = 1;
    o.dram_bytes = 32ull << 20;
    o.secret = kSecret;
    o.store_args = {"--max-connections", std::to_string(kMaxConnections), "--metrics-listen",
                    "127.0.0.1:0"};
    for (const std::string& a : StoreArgs()) o.store_args.push_back(a);
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.allow_shm = false;
    return co;
  }
};

class DataPlaneIdleTest : public OneStoreDataPlaneTest {
 protected:
  // Every connection of this test comes from 127.0.0.1: its share is
  // all of them (DataPlaneShareTest below takes the share itself).
  std::vector<std::string> StoreArgs() const override {
    return {"--max-connections-per-source", std::to_string(kMaxConnections), "--idle-timeout",
            "1s"};
  }
};

TEST_F(DataPlaneIdleTest, HeldIdleConnectionsLockNewClientsOutOnlyUntilTheIdleTimeout) {
  const std::string store = cluster_->store_address(0);
  // Each held connection is a client of its own that pinged once (an
  // authenticated connection, back in its pool) and stays idle.
  std::vector<std::unique_ptr<transport::TcpDataClient>> held;
  for (int i = 0; i < kMaxConnections; ++i) {
    transport::TcpDataClient::Options o;
    o.secret = kSecret;
    held.push_back(std::make_unique<transport::TcpDataClient>(o));
    ASSERT_TRUE(held.back()->Ping(store, MonoMs() + 5000).ok()) << i;
  }
  // A real client gets through within a few idle timeouts (it retries as
  // an engine would; a refused connection fails fast).
  const std::string value(64 << 10, 'v');
  const uint64_t give_up = MonoMs() + 20000;
  Status put;
  int tries = 0;
  do {
    ++tries;
    put = client_->Put("after-idle", value.data(), value.size());
    if (!put.ok()) usleep(100 * 1000);
  } while (!put.ok() && MonoMs() < give_up);
  ASSERT_TRUE(put.ok()) << put.ToString() << " after " << tries << " tries";
  std::string back;
  ASSERT_TRUE(client_->Get("after-idle", &back).ok());
  EXPECT_TRUE(back == value);
  // The first closure let the put in; the others follow within the same
  // idle timeout, each on its own connection's clock (a loaded machine
  // may take a moment longer to count them all).
  double idle = 0;
  EXPECT_TRUE(WaitFor(
      [&] {
        idle = ClosedBy(HttpGet(cluster_->store_metrics_port(0), "/metrics"), "idle");
        return idle >= kMaxConnections;
      },
      10000))
      << "closed as idle: " << idle;
  std::printf("closed as idle: %.0f; the real client's put took %d tries\n", idle, tries);
}

// The same attack without waiting for the idle timeout: one host (here
// 127.0.0.1) holds every authenticated connection it can get. It gets its
// share (half of --max-connections by default), and a client on another
// host (127.0.0.2) is still admitted.
class DataPlaneShareTest : public OneStoreDataPlaneTest {
 protected:
  std::vector<std::string> StoreArgs() const override { return {"--idle-timeout", "10m"}; }
};

TEST_F(DataPlaneShareTest, OneHostHoldingItsShareLeavesTheOtherHalfToOtherHosts) {
  const std::string store = cluster_->store_address(0);
  auto hp = ParseHostPort(store);
  ASSERT_TRUE(hp.ok());
  std::vector<std::unique_ptr<transport::TcpDataClient>> held;
  int refused = 0;
  for (int i = 0; i < kMaxConnections; ++i) {
    transport::TcpDataClient::Options o;
    o.secret = kSecret;
    held.push_back(std::make_unique<transport::TcpDataClient>(o));
    if (!held.back()->Ping(store, MonoMs() + 5000).ok()) ++refused;
  }
  EXPECT_EQ(refused, kMaxConnections / 2);
  // Another host connects: admitted (its handshake is pending, so the
  // store keeps it open), not closed at accept.
  int other = ConnectFrom(2, hp->port);
  ASSERT_GE(other, 0);
  usleep(500 * 1000);
  EXPECT_FALSE(PeerClosed(other));
  close(other);
  const double share =
      ClosedBy(HttpGet(cluster_->store_metrics_port(0), "/metrics"), "source_share");
  EXPECT_GE(share, kMaxConnections / 2);
}

}  // namespace
}  // namespace shelf
