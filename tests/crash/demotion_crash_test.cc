// kill -9 in the middle of a demotion (fault injected through
// SHELF_FAULT_KILL_IN_DEMOTION in the store): after a restart on the same
// SSD directory each block is either fully readable or cleanly absent,
// never half and never wrong.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "shelf/client.h"
#include "tools/local_cluster.h"

namespace shelf {
namespace {

std::string Block(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

void RunCrash(const char* kill_point, bool expect_some_on_ssd) {
  LocalCluster::Options o;
  o.stores = 0;
  o.dram_bytes = 8ull << 20;
  o.ssd_bytes = 64ull << 20;
  o.bin_dir = SHELF_BIN_DIR;
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  setenv("SHELF_FAULT_KILL_IN_DEMOTION", kill_point, 1);
  auto added = (*cluster)->AddStore();
  unsetenv("SHELF_FAULT_KILL_IN_DEMOTION");
  ASSERT_TRUE(added.ok()) << added.status();
  ClientOptions co;
  co.masters = {(*cluster)->master_address()};
  co.timeout_ms = 5000;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  // Fill past the high watermark: the first demotion kills the store.
  constexpr int kBlocks = 12;
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = Block(1 << 20, i);
    client->Put(absl::StrCat("c", i), data.data(), data.size());
  }
  Process* store = (*cluster)->store_process(*added);
  ASSERT_NE(store->Wait(10000), -1) << "the store did not reach its kill point";
  ASSERT_TRUE((*cluster)->WaitForLiveNodes(0, 8000).ok());
  ASSERT_TRUE((*cluster)->RestartStore(*added).ok());
  ASSERT_TRUE((*cluster)->WaitForLiveNodes(1, 15000).ok());
  int readable = 0;
  for (int i = 0; i < kBlocks; ++i) {
    std::string got;
    Status s = client->Get(absl::StrCat("c", i), &got);
    if (s.ok()) {
      ASSERT_TRUE(got == Block(1 << 20, i)) << "block " << i << " came back with wrong bytes";
      ++readable;
    } else {
      EXPECT_EQ(s.code(), StatusCode::kNotFound) << "block " << i << ": " << s.ToString();
    }
  }
  std::printf("%s: %d of %d blocks readable after the crash\n", kill_point, readable, kBlocks);
  if (expect_some_on_ssd) {
    EXPECT_GE(readable, 1) << "the block written before the kill is lost";
  } else {
    EXPECT_EQ(readable, 0) << "DRAM does not survive a restart and nothing reached SSD";
  }
}

TEST(DemotionCrashTest, KilledBeforeTheSsdWriteLeavesNothingHalf) {
  RunCrash("before-write", false);
}

TEST(DemotionCrashTest, KilledAfterTheSsdWriteKeepsTheWholeBlock) {
  RunCrash("after-write", true);
}

}  // namespace
}  // namespace shelf
