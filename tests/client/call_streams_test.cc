// Call streams (client/call_streams.h, MasterService.Calls) against a real
// shelf-master and shelf-store: the hot calls ride streams the master
// counts, and the streams end with their client; a master that serves
// none (--max-call-streams 0) gets unary calls; a call on a stream to a
// master that stopped answering (SIGSTOP: fault injection) ends at its
// deadline, and the next call after the master resumes succeeds.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "shelf/client.h"
#include "testing/http_probe.h"
#include "testing/local_cluster.h"
#include "testing/raw_peer.h"
#include "testing/test_paths.h"
#include "testing/wait_for.h"

namespace shelf {
namespace {

std::unique_ptr<LocalCluster> StartCluster(std::vector<std::string> master_args = {}) {
  LocalCluster::Options o;
  o.stores = 1;
  o.dram_bytes = 64ull << 20;
  o.bin_dir = TestBinDir();
  o.master_args = {"--metrics-listen", "127.0.0.1:0"};
  o.master_args.insert(o.master_args.end(), master_args.begin(), master_args.end());
  auto c = LocalCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::unique_ptr<Client> OpenClient(const std::string& master, size_t streams = 4) {
  ClientOptions co;
  co.masters = {master};
  co.timeout_ms = 20000;
  co.master_call_streams = streams;
  std::unique_ptr<Client> c;
  Status s = Client::Open(co, &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

double OpenStreams(const LocalCluster& cluster) {
  return MetricValue(HttpGet(cluster.master_metrics_port(), "/metrics"),
                     "shelf_master_call_streams");
}

// Whether process `pid` is stopped (its /proc state 'T'): kill(SIGSTOP)
// returns before the signal has stopped it.
bool Stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'T';
}

// Puts, reads back and looks up `n` keys of `prefix`.
void RoundTrip(Client* client, const std::string& prefix, int n) {
  for (int i = 0; i < n; ++i) {
    const std::string key = prefix + std::to_string(i);
    const std::string value(4096 + i, static_cast<char>('a' + i % 26));
    ASSERT_TRUE(client->Put(key, value.data(), value.size()).ok()) << key;
    std::string got;
    ASSERT_TRUE(client->Get(key, &got).ok()) << key;
    EXPECT_EQ(got, value);
  }
  std::vector<bool> present;
  ASSERT_TRUE(client->Exists({prefix + "0", prefix + "absent"}, &present).ok());
  EXPECT_EQ(present, (std::vector<bool>{true, false}));
}

TEST(CallStreamsTest, HotCallsRideStreamsThatEndWithTheirClient) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  ASSERT_NE(cluster->master_metrics_port(), 0);
  auto client = OpenClient(cluster->master_address());
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(OpenStreams(*cluster), 0);
  RoundTrip(client.get(), "streamed/", 8);
  // One call at a time here: one stream carried them all.
  EXPECT_EQ(OpenStreams(*cluster), 1);
  client.reset();
  EXPECT_TRUE(WaitFor([&] { return OpenStreams(*cluster) == 0; }, 10000))
      << "the master still holds " << OpenStreams(*cluster) << " streams of a closed client";
}

TEST(CallStreamsTest, AMasterServingNoStreamsGetsUnaryCalls) {
  auto cluster = StartCluster({"--max-call-streams", "0"});
  ASSERT_NE(cluster, nullptr);
  auto client = OpenClient(cluster->master_address());
  ASSERT_NE(client, nullptr);
  RoundTrip(client.get(), "unary/", 4);
  EXPECT_EQ(OpenStreams(*cluster), 0);
  // So does a client that keeps none, from a master that serves them.
  auto streamed = StartCluster();
  ASSERT_NE(streamed, nullptr);
  auto unary = OpenClient(streamed->master_address(), /*streams=*/0);
  ASSERT_NE(unary, nullptr);
  RoundTrip(unary.get(), "unary/", 4);
  EXPECT_EQ(OpenStreams(*streamed), 0);
}

TEST(CallStreamsTest, ACallToAStalledMasterEndsAtItsDeadline) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto client = OpenClient(cluster->master_address());
  ASSERT_NE(client, nullptr);
  RoundTrip(client.get(), "stall/", 2);  // the stream is open, idle
  ASSERT_EQ(OpenStreams(*cluster), 1);
  cluster->master_process()->Signal(SIGSTOP);
  ASSERT_TRUE(WaitFor([&] { return Stopped(cluster->master_process()->pid()); }, 10000));
  std::vector<bool> present;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = client->Exists({"stall/0"}, &present, Deadline(300));
  const auto took = std::chrono::steady_clock::now() - t0;
  cluster->master_process()->Signal(SIGCONT);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  // Bounded by the deadline, not by the master's return (a liveness
  // bound: the call must not wait for the SIGCONT above).
  EXPECT_LT(took, std::chrono::seconds(10));
  // The stream it was on is gone; the next call opens another.
  ASSERT_TRUE(client->Exists({"stall/0"}, &present).ok());
  EXPECT_EQ(present, std::vector<bool>{true});
}

TEST(CallStreamsTest, OptionsBoundTheStreams) {
  ClientOptions co;
  co.masters = {"127.0.0.1:1"};
  co.master_call_streams = 65;
  std::unique_ptr<Client> c;
  Status s = Client::Open(co, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("master_call_streams"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shelf
