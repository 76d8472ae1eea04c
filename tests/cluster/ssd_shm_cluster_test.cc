// Same-host reads of SSD-tier blocks through shared memory, across real
// processes: a client on the store's host gets a block that lives only on
// the SSD tier without TCP carrying its bytes (the store reads it into a
// pinned range of its shared segment, the client copies it out and releases
// the pin), and the same block read by a TCP-only client is identical.
#include <gtest/gtest.h>

#include <random>

#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"

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

// Not a multiple of 4 KiB: the window's range is rounded, the copy is not.
constexpr size_t kBlock = (1 << 20) - 100;
constexpr uint64_t kDram = 24ull << 20;
constexpr uint64_t kSsd = 128ull << 20;
constexpr int kBlocks = 60;

std::string Key(int i) { return "ssd-shm-" + std::to_string(i); }

TEST(SsdShmClusterTest, SameHostSsdHitsSkipTcp) {
  LocalCluster::Options o;
  o.stores = 1;
  o.dram_bytes = kDram;
  o.ssd_bytes = kSsd;
  o.bin_dir = TestBinDir();
  // A window of 16 MiB: room for the parallel reads of a batch (8 transfer
  // threads), and passed through many times over by the reads below, so
  // every pin must be released for them to keep going through it.
  o.store_args = {"--shm-ssd-window=16MiB"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions co;
  co.masters = {(*cluster)->master_address()};
  co.timeout_ms = 20000;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = Block(kBlock, i);
    Status s = client->Put(Key(i), data.data(), data.size());
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  // The blocks with no DRAM copy left.
  std::vector<int> ssd_only;
  for (int i = 0; i < kBlocks; ++i) {
    std::string out;
    (*cluster)->Shelfctl({"stat", Key(i), "--json"}, &out);
    if (out.find("\"tier\":\"ssd\"") != std::string::npos &&
        out.find("\"tier\":\"dram\"") == std::string::npos) {
      ssd_only.push_back(i);
    }
  }
  ASSERT_GE(ssd_only.size(), 10u);

  // One at a time, three rounds: each block comes from the SSD tier, over
  // shared memory, with no TCP byte.
  const ClientStats before = client->stats();
  uint64_t bytes = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i : ssd_only) {
      std::string got;
      Status s = client->Get(Key(i), &got);
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
      ASSERT_TRUE(got == Block(kBlock, i)) << "block " << i << " differs";
      bytes += kBlock;
    }
  }
  ClientStats after = client->stats();
  EXPECT_EQ(after.bytes_loaded_tcp - before.bytes_loaded_tcp, 0u);
  EXPECT_EQ(after.bytes_loaded_shm - before.bytes_loaded_shm, bytes);
  EXPECT_EQ(after.bytes_loaded_ssd - before.bytes_loaded_ssd, bytes);
  EXPECT_EQ(after.checksum_mismatches, 0u);

  // All at once: the reads run in parallel on one attachment.
  std::vector<std::string> keys;
  keys.reserve(ssd_only.size());
  for (int i : ssd_only) keys.push_back(Key(i));
  std::vector<std::string> values;
  std::vector<Status> statuses;
  ASSERT_TRUE(client->BatchGet(keys, &values, &statuses).ok());
  for (size_t j = 0; j < keys.size(); ++j) {
    ASSERT_TRUE(statuses[j].ok()) << keys[j] << ": " << statuses[j].ToString();
    ASSERT_TRUE(values[j] == Block(kBlock, ssd_only[j])) << keys[j] << " differs";
  }
  const ClientStats batch = client->stats();
  EXPECT_EQ(batch.bytes_loaded_tcp - before.bytes_loaded_tcp, 0u);
  EXPECT_EQ(batch.bytes_loaded_shm - after.bytes_loaded_shm, keys.size() * kBlock);

  // A client that may not use shared memory reads the same bytes over TCP.
  co.allow_shm = false;
  std::unique_ptr<Client> tcp;
  ASSERT_TRUE(Client::Open(co, &tcp).ok());
  std::string got;
  ASSERT_TRUE(tcp->Get(Key(ssd_only[0]), &got).ok());
  EXPECT_TRUE(got == Block(kBlock, ssd_only[0]));
  EXPECT_EQ(tcp->stats().bytes_loaded_tcp, kBlock);
  EXPECT_EQ(tcp->stats().bytes_loaded_shm, 0u);
}

// A block larger than the store's window cannot be pinned there: the read
// goes on over TCP, and a block that fits still comes through the window.
TEST(SsdShmClusterTest, BlockLargerThanTheWindowGoesOverTcp) {
  LocalCluster::Options o;
  o.stores = 1;
  o.dram_bytes = 16ull << 20;
  o.ssd_bytes = 96ull << 20;
  o.bin_dir = TestBinDir();
  o.store_args = {"--shm-ssd-window=2MiB"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions co;
  co.masters = {(*cluster)->master_address()};
  co.timeout_ms = 20000;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  // Alternating sizes, three times the segment: most end up on SSD alone.
  constexpr size_t kSmall = 256 << 10, kLarge = 3 << 20;
  const int blocks = 24;
  auto size_of = [&](int i) { return i % 2 == 0 ? kSmall : kLarge; };
  for (int i = 0; i < blocks; ++i) {
    std::string data = Block(size_of(i), 100 + i);
    ASSERT_TRUE(client->Put(Key(i), data.data(), data.size()).ok()) << i;
  }
  int small_read = -1, large_read = -1;
  for (int i = 0; i < blocks && (small_read < 0 || large_read < 0); ++i) {
    std::string out;
    (*cluster)->Shelfctl({"stat", Key(i), "--json"}, &out);
    if (out.find("\"tier\":\"dram\"") != std::string::npos) continue;
    if (out.find("\"tier\":\"ssd\"") == std::string::npos) continue;
    int& slot = size_of(i) == kSmall ? small_read : large_read;
    if (slot >= 0) continue;
    slot = i;
    const ClientStats before = client->stats();
    std::string got;
    ASSERT_TRUE(client->Get(Key(i), &got).ok()) << i;
    ASSERT_TRUE(got == Block(size_of(i), 100 + i)) << i;
    const ClientStats after = client->stats();
    if (size_of(i) == kSmall) {
      EXPECT_EQ(after.bytes_loaded_shm - before.bytes_loaded_shm, kSmall);
      EXPECT_EQ(after.bytes_loaded_tcp - before.bytes_loaded_tcp, 0u);
    } else {
      EXPECT_EQ(after.bytes_loaded_tcp - before.bytes_loaded_tcp, kLarge);
      EXPECT_EQ(after.bytes_loaded_shm - before.bytes_loaded_shm, 0u);
    }
  }
  EXPECT_GE(small_read, 0);
  EXPECT_GE(large_read, 0);
}

}  // namespace
}  // namespace shelf
