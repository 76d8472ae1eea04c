// SSD tier tests on real RocksDB files, with faults injected through a
// FileSystem wrapper (the RocksDB seam): failing writes and a flipped byte
// in a blob file.
#include "storage/ssd_tier.h"

#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace shelf {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const char* name) {
  std::string dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(getpid());
  fs::remove_all(dir);
  return dir;
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
  explicit FaultInjectionFs(std::shared_ptr<rocksdb::FileSystem> base)
      : rocksdb::FileSystemWrapper(std::move(base)) {}
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
    auto tier = SsdTier::Open({.dir = dir, .capacity_bytes = 64 << 20});
    ASSERT_TRUE(tier.ok()) << tier.status();
    ASSERT_TRUE((*tier)->Put("a", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
    ASSERT_TRUE((*tier)->Put("b", b.data(), b.size(), BlockChecksum(b.data(), b.size())).ok());
    ASSERT_TRUE((*tier)->Put("c", b.data(), 10, BlockChecksum(b.data(), 10)).ok());
    ASSERT_TRUE((*tier)->Delete("c").ok());
    EXPECT_EQ((*tier)->used_bytes(), a.size() + b.size());
  }
  auto tier = SsdTier::Open({.dir = dir, .capacity_bytes = 64 << 20});
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

TEST(SsdTier, RefusesWrongChecksumAndOverCapacity) {
  std::string dir = TempDir("ssd-cap");
  auto tier = SsdTier::Open({.dir = dir, .capacity_bytes = 1 << 20});
  ASSERT_TRUE(tier.ok());
  std::string a = Block(600 << 10, 3);
  EXPECT_EQ((*tier)->Put("a", a.data(), a.size(), 12345).code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE((*tier)->Put("a", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
  EXPECT_EQ((*tier)->Put("b", a.data(), a.size(), BlockChecksum(a.data(), a.size())).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*tier)->Inventory().size(), 1u);
  fs::remove_all(dir);
}

TEST(SsdTier, FlippedByteInBlobFileIsDetectedAndNeverServed) {
  std::string dir = TempDir("ssd-flip");
  std::string a = Block(256 << 10, 4);
  {
    auto tier = SsdTier::Open({.dir = dir, .capacity_bytes = 64 << 20});
    ASSERT_TRUE(tier.ok());
    ASSERT_TRUE((*tier)->Put("a", a.data(), a.size(), BlockChecksum(a.data(), a.size())).ok());
  }  // close: flushes the memtable, so the value lands in a blob file
  std::string blob;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".blob") blob = e.path();
  }
  ASSERT_FALSE(blob.empty()) << "no blob file written";
  {
    std::fstream f(blob, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(blob) / 2));
    char c;
    f.read(&c, 1);
    c ^= 0x40;
    f.seekp(static_cast<std::streamoff>(fs::file_size(blob) / 2));
    f.write(&c, 1);
  }
  auto tier = SsdTier::Open({.dir = dir, .capacity_bytes = 64 << 20});
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::string got;
  absl::Status s = (*tier)->Get("a", &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(got.empty());
  // Dropped: a second read is a clean miss, never the wrong bytes.
  EXPECT_EQ((*tier)->Get("a", &got).code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(SsdTier, FailingWritesAreStatusesAndTheTierRecovers) {
  std::string dir = TempDir("ssd-fail");
  auto fault_fs = std::make_shared<FaultInjectionFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fault_fs);
  std::string a = Block(64 << 10, 5);
  {
    auto tier = SsdTier::Open({.dir = dir, .capacity_bytes = 64 << 20, .env = env.get()});
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
  auto tier = SsdTier::Open({.dir = dir, .capacity_bytes = 64 << 20, .env = env.get()});
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

// Blocks that outlive their neighbours keep a blob file alive; once the
// files hold more than twice the live bytes, a Sync rewrites the live
// blobs and the garbage leaves the disk. The survivors read back intact.
TEST(SsdTier, GarbageOutweighingLiveBytesIsCollected) {
  std::string dir = TempDir("ssd-gc");
  auto tier =
      SsdTier::Open({.dir = dir, .capacity_bytes = 256 << 20, .gc_min_garbage_bytes = 4 << 20});
  ASSERT_TRUE(tier.ok()) << tier.status();
  constexpr int kBlocks = 48;
  constexpr size_t kBytes = 512 << 10;
  // Four flushes, so four blob files, each with one survivor.
  for (int i = 0; i < kBlocks; ++i) {
    std::string b = Block(kBytes, 100 + i);
    ASSERT_TRUE(
        (*tier)
            ->Put(absl::StrCat("g", i), b.data(), b.size(), BlockChecksum(b.data(), b.size()))
            .ok());
    if (i % 12 == 11) {
      ASSERT_TRUE((*tier)->Sync().ok());
    }
  }
  uint64_t before = (*tier)->blob_file_bytes();
  EXPECT_GE(before, kBlocks * kBytes);
  for (int i = 0; i < kBlocks; ++i) {
    if (i % 12 != 0) {
      ASSERT_TRUE((*tier)->Delete(absl::StrCat("g", i)).ok());
    }
  }
  // The deletes reach the files' garbage accounting through a flush.
  ASSERT_TRUE((*tier)->Sync().ok());
  uint64_t after = (*tier)->blob_file_bytes();
  EXPECT_LT(after, before / 4) << "before " << before << " after " << after;
  EXPECT_EQ((*tier)->used_bytes(), 4 * kBytes);
  for (int i = 0; i < kBlocks; i += 12) {
    std::string got;
    ASSERT_TRUE((*tier)->Get(absl::StrCat("g", i), &got).ok()) << i;
    EXPECT_TRUE(got == Block(kBytes, 100 + i)) << i;
  }
  tier->reset();
  fs::remove_all(dir);
}

TEST(SsdTier, UnwritableDirectoryIsAnError) {
  auto tier = SsdTier::Open({.dir = "/proc/shelf-cannot-exist/ssd", .capacity_bytes = 1 << 20});
  EXPECT_FALSE(tier.ok());
}

}  // namespace
}  // namespace shelf
