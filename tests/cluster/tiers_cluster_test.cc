// The store's tiers across real processes: DRAM overflowing into the SSD
// tier (RocksDB files on disk), and SSD contents surviving kill -9.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "shelf/client.h"
#include "testing/http_probe.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "testing/wait_for.h"

namespace shelf {
namespace {

std::string Block(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

constexpr size_t kBlock = 1 << 20;
constexpr uint64_t kDram = 32ull << 20;
constexpr uint64_t kSsd = 160ull << 20;

// One store with kDram of DRAM and kSsd of SSD, and a client of it.
class TiersClusterTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> store_args = {}, std::vector<std::string> master_args = {}) {
    LocalCluster::Options o;
    o.stores = 1;
    o.dram_bytes = kDram;
    o.ssd_bytes = kSsd;
    o.bin_dir = TestBinDir();
    o.store_args = std::move(store_args);
    o.master_args = std::move(master_args);
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    ClientOptions co;
    co.masters = {cluster_->master_address()};
    co.timeout_ms = 20000;
    ASSERT_TRUE(Client::Open(co, &client_).ok());
  }
  // Puts blocks prefix0.. (kBlock each, one replica), then reads every one
  // back, from DRAM or SSD, byte-identical.
  void PutAndReadBack(const std::string& prefix, int blocks) {
    for (int i = 0; i < blocks; ++i) {
      std::string data = Block(kBlock, i);
      Status s = client_->Put(prefix + std::to_string(i), data.data(), data.size());
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    }
    for (int i = 0; i < blocks; ++i) {
      std::string got;
      Status s = client_->Get(prefix + std::to_string(i), &got);
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
      ASSERT_TRUE(got == Block(kBlock, i)) << "block " << i << " differs";
    }
  }
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(TiersClusterTest, DramOverflowsToSsdAndSurvivesKill9) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // Three times the DRAM segment.
  const int blocks = static_cast<int>(3 * kDram / kBlock);
  ASSERT_NO_FATAL_FAILURE(PutAndReadBack("tier-", blocks));
  ClientStats st = client_->stats();
  EXPECT_GT(st.blocks_loaded_ssd, 0u);
  EXPECT_GT(st.blocks_loaded_dram, 0u);
  EXPECT_EQ(st.checksum_mismatches, 0u);
  std::string json;
  ASSERT_EQ(cluster_->Shelfctl({"status", "--json"}, &json), 0);
  const Json status = JsonParse(json);
  ASSERT_TRUE(status.is_object() && status["ssd_used_bytes"].is_number_unsigned()) << json;
  uint64_t ssd_used = status["ssd_used_bytes"].get<uint64_t>();
  EXPECT_GT(ssd_used, 0u);
  EXPECT_LE(ssd_used, kSsd);

  // kill -9, restart on the same SSD directory (a new port): the SSD blocks
  // come back through the cluster with no client action.
  std::vector<int> on_ssd;
  for (int i = 0; i < blocks; ++i) {
    std::string out;
    cluster_->Shelfctl({"stat", "tier-" + std::to_string(i), "--json"}, &out);
    if (out.find("\"tier\":\"ssd\"") != std::string::npos) on_ssd.push_back(i);
  }
  ASSERT_FALSE(on_ssd.empty());
  std::string ssd_dir = cluster_->store_ssd_dir(0);
  cluster_->KillStore(0);
  ASSERT_TRUE(cluster_->WaitForLiveNodes(0, 8000).ok());
  ASSERT_TRUE(cluster_->RestartStore(0).ok());
  ASSERT_TRUE(cluster_->WaitForLiveNodes(1, 15000).ok());
  for (int i : on_ssd) {
    std::string got;
    Status s = client_->Get("tier-" + std::to_string(i), &got);
    ASSERT_TRUE(s.ok()) << "block " << i << " after restart: " << s.ToString();
    ASSERT_TRUE(got == Block(kBlock, i));
  }
  // The tier stays bounded on disk too (RocksDB files, with slack for the
  // WAL and blob files not yet collected).
  EXPECT_LT(DirBytes(ssd_dir), 3 * kSsd);
}

// A key whose only copy sits on a store's SSD is put again while that
// store is dead, and the new value's only store dies too (kill -9: DRAM
// gone). The first store comes back with the old value on its SSD: the key
// must read as absent, never as the old value (a RESP SET, a Mooncake
// upsert: keys that are not content addresses).
TEST_F(TiersClusterTest, AnOldValueStaysOutWhenItsStoreReturnsAfterTheNewOneWasLost) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string old_value = Block(kBlock, 1), new_value = Block(kBlock, 2);
  ASSERT_TRUE(client_->Put("upsert", old_value.data(), old_value.size()).ok());
  // Twice the DRAM segment after it: the key is demoted to SSD.
  ASSERT_NO_FATAL_FAILURE(PutAndReadBack("fill-", static_cast<int>(2 * kDram / kBlock)));
  for (const char* key : {"upsert", "fill-0"}) {
    std::string stat;
    ASSERT_TRUE(WaitFor(
        [&] {
          cluster_->Shelfctl({"stat", key, "--json"}, &stat);
          return stat.find("\"tier\":\"ssd\"") != std::string::npos;
        },
        15000, 50))
        << stat;
  }
  cluster_->KillStore(0);
  ASSERT_TRUE(cluster_->WaitForLiveNodes(0, 8000).ok());
  absl::StatusOr<int> second = cluster_->AddStore();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(client_->Put("upsert", new_value.data(), new_value.size()).ok());
  std::string got;
  ASSERT_TRUE(client_->Get("upsert", &got).ok());
  ASSERT_TRUE(got == new_value);
  cluster_->KillStore(*second);
  ASSERT_TRUE(cluster_->WaitForLiveNodes(0, 8000).ok());
  ASSERT_TRUE(cluster_->RestartStore(0).ok());
  ASSERT_TRUE(cluster_->WaitForLiveNodes(1, 15000).ok());
  Status s = client_->Get("upsert", &got);
  EXPECT_EQ(s.code(), StatusCode::kNotFound)
      << s.ToString() << (s.ok() && got == old_value ? ": the old value came back" : "");
  // Its other blocks, put before it died and not since, are back.
  s = client_->Get("fill-0", &got);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A sample of the store's /metrics (`name` with its labels), -1 when
// unread.
double StoreMetric(uint16_t metrics_port, const std::string& name) {
  const std::string text = HttpGet(metrics_port, "/metrics");
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::strtod(text.c_str() + at + name.size() + 2, nullptr);
}

// The store's SSD bytes as its /metrics say (shelf_store_used_bytes).
double StoreSsdBytes(uint16_t metrics_port) {
  return StoreMetric(metrics_port, "shelf_store_used_bytes{tier=\"ssd\"}");
}

// The store counts the block bytes clients write by the transport that
// carried them: a same-host client's puts come in through shared memory
// (shm), a TCP-only client's over its data connection (tcp).
TEST_F(TiersClusterTest, WrittenBytesAreCountedByTheTransportThatCarriedThem) {
  ASSERT_NO_FATAL_FAILURE(Start({"--metrics-listen", "127.0.0.1:0"}));
  const std::string a = Block(kBlock, 1), b = Block(kBlock, 2);
  ASSERT_TRUE(client_->Put("by-shm", a.data(), a.size()).ok());
  ASSERT_EQ(client_->stats().bytes_stored_shm, kBlock) << "the same-host put did not use shm";
  ClientOptions co;
  co.masters = {cluster_->master_address()};
  co.timeout_ms = 20000;
  co.allow_shm = false;
  std::unique_ptr<Client> tcp;
  ASSERT_TRUE(Client::Open(co, &tcp).ok());
  ASSERT_TRUE(tcp->Put("by-tcp", b.data(), b.size()).ok());
  const uint16_t port = cluster_->store_metrics_port(0);
  EXPECT_EQ(StoreMetric(port, "shelf_store_written_bytes_total{tier=\"dram\",transport=\"shm\"}"),
            kBlock);
  EXPECT_EQ(StoreMetric(port, "shelf_store_written_bytes_total{tier=\"dram\",transport=\"tcp\"}"),
            kBlock);
}

// Demotions copied to a hugepage buffer before their writes (--demote-copy
// always; by default, blocks of 2 MiB and more where the segment is on
// 4 KiB pages) reach the SSD whole, read back and survive a kill -9.
TEST_F(TiersClusterTest, BlocksDemotedFromACopyReadBackWholeAfterKill9) {
  ASSERT_NO_FATAL_FAILURE(Start({"--demote-copy", "always", "--metrics-listen", "127.0.0.1:0"}));
  const int blocks = static_cast<int>(2 * kDram / kBlock);
  ASSERT_NO_FATAL_FAILURE(PutAndReadBack("copy-", blocks));
  const uint16_t port = cluster_->store_metrics_port(0);
  const double copies = StoreMetric(port, "shelf_store_demotion_copies_total");
  EXPECT_GT(copies, 0);
  EXPECT_EQ(copies, StoreMetric(port, "shelf_store_demotions_total{result=\"ok\"}"));
  cluster_->KillStore(0);
  ASSERT_TRUE(cluster_->WaitForLiveNodes(0, 8000).ok());
  ASSERT_TRUE(cluster_->RestartStore(0).ok());
  ASSERT_TRUE(cluster_->WaitForLiveNodes(1, 15000).ok());
  int back = 0;
  for (int i = 0; i < blocks; ++i) {
    std::string got;
    Status s = client_->Get("copy-" + std::to_string(i), &got);
    if (s.code() == StatusCode::kNotFound) continue;  // in DRAM when it died
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    ASSERT_TRUE(got == Block(kBlock, i)) << "block " << i << " differs";
    ++back;
  }
  EXPECT_GT(back, 0);
}

// A store that has just registered takes its first orders at once: its
// first heartbeat long-polls from the start, so the copy ahead ordered in
// its first moments (here by an admin) runs then. With a 10 s heartbeat
// interval, a first heartbeat sent only once the interval was over would
// leave the block DRAM-only for about 10 s, while writers waited for the
// room such orders make.
TEST_F(TiersClusterTest, AStoreJustRegisteredTakesItsFirstOrdersAtOnce) {
  ASSERT_NO_FATAL_FAILURE(Start({}, {"--heartbeat-interval", "10s", "--node-ttl", "60s"}));
  const std::string data = Block(kBlock, 7);
  ASSERT_TRUE(client_->Put("first", data.data(), data.size()).ok());
  std::string out;
  ASSERT_EQ(cluster_->Shelfctl({"evict", "--copy", "--bytes", "1MiB"}, &out), 0) << out;
  auto copied = [&] {
    std::string stat;
    cluster_->Shelfctl({"stat", "first"}, &stat);
    return stat.find(" ssd offset ") != std::string::npos &&
           stat.find(" dram ") != std::string::npos;
  };
  EXPECT_TRUE(WaitFor(copied, 5000)) << "the copy ahead was not done within 5 s of its order";
}

// Heartbeat answers lost on their way, injected: the store drops the first
// answer that carries a demotion and the first that carries a drop, as a
// call that timed out after the master had sent it. Orders stay queued
// until acknowledged, so none is lost: the removed keys stay removed, and
// their SSD copies go.
TEST_F(TiersClusterTest, RemovedKeysStayRemovedWhenAnswersAreLostUnderFaultInjection) {
  // The store gets the variable only by inheriting it (LocalCluster passes no
  // environment): set and cleared on the test's thread before the test starts
  // threads of its own; this process does not read it.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): see above
  setenv("SHELF_FAULT_LOSE_HEARTBEAT_ANSWERS", "DEMOTE,DROP_SSD", 1);
  Start({"--metrics-listen", "127.0.0.1:0"});
  unsetenv("SHELF_FAULT_LOSE_HEARTBEAT_ANSWERS");  // NOLINT(concurrency-mt-unsafe): as above
  ASSERT_FALSE(HasFatalFailure());
  // Twice the DRAM segment: demotions are ordered.
  const int blocks = static_cast<int>(2 * kDram / kBlock);
  ASSERT_NO_FATAL_FAILURE(PutAndReadBack("lost-", blocks));
  const uint16_t port = cluster_->store_metrics_port(0);
  ASSERT_GT(StoreSsdBytes(port), 0);
  for (int i = 0; i < blocks; ++i) {
    Status s = client_->Remove("lost-" + std::to_string(i));
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  // The drops, sent again after the lost answer, empty the tier.
  EXPECT_TRUE(WaitFor([&] { return StoreSsdBytes(port) == 0; }, 15000, 50))
      << StoreSsdBytes(port) << " bytes left on SSD";
  for (int i = 0; i < blocks; ++i) {
    std::string got;
    Status s = client_->Get("lost-" + std::to_string(i), &got);
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << i << ": " << s.ToString();
  }
}

}  // namespace
}  // namespace shelf
