// Disk faults under the SSD tier: a full file system (a tiny tmpfs the test
// mounts, so it needs root and skips without it) and blob files corrupted
// on disk. In both, errors are clear (a status that says what happened, a
// log line), nothing wrong is ever served, and the store keeps serving.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "shelf/client.h"
#include "storage/ssd_tier.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/fault/fault_util.h"
#include "transport/tcp_client.h"

namespace shelf {
namespace {

using fault::BlockBytes;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A tmpfs of `bytes` mounted on a fresh directory, unmounted on destruction.
class TinyDisk {
 public:
  static absl::StatusOr<std::unique_ptr<TinyDisk>> Mount(uint64_t bytes) {
    if (!fault::IsRoot()) return absl::FailedPreconditionError("mounting a tmpfs needs root");
    std::string tmpl = (std::filesystem::temp_directory_path() / "shelf-fulldisk-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return absl::UnavailableError("mkdtemp failed");
    std::string opts = absl::StrCat("size=", bytes);
    // In a mount namespace of this thread's own (inherited by the stores it
    // forks), the mount dies with the test even if the test aborts.
    static const bool private_ns = unshare(CLONE_NEWNS) == 0 &&
                                   mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
    (void)private_ns;
    if (mount("tmpfs", tmpl.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      std::string err = ErrnoText(errno);
      rmdir(tmpl.c_str());
      return absl::FailedPreconditionError(absl::StrCat("mount tmpfs: ", err));
    }
    return std::unique_ptr<TinyDisk>(new TinyDisk(tmpl));
  }
  ~TinyDisk() {
    umount2(dir_.c_str(), MNT_DETACH);
    rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }

 private:
  explicit TinyDisk(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Fills a tier on a 4 MiB disk; returns how many 512 KiB blocks it took and
// the error of the first that did not fit.
void FillTier(storage::SsdTier* tier, int* stored, absl::Status* full) {
  constexpr size_t kBytes = 512 << 10;
  *stored = 0;
  *full = absl::OkStatus();
  for (int i = 0; i < 64 && full->ok(); ++i) {
    std::string data = BlockBytes(kBytes, i);
    // Each block made durable before the next, as the store's mover does.
    *full = tier->Put(absl::StrCat("k", i), data.data(), data.size(),
                      BlockChecksum(data.data(), data.size()));
    if (full->ok()) *full = tier->Sync();
    if (full->ok()) ++*stored;
  }
}

TEST(FullDiskTest, SsdTierReportsNoSpaceAndKeepsWhatItHas) {
  auto disk = TinyDisk::Mount(4ull << 20);
  if (!disk.ok()) GTEST_SKIP() << disk.status();
  storage::SsdTier::Options so;
  so.dir = (*disk)->dir() + "/ssd";
  so.capacity_bytes = 1ull << 30;  // the tier believes it has room; the disk has not
  auto tier = storage::SsdTier::Open(so);
  ASSERT_TRUE(tier.ok()) << tier.status();
  int stored = 0;
  absl::Status full;
  FillTier(tier->get(), &stored, &full);
  ASSERT_FALSE(full.ok()) << "a 4 MiB disk took 32 MiB";
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("No space left"), absl::string_view::npos)
      << "the error should say the disk is full: " << full;
  // The failed block is not there; what was stored reads back exactly.
  std::string got;
  EXPECT_EQ((*tier)->Get(absl::StrCat("k", stored), &got).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE((*tier)->Contains(absl::StrCat("k", stored)));
  EXPECT_EQ((*tier)->Inventory().size(), static_cast<size_t>(stored));
  for (int i = 0; i < stored; ++i) {
    absl::Status s = (*tier)->Get(absl::StrCat("k", i), &got);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    EXPECT_TRUE(got == BlockBytes(512 << 10, i)) << i;
  }
  // Later writes of the same size keep failing cleanly (the extent file
  // cannot grow, or RocksDB stops writing the index after a hard error),
  // at Put or at the Sync that would make them durable; nothing crashes.
  std::string data = BlockBytes(512 << 10, 99);
  absl::Status late =
      (*tier)->Put("late", data.data(), data.size(), BlockChecksum(data.data(), data.size()));
  if (late.ok()) late = (*tier)->Sync();
  EXPECT_FALSE(late.ok());
  EXPECT_FALSE((*tier)->Contains("late"));
  tier->reset();
}

// RocksDB writes an info log; were it a LOG file in the tier's directory,
// a full disk would fail that write, then the error message to the same
// log, and RocksDB 7.8 (Debian's build keeps assertions) would abort the
// process. SsdTier sends the info log to the process log instead: a full
// SSD is a RESOURCE_EXHAUSTED write, not a dead store.
TEST(FullDiskTest, SsdTierWithItsInfoLogOnTheFullDiskSurvives) {
  auto disk = TinyDisk::Mount(4ull << 20);
  if (!disk.ok()) GTEST_SKIP() << disk.status();
  storage::SsdTier::Options so;
  so.dir = (*disk)->dir() + "/ssd";
  so.capacity_bytes = 1ull << 30;
  auto tier = storage::SsdTier::Open(so);
  ASSERT_TRUE(tier.ok()) << tier.status();
  int stored = 0;
  absl::Status full;
  FillTier(tier->get(), &stored, &full);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  tier->reset();
}

// A store whose SSD directory fills keeps running: demotions fail with the
// disk's error (the blocks stay in DRAM or are dropped), nothing wrong is
// served, and the DRAM tier keeps taking blocks.
TEST(FullDiskTest, StoreWithAFullSsdDirectoryServesNothingWrong) {
  auto disk = TinyDisk::Mount(6ull << 20);
  if (!disk.ok()) GTEST_SKIP() << disk.status();
  LocalCluster::Options o;
  o.stores = 0;
  o.dram_bytes = 8ull << 20;
  o.bin_dir = TestBinDir();
  o.master_args = {"--demote-wait", "300ms"};
  o.keep_work_dir = std::getenv("SHELF_FAULT_KEEP") != nullptr;
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  auto idx = c.AddStore({"--ssd-dir", (*disk)->dir() + "/ssd", "--ssd-size", "256MiB"});
  ASSERT_TRUE(idx.ok()) << idx.status();
  ClientOptions co;
  co.masters = {c.master_address()};
  co.timeout_ms = 20000;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());

  // Four times the DRAM segment: demotions fill the disk, then fail.
  constexpr size_t kBytes = 256 << 10;
  constexpr int kCount = 128;
  int put_ok = 0;
  for (int i = 0; i < kCount; ++i) {
    std::string data = BlockBytes(kBytes, i);
    Status s = client->Put(absl::StrCat("full-", i), data.data(), data.size());
    if (s.ok()) {
      ++put_ok;
    } else {
      EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
      if (put_ok == i) std::printf("first failed put (%d): %s\n", i, s.ToString().c_str());
    }
  }
  EXPECT_GT(put_ok, kCount / 2);
  int hits = 0;
  for (int i = 0; i < kCount; ++i) {
    std::string got;
    Status s = client->Get(absl::StrCat("full-", i), &got);
    if (s.ok()) {
      ++hits;
      EXPECT_TRUE(got == BlockBytes(kBytes, i)) << "wrong bytes for block " << i;
    } else {
      EXPECT_EQ(s.code(), StatusCode::kNotFound) << i << ": " << s.ToString();
    }
  }
  EXPECT_GT(hits, 0);
  // The failure is visible to the operator: the master logs the failed
  // demotions with the store's reason.
  std::string log = ReadFile(c.work_dir() + "/master.log");
  EXPECT_NE(log.find("demotion failed"), std::string::npos);
  EXPECT_NE(log.find("No space left"), std::string::npos)
      << "master log should carry the disk's error";
  // The store is alive and still takes blocks in DRAM.
  EXPECT_TRUE(c.store_process(0)->Running());
  std::string data = BlockBytes(4096, 4242);
  EXPECT_TRUE(client->Put("after-full", data.data(), data.size()).ok());
  std::string got;
  EXPECT_TRUE(client->Get("after-full", &got).ok());
  EXPECT_TRUE(got == data);
  std::printf("full SSD: %d of %d puts ok, %d readable afterwards\n", put_ok, kCount, hits);
}

// Flips bytes through the file holding block bytes under `dir` (the
// extent file); returns how many files.
int CorruptExtentFiles(const std::string& dir) {
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() != "extents.dat") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    uint64_t size = e.file_size();
    for (uint64_t off = 100; off + 100 < size; off += 1024) {
      f.seekg(static_cast<std::streamoff>(off));
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5A);
      f.seekp(static_cast<std::streamoff>(off));
      f.write(&c, 1);
    }
    ++files;
  }
  return files;
}

TEST(CorruptBlobTest, CorruptSsdBlocksAreReportedAndNeverServed) {
  LocalCluster::Options o;
  o.stores = 1;
  o.dram_bytes = 16ull << 20;
  o.ssd_bytes = 256ull << 20;
  o.bin_dir = TestBinDir();
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  ClientOptions co;
  co.masters = {c.master_address()};
  co.timeout_ms = 10000;
  co.verify_checksums = false;  // the store itself must not serve bad bytes
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  fault::FaultProbe probe(c.master_address(), "");

  constexpr size_t kBytes = 256 << 10;
  constexpr int kCount = 8;
  std::vector<std::string> keys;
  for (int i = 0; i < kCount; ++i) {
    keys.push_back(absl::StrCat("blob-", i));
    std::string data = BlockBytes(kBytes, i);
    ASSERT_TRUE(client->Put(keys.back(), data.data(), data.size()).ok());
  }
  // Demote everything to the SSD tier and wait until the master has moved
  // every replica there.
  {
    v1::EvictRequest req;
    req.set_bytes(1ull << 40);
    v1::EvictResponse resp;
    ASSERT_TRUE(probe.admin()->Evict(probe.Context().get(), req, &resp).ok());
    EXPECT_EQ(resp.demoted_objects(), static_cast<uint64_t>(kCount));
  }
  auto all_on_ssd = [&](const v1::StatusResponse& st) {
    return st.ssd_used_bytes() == kCount * kBytes && st.dram_used_bytes() == 0;
  };
  ASSERT_TRUE(probe.WaitFor(all_on_ssd, 15000).ok());

  // A clean stop flushes RocksDB, so the blocks sit in blob files; the
  // restarted store reports them.
  auto restart = [&]() -> absl::Status {
    c.store_process(0)->Stop();
    if (absl::Status s = c.RestartStore(0); !s.ok()) return s;
    return probe.WaitFor(
        [&](const v1::StatusResponse& st) {
          for (const v1::NodeStatus& n : st.nodes()) {
            if (n.address() == c.store_address(0) && n.state() == v1::NODE_LIVE) return true;
          }
          return false;
        },
        15000);
  };
  ASSERT_TRUE(restart().ok());
  ASSERT_TRUE(probe.WaitFor(all_on_ssd, 15000).ok());
  ASSERT_GT(CorruptExtentFiles(c.store_ssd_dir(0)), 0) << "no extent file to corrupt";

  // The running store reads the damaged files: DATA_LOSS, never a hit, and
  // never wrong bytes, through the client and on the raw data plane.
  int data_loss = 0;
  for (int i = 0; i < kCount / 2; ++i) {
    std::string got;
    Status s = client->Get(keys[i], &got);
    if (s.ok()) {
      EXPECT_TRUE(got == BlockBytes(kBytes, i)) << "corrupt bytes served for " << keys[i];
    } else {
      EXPECT_TRUE(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kNotFound)
          << s.ToString();
      data_loss += s.code() == StatusCode::kDataLoss;
    }
  }
  EXPECT_GT(data_loss, 0);
  {
    transport::TcpDataClient raw(transport::TcpDataClient::Options{});
    std::string buf(kBytes, '\0');
    for (int i = kCount / 2; i < kCount; ++i) {
      absl::Status s =
          raw.ReadKey(c.store_address(0), keys[i], kBytes, buf.data(), MonoMs() + 5000);
      if (s.ok()) {
        EXPECT_TRUE(buf == BlockBytes(kBytes, i)) << "corrupt bytes served for " << keys[i];
      } else {
        EXPECT_TRUE(s.code() == absl::StatusCode::kDataLoss ||
                    s.code() == absl::StatusCode::kNotFound)
            << s;
      }
    }
  }
  std::string log = ReadFile(c.store_log(0));
  EXPECT_NE(log.find("corrupt SSD entry dropped"), std::string::npos);

  // A restart over the damaged files: the store comes up, and what it
  // reports is either intact or not served.
  ASSERT_TRUE(restart().ok());
  for (int i = 0; i < kCount; ++i) {
    std::string got;
    Status s = client->Get(keys[i], &got);
    if (s.ok()) {
      EXPECT_TRUE(got == BlockBytes(kBytes, i)) << "corrupt bytes served for " << keys[i];
    } else {
      EXPECT_TRUE(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kNotFound)
          << s.ToString();
    }
  }
  std::string data = BlockBytes(kBytes, 99);
  ASSERT_TRUE(client->Put("after-corruption", data.data(), data.size()).ok());
  std::string got;
  ASSERT_TRUE(client->Get("after-corruption", &got).ok());
  EXPECT_TRUE(got == data);
}

// An SSD directory RocksDB cannot open (here: its CURRENT file is garbage):
// the store moves it aside, starts the tier empty keeping the node id file,
// says so in its log, and serves.
TEST(UnreadableSsdDirTest, StoreStartsWithAnEmptyTierAndKeepsItsNodeId) {
  LocalCluster::Options o;
  o.stores = 0;
  o.dram_bytes = 8ull << 20;
  o.bin_dir = TestBinDir();
  o.keep_work_dir = std::getenv("SHELF_FAULT_KEEP") != nullptr;
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  std::string dir = c.work_dir() + "/broken.ssd";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/CURRENT") << "this is not a manifest name\n";
    std::ofstream(dir + "/NODE_ID") << "node-keepme\n";
  }
  auto idx = c.AddStore({"--ssd-dir", dir, "--ssd-size", "64MiB"});
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_TRUE(c.store_process(0)->Running());
  std::string log = ReadFile(c.store_log(0));
  EXPECT_NE(log.find("SSD TIER UNREADABLE"), std::string::npos) << log;
  EXPECT_NE(log.find("SSD tier open"), std::string::npos) << log;
  // The old directory is kept, renamed, with what it held.
  int aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(c.work_dir())) {
    if (e.path().filename().string().rfind("broken.ssd.unreadable-", 0) == 0) {
      ++aside;
      EXPECT_EQ(ReadFile((e.path() / "CURRENT").string()), "this is not a manifest name\n");
    }
  }
  EXPECT_EQ(aside, 1);
  // The identity moved into the fresh directory (this cluster also pins
  // --node-id, so the file is what a restart without it would read).
  EXPECT_EQ(ReadFile(dir + "/NODE_ID"), "node-keepme\n");
  // The store serves, and its fresh tier takes demotions.
  ClientOptions co;
  co.masters = {c.master_address()};
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  constexpr size_t kBytes = 256 << 10;
  for (int i = 0; i < 64; ++i) {
    std::string data = BlockBytes(kBytes, i);
    ASSERT_TRUE(client->Put(absl::StrCat("fresh-", i), data.data(), data.size()).ok()) << i;
  }
  int read = 0;
  for (int i = 0; i < 64; ++i) {
    std::string got;
    Status s = client->Get(absl::StrCat("fresh-", i), &got);
    if (!s.ok()) continue;
    ++read;
    EXPECT_TRUE(got == BlockBytes(kBytes, i)) << i;
  }
  // 16 MiB into 8 MiB of DRAM: most of what was written went to SSD.
  EXPECT_GT(read, 48);
}

}  // namespace
}  // namespace shelf
