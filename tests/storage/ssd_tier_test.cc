// SSD tier tests on real files (the extent file and the RocksDB index),
// with faults injected through a FileSystem wrapper (the RocksDB seam):
// failing index writes; and a flipped byte in the extent file.
#include "storage/ssd_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/mutex.h"
#include "common/sync_point.h"

namespace shelf::storage {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const char* name) {
  std::string dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(getpid());
  fs::remove_all(dir);
  return dir;
}

// A tier of `capacity` bytes in `dir`; optionally an index fault seam and
// the extent file's growth step.
SsdTier::Options TierOptions(std::string dir, uint64_t capacity, rocksdb::Env* env = nullptr,
                             uint64_t grow_bytes = 0) {
  SsdTier::Options o;
  o.dir = std::move(dir);
  o.capacity_bytes = capacity;
  o.env = env;
  if (grow_bytes != 0) o.grow_bytes = grow_bytes;
  return o;
}

std::string Block(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Fault injection: while `fail_writes` is set, every append to a file
// fails with an I/O error, as a failing or full disk would.
class FaultInjectionFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultInjectionFs(const std::shared_ptr<rocksdb::FileSystem>& base)
      : rocksdb::FileSystemWrapper(base) {}
  const char* Name() const override { return "FaultInjectionFs"; }
  std::atomic<bool> fail_writes{false};

  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, FaultInjectionFs* fs)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
      if (fs_->fail_writes.load()) return rocksdb::IOStatus::IOError("injected write failure");
      return rocksdb::FSWritableFileOwnerWrapper::Append(data, o, d);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* d) override {
      if (fs_->fail_writes.load()) return rocksdb::IOStatus::IOError("injected write failure");
      return rocksdb::FSWritableFileOwnerWrapper::Append(data, o, v, d);
    }

   private:
    FaultInjectionFs* fs_;
  };

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* d) override {
    std::unique_ptr<rocksdb::FSWritableFile> f;
    rocksdb::IOStatus s = target()->NewWritableFile(name, o, &f, d);
    if (s.ok()) result->reset(new File(std::move(f), this));
    return s;
  }
};

TEST(SsdTier, PutGetDeleteAndInventorySurviveReopen) {
  std::string dir = TempDir("ssd-reopen");
  std::string a = Block(300 << 10, 1), b = Block(5000, 2);
  {
    auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
    ASSERT_TRUE(tier.ok()) << tier.status();
    ASSERT_TRUE((*tier)->Put("a", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
    ASSERT_TRUE((*tier)->Put("b", b.data(), b.size(), BlockChecksum(b.data(), b.size())).ok());
    ASSERT_TRUE((*tier)->Put("c", b.data(), 10, BlockChecksum(b.data(), 10)).ok());
    ASSERT_TRUE((*tier)->Delete("c").ok());
    EXPECT_EQ((*tier)->used_bytes(), a.size() + b.size());
  }
  auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ((*tier)->used_bytes(), a.size() + b.size());
  auto inv = (*tier)->Inventory();
  ASSERT_EQ(inv.size(), 2u);
  std::string got;
  ASSERT_TRUE((*tier)->Get("a", &got).ok());
  EXPECT_EQ(got, a);
  EXPECT_EQ((*tier)->Get("c", &got).code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

// The tier's files name every tenant's keys and hold their blocks: another
// local user reads none of them, whatever the umask the store started
// under (RocksDB creates its files 0644 under umask 022), and a directory
// made before with looser modes is tightened.
TEST(SsdTier, AnotherUserReadsNoneOfItsFilesWhateverTheUmask) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  for (bool existed : {false, true}) {
    std::string dir = TempDir(existed ? "ssd-private-existing" : "ssd-private");
    if (existed) {
      fs::create_directories(dir);
      chmod(dir.c_str(), 0755);
    }
    const mode_t old_umask = umask(022);
    {
      auto tier = SsdTier::Open(TierOptions(dir, 16 << 20));
      umask(old_umask);
      ASSERT_TRUE(tier.ok()) << tier.status();
      std::string a = Block(8192, 7);
      ASSERT_TRUE(
          (*tier)->Put("team-a/k", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
      ASSERT_TRUE((*tier)->Sync().ok());
    }
    struct stat st;
    ASSERT_EQ(stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << (existed ? "an existing directory" : "a new one");
    // As uid 65534 (nobody): neither the index's files nor the extent file
    // open, nor is the directory listed.
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
    ASSERT_FALSE(files.empty());
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
      int opened = 0;
      for (const std::string& f : files) {
        int fd = open(f.c_str(), O_RDONLY);
        if (fd >= 0) {
          ++opened;
          close(fd);
        }
      }
      // Plain system calls only: the parent has threads, the child one.
      if (int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY); fd >= 0) {
        ++opened;
        close(fd);
      }
      _exit(opened == 0 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "another uid read the tier's files";
    fs::remove_all(dir);
  }
}

// DeleteMany (a store's run of SSD drops): every key named goes, durable
// ones and puts not yet synced alike; absent and repeated keys are no
// error; every extent is freed once the deletes are synced.
TEST(SsdTier, DeleteManyDropsEveryKeyNamedAndFreesTheirExtents) {
  std::string dir = TempDir("ssd-delete-many");
  constexpr uint64_t kSize = 64 << 10;
  auto key = [](int i) { return absl::StrCat("k", i); };
  {
    auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (int i = 0; i < 10; ++i) {
      std::string b = Block(kSize, 100 + i);
      ASSERT_TRUE((*tier)->Put(key(i), b.data(), b.size(), BlockChecksum(b.data(), b.size())).ok());
    }
    ASSERT_TRUE((*tier)->Sync().ok());
    const uint64_t free_before = (*tier)->free_extent_bytes();
    // Not yet synced: a new key, and a new version of a durable one.
    std::string b10 = Block(kSize, 110), b3 = Block(kSize, 203);
    ASSERT_TRUE(
        (*tier)->Put(key(10), b10.data(), b10.size(), BlockChecksum(b10.data(), b10.size())).ok());
    ASSERT_TRUE(
        (*tier)->Put(key(3), b3.data(), b3.size(), BlockChecksum(b3.data(), b3.size())).ok());
    ASSERT_TRUE((*tier)->DeleteMany({key(1), key(3), key(5), key(10), "absent", key(1)}).ok());
    EXPECT_EQ((*tier)->used_bytes(), 7 * kSize);
    std::string got;
    for (int i : {1, 3, 5, 10}) {
      EXPECT_EQ((*tier)->Get(key(i), &got).code(), absl::StatusCode::kNotFound) << key(i);
    }
    ASSERT_TRUE((*tier)->Get(key(4), &got).ok());
    EXPECT_EQ(got, Block(kSize, 104));
    ASSERT_TRUE((*tier)->Sync().ok());
    // Freed: the three durable extents, and the two pending puts' own
    // (which took two extents of the free space measured before).
    EXPECT_EQ((*tier)->free_extent_bytes(), free_before + 3 * kSize);
  }
  auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<std::string> keys;
  for (const SsdTier::Entry& e : (*tier)->Inventory()) keys.push_back(e.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"k0", "k2", "k4", "k6", "k7", "k8", "k9"}));
  EXPECT_EQ((*tier)->used_bytes(), 7 * kSize);
  fs::remove_all(dir);
}

// The inventory (what a store reports to a new master) lists only what a
// crash would keep: a put is listed once synced, and an overwrite not yet
// synced shows the version it replaces.
TEST(SsdTier, InventoryListsOnlyDurableVersions) {
  std::string dir = TempDir("ssd-inventory");
  std::string a = Block(64 << 10, 11), b = Block(64 << 10, 12);
  const uint64_t ca = BlockChecksum(a.data(), a.size()), cb = BlockChecksum(b.data(), b.size());
  auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  auto listed = [&]() {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const SsdTier::Entry& e : (*tier)->Inventory()) out.emplace_back(e.key, e.checksum);
    return out;
  };
  using Listed = std::vector<std::pair<std::string, uint64_t>>;
  ASSERT_TRUE((*tier)->Put("k", a.data(), a.size(), ca).ok());
  EXPECT_EQ(listed(), Listed{});
  ASSERT_TRUE((*tier)->Sync().ok());
  EXPECT_EQ(listed(), (Listed{{"k", ca}}));
  ASSERT_TRUE((*tier)->Put("k", b.data(), b.size(), cb).ok());
  EXPECT_EQ(listed(), (Listed{{"k", ca}}));
  ASSERT_TRUE((*tier)->Sync().ok());
  EXPECT_EQ(listed(), (Listed{{"k", cb}}));
  tier->reset();
  fs::remove_all(dir);
}

TEST(SsdTier, RefusesWrongChecksumAndOverCapacity) {
  std::string dir = TempDir("ssd-cap");
  auto tier = SsdTier::Open(TierOptions(dir, 1 << 20));
  ASSERT_TRUE(tier.ok());
  std::string a = Block(600 << 10, 3);
  EXPECT_EQ((*tier)->Put("a", a.data(), a.size(), 12345).code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE((*tier)->Put("a", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
  EXPECT_EQ((*tier)->Put("b", a.data(), a.size(), BlockChecksum(a.data(), a.size())).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE((*tier)->Sync().ok());
  EXPECT_EQ((*tier)->Inventory().size(), 1u);
  fs::remove_all(dir);
}

TEST(SsdTier, PutInPlaceWritesFromTheCallersMemoryAndAccountsItsWrites) {
  std::string dir = TempDir("ssd-in-place");
  // Aligned memory as a store's segment is: a block of whole pages, one
  // over a chunk with a partial last page, and one at an unaligned address
  // (copied, as Put does).
  constexpr size_t kBytes = (5 << 20) + (64 << 10);
  char* mem = static_cast<char*>(std::aligned_alloc(4096, kBytes));
  ASSERT_NE(mem, nullptr);
  std::string original = Block(kBytes, 9);
  std::memcpy(mem, original.data(), kBytes);
  struct Case {
    const char* key;
    size_t at, size;
  };
  const Case cases[] = {{"pages", 0, 8192}, {"tail", 4096, (5 << 20) + 1000}, {"odd", 1, 3000}};
  SsdTier::Options o = TierOptions(dir, 64 << 20);
  o.max_inflight_bytes = 1 << 20;  // a write count that leaked would hang the puts below
  {
    auto tier = SsdTier::Open(o);
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (const Case& c : cases) {
      ASSERT_TRUE(
          (*tier)->PutInPlace(c.key, mem + c.at, c.size, BlockChecksum(mem + c.at, c.size)).ok())
          << c.key;
    }
    // A wrong checksum writes nothing and leaves the tier working.
    EXPECT_EQ((*tier)->PutInPlace("bad", mem, 8192, 12345).code(), absl::StatusCode::kDataLoss);
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE(
          (*tier)
              ->PutInPlace(absl::StrCat("many", i), mem, 512 << 10, BlockChecksum(mem, 512 << 10))
              .ok());
    }
    ASSERT_TRUE((*tier)->Sync().ok());
    // Written by the time Sync returns: the memory may change now.
    std::memset(mem, 0, kBytes);
    std::string got;
    for (const Case& c : cases) {
      ASSERT_TRUE((*tier)->Get(c.key, &got).ok()) << c.key;
      EXPECT_EQ(got, original.substr(c.at, c.size)) << c.key;
    }
    EXPECT_EQ((*tier)->Get("bad", &got).code(), absl::StatusCode::kNotFound);
  }
  std::free(mem);
  auto tier = SsdTier::Open(o);
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ((*tier)->Inventory().size(), 3u + 8u);
  std::string got;
  for (const Case& c : cases) {
    ASSERT_TRUE((*tier)->Get(c.key, &got).ok()) << c.key;
    EXPECT_EQ(got, original.substr(c.at, c.size)) << c.key;
  }
  ASSERT_TRUE((*tier)->Get("many7", &got).ok());
  EXPECT_EQ(got, original.substr(0, 512 << 10));
  fs::remove_all(dir);
}

TEST(SsdTier, FlippedByteInTheExtentFileIsDetectedAndNeverServed) {
  std::string dir = TempDir("ssd-flip");
  std::string a = Block(256 << 10, 4);
  {
    auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
    ASSERT_TRUE(tier.ok());
    ASSERT_TRUE((*tier)->Put("a", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
  }  // close: syncs, so the block is in the extent file and indexed
  std::string data = dir + "/extents.dat";
  ASSERT_TRUE(fs::exists(data)) << "no extent file written";
  {
    // The block is the first extent: flip a byte in its middle.
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(a.size() / 2));
    char c;
    f.read(&c, 1);
    c ^= 0x40;
    f.seekp(static_cast<std::streamoff>(a.size() / 2));
    f.write(&c, 1);
  }
  auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::string got;
  absl::Status s = (*tier)->Get("a", &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(got.empty());
  // Dropped: a second read is a clean miss, never the wrong bytes.
  EXPECT_EQ((*tier)->Get("a", &got).code(), absl::StatusCode::kNotFound);
  tier->reset();
  // And the drop is durable.
  tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_FALSE((*tier)->Contains("a"));
  fs::remove_all(dir);
}

#ifdef SHELF_SYNC_POINTS  // the tests that inject through sync points
// A read that finds a version corrupt drops that version alone: a put of
// the key between the read and the drop (pending or already synced) is
// the key's now, and stays, durably.
TEST(SsdTier, DroppingACorruptVersionKeepsANewerPutOfTheKey) {
  for (bool synced : {false, true}) {
    SCOPED_TRACE(synced ? "newer put synced" : "newer put pending");
    std::string dir = TempDir("ssd-drop-version");
    std::string a = Block(256 << 10, 5), b = Block(256 << 10, 6);
    {
      auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
      ASSERT_TRUE(tier.ok());
      ASSERT_TRUE((*tier)->Put("k", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
    }
    {
      // The block is the first extent: flip a byte in its middle.
      std::fstream f(dir + "/extents.dat", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(a.size() / 2));
      f.put('\x5a' ^ a[a.size() / 2]);
    }
    auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
    ASSERT_TRUE(tier.ok()) << tier.status();
    SyncPoint::Get()->SetCallBack("SsdTier::DropCorrupt", [&](void*) {
      ASSERT_TRUE((*tier)->Put("k", b.data(), b.size(), BlockChecksum(b.data(), b.size())).ok());
      if (synced) {
        ASSERT_TRUE((*tier)->Sync().ok());
      }
    });
    SyncPoint::Get()->EnableProcessing();
    std::string got;
    absl::Status s = (*tier)->Get("k", &got);
    SyncPoint::Get()->DisableProcessing();
    SyncPoint::Get()->ClearAll();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    ASSERT_TRUE((*tier)->Get("k", &got).ok());
    EXPECT_TRUE(got == b) << "wrong bytes";
    tier->reset();
    tier = SsdTier::Open(TierOptions(dir, 64 << 20));
    ASSERT_TRUE(tier.ok()) << tier.status();
    ASSERT_TRUE((*tier)->Get("k", &got).ok());
    EXPECT_TRUE(got == b) << "wrong bytes after reopen";
    tier->reset();
    fs::remove_all(dir);
  }
}

#endif  // SHELF_SYNC_POINTS

// Blocks of several read chunks (2 MiB) are read in parallel pieces and
// checksummed as they arrive: each must come back whole from concurrent
// readers, an odd size included, and a flipped byte in a later chunk is
// still caught.
TEST(SsdTier, LargeBlocksReadInChunksComeBackWholeAndChecked) {
  std::string dir = TempDir("ssd-large");
  std::vector<std::string> blocks = {Block((9 << 20) + 123, 5), Block(4 << 20, 6),
                                     Block(16 << 20, 7)};
  {
    auto tier = SsdTier::Open(TierOptions(dir, 256 << 20));
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const std::string& b = blocks[i];
      ASSERT_TRUE(
          (*tier)
              ->Put(absl::StrCat("k", i), b.data(), b.size(), BlockChecksum(b.data(), b.size()))
              .ok());
    }
  }
  auto tier = SsdTier::Open(TierOptions(dir, 256 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  readers.reserve(4);
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::string got;
      for (int round = 0; round < 3; ++round) {
        size_t i = static_cast<size_t>(t + round) % blocks.size();
        if (!(*tier)->Get(absl::StrCat("k", i), &got).ok() || got != blocks[i]) ++wrong;
      }
    });
  }
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0);
  tier->reset();
  {
    // The first block is the first extent: flip a byte in its fourth chunk.
    std::fstream f(dir + "/extents.dat", std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = (7 << 20) + 17;
    f.seekg(at);
    char c;
    f.read(&c, 1);
    c ^= 0x01;
    f.seekp(at);
    f.write(&c, 1);
  }
  tier = SsdTier::Open(TierOptions(dir, 256 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::string got;
  EXPECT_EQ((*tier)->Get("k0", &got).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ((*tier)->Get("k0", &got).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE((*tier)->Get("k2", &got).ok());
  EXPECT_EQ(got, blocks[2]);
  fs::remove_all(dir);
}

// GetInto reads into the caller's memory: straight from the device into an
// aligned destination with room for the rounded size (small and chunked
// blocks), through a buffer into any other, never past a capacity that is
// too small; a flipped byte is caught either way.
TEST(SsdTier, GetIntoReadsIntoTheCallersMemoryAndChecks) {
  std::string dir = TempDir("ssd-into");
  std::vector<std::string> blocks = {Block((256 << 10) + 5, 8), Block((6 << 20) + 77, 9)};
  auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string& b = blocks[i];
    ASSERT_TRUE(
        (*tier)
            ->Put(absl::StrCat("k", i), b.data(), b.size(), BlockChecksum(b.data(), b.size()))
            .ok());
  }
  ASSERT_TRUE((*tier)->Sync().ok());
  const uint64_t room = 8ull << 20;
  void* p = nullptr;
  ASSERT_EQ(posix_memalign(&p, 4096, room + 4096), 0);
  std::unique_ptr<char, decltype(&std::free)> mem(static_cast<char*>(p), &std::free);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string key = absl::StrCat("k", i);
    for (uint64_t shift : {0, 1}) {  // aligned (direct), then not
      char* dst = mem.get() + shift;
      std::memset(dst, 0, room);
      uint64_t size = 0;
      ASSERT_TRUE((*tier)->GetInto(key, dst, room, &size).ok()) << key << " shift " << shift;
      ASSERT_EQ(size, blocks[i].size());
      EXPECT_EQ(std::memcmp(dst, blocks[i].data(), size), 0) << key << " shift " << shift;
    }
    uint64_t size = 0;
    EXPECT_EQ((*tier)->GetInto(key, mem.get(), blocks[i].size() - 1, &size).code(),
              absl::StatusCode::kOutOfRange);
  }
  uint64_t size = 0;
  EXPECT_EQ((*tier)->GetInto("absent", mem.get(), room, &size).code(), absl::StatusCode::kNotFound);
  tier->reset();
  {
    // Flip a byte in the second (chunked) block's last chunk.
    std::fstream f(dir + "/extents.dat", std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = static_cast<std::streamoff>(((256 << 10) + 4096) + (6 << 20) + 3);
    f.seekg(at);
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(at);
    f.write(&c, 1);
  }
  tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->GetInto("k1", mem.get(), room, &size).code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE((*tier)->Contains("k1"));
  ASSERT_TRUE((*tier)->GetInto("k0", mem.get(), room, &size).ok());
  EXPECT_EQ(std::memcmp(mem.get(), blocks[0].data(), size), 0);
  fs::remove_all(dir);
}

TEST(SsdTier, FailingWritesAreStatusesAndTheTierRecovers) {
  std::string dir = TempDir("ssd-fail");
  auto fault_fs = std::make_shared<FaultInjectionFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fault_fs);
  std::string a = Block(64 << 10, 5);
  {
    auto tier = SsdTier::Open(TierOptions(dir, 64 << 20, env.get()));
    ASSERT_TRUE(tier.ok()) << tier.status();
    fault_fs->fail_writes.store(true);
    // The write lands in memory; making it durable fails.
    absl::Status s = (*tier)->Put("a", a.data(), a.size(), BlockChecksum(a.data(), a.size()));
    if (s.ok()) s = (*tier)->Sync();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("SSD tier"), std::string::npos) << s;
    fault_fs->fail_writes.store(false);
    std::string got;
    EXPECT_NE((*tier)->Get("a", &got).code(), absl::StatusCode::kOk);
    EXPECT_FALSE((*tier)->Contains("a"));
  }
  // After the fault clears, a reopened tier works and holds no half block.
  auto tier = SsdTier::Open(TierOptions(dir, 64 << 20, env.get()));
  ASSERT_TRUE(tier.ok()) << tier.status();
  for (const auto& e : (*tier)->Inventory()) {
    std::string got;
    ASSERT_TRUE((*tier)->Get(e.key, &got).ok());
    EXPECT_EQ(BlockChecksum(got.data(), got.size()), e.checksum);
  }
  ASSERT_TRUE((*tier)->Put("b", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
  ASSERT_TRUE((*tier)->Sync().ok());
  fs::remove_all(dir);
}

#ifdef SHELF_SYNC_POINTS  // the tests that inject through sync points
// A put that finds no free extent syncs, to free what deletes released;
// when that sync fails (a failing disk, injected), the puts before it leave the index, and the next
// Sync says so: the caller that made them learns they are not durable.
TEST(SsdTier, ASyncForRoomThatFailsFailsTheNextSyncToo) {
  std::string dir = TempDir("ssd-room-fail");
  constexpr uint64_t kBlock = 1 << 20, kBlocks = 16;
  const std::string x = Block(kBlock, 7), a = Block(kBlock, 8), b = Block(kBlock, 9);
  auto put = [](SsdTier* t, const std::string& key, const std::string& v) {
    return t->Put(key, v.data(), v.size(), BlockChecksum(v.data(), v.size()));
  };
  auto tier = SsdTier::Open(TierOptions(dir, kBlocks * kBlock));
  ASSERT_TRUE(tier.ok()) << tier.status();
  // Durable blocks deleted: their extents are free once a sync makes the
  // deletes durable.
  for (uint64_t i = 0; i < kBlocks; ++i)
    ASSERT_TRUE(put(tier->get(), absl::StrCat("x", i), x).ok());
  ASSERT_TRUE((*tier)->Sync().ok());
  for (uint64_t i = 0; i < kBlocks; ++i) ASSERT_TRUE((*tier)->Delete(absl::StrCat("x", i)).ok());
  // Every other extent but one taken by blocks put and deleted before any
  // sync, the last by "a", not yet durable.
  const uint64_t extents = (*tier)->extent_space_bytes() / kBlock;
  for (uint64_t i = kBlocks; i + 1 < extents; ++i) {
    ASSERT_TRUE(put(tier->get(), "y", x).ok());
    ASSERT_TRUE((*tier)->Delete("y").ok());
  }
  ASSERT_TRUE(put(tier->get(), "a", a).ok());
  // No free extent: "b" syncs for room, which fails (the extent file's
  // sync, injected), taking "a" with it.
  SyncPoint::Get()->SetCallBack("SsdTier::SyncTaken:DataSynced", [](void* arg) {
    *static_cast<absl::Status*>(arg) = absl::UnavailableError("injected fdatasync failure");
  });
  SyncPoint::Get()->EnableProcessing();
  EXPECT_FALSE(put(tier->get(), "b", b).ok());
  SyncPoint::Get()->DisableProcessing();
  SyncPoint::Get()->ClearAll();
  EXPECT_FALSE((*tier)->Contains("a"));
  absl::Status s = (*tier)->Sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  // Said once: the sync after it covers only what came since.
  ASSERT_TRUE(put(tier->get(), "b", b).ok());
  EXPECT_TRUE((*tier)->Sync().ok());
  std::string got;
  ASSERT_TRUE((*tier)->Get("b", &got).ok());
  EXPECT_TRUE(got == b);
  tier->reset();
  fs::remove_all(dir);
}

#endif  // SHELF_SYNC_POINTS

// Space freed by deletes and overwrites is reused: the extent file stops
// growing once it holds the live set, the free-extent map rebuilt at open
// matches, and every survivor reads back intact.
TEST(SsdTier, FreedExtentsAreReusedAndRebuiltOnOpen) {
  std::string dir = TempDir("ssd-reuse");
  constexpr size_t kBytes = 512 << 10;
  constexpr int kKeys = 16;
  uint64_t file_after_first_round = 0;
  {
    auto tier = SsdTier::Open(TierOptions(dir, 64 << 20, nullptr, 1 << 20));
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (int round = 0; round < 6; ++round) {
      // Key r<round> is deleted at the end of its round and not put again.
      for (int i = round; i < kKeys; ++i) {
        // Sizes vary by round, so extents are split and coalesced.
        std::string b = Block(kBytes - size_t{4096} * (round % 3) * (i % 5), 1000 * round + i);
        ASSERT_TRUE(
            (*tier)
                ->Put(absl::StrCat("r", i), b.data(), b.size(), BlockChecksum(b.data(), b.size()))
                .ok());
        if (i % 4 == 3) {
          ASSERT_TRUE((*tier)->Sync().ok());
        }
      }
      ASSERT_TRUE((*tier)->Delete(absl::StrCat("r", round)).ok());
      ASSERT_TRUE((*tier)->Sync().ok());
      if (round == 0) file_after_first_round = (*tier)->data_file_bytes();
    }
    // Six rounds of overwrites in the space of about two.
    EXPECT_LE((*tier)->data_file_bytes(), 2 * file_after_first_round + (1 << 20));
  }
  auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->Inventory().size(), static_cast<size_t>(kKeys - 6));
  for (int i = 6; i < kKeys; ++i) {
    std::string got;
    ASSERT_TRUE((*tier)->Get(absl::StrCat("r", i), &got).ok()) << i;
    EXPECT_TRUE(got == Block(kBytes - size_t{4096} * (5 % 3) * (i % 5), 5000 + i)) << i;
  }
  EXPECT_EQ((*tier)->free_extent_bytes() +
                [&] {
                  uint64_t taken = 0;
                  for (const auto& e : (*tier)->Inventory()) taken += (e.size + 4095) / 4096 * 4096;
                  return taken;
                }(),
            (*tier)->data_file_bytes());
  tier->reset();
  fs::remove_all(dir);
}

// SyncAsync: completions in call order, Sync after them; a key overwritten
// (twice) and another deleted while earlier syncs are queued or running:
// the newest versions are what is read, before and after a reopen, and
// every extent is either some indexed block's or free (no leak, no double
// free).
TEST(SsdTier, AsyncSyncsCompleteInOrderAndOverwritesFreeEveryExtent) {
  std::string dir = TempDir("ssd-async");
  constexpr size_t kBytes = 256 << 10;
  auto put = [](SsdTier* tier, const std::string& key, uint32_t seed) {
    std::string b = Block(kBytes, seed);
    return tier->Put(key, b.data(), b.size(), BlockChecksum(b.data(), b.size()));
  };
  {
    auto tier = SsdTier::Open(TierOptions(dir, 64 << 20, nullptr, 1 << 20));
    ASSERT_TRUE(tier.ok()) << tier.status();
    Mutex mu;
    std::vector<int> order;
    auto done = [&](int n) {
      return [&, n](const absl::Status& s) {
        EXPECT_TRUE(s.ok()) << s;
        MutexLock lock(&mu);
        order.push_back(n);
      };
    };
    for (int round = 0; round < 20; ++round) {
      ASSERT_TRUE(put(tier->get(), "a", 100 + round).ok());
      ASSERT_TRUE(put(tier->get(), absl::StrCat("k", round), round).ok());
      if (round % 3 == 2) {
        ASSERT_TRUE((*tier)->Delete(absl::StrCat("k", round - 1)).ok());
      }
      (*tier)->SyncAsync(done(round));
      ASSERT_TRUE(put(tier->get(), "a", 200 + round).ok());  // while that sync may run
    }
    ASSERT_TRUE((*tier)->Sync().ok());
    {
      MutexLock lock(&mu);
      ASSERT_EQ(order.size(), 20u);
      for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
    }
    std::string got;
    ASSERT_TRUE((*tier)->Get("a", &got).ok());
    EXPECT_TRUE(got == Block(kBytes, 219));
    // Before any reopen rebuilds the map: every extent no block holds is free.
    uint64_t held = 0;
    for (const auto& e : (*tier)->Inventory()) held += (e.size + 4095) / 4096 * 4096;
    EXPECT_EQ((*tier)->free_extent_bytes() + held, (*tier)->data_file_bytes());
  }
  auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::string got;
  ASSERT_TRUE((*tier)->Get("a", &got).ok());
  EXPECT_TRUE(got == Block(kBytes, 219));
  uint64_t taken = 0;
  for (const auto& e : (*tier)->Inventory()) {
    taken += (e.size + 4095) / 4096 * 4096;
    if (e.key == "a") continue;
    int round = 0;
    ASSERT_TRUE(absl::SimpleAtoi(e.key.c_str() + 1, &round)) << e.key;
    EXPECT_FALSE(round % 3 == 1 && round < 19) << e.key << " was deleted";
    ASSERT_TRUE((*tier)->Get(e.key, &got).ok()) << e.key;
    EXPECT_TRUE(got == Block(kBytes, round)) << e.key;
  }
  EXPECT_EQ((*tier)->Inventory().size(), 1u + 20u - 6u);
  EXPECT_EQ((*tier)->free_extent_bytes() + taken, (*tier)->data_file_bytes());
  tier->reset();
  fs::remove_all(dir);
}

// Writes `blocks` (key, bytes) into `dir` in SSD format version 1, which
// kept block bytes in RocksDB: "b" || key -> header | bytes, and with
// `meta` "m" || key -> header (without it, its first layout: block records
// alone).
void WriteFormatOne(const std::string& dir,
                    const std::vector<std::pair<std::string, const std::string*>>& blocks,
                    bool meta) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.enable_blob_files = true;
  o.min_blob_size = 4096;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(o, dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  for (const auto& [key, v] : blocks) {
    char h[24] = {};
    absl::little_endian::Store32(h, 0x31445353);
    h[4] = 1;
    absl::little_endian::Store64(h + 8, v->size());
    absl::little_endian::Store64(h + 16, BlockChecksum(v->data(), v->size()));
    ASSERT_TRUE(db->Put({}, "b" + key, std::string(h, 24) + *v).ok());
    if (meta) {
      ASSERT_TRUE(db->Put({}, "m" + key, std::string(h, 24)).ok());
    }
  }
  ASSERT_TRUE(db->Flush({}).ok());
}

// Every record of the RocksDB database in `dir`, read-only.
std::map<std::string, std::string> DatabaseRecords(const std::string& dir) {
  std::map<std::string, std::string> records;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return records;
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator({}));
  for (it->SeekToFirst(); it->Valid(); it->Next())
    records[it->key().ToString()] = it->value().ToString();
  EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  return records;
}

// A directory in SSD format version 1, in either of its layouts, is
// refused at open with a message that names the version, and nothing in
// it is changed: its records are all still there for an older release.
TEST(SsdTier, ADirectoryInFormatVersionOneIsRefusedAndLeftAsItWas) {
  for (bool meta : {false, true}) {
    SCOPED_TRACE(meta ? "block and metadata records" : "block records alone");
    std::string dir = TempDir("ssd-format-1");
    std::string a = Block(300 << 10, 21), b = Block(5000, 22);
    ASSERT_NO_FATAL_FAILURE(WriteFormatOne(dir, {{"a", &a}, {"b", &b}}, meta));
    const std::map<std::string, std::string> before = DatabaseRecords(dir);
    ASSERT_EQ(before.size(), meta ? 4u : 2u);
    auto tier = SsdTier::Open(TierOptions(dir, 64 << 20));
    ASSERT_FALSE(tier.ok());
    EXPECT_EQ(tier.status().code(), absl::StatusCode::kFailedPrecondition) << tier.status();
    const std::string message(tier.status().message());
    EXPECT_NE(message.find("SSD format version 1"), std::string::npos) << message;
    EXPECT_NE(message.find(dir), std::string::npos) << message;
    EXPECT_TRUE(DatabaseRecords(dir) == before) << "the refused directory changed";
    fs::remove_all(dir);
  }
}

TEST(SsdTier, UnwritableDirectoryIsAnError) {
  auto tier = SsdTier::Open(TierOptions("/proc/shelf-cannot-exist/ssd", 1 << 20));
  EXPECT_FALSE(tier.ok());
}

}  // namespace
}  // namespace shelf::storage
