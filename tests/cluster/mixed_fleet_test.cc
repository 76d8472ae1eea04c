// A mixed fleet: one store that offers only TCP (--shm=false) next to one
// that also offers shared memory, all on this host. Clients use the best
// transport both ends share (shm, then tcp) per store, and a client that
// shares no transport with a store gets a clear error for that replica and
// is served by the other.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/local_cluster.h"
#include "tests/fault/fault_util.h"

namespace shelf {
namespace {

using fault::BlockBytes;

class MixedFleetTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.stores = 0;  // added in SetUp, one of each kind
    return o;
  }
  void SetUp() override {
    ClusterFixture::SetUp();
    if (HasFatalFailure()) return;
    auto tcp_only = cluster_->AddStore({"--shm=false"});
    ASSERT_TRUE(tcp_only.ok()) << tcp_only.status();
    auto both = cluster_->AddStore({});
    ASSERT_TRUE(both.ok()) << both.status();
  }

  std::unique_ptr<Client> Open(bool allow_tcp, bool allow_shm) {
    ClientOptions co = DefaultClientOptions();
    co.allow_tcp = allow_tcp;
    co.allow_shm = allow_shm;
    return OpenClient(co);
  }
};

TEST_F(MixedFleetTest, EachStoreIsReachedOverTheBestTransportBothEndsShare) {
  std::unique_ptr<Client> client = Open(true, true);
  ASSERT_NE(client, nullptr);
  constexpr int kBlocks = 32;
  constexpr size_t kBytes = 256 << 10;
  PutOptions po;
  po.replicas = 2;  // one replica on each store
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = BlockBytes(kBytes, i);
    ASSERT_TRUE(client->Put(absl::StrCat("mixed-", i), data.data(), data.size(), po).ok()) << i;
  }
  for (int i = 0; i < kBlocks; ++i) {
    std::string got;
    ASSERT_TRUE(client->Get(absl::StrCat("mixed-", i), &got).ok()) << i;
    EXPECT_TRUE(got == BlockBytes(kBytes, i)) << i;
  }
  // Both replicas are local; the master lists them in its order, and the
  // client takes shared memory where the store offers it.
  ClientStats st = client->stats();
  EXPECT_EQ(st.bytes_loaded, kBlocks * kBytes);
  EXPECT_GT(st.bytes_loaded_shm + st.bytes_loaded_tcp, 0u);

  // Single-replica blocks, spread by placement over both stores.
  std::unique_ptr<Client> tcp_client = Open(true, false);
  std::unique_ptr<Client> shm_client = Open(false, true);
  ASSERT_NE(tcp_client, nullptr);
  ASSERT_NE(shm_client, nullptr);
  PutOptions one;
  one.replicas = 1;
  int via_tcp_store = 0, via_shm_store = 0;
  for (int i = 0; i < kBlocks; ++i) {
    std::string key = absl::StrCat("single-", i);
    std::string data = BlockBytes(kBytes, 1000 + i);
    ASSERT_TRUE(tcp_client->Put(key, data.data(), data.size(), one).ok()) << i;
    // Any client that shares a transport with the store holding it reads it.
    std::string got;
    ASSERT_TRUE(tcp_client->Get(key, &got).ok()) << i;
    EXPECT_TRUE(got == data);
    got.clear();
    Status s = shm_client->Get(key, &got);
    if (s.ok()) {
      EXPECT_TRUE(got == data);
      ++via_shm_store;
    } else {
      // The block sits on the TCP-only store: a shm-only client shares no
      // transport with it, and says so.
      EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
      EXPECT_NE(s.message().find("no shared transport"), std::string::npos) << s.ToString();
      ++via_tcp_store;
    }
  }
  // Placement spreads single-replica blocks over both stores.
  EXPECT_GT(via_tcp_store, 0);
  EXPECT_GT(via_shm_store, 0);
  EXPECT_EQ(shm_client->stats().bytes_loaded_tcp, 0u);
  EXPECT_EQ(tcp_client->stats().bytes_loaded_shm, 0u);
  EXPECT_EQ(shm_client->stats().bytes_loaded_shm, static_cast<uint64_t>(via_shm_store) * kBytes);
  std::printf("mixed fleet: %d single-replica blocks on the tcp-only store, %d on the shm store\n",
              via_tcp_store, via_shm_store);
}

TEST_F(MixedFleetTest, AStoreWhoseRdmaDeviceFailsToOpenServesWithoutRdma) {
  // This machine may have no RDMA at all; the device name is one no machine
  // has. The store logs it, advertises tcp and shm only, and serves.
  auto store = cluster_->AddStore({"--rdma-device=shelf-no-such-rdma-device"});
  ASSERT_TRUE(store.ok()) << store.status();
  std::unique_ptr<Client> client = Open(true, true);
  ASSERT_NE(client, nullptr);
  PutOptions all;
  all.replicas = 3;  // one replica on every store
  std::string data = BlockBytes(100 << 10, 77);
  ASSERT_TRUE(client->Put("rdma-less", data.data(), data.size(), all).ok());
  std::string got;
  ASSERT_TRUE(client->Get("rdma-less", &got).ok());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(client->stats().bytes_loaded_rdma, 0u);
  std::ifstream log(cluster_->store_log(*store));
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("RDMA UNAVAILABLE"), std::string::npos) << text;
  EXPECT_NE(text.find("shelf-no-such-rdma-device"), std::string::npos) << text;
}

}  // namespace
}  // namespace shelf
