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
#include "testing/local_cluster.h"
#include "testing/test_paths.h"

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

// A master, one store (8 MiB DRAM, 64 MiB SSD) started with the fault
// point `kill_point`, and a client.
struct CrashRig {
  std::unique_ptr<LocalCluster> cluster;
  int store = -1;
  std::unique_ptr<Client> client;
};

void StartRig(const char* kill_point, CrashRig* rig) {
  LocalCluster::Options o;
  o.stores = 0;
  o.dram_bytes = 8ull << 20;
  o.ssd_bytes = 64ull << 20;
  o.bin_dir = TestBinDir();
  // Demotions start at the fixed watermark only (not ahead of the put
  // rate), so each test knows which puts and orders demote.
  o.master_args = {"--demote-lead", "0"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  rig->cluster = *std::move(cluster);
  // The store gets the variable only by inheriting it (LocalCluster passes no
  // environment): set and cleared on the test's thread before the test starts
  // threads of its own; this process does not read it.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): see above
  setenv("SHELF_FAULT_KILL_IN_DEMOTION", kill_point, 1);
  auto added = rig->cluster->AddStore();
  unsetenv("SHELF_FAULT_KILL_IN_DEMOTION");  // NOLINT(concurrency-mt-unsafe): as above
  ASSERT_TRUE(added.ok()) << added.status();
  rig->store = *added;
  ClientOptions co;
  co.masters = {rig->cluster->master_address()};
  co.timeout_ms = 5000;
  ASSERT_TRUE(Client::Open(co, &rig->client).ok());
}

void RunCrash(const char* kill_point, bool expect_some_on_ssd) {
  CrashRig rig;
  ASSERT_NO_FATAL_FAILURE(StartRig(kill_point, &rig));
  LocalCluster* cluster = rig.cluster.get();
  Client* client = rig.client.get();
  // Fill past the high watermark: the first demotion kills the store.
  constexpr int kBlocks = 12;
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = Block(1 << 20, i);
    client->Put(absl::StrCat("c", i), data.data(), data.size());
  }
  Process* store = cluster->store_process(rig.store);
  ASSERT_NE(store->Wait(10000), -1) << "the store did not reach its kill point";
  ASSERT_TRUE(cluster->WaitForLiveNodes(0, 8000).ok());
  ASSERT_TRUE(cluster->RestartStore(rig.store).ok());
  ASSERT_TRUE(cluster->WaitForLiveNodes(1, 15000).ok());
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

// Four demotions ordered at once run as one batch; the store dies after
// executing them, before their Sync, having waited long enough for any
// early report to reach the master. Every block the master was told is on
// SSD must read back whole after the restart: a demotion reported before
// its Sync would have let the master free the only DRAM copy of a block
// the crash then took from the SSD tier (its memtable, without a WAL).
TEST(DemotionCrashTest, NoDemotionIsReportedBeforeItIsDurable) {
  CrashRig rig;
  ASSERT_NO_FATAL_FAILURE(StartRig("before-sync", &rig));
  LocalCluster* cluster = rig.cluster.get();
  Client* client = rig.client.get();
  // 6 MiB of 8: below the high watermark, so only the order below demotes.
  constexpr int kBlocks = 6;
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = Block(1 << 20, 100 + i);
    ASSERT_TRUE(client->Put(absl::StrCat("d", i), data.data(), data.size()).ok());
  }
  std::string out;
  ASSERT_EQ(cluster->Shelfctl({"evict", "--bytes", "4MiB", "--json"}, &out), 0) << out;
  size_t at = out.find("\"demoted_objects\"");
  ASSERT_NE(at, std::string::npos) << out;
  ASSERT_EQ(std::strtoull(out.c_str() + out.find(':', at) + 1, nullptr, 10), 4u) << out;
  Process* store = cluster->store_process(rig.store);
  ASSERT_NE(store->Wait(20000), -1) << "the store did not reach its kill point";
  // What the master believes now, before the store is declared dead.
  std::vector<int> on_ssd;
  for (int i = 0; i < kBlocks; ++i) {
    std::string stat;
    cluster->Shelfctl({"stat", absl::StrCat("d", i)}, &stat);
    if (stat.find(" ssd offset ") != std::string::npos) on_ssd.push_back(i);
  }
  ASSERT_TRUE(cluster->RestartStore(rig.store).ok());
  ASSERT_TRUE(cluster->WaitForLiveNodes(1, 15000).ok());
  for (int i : on_ssd) {
    std::string got;
    Status s = client->Get(absl::StrCat("d", i), &got);
    ASSERT_TRUE(s.ok()) << "block d" << i
                        << " was reported on SSD before it was durable and is lost: "
                        << s.ToString();
    ASSERT_TRUE(got == Block(1 << 20, 100 + i)) << "block d" << i << " came back with wrong bytes";
  }
  std::printf("before-sync: the master had been told of %zu demotions at the kill\n",
              on_ssd.size());
}

TEST(DemotionCrashTest, KilledBeforeTheSsdWriteLeavesNothingHalf) {
  RunCrash("before-write", false);
}

TEST(DemotionCrashTest, KilledAfterTheSsdWriteKeepsTheWholeBlock) { RunCrash("after-write", true); }

}  // namespace
}  // namespace shelf
