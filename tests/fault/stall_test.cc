// A store frozen with SIGSTOP (a stuck process, a long GC-like pause, a
// swapped-out host) and thawed with SIGCONT: every call keeps its deadline,
// no wrong byte is returned, the frozen replica is avoided (shared memory,
// or once the master has declared it dead) or times out, and the store
// rejoins the cluster after it wakes up.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/fault/fault_util.h"

namespace shelf {
namespace {

using fault::BlockBytes;

constexpr int kBlocks = 30;
constexpr size_t kBlockBytes = 64 << 10;
constexpr uint64_t kDeadlineMs = 1500;
constexpr uint64_t kSlackMs = 1500;  // scheduling on a loaded machine

struct Round {
  int ok = 0, failed = 0, wrong = 0;
  uint64_t slowest_ms = 0;
  std::string first_error;
};

Round ReadAll(Client* client, const std::string& prefix) {
  Round r;
  for (int i = 0; i < kBlocks; ++i) {
    std::string got;
    uint64_t t0 = MonoMs();
    Status s = client->Get(absl::StrCat(prefix, i), &got, kDeadlineMs);
    r.slowest_ms = std::max(r.slowest_ms, MonoMs() - t0);
    if (!s.ok()) {
      ++r.failed;
      if (r.first_error.empty()) r.first_error = s.ToString();
      // Only a timeout or an unreachable store may explain a failure.
      EXPECT_TRUE(s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable)
          << s.ToString();
    } else if (got != BlockBytes(kBlockBytes, i)) {
      ++r.wrong;
    } else {
      ++r.ok;
    }
  }
  return r;
}

TEST(StallTest, DeadlinesHoldWhileAStoreIsStoppedAndItRejoinsAfter) {
  LocalCluster::Options o;
  o.stores = 2;
  o.dram_bytes = 64ull << 20;
  o.bin_dir = TestBinDir();
  o.master_args = {"--node-ttl", "2s"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  ClientOptions co;
  co.masters = {c.master_address()};
  co.timeout_ms = kDeadlineMs;
  std::unique_ptr<Client> shm_client, tcp_client;
  ASSERT_TRUE(Client::Open(co, &shm_client).ok());
  co.allow_shm = false;
  ASSERT_TRUE(Client::Open(co, &tcp_client).ok());

  PutOptions po;
  po.replicas = 2;
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = BlockBytes(kBlockBytes, i);
    ASSERT_TRUE(tcp_client->Put(absl::StrCat("stall-", i), data.data(), data.size(), po).ok());
  }
  ASSERT_EQ(ReadAll(tcp_client.get(), "stall-").ok, kBlocks);
  ASSERT_EQ(ReadAll(shm_client.get(), "stall-").ok, kBlocks);

  c.store_process(0)->Signal(SIGSTOP);
  uint64_t stopped_at = MonoMs();
  // Frozen, not yet declared dead: TCP reads of its replica time out within
  // the deadline; shared memory needs no store CPU and is not affected.
  Round tcp_frozen = ReadAll(tcp_client.get(), "stall-");
  EXPECT_EQ(tcp_frozen.wrong, 0);
  EXPECT_LE(tcp_frozen.slowest_ms, kDeadlineMs + kSlackMs) << "a get outlived its deadline";
  Round shm_frozen = ReadAll(shm_client.get(), "stall-");
  EXPECT_EQ(shm_frozen.wrong, 0);
  EXPECT_EQ(shm_frozen.ok, kBlocks) << shm_frozen.first_error;
  // A put that lands on the frozen store fails within its deadline, or
  // succeeds elsewhere; it never hangs.
  {
    std::string data = BlockBytes(kBlockBytes, 777);
    uint64_t t0 = MonoMs();
    Status s = tcp_client->Put("stall-put", data.data(), data.size());
    EXPECT_LE(MonoMs() - t0, 3 * kDeadlineMs + kSlackMs) << s.ToString();
  }

  // The master declares it dead after its TTL (2 s): reads avoid it.
  ASSERT_TRUE(c.WaitForLiveNodes(1, 10000).ok());
  Round tcp_dead = ReadAll(tcp_client.get(), "stall-");
  EXPECT_EQ(tcp_dead.ok, kBlocks) << tcp_dead.first_error;
  EXPECT_LE(tcp_dead.slowest_ms, kDeadlineMs + kSlackMs);

  c.store_process(0)->Signal(SIGCONT);
  ASSERT_TRUE(c.WaitForLiveNodes(2, 15000).ok()) << "the thawed store did not rejoin";
  EXPECT_TRUE(c.store_process(0)->Running());
  // It takes two-replica puts again, and both copies serve.
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = BlockBytes(kBlockBytes, i);
    Status s = tcp_client->Put(absl::StrCat("rejoined-", i), data.data(), data.size(), po);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Round rejoined = ReadAll(tcp_client.get(), "rejoined-");
  EXPECT_EQ(rejoined.ok, kBlocks) << rejoined.first_error;
  std::printf(
      "SIGSTOP %llu ms: tcp %d ok / %d timed out (slowest %llu ms), shm %d ok; after "
      "the TTL tcp %d ok\n",
      static_cast<unsigned long long>(MonoMs() - stopped_at), tcp_frozen.ok, tcp_frozen.failed,
      static_cast<unsigned long long>(tcp_frozen.slowest_ms), shm_frozen.ok, tcp_dead.ok);
}

// A replica that accepts the connection but never answers must not consume
// the whole deadline of the get: while other replicas remain, each attempt
// gets a share of the time left (ClientImpl::ReadObject), and the healthy
// replica serves the get in time.
TEST(StallTest, GetsFailOverToTheHealthyReplicaWhileOneIsFrozen) {
  LocalCluster::Options o;
  o.stores = 2;
  o.bin_dir = TestBinDir();
  // A long TTL: the master keeps listing the frozen replica, as it does for
  // the first seconds of any stall.
  o.master_args = {"--node-ttl", "60s"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions co;
  co.masters = {(*cluster)->master_address()};
  co.allow_shm = false;
  co.timeout_ms = kDeadlineMs;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  PutOptions po;
  po.replicas = 2;
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = BlockBytes(kBlockBytes, i);
    ASSERT_TRUE(client->Put(absl::StrCat("fo-", i), data.data(), data.size(), po).ok());
  }
  (*cluster)->store_process(0)->Signal(SIGSTOP);
  Round r = ReadAll(client.get(), "fo-");
  (*cluster)->store_process(0)->Signal(SIGCONT);
  EXPECT_EQ(r.ok, kBlocks) << r.failed << " failed, first: " << r.first_error;
}

}  // namespace
}  // namespace shelf
