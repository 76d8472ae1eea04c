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
#include "testing/wait_for.h"

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

void StartRig(const char* kill_point, CrashRig* rig,
              const std::vector<std::string>& store_args = {}) {
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
  auto added = rig->cluster->AddStore(store_args);
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
// Where shelfctl stat says `key` lies: "dram", "ssd", "both" or "none".
std::string TiersOf(LocalCluster* cluster, const std::string& key) {
  std::string stat;
  cluster->Shelfctl({"stat", key}, &stat);
  const bool ssd = stat.find(" ssd offset ") != std::string::npos;
  const bool dram = stat.find(" dram ") != std::string::npos;
  return dram && ssd ? "both" : ssd ? "ssd" : dram ? "dram" : "none";
}

// A store killed with blocks in every state a DRAM byte can be in: clean
// (promoted back from its SSD copy, or copied ahead to it), DRAM-only (fresh puts, and a key
// replaced after its old value was demoted, whose old value the SSD may
// still hold when the store dies), and demoting (a run whose SSD writes
// are not durable). After the restart every block the master indexes
// reads back whole, and no key is ever served an older value than the
// last one put.
TEST(DemotionCrashTest, CleanDramOnlyAndDemotingBlocksComeBackWholeAndNeverStale) {
  CrashRig rig;
  ASSERT_NO_FATAL_FAILURE(StartRig("before-sync", &rig, {"--promote-on-hit"}));
  LocalCluster* cluster = rig.cluster.get();
  Client* client = rig.client.get();
  constexpr size_t kMiB = 1 << 20;
  auto put = [&](const std::string& key, uint64_t seed, bool replace) {
    std::string data = Block(kMiB, seed);
    PutOptions po;
    po.replace = replace;
    ASSERT_TRUE(client->Put(key, data.data(), data.size(), po).ok()) << key;
  };
  auto evict_one = [&](const std::string& key) {
    std::string out;
    ASSERT_EQ(cluster->Shelfctl({"evict", "--bytes", "1MiB"}, &out), 0) << out;
    ASSERT_TRUE(WaitFor([&] { return TiersOf(cluster, key) == "ssd"; }, 15000))
        << key << " is " << TiersOf(cluster, key);
  };
  // S's first value, and A, each demoted alone (a run of one: the kill
  // point waits for a run of two).
  ASSERT_NO_FATAL_FAILURE(put("s", 1, false));
  ASSERT_NO_FATAL_FAILURE(evict_one("s"));
  ASSERT_NO_FATAL_FAILURE(put("a", 2, false));
  ASSERT_NO_FATAL_FAILURE(evict_one("a"));
  // A read promotes A: clean, in DRAM and on SSD.
  std::string got;
  ASSERT_TRUE(client->Get("a", &got).ok());
  ASSERT_TRUE(WaitFor([&] { return TiersOf(cluster, "a") == "both"; }, 15000))
      << "a is " << TiersOf(cluster, "a");
  // S replaced: its new value is DRAM-only. DRAM-only blocks besides.
  ASSERT_NO_FATAL_FAILURE(put("s", 3, true));
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(put(absl::StrCat("d", i), 10 + i, false));
  // S's new value copied ahead (a run of one), kept in DRAM: clean too.
  std::string out;
  ASSERT_EQ(cluster->Shelfctl({"evict", "--copy", "--bytes", "1MiB"}, &out), 0) << out;
  ASSERT_TRUE(WaitFor([&] { return TiersOf(cluster, "s") == "both"; }, 15000))
      << "s is " << TiersOf(cluster, "s");
  // A run of demotions: dropping the clean DRAM copies of A and S (their
  // blocks stay on SSD) frees 2 MiB, demoting D0 and D1 the rest; the
  // store dies before they are durable.
  ASSERT_EQ(cluster->Shelfctl({"evict", "--bytes", "4MiB"}, &out), 0) << out;
  Process* store = cluster->store_process(rig.store);
  ASSERT_NE(store->Wait(20000), -1) << "the store did not reach its kill point";
  // Until the master declares the store dead, its DRAM replicas stay
  // indexed and read as DATA_LOSS (the checksum catches the new process's
  // empty segment), never as wrong bytes; the checks below start after.
  ASSERT_TRUE(cluster->WaitForLiveNodes(0, 8000).ok());
  ASSERT_TRUE(cluster->RestartStore(rig.store).ok());
  ASSERT_TRUE(cluster->WaitForLiveNodes(1, 15000).ok());

  const std::pair<std::string, uint64_t> latest[] = {
      {"s", 3}, {"a", 2}, {"d0", 10}, {"d1", 11}, {"d2", 12}};
  int readable = 0;
  for (const auto& [key, seed] : latest) {
    const std::string tiers = TiersOf(cluster, key);
    Status s = client->Get(key, &got);
    if (tiers != "none") {
      ASSERT_TRUE(s.ok()) << key << " is indexed (" << tiers << ") but reads " << s.ToString();
    }
    if (s.ok()) {
      ASSERT_TRUE(got == Block(kMiB, seed))
          << key << " came back with another value (an older one: stale)";
      ++readable;
    } else {
      EXPECT_EQ(s.code(), StatusCode::kNotFound) << key << ": " << s.ToString();
    }
  }
  // A's and S's SSD copies were durable before the crash: S reads its
  // second value, never its first.
  EXPECT_TRUE(client->Get("a", &got).ok());
  EXPECT_TRUE(client->Get("s", &got).ok());
  std::printf("mixed states: %d of 5 keys readable after the crash\n", readable);
}

}  // namespace shelf
