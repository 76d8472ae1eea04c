// A network partition between the client and one store. The store runs in
// a network namespace of its own, reached through a veth pair the test
// creates; `ip link set ... down` cuts it off from the client and the
// master at once, `up` heals it. Clients use TCP only (no shared memory),
// so every byte crosses the cut link.
//
// Needs root (namespaces); skips with a message without it.
#include <gtest/gtest.h>

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

constexpr int kBlocks = 40;
constexpr size_t kBlockBytes = 96 << 10;
constexpr uint64_t kDeadlineMs = 3000;
// Scheduling slack on a loaded 2-core machine.
constexpr uint64_t kSlackMs = 1500;

class PartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fault::IsRoot()) GTEST_SKIP() << "needs root for network namespaces";
    auto ns = fault::NetNs::Create();
    if (!ns.ok()) GTEST_SKIP() << "cannot create a network namespace: " << ns.status();
    ns_ = *std::move(ns);
    // The master listens on every address, so the store in the namespace
    // reaches it through the veth pair and everything else on loopback.
    LocalCluster::Options o;
    o.stores = 1;
    o.dram_bytes = 64ull << 20;
    o.bin_dir = TestBinDir();
    o.master_args = {"--listen", "0.0.0.0:0", "--insecure", "--node-ttl", "2s"};
    o.store_args = {"--shm=false"};
    auto c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    const std::string& bound = cluster_->master_address();
    port_ = bound.substr(bound.rfind(':') + 1);
    master_ = "127.0.0.1:" + port_;
    ASSERT_TRUE(StartNsStore().ok());
    ASSERT_TRUE(cluster_->WaitForLiveNodes(2, 15000).ok());

    ClientOptions co;
    co.masters = {master_};
    co.allow_shm = false;
    co.timeout_ms = kDeadlineMs;
    ASSERT_TRUE(Client::Open(co, &client_).ok());
    probe_ = std::make_unique<fault::FaultProbe>(master_, "");
  }

  void TearDown() override {
    ns_store_.reset();
    cluster_.reset();
    ns_.reset();
  }

  absl::Status StartNsStore() {
    std::string dir = cluster_->work_dir();
    std::string ready = dir + "/ns-store.addr";
    std::vector<std::string> argv =
        ns_->Wrap({TestBinDir() + "/shelf-store", "--master",
                   absl::StrCat(ns_->root_ip(), ":", port_), "--listen", ns_->ns_ip() + ":0",
                   "--dram-size", std::to_string(64ull << 20), "--node-id", "ns-store", "--run-dir",
                   dir + "/ns-store.run", "--ready-file", ready, "--shm=false", "--insecure"});
    auto p = Process::Spawn(argv, dir + "/ns-store.log");
    if (!p.ok()) return p.status();
    ns_store_ = *std::move(p);
    auto addr = WaitForFileLine(ready, 15000, ns_store_.get());
    if (!addr.ok()) return addr.status();
    ns_store_address_ = *addr;
    return absl::OkStatus();
  }

  // Puts kBlocks blocks with a replica on each store (there are two).
  void PutBlocks(const std::string& prefix) {
    PutOptions po;
    po.replicas = 2;
    for (int i = 0; i < kBlocks; ++i) {
      std::string data = BlockBytes(kBlockBytes, i);
      Status s = client_->Put(absl::StrCat(prefix, i), data.data(), data.size(), po);
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    }
  }

  struct Round {
    int ok = 0, failed = 0, wrong = 0;
    uint64_t slowest_ms = 0;
    std::string first_error;
  };
  // Reads every block once with the deadline; counts outcomes.
  Round ReadAll(const std::string& prefix) {
    Round r;
    for (int i = 0; i < kBlocks; ++i) {
      std::string got;
      uint64_t t0 = MonoMs();
      Status s = client_->Get(absl::StrCat(prefix, i), &got, kDeadlineMs);
      r.slowest_ms = std::max(r.slowest_ms, MonoMs() - t0);
      if (!s.ok()) {
        ++r.failed;
        if (r.first_error.empty()) r.first_error = s.ToString();
      } else if (got != BlockBytes(kBlockBytes, i)) {
        ++r.wrong;
      } else {
        ++r.ok;
      }
    }
    return r;
  }

  std::unique_ptr<fault::NetNs> ns_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Process> ns_store_;
  std::string ns_store_address_, port_, master_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<fault::FaultProbe> probe_;
};

TEST_F(PartitionTest, ReadsNeverHangOrLieAndHealingRestoresTheNode) {
  PutBlocks("part-");
  Round before = ReadAll("part-");  // also fills the connection pools
  ASSERT_EQ(before.ok, kBlocks) << before.first_error;

  ASSERT_TRUE(ns_->SetLink(false).ok());
  // During the cut: no call outlives its deadline, no byte is wrong.
  Round during = ReadAll("part-");
  EXPECT_EQ(during.wrong, 0);
  EXPECT_LE(during.slowest_ms, kDeadlineMs + kSlackMs) << "a get outlived its deadline";
  // Once the master has declared the unreachable store dead (TTL 2 s), its
  // replicas leave the answers and every get is served by the other one.
  ASSERT_TRUE(cluster_->WaitForLiveNodes(1, 10000).ok());
  Round after_ttl = ReadAll("part-");
  EXPECT_EQ(after_ttl.ok, kBlocks) << after_ttl.first_error;
  EXPECT_LE(after_ttl.slowest_ms, kDeadlineMs + kSlackMs);
  // Puts still work with one replica; two replicas cannot be placed.
  std::string data = BlockBytes(kBlockBytes, 999);
  EXPECT_TRUE(client_->Put("during-cut", data.data(), data.size()).ok());

  ASSERT_TRUE(ns_->SetLink(true).ok());
  // Healing: the store's next heartbeat finds itself forgotten and
  // re-registers; it takes placements again.
  ASSERT_TRUE(cluster_->WaitForLiveNodes(2, 20000).ok());
  PutBlocks("healed-");
  Round healed = ReadAll("healed-");
  EXPECT_EQ(healed.ok, kBlocks) << healed.first_error;
  absl::StatusOr<v1::StatusResponse> st = probe_->Status();
  ASSERT_TRUE(st.ok());
  bool ns_store_holds_blocks = false;
  for (const v1::NodeStatus& n : st->nodes()) {
    if (n.node_id() == "ns-store") ns_store_holds_blocks = n.objects() >= kBlocks;
  }
  EXPECT_TRUE(ns_store_holds_blocks) << st->DebugString();
  std::printf(
      "partition: during the cut %d ok / %d failed (slowest %llu ms), after the TTL "
      "%d ok (slowest %llu ms)\n",
      during.ok, during.failed, static_cast<unsigned long long>(during.slowest_ms), after_ttl.ok,
      static_cast<unsigned long long>(after_ttl.slowest_ms));
}

// What the architecture promises ("it tries the next replica" when a store
// cannot be reached) and what a client needs during a cut: every get is
// served by the surviving replica within its deadline, also before the
// master notices.
//
//
// A connection pooled before the cut is reused after it, and the request
// goes into the void; the attempt is bounded by its share of the deadline
// (ClientImpl::ReadObject), then the next replica serves.
TEST_F(PartitionTest, ReadsFailOverWithinTheDeadlineBeforeTheMasterNotices) {
  PutBlocks("fo-");
  ASSERT_EQ(ReadAll("fo-").ok, kBlocks);
  ASSERT_TRUE(ns_->SetLink(false).ok());
  Round during = ReadAll("fo-");
  EXPECT_EQ(during.ok, kBlocks) << during.failed << " failed, first: " << during.first_error;
  EXPECT_LE(during.slowest_ms, kDeadlineMs + kSlackMs);
}

}  // namespace
}  // namespace shelf
