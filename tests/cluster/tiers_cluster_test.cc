// The store's tiers across real processes: DRAM overflowing into the SSD
// tier (RocksDB files on disk), and SSD contents surviving kill -9.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "common/clock.h"
#include "common/json.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"

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

TEST(TiersClusterTest, DramOverflowsToSsdAndSurvivesKill9) {
  LocalCluster::Options o;
  o.stores = 1;
  o.dram_bytes = kDram;
  o.ssd_bytes = kSsd;
  o.bin_dir = SHELF_BIN_DIR;
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions co;
  co.masters = {(*cluster)->master_address()};
  co.timeout_ms = 20000;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());

  // Three times the DRAM segment, one replica each.
  const int blocks = static_cast<int>(3 * kDram / kBlock);
  for (int i = 0; i < blocks; ++i) {
    std::string data = Block(kBlock, i);
    Status s = client->Put("tier-" + std::to_string(i), data.data(), data.size());
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  // Every block stays readable, from DRAM or SSD, byte-identical.
  for (int i = 0; i < blocks; ++i) {
    std::string got;
    Status s = client->Get("tier-" + std::to_string(i), &got);
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    ASSERT_TRUE(got == Block(kBlock, i)) << "block " << i << " differs";
  }
  ClientStats st = client->stats();
  EXPECT_GT(st.blocks_loaded_ssd, 0u);
  EXPECT_GT(st.blocks_loaded_dram, 0u);
  EXPECT_EQ(st.checksum_mismatches, 0u);
  std::string json;
  ASSERT_EQ((*cluster)->Shelfctl({"status", "--json"}, &json), 0);
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
    (*cluster)->Shelfctl({"stat", "tier-" + std::to_string(i), "--json"}, &out);
    if (out.find("\"tier\":\"ssd\"") != std::string::npos) on_ssd.push_back(i);
  }
  ASSERT_FALSE(on_ssd.empty());
  std::string ssd_dir = (*cluster)->store_ssd_dir(0);
  (*cluster)->KillStore(0);
  ASSERT_TRUE((*cluster)->WaitForLiveNodes(0, 8000).ok());
  ASSERT_TRUE((*cluster)->RestartStore(0).ok());
  ASSERT_TRUE((*cluster)->WaitForLiveNodes(1, 15000).ok());
  for (int i : on_ssd) {
    std::string got;
    Status s = client->Get("tier-" + std::to_string(i), &got);
    ASSERT_TRUE(s.ok()) << "block " << i << " after restart: " << s.ToString();
    ASSERT_TRUE(got == Block(kBlock, i));
  }
  // The tier stays bounded on disk too (RocksDB files, with slack for the
  // WAL and blob files not yet collected).
  EXPECT_LT(DirBytes(ssd_dir), 3 * kSsd);
}

}  // namespace
}  // namespace shelf
