// kill -9 of a process writing to the SSD tier (extent writes in flight,
// syncs, overwrites and deletes that reuse freed extents), then a reopen:
// nothing indexed may be unreadable or wrong, and nothing synced may be
// lost. Each writer and each check runs in a forked child, so this
// process never holds RocksDB's threads across a fork.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/mutex.h"
#include "storage/ssd_tier.h"

namespace shelf {
namespace {

constexpr int kEvenKeys = 8;  // overwritten every round, never deleted
constexpr int kOddKeys = 8;   // put, then deleted four rounds later
constexpr uint64_t kCapacity = 12ull << 20;

storage::SsdTier::Options TierOptions(const std::string& dir) {
  storage::SsdTier::Options o;
  o.dir = dir;
  o.capacity_bytes = kCapacity;
  o.grow_bytes = 1 << 20;
  return o;
}

// Block `id` at `version`: self-describing (id and version in its first
// 16 bytes, the rest drawn from both), 64 KiB to 512 KiB.
std::string Block(uint64_t id, uint64_t version) {
  size_t n = (64 << 10) * (1 + (id * 7919 + version * 104729) % 8);
  std::string s(n, '\0');
  std::memcpy(&s[0], &id, 8);
  std::memcpy(&s[8], &version, 8);
  std::mt19937_64 rng(id << 32 ^ version);
  for (size_t i = 16; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

std::string Key(uint64_t id) { return absl::StrCat("k", id); }

// The writer: round after round, overwrites every even key, puts one odd
// key and deletes another, syncs, and reports the round on `fd`. With
// `async`, each round's sync is a SyncAsync that reports the round when it
// completes, while the next rounds are written (up to 3 syncs under way,
// as the store's mover). Never returns.
[[noreturn]] void Writer(const std::string& dir, uint64_t first_version, int fd, bool async) {
  auto tier = storage::SsdTier::Open(TierOptions(dir));
  if (!tier.ok()) {
    std::fprintf(stderr, "writer: %s\n", std::string(tier.status().message()).c_str());
    _exit(3);
  }
  struct Syncs {
    Mutex mu;
    CondVar cv;
    int running ABSL_GUARDED_BY(mu) = 0;
  };
  auto syncs = std::make_shared<Syncs>();
  for (uint64_t v = first_version;; ++v) {
    auto put = [&](uint64_t id) {
      std::string b = Block(id, v);
      absl::Status s = (*tier)->Put(Key(id), b.data(), b.size(), BlockChecksum(b.data(), b.size()));
      if (!s.ok()) {
        std::fprintf(stderr, "writer put: %s\n", std::string(s.message()).c_str());
        _exit(4);
      }
    };
    for (uint64_t j = 0; j < kEvenKeys; ++j) put(2 * j);
    put(2 * (v % kOddKeys) + 1);
    (*tier)->Delete(Key(2 * ((v + 4) % kOddKeys) + 1)).IgnoreError();
    if (!async) {
      absl::Status s = (*tier)->Sync();
      if (!s.ok()) _exit(5);
      if (write(fd, &v, sizeof(v)) != sizeof(v)) _exit(6);
      continue;
    }
    {
      MutexLock lock(&syncs->mu);
      while (syncs->running >= 3) syncs->cv.Wait(&syncs->mu);
      ++syncs->running;
    }
    (*tier)->SyncAsync([syncs, fd, v](const absl::Status& s) {
      if (!s.ok()) _exit(5);
      if (write(fd, &v, sizeof(v)) != sizeof(v)) _exit(6);
      {
        MutexLock lock(&syncs->mu);
        --syncs->running;
      }
      syncs->cv.SignalAll();
    });
  }
}

// The check, in a child: 0 when every indexed block reads back as the
// block its key and version say, and every even key is at `min_version`
// or later.
int Check(const std::string& dir, uint64_t min_version, uint64_t* file_bytes) {
  auto tier = storage::SsdTier::Open(TierOptions(dir));
  if (!tier.ok()) {
    std::fprintf(stderr, "reopen: %s\n", std::string(tier.status().message()).c_str());
    return 1;
  }
  std::map<uint64_t, uint64_t> versions;
  for (const storage::SsdTier::Entry& e : (*tier)->Inventory()) {
    std::string got;
    absl::Status s = (*tier)->Get(e.key, &got);
    if (!s.ok()) {
      std::fprintf(stderr, "indexed %s unreadable: %s\n", e.key.c_str(),
                   std::string(s.message()).c_str());
      return 1;
    }
    uint64_t id = 0, version = 0;
    if (got.size() < 16) return 1;
    std::memcpy(&id, got.data(), 8);
    std::memcpy(&version, got.data() + 8, 8);
    if (Key(id) != e.key || got != Block(id, version)) {
      std::fprintf(stderr, "indexed %s has wrong bytes\n", e.key.c_str());
      return 1;
    }
    versions[id] = version;
  }
  for (uint64_t j = 0; j < kEvenKeys && min_version > 0; ++j) {
    if (versions.count(2 * j) == 0 || versions[2 * j] < min_version) {
      std::fprintf(stderr, "synced %s lost (version %llu wanted >= %llu)\n", Key(2 * j).c_str(),
                   static_cast<unsigned long long>(versions[2 * j]),
                   static_cast<unsigned long long>(min_version));
      return 1;
    }
  }
  *file_bytes = (*tier)->data_file_bytes();
  std::printf("reopened: %zu blocks indexed, all verified\n", versions.size());
  return 0;
}

// Runs `kills` writers on one directory, each killed with SIGKILL after
// `rounds` synced rounds and a pause of 0-3 ms (so the kill lands at
// another point of the write-sync-index cycle each time), each followed
// by a check.
void KillAndCheck(const char* name, int kills, uint64_t rounds, bool async = false) {
  std::string dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::mt19937 rng(42);
  uint64_t written = 0;
  for (int k = 0; k < kills; ++k) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    uint64_t first = (k + 1) * 100000ull;
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      Writer(dir, first, fds[1], async);
    }
    close(fds[1]);
    uint64_t last = 0, v = 0;
    for (uint64_t r = 0; r < rounds && read(fds[0], &v, sizeof(v)) == sizeof(v); ++r) {
      // Syncs complete in the order they were called.
      ASSERT_EQ(v, r == 0 ? first : last + 1) << name << ": a round reported out of order";
      last = v;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed on its own, status " << status;
    ASSERT_GE(last, first) << "the writer synced nothing";
    for (uint64_t x = first; x <= last; ++x) {
      for (uint64_t j = 0; j < kEvenKeys; ++j) written += Block(2 * j, x).size();
    }
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    pid_t checker = fork();
    ASSERT_GE(checker, 0);
    if (checker == 0) {
      close(out[0]);
      uint64_t file_bytes = 0;
      int rc = Check(dir, last, &file_bytes);
      if (write(out[1], &file_bytes, sizeof(file_bytes)) != sizeof(file_bytes)) rc = 1;
      _exit(rc);
    }
    close(out[1]);
    uint64_t file_bytes = 0;
    ASSERT_EQ(read(out[0], &file_bytes, sizeof(file_bytes)),
              static_cast<ssize_t>(sizeof(file_bytes)));
    close(out[0]);
    ASSERT_EQ(waitpid(checker, &status, 0), checker);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << name << ": kill " << k << ": the reopened tier failed its check (see stderr)";
    std::printf("%s: kill %d after round %llu: extent file %llu bytes, %llu written so far\n", name,
                k, static_cast<unsigned long long>(last - first),
                static_cast<unsigned long long>(file_bytes),
                static_cast<unsigned long long>(written));
    if (k == kills - 1 && rounds > 10) {
      // Overwrites reused freed extents: the file holds far less than was written.
      EXPECT_LT(file_bytes, written / 2);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(SsdExtentCrashTest, KilledDuringExtentWritesLosesNothingSynced) {
  KillAndCheck("ssd-crash-writes", 4, 2);
}

TEST(SsdExtentCrashTest, KilledDuringSpaceReuseLosesNothingSynced) {
  KillAndCheck("ssd-crash-reuse", 4, 24);
}

// Syncs overlapped with the next rounds' writes (SyncAsync, as the store's
// mover): what a completed sync reported is there after the kill.
TEST(SsdExtentCrashTest, KilledDuringOverlappedSyncsLosesNothingSynced) {
  KillAndCheck("ssd-crash-async", 4, 24, /*async=*/true);
}

}  // namespace
}  // namespace shelf
