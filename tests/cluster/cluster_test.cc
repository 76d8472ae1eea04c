// End-to-end tests across real processes: a shelf-master and shelf-store
// daemons on loopback ports they pick, driven through libshelf, shelfctl
// and raw data-plane frames.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/net.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/local_cluster.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (size_t i = n & ~size_t{7}; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

class ClusterTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.dram_bytes = 192ull << 20;  // room for the 64 MiB block
    return o;
  }
};

TEST_F(ClusterTest, PutGetRoundTripsAllSizes) {
  for (size_t size : {size_t{1}, size_t{4} << 10, size_t{4} << 20, size_t{64} << 20}) {
    std::string key = "block-" + std::to_string(size);
    std::string data = RandomBytes(size, static_cast<uint32_t>(size));
    Status s = client_->Put(key, data.data(), data.size());
    ASSERT_TRUE(s.ok()) << size << ": " << s.ToString();
    std::string got;
    s = client_->Get(key, &got);
    ASSERT_TRUE(s.ok()) << size << ": " << s.ToString();
    EXPECT_TRUE(got == data) << "bytes differ for size " << size;
  }
}

TEST_F(ClusterTest, ClientExposesItsOwnMetrics) {
  std::string data = RandomBytes(8192, 9);
  ASSERT_TRUE(client_->Put("m0", data.data(), data.size()).ok());
  std::string got;
  ASSERT_TRUE(client_->Get("m0", &got).ok());
  EXPECT_EQ(client_->Get("m-missing", &got).code(), StatusCode::kNotFound);
  size_t matched = 0;
  ASSERT_TRUE(client_->MatchPrefix({"m0", "m-missing", "m0"}, &matched).ok());
  EXPECT_EQ(matched, 1u);
  std::string text = client_->MetricsText();
  EXPECT_NE(text.find("shelf_client_ops_total{op=\"get\",result=\"ok\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("shelf_client_ops_total{op=\"get\",result=\"miss\"} 1"), std::string::npos);
  EXPECT_NE(text.find("shelf_client_ops_total{op=\"put\",result=\"ok\"} 1"), std::string::npos);
  EXPECT_NE(text.find("shelf_client_prefix_lookups_total 3"), std::string::npos) << text;
  EXPECT_NE(text.find("shelf_client_prefix_hits_total 1"), std::string::npos);
  EXPECT_NE(text.find("shelf_client_bytes_total{direction=\"load\",transport=\"shm\"} 8192"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("shelf_client_op_seconds_bucket{op=\"get\""), std::string::npos);
}

TEST_F(ClusterTest, TcpOnlyClientReadsTheSameBytes) {
  ClientOptions co;
  co.masters = {cluster_->master_address()};
  co.allow_shm = false;
  std::unique_ptr<Client> tcp;
  ASSERT_TRUE(Client::Open(co, &tcp).ok());
  std::string data = RandomBytes(3 << 20, 7);
  ASSERT_TRUE(tcp->Put("tcp-block", data.data(), data.size()).ok());
  std::string got;
  ASSERT_TRUE(tcp->Get("tcp-block", &got).ok());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(tcp->stats().bytes_loaded_shm, 0u);
  EXPECT_EQ(tcp->stats().bytes_loaded_tcp, data.size());
  // The shared-memory client sees what the TCP client wrote.
  ASSERT_TRUE(client_->Get("tcp-block", &got).ok());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(client_->stats().bytes_loaded_shm, data.size());
}

TEST_F(ClusterTest, BadInputGetsClearErrors) {
  std::string got;
  EXPECT_EQ(client_->Put("", "x", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Put(std::string(257, 'k'), "x", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(client_->Put(std::string(256, 'k'), "x", 1).ok());
  EXPECT_EQ(client_->Get("", &got).code(), StatusCode::kInvalidArgument);
  Status s = client_->Get("never-written", &got);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_EQ(client_->Put("zero", "x", 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Remove("never-written").code(), StatusCode::kNotFound);
  size_t matched = 99;
  ASSERT_TRUE(client_->MatchPrefix({"never-written"}, &matched).ok());
  EXPECT_EQ(matched, 0u);
  std::vector<std::string> many(1025, "k");
  EXPECT_EQ(client_->MatchPrefix(many, &matched).code(), StatusCode::kInvalidArgument);
  char small[4];
  size_t size = 0;
  ASSERT_TRUE(client_->Put("eight", "12345678", 8).ok());
  EXPECT_EQ(client_->GetInto("eight", small, sizeof(small), &size).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(size, 8u);
  client_->Close();
  EXPECT_EQ(client_->Get("eight", &got).code(), StatusCode::kFailedPrecondition);
}

TEST_F(ClusterTest, StoreRejectsRangesOutsideItsSegmentAndUngrantedWrites) {
  // A store's data plane, spoken to directly: reads outside the segment are
  // OUT_OF_RANGE; writes need a valid grant; nothing crashes.
  transport::TcpDataClient raw(transport::TcpDataClient::Options{});
  const std::string& store = cluster_->store_address(0);
  std::vector<char> buf(4096);
  uint64_t deadline = MonoMs() + 5000;
  absl::Status s = raw.Read(store, 0, (192ull << 20) - 100, 4096, buf.data(), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  s = raw.Read(store, 0, ~0ull - 10, 4096, buf.data(), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  s = raw.Read(store, 7, 0, 16, buf.data(), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  transport::wire::Grant forged;
  forged.put_id = 1;
  forged.length = 4096;
  forged.expires_unix_ms = ~0ull;
  forged.mac = std::string(32, 'x');
  s = raw.Write(store, forged, 0, 0, buf.data(), 4096, deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // The store still serves.
  EXPECT_TRUE(raw.Ping(store, MonoMs() + 5000).ok());
  std::string data = RandomBytes(1000, 3);
  ASSERT_TRUE(client_->Put("after", data.data(), data.size()).ok());
  std::string got;
  ASSERT_TRUE(client_->Get("after", &got).ok());
  EXPECT_TRUE(got == data);
}

TEST_F(ClusterTest, GarbageOnTheDataPlaneClosesTheConnectionOnly) {
  absl::StatusOr<HostPort> hp = ParseHostPort(cluster_->store_address(0));
  ASSERT_TRUE(hp.ok());
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<int> fd = TcpConnect(*hp, 2000);
    ASSERT_TRUE(fd.ok());
    SetIoTimeoutMs(*fd, 2000);
    char hello[transport::wire::kHeaderBytes + transport::wire::kNonceBytes];
    ASSERT_TRUE(ReadFull(*fd, hello, sizeof(hello)).ok());
    std::string junk = RandomBytes(size_t{4096} * (round + 1), 100 + round);
    WriteFull(*fd, junk.data(), junk.size()).IgnoreError();
    char c;
    // The store hangs up (auth fails or the frame is rejected).
    EXPECT_LE(recv(*fd, &c, 1, 0), 0);
    close(*fd);
  }
  EXPECT_TRUE(transport::TcpDataClient(transport::TcpDataClient::Options{})
                  .Ping(cluster_->store_address(0), MonoMs() + 5000)
                  .ok());
}

// A second master started on the port of a running one refuses to start,
// rather than binding beside it and taking half its connections (gRPC's
// default SO_REUSEPORT); the running master keeps serving.
TEST_F(ClusterTest, AMasterOnAPortInUseRefusesToStart) {
  const std::string log = cluster_->work_dir() + "/second-master.log";
  auto second = Process::Spawn(
      {cluster_->bin_dir() + "/shelf-master", "--listen", cluster_->master_address()}, log);
  ASSERT_TRUE(second.ok()) << second.status();
  const int status = (*second)->Wait(30000);
  ASSERT_NE(status, -1) << "the second master is still running";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  std::ifstream f(log);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("cannot listen on " + cluster_->master_address()), std::string::npos) << text;
  const std::string data = RandomBytes(4096, 12);
  ASSERT_TRUE(client_->Put("after-second", data.data(), data.size()).ok());
  std::string got;
  ASSERT_TRUE(client_->Get("after-second", &got).ok());
  EXPECT_TRUE(got == data);
}

TEST_F(ClusterTest, ShelfctlRoundTripsAFileAndReportsStatus) {
  std::string dir = cluster_->work_dir();
  std::string in = dir + "/in.bin", out = dir + "/out.bin";
  std::string data = RandomBytes(4 << 20, 11);
  std::ofstream(in, std::ios::binary) << data;
  std::string text;
  ASSERT_EQ(cluster_->Shelfctl({"put", "file-key", in}, &text), 0) << text;
  ASSERT_EQ(cluster_->Shelfctl({"get", "file-key", out}, &text), 0) << text;
  std::ifstream f(out, std::ios::binary);
  std::string back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(back == data);
  ASSERT_EQ(cluster_->Shelfctl({"status", "--json"}, &text), 0);
  const Json status = JsonParse(text);
  ASSERT_TRUE(status.is_object()) << text;
  ASSERT_TRUE(status["nodes"].is_array()) << text;
  bool live = false, listed = false;
  for (const Json& n : status["nodes"]) {
    live |= n["state"] == "live";
    listed |= n["address"] == cluster_->store_address(1);
  }
  EXPECT_TRUE(live) << text;
  EXPECT_TRUE(listed) << text;
  // locate: the one store holding file-key has a run of 1 (of 2 keys).
  ASSERT_EQ(cluster_->Shelfctl({"locate", "file-key", "missing-key", "--json"}, &text), 0) << text;
  const Json where = JsonParse(text);
  ASSERT_TRUE(where.is_object()) << text;
  EXPECT_EQ(where["keys"], 2) << text;
  EXPECT_EQ(where["cluster_blocks"], 1) << text;
  ASSERT_EQ(where["nodes"].size(), 1u) << text;
  EXPECT_EQ(where["nodes"][0]["blocks"], 1) << text;
  EXPECT_EQ(where["nodes"][0]["tiers"][0], "dram") << text;
  ASSERT_EQ(cluster_->Shelfctl({"locate", "file-key"}, &text), 0) << text;
  EXPECT_NE(text.find("BLOCKS"), std::string::npos) << text;
  EXPECT_EQ(cluster_->Shelfctl({"locate"}, &text), 2);
  EXPECT_EQ(cluster_->Shelfctl({"get", "missing-key", out}, &text), 3);
  EXPECT_EQ(cluster_->Shelfctl({"rm", "file-key"}, &text), 0);
  EXPECT_EQ(cluster_->Shelfctl({"stat", "file-key"}, &text), 3);
  EXPECT_EQ(cluster_->Shelfctl({"frobnicate"}, &text), 2);
}

TEST_F(ClusterTest, ReplicasSurviveAStoreKilledWithSigkill) {
  // Three stores, two replicas of every block.
  ASSERT_TRUE(cluster_->AddStore().ok());
  std::vector<std::string> keys;
  PutOptions po;
  po.replicas = 2;
  for (int i = 0; i < 20; ++i) {
    std::string data = RandomBytes(64 << 10, 500 + i);
    keys.push_back("rep-" + std::to_string(i));
    ASSERT_TRUE(client_->Put(keys.back(), data.data(), data.size(), po).ok());
  }
  cluster_->KillStore(0);
  for (int i = 0; i < 20; ++i) {
    std::string got;
    Status s = client_->Get(keys[i], &got);
    ASSERT_TRUE(s.ok()) << keys[i] << ": " << s.ToString();
    EXPECT_TRUE(got == RandomBytes(64 << 10, 500 + i));
  }
  // The master declares the node dead within its TTL (3 s) plus a tick.
  uint64_t t0 = MonoMs();
  ASSERT_TRUE(cluster_->WaitForLiveNodes(2, 6000).ok());
  std::printf("store declared dead %llu ms after the kill\n",
              static_cast<unsigned long long>(MonoMs() - t0));
  std::string text;
  ASSERT_EQ(cluster_->Shelfctl({"nodes", "--json"}, &text), 0);
  bool dead = false;
  for (const Json& n : JsonParse(text)) dead |= n["state"] == "dead";
  EXPECT_TRUE(dead) << text;
}

}  // namespace
}  // namespace shelf
