// Master high availability across real processes: a real etcd, three
// shelf-master candidates, two shelf-store daemons and a client.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include "absl/base/config.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/clock.h"
#include "common/rpc.h"
#include "coord/election.h"
#include "coord/etcd_client.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "testing/wait_for.h"
#include "tests/coord/etcd_harness.h"

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

class HaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = coord::testing::EtcdProcess::Start();
    if (!etcd.ok() && etcd.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << etcd.status();
    }
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    auto client = coord::EtcdClient::Connect(etcd_->endpoint());
    ASSERT_TRUE(client.ok());
    etcd_client_ = *std::move(client);
    cluster_ = absl::StrCat("ha", getpid());
    dir_ = ::testing::TempDir() + "/" + cluster_;
    std::filesystem::create_directories(dir_);
    // Generous caps: three masters, etcd and two stores start at once, on a
    // loaded machine under a sanitizer.
    for (int i = 0; i < 3; ++i) {
      absl::Status started = StartMaster(i);
      ASSERT_TRUE(started.ok()) << started << " (log: " << dir_ << "/m" << i << ".log)";
    }
    ASSERT_TRUE(WaitForLeader(60000).ok());
    for (int i = 0; i < 2; ++i) {
      std::string ready = absl::StrCat(dir_, "/s", i, ".addr");
      std::vector<std::string> argv = {TestBinDir() + "/shelf-store",
                                       "--master",
                                       absl::StrCat("etcd://", etcd_->endpoint(), "/", cluster_),
                                       "--listen",
                                       "127.0.0.1:0",
                                       "--dram-size",
                                       "64MiB",
                                       "--node-id",
                                       absl::StrCat("store", i),
                                       "--run-dir",
                                       absl::StrCat(dir_, "/s", i, ".run"),
                                       "--ready-file",
                                       ready};
      for (const std::string& f : store_flags_) {
        argv.push_back(absl::StrReplaceAll(f, {{"{i}", absl::StrCat(i)}, {"{dir}", dir_}}));
      }
      auto p = Process::Spawn(argv, absl::StrCat(dir_, "/s", i, ".log"));
      ASSERT_TRUE(p.ok());
      stores_.push_back(*std::move(p));
      ASSERT_TRUE(WaitForFileLine(ready, 60000, stores_.back().get()).ok());
    }
    ASSERT_TRUE(WaitForLiveStores(2, 60000).ok());
  }

  void TearDown() override {
    stores_.clear();
    masters_.clear();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  absl::Status StartMaster(int i) {
    std::string ready = absl::StrCat(dir_, "/m", i, ".addr");
    std::vector<std::string> argv = {TestBinDir() + "/shelf-master",
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--ready-file",
                                     ready,
                                     "--etcd",
                                     etcd_->endpoint(),
                                     "--cluster",
                                     cluster_};
    argv.insert(argv.end(), master_flags_.begin(), master_flags_.end());
    auto p = Process::Spawn(argv, absl::StrCat(dir_, "/m", i, ".log"));
    if (!p.ok()) return p.status();
    masters_.push_back(*std::move(p));
    auto addr = WaitForFileLine(ready, 60000, masters_.back().get());
    if (!addr.ok()) return addr.status();
    master_addrs_.push_back(*addr);
    return absl::OkStatus();
  }

  absl::StatusOr<coord::LeaderInfo> Leader() {
    return coord::LeaderElection::GetLeader(etcd_client_.get(), cluster_);
  }

  absl::Status WaitForLeader(uint64_t timeout_ms) {
    if (WaitFor([&] { return Leader().ok(); }, timeout_ms, 50)) return absl::OkStatus();
    return absl::DeadlineExceededError("no leader elected");
  }

  absl::StatusOr<v1::StatusResponse> AdminStatus(const std::string& addr) {
    auto ch = MakeChannel(addr, TlsFiles());
    if (!ch.ok()) return ch.status();
    auto stub = v1::AdminService::NewStub(*ch);
    grpc::ClientContext ctx;
    PrepareContext(&ctx, "", 1000);
    v1::StatusResponse r;
    absl::Status s = FromGrpc(stub->Status(&ctx, v1::StatusRequest(), &r));
    if (!s.ok()) return s;
    return r;
  }

  // Waits until the current leader reports `n` live stores and no recovery.
  absl::Status WaitForLiveStores(int n, uint64_t timeout_ms) {
    bool back = WaitFor(
        [&] {
          auto leader = Leader();
          if (!leader.ok()) return false;
          auto st = AdminStatus(leader->address);
          if (!st.ok() || !st->is_leader() || st->recovering()) return false;
          int live = 0;
          for (const auto& node : st->nodes()) live += node.state() == v1::NODE_LIVE;
          return live == n;
        },
        timeout_ms, 50);
    if (back) return absl::OkStatus();
    return absl::DeadlineExceededError("stores did not come back");
  }

  int MasterIndex(const std::string& addr) {
    for (size_t i = 0; i < master_addrs_.size(); ++i) {
      if (master_addrs_[i] == addr) return static_cast<int>(i);
    }
    return -1;
  }

  // Shorter than the defaults, so the tests of fencing and outages run
  // quicker; the failover timing test (HaDefaultsTest) runs the defaults.
  std::vector<std::string> master_flags_ = {"--election-ttl",   "2s", "--node-ttl", "2s",
                                            "--recovery-grace", "4s"};
  // Extra store flags; "{i}" is the store's number, "{dir}" the test's folder.
  std::vector<std::string> store_flags_;
  std::unique_ptr<coord::testing::EtcdProcess> etcd_;
  std::unique_ptr<coord::EtcdClient> etcd_client_;
  std::string cluster_, dir_;
  std::vector<std::unique_ptr<Process>> masters_, stores_;
  std::vector<std::string> master_addrs_;
};

// The masters with their default settings (election TTL 3 s, node TTL 3 s,
// recovery grace 5 s).
class HaDefaultsTest : public HaTest {
 protected:
  HaDefaultsTest() { master_flags_.clear(); }
};

constexpr uint64_t kDefaultElectionTtlMs = 3000;

// kill -9 of the leader while a client puts and gets: a standby leads, the
// stores re-register, and every block committed before the kill is
// readable again within the election TTL plus 2 s. Prints the phases.
TEST_F(HaDefaultsTest, KillingTheLeaderLosesNothingALiveStoreHolds) {
  ClientOptions co;
  co.masters = master_addrs_;
  co.timeout_ms = 5000;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  constexpr int kBlocks = 40;
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = Block(256 << 10, i);
    Status s = client->Put(absl::StrCat("before-", i), data.data(), data.size());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Let the stores learn what their DRAM holds (notices ride on heartbeats).
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));

  std::atomic<bool> stop{false};
  std::atomic<int> ok_after{0}, failures{0}, wrong{0};
  std::atomic<uint64_t> killed_at{0};
  std::thread loop([&] {
    for (int i = 0; !stop.load() && i < 100000; ++i) {
      std::string key = absl::StrCat("loop-", i);
      std::string data = Block(64 << 10, 100000 + i);
      std::string got;
      if (client->Put(key, data.data(), data.size()).ok() && client->Get(key, &got).ok()) {
        if (got != data) ++wrong;
        if (killed_at.load() != 0) ++ok_after;
      } else {
        ++failures;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
  auto join_loop = absl::MakeCleanup([&] {
    stop.store(true);
    loop.join();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto old = Leader();
  ASSERT_TRUE(old.ok());
  int idx = MasterIndex(old->address);
  ASSERT_GE(idx, 0);
  uint64_t t0 = MonoMs();
  killed_at.store(t0);
  masters_[idx]->Signal(SIGKILL);
  masters_[idx]->Wait(5000);

  // Phases, each in ms after the kill: the leader key names a standby (the
  // old lease expired, the standby won), the new leader lists both stores
  // live (they re-registered), its recovery ended, and every block written
  // before the kill reads back. The reads come from clients started after
  // the kill, a new one for every pass, that find the leader through etcd,
  // as a CLI or a restarting engine does: the loop's client, connected
  // before, would hide that path.
  std::atomic<uint64_t> elected_ms{0}, registered_ms{0}, recovered_ms{0};
  std::atomic<bool> watching{true};
  std::thread watcher([&] {
    while (watching.load() && MonoMs() - t0 < 20000 && recovered_ms.load() == 0) {
      uint64_t now = MonoMs() - t0;
      auto l = Leader();
      if (l.ok() && l->address != old->address && l->term > old->term) {
        if (elected_ms.load() == 0) elected_ms.store(now);
        auto st = AdminStatus(l->address);
        if (st.ok() && st->is_leader()) {
          int live = 0;
          for (const auto& node : st->nodes()) live += node.state() == v1::NODE_LIVE;
          if (registered_ms.load() == 0 && live == 2) registered_ms.store(now);
          if (live == 2 && !st->recovering()) recovered_ms.store(now);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  auto join_watcher = absl::MakeCleanup([&] {
    watching.store(false);
    watcher.join();
  });
  uint64_t readable_ms = 0;
  ClientOptions fresh = co;
  fresh.masters = {absl::StrCat("etcd://", etcd_->endpoint(), "/", cluster_)};
  std::vector<bool> readable(kBlocks, false);
  int readable_count = 0;
  while (MonoMs() - t0 < 20000 && readable_count < kBlocks) {
    std::unique_ptr<Client> reader;
    ASSERT_TRUE(Client::Open(fresh, &reader).ok());
    for (int i = 0; i < kBlocks; ++i) {
      if (readable[i]) continue;
      std::string got;
      if (!reader->Get(absl::StrCat("before-", i), &got, Deadline(200)).ok()) break;
      ASSERT_TRUE(got == Block(256 << 10, i)) << "before-" << i << " came back wrong";
      readable[i] = true;
      ++readable_count;
    }
    if (readable_count == kBlocks) {
      readable_ms = MonoMs() - t0;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The watcher ends once recovery is done (or after 20 s).
  std::move(join_watcher).Invoke();
  std::printf(
      "failover phases after kill -9 of the leader (election TTL %llu ms, defaults):\n"
      "  new leader elected      %6llu ms\n"
      "  stores re-registered    %6llu ms\n"
      "  recovery done           %6llu ms\n"
      "  every block readable    %6llu ms\n",
      static_cast<unsigned long long>(kDefaultElectionTtlMs),
      static_cast<unsigned long long>(elected_ms.load()),
      static_cast<unsigned long long>(registered_ms.load()),
      static_cast<unsigned long long>(recovered_ms.load()),
      static_cast<unsigned long long>(readable_ms));
  ASSERT_GT(elected_ms.load(), 0u) << "no new leader";
  ASSERT_GT(readable_ms, 0u) << readable_count << " of " << kBlocks
                             << " blocks readable 20 s after the kill";
#if !defined(ABSL_HAVE_ADDRESS_SANITIZER) && !defined(ABSL_HAVE_THREAD_SANITIZER)
  // A bound on time holds in the normal build only: sanitizers slow every
  // process several times over.
  EXPECT_LE(readable_ms, kDefaultElectionTtlMs + 2000)
      << "every block should be readable within the election TTL plus 2 s";
#endif
  ASSERT_TRUE(WaitForLiveStores(2, 15000).ok());
  // The loop resumes without a restart.
  WaitFor([&] { return ok_after.load() >= 5; }, 10000, 50);
  std::move(join_loop).Invoke();
  EXPECT_GE(ok_after.load(), 5) << "client loop did not resume";
  EXPECT_EQ(wrong.load(), 0);
}

// Stores with an SSD tier that promote what they serve from it.
class HaTieredTest : public HaTest {
 protected:
  HaTieredTest() {
    store_flags_ = {"--ssd-dir", "{dir}/ssd{i}", "--ssd-size", "256MiB", "--promote-on-hit"};
  }

  // The tier of `key`'s first replica as Locate reports it, or none.
  std::optional<Tier> TierOf(Client* client, const std::string& key) {
    std::vector<NodeRun> nodes;
    if (!client->Locate({key}, &nodes).ok() || nodes.empty() || nodes[0].tiers.empty()) {
      return std::nullopt;
    }
    return nodes[0].tiers[0];
  }

  // A client that finds the leader through etcd; null if it cannot open.
  std::unique_ptr<Client> OpenClient() {
    ClientOptions co;
    co.masters = {absl::StrCat("etcd://", etcd_->endpoint(), "/", cluster_)};
    co.timeout_ms = 5000;
    std::unique_ptr<Client> client;
    if (!Client::Open(co, &client).ok()) return nullptr;
    return client;
  }

  // kill -9 of the leader; returns once another leads with both stores.
  void KillTheLeader() {
    auto old = Leader();
    ASSERT_TRUE(old.ok());
    const int idx = MasterIndex(old->address);
    ASSERT_GE(idx, 0);
    masters_[idx]->Signal(SIGKILL);
    masters_[idx]->Wait(5000);
    ASSERT_TRUE(WaitFor(
        [&] {
          auto l = Leader();
          return l.ok() && l->address != old->address;
        },
        20000, 50));
    ASSERT_TRUE(WaitForLiveStores(2, 20000).ok());
  }

  absl::Status Evict(uint64_t bytes, bool copy = false) {
    auto leader = Leader();
    if (!leader.ok()) return leader.status();
    auto ch = MakeChannel(leader->address, TlsFiles());
    if (!ch.ok()) return ch.status();
    auto stub = v1::AdminService::NewStub(*ch);
    grpc::ClientContext ctx;
    PrepareContext(&ctx, "", 5000);
    v1::EvictRequest req;
    req.set_bytes(bytes);
    req.set_copy(copy);
    v1::EvictResponse resp;
    return FromGrpc(stub->Evict(&ctx, req, &resp));
  }
};

// kill -9 of the leader while the stores hold blocks in every state: clean
// (promoted back from SSD), DRAM-only (fresh, and a key replaced after its
// old value was demoted, which its store's SSD may still hold), and being
// demoted (ordered just before the kill). The new leader rebuilds the
// index from the stores' inventories: every block reads back, each key
// with the last value put, none with an older one.
TEST_F(HaTieredTest, AFailoverKeepsEveryBlockStateAndServesNothingStale) {
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  constexpr size_t kMiB = 1 << 20;
  auto put = [&](const std::string& key, uint64_t seed, bool replace) {
    std::string data = Block(kMiB, seed);
    PutOptions po;
    po.replace = replace;
    Status st = client->Put(key, data.data(), data.size(), po);
    ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
  };
  auto demote_alone = [&](const std::string& key) {
    ASSERT_TRUE(Evict(kMiB).ok());
    ASSERT_TRUE(WaitFor([&] { return TierOf(client.get(), key) == Tier::kSsd; }, 15000, 20))
        << key << " did not reach SSD";
  };
  ASSERT_NO_FATAL_FAILURE(put("s", 1, false));
  ASSERT_NO_FATAL_FAILURE(demote_alone("s"));
  ASSERT_NO_FATAL_FAILURE(put("a", 2, false));
  ASSERT_NO_FATAL_FAILURE(demote_alone("a"));
  std::string got;
  ASSERT_TRUE(client->Get("a", &got).ok());
  ASSERT_TRUE(WaitFor([&] { return TierOf(client.get(), "a") == Tier::kDram; }, 15000, 20))
      << "a was not promoted";
  ASSERT_NO_FATAL_FAILURE(put("s", 3, true));
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(put(absl::StrCat("d", i), 10 + i, false));
  // Let the stores learn what their DRAM holds (notices ride on heartbeats).
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  ASSERT_TRUE(Evict(2 * kMiB).ok());  // demotions in flight at the kill
  ASSERT_NO_FATAL_FAILURE(KillTheLeader());

  const std::pair<std::string, uint64_t> latest[] = {
      {"s", 3}, {"a", 2}, {"d0", 10}, {"d1", 11}, {"d2", 12}};
  std::unique_ptr<Client> fresh = OpenClient();  // finds the new leader
  ASSERT_NE(fresh, nullptr);
  for (const auto& [key, seed] : latest) {
    Status st = fresh->Get(key, &got);
    ASSERT_TRUE(st.ok()) << key << " is lost after the failover: " << st.ToString();
    ASSERT_TRUE(got == Block(kMiB, seed)) << key << " came back with another (older) value";
  }
}

// Blocks copied ahead to SSD and kept in DRAM (clean) when the leader is
// killed: each store's inventory lists both copies, and the new leader
// indexes both, counts them clean, and reads every block back.
TEST_F(HaTieredTest, CopiedAheadBlocksStayCleanAcrossAFailover) {
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  constexpr size_t kMiB = 1 << 20;
  constexpr int kBlocks = 4;
  for (int i = 0; i < kBlocks; ++i) {
    std::string data = Block(kMiB, 20 + i);
    ASSERT_TRUE(client->Put(absl::StrCat("c", i), data.data(), data.size()).ok());
  }
  auto clean = [&]() -> uint64_t {
    auto l = Leader();
    if (!l.ok()) return 0;
    auto st = AdminStatus(l->address);
    return st.ok() ? st->dram_clean_bytes() : 0;
  };
  ASSERT_TRUE(Evict(kBlocks * kMiB, /*copy=*/true).ok());
  ASSERT_TRUE(WaitFor([&] { return clean() == kBlocks * kMiB; }, 15000, 20))
      << "clean bytes: " << clean();
  // Let the stores learn what their DRAM holds (notices ride on heartbeats).
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  ASSERT_NO_FATAL_FAILURE(KillTheLeader());
  EXPECT_TRUE(WaitFor([&] { return clean() == kBlocks * kMiB; }, 5000, 20))
      << "the new leader counts " << clean() << " clean bytes";
  std::unique_ptr<Client> fresh = OpenClient();  // finds the new leader
  ASSERT_NE(fresh, nullptr);
  for (int i = 0; i < kBlocks; ++i) {
    std::string got;
    Status st = fresh->Get(absl::StrCat("c", i), &got);
    ASSERT_TRUE(st.ok()) << "c" << i << ": " << st.ToString();
    ASSERT_TRUE(got == Block(kMiB, 20 + i)) << "c" << i << " came back with other bytes";
  }
}

TEST_F(HaTest, AStoppedOldLeaderAcceptsNoWritesAfterFailover) {
  auto old = Leader();
  ASSERT_TRUE(old.ok());
  int idx = MasterIndex(old->address);
  masters_[idx]->Signal(SIGSTOP);
  absl::StatusOr<coord::LeaderInfo> now;
  WaitFor(
      [&] {
        now = Leader();
        return now.ok() && now->address != old->address;
      },
      15000);
  ASSERT_TRUE(now.ok() && now->address != old->address);
  masters_[idx]->Signal(SIGCONT);
  // The resumed old leader fences itself: no writes, no lookups.
  auto ch = MakeChannel(old->address, TlsFiles());
  ASSERT_TRUE(ch.ok());
  auto stub = v1::MasterService::NewStub(*ch);
  v1::PutStartRequest req;
  req.set_key("after-partition");
  req.set_size(4096);
  v1::PutStartResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, "", 5000);
  absl::Status s = FromGrpc(stub->PutStart(&ctx, req, &resp));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("NOT_LEADER"), std::string::npos) << s;
  auto st = AdminStatus(old->address);
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->is_leader());
  // The new leader serves, with both stores.
  ASSERT_TRUE(WaitForLiveStores(2, 15000).ok());
}

TEST_F(HaTest, AStoreRestartingDuringRecoveryIsHandled) {
  ClientOptions co;
  co.masters = master_addrs_;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  PutOptions two;
  two.replicas = 2;
  std::string data = Block(128 << 10, 7);
  ASSERT_TRUE(client->Put("replicated", data.data(), data.size(), two).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  auto old = Leader();
  ASSERT_TRUE(old.ok());
  masters_[MasterIndex(old->address)]->Signal(SIGKILL);
  // While a new leader is elected and recovers, store 0 dies and restarts
  // (empty DRAM, same node id).
  stores_[0]->Signal(SIGKILL);
  stores_[0]->Wait(5000);
  std::string ready = absl::StrCat(dir_, "/s0b.addr");
  auto p = Process::Spawn({TestBinDir() + "/shelf-store", "--master",
                           absl::StrCat("etcd://", etcd_->endpoint(), "/", cluster_), "--listen",
                           "127.0.0.1:0", "--dram-size", "64MiB", "--node-id", "store0",
                           "--run-dir", dir_ + "/s0b.run", "--ready-file", ready},
                          dir_ + "/s0b.log");
  ASSERT_TRUE(p.ok());
  stores_[0] = *std::move(p);
  ASSERT_TRUE(WaitForLiveStores(2, 20000).ok());
  // The copy on the store that stayed up is still served.
  std::string got;
  Status s = client->Get("replicated", &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(got == data);
}

TEST_F(HaTest, LeaderKeepsServingThroughAShortEtcdOutage) {
  ClientOptions co;
  co.masters = master_addrs_;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  auto old = Leader();
  ASSERT_TRUE(old.ok());
  etcd_->Kill();
  std::string data = Block(4096, 1);
  std::string got;
  // Within the lease the leader serves on.
  ASSERT_TRUE(client->Put("during-outage", data.data(), data.size()).ok());
  ASSERT_TRUE(client->Get("during-outage", &got).ok());
  ASSERT_TRUE(etcd_->Restart().ok());
  ASSERT_TRUE(WaitForLeader(15000).ok());
  ASSERT_TRUE(WaitForLiveStores(2, 15000).ok());
  auto again = Leader();
  ASSERT_TRUE(again.ok());
  // An outage shorter than the lease keeps the same leader and term; a
  // longer one (etcd's own restart can take longer than the 2 s TTL here)
  // elects again. Either way nothing the stores hold is lost.
  std::printf("after the etcd outage: leader %s term %lld (before: %s term %lld)\n",
              again->address.c_str(), static_cast<long long>(again->term), old->address.c_str(),
              static_cast<long long>(old->term));
  ASSERT_TRUE(client->Get("during-outage", &got).ok());
  EXPECT_TRUE(got == data);
}

// A client given "etcd://.../CLUSTER" instead of the masters' addresses
// finds the leader through etcd and follows it after kill -9: the block
// written before the kill reads back, and new puts succeed.
TEST_F(HaTest, AClientGivenEtcdFollowsTheLeaderAcrossAFailover) {
  ClientOptions co;
  co.masters = {absl::StrCat("etcd://", etcd_->endpoint(), "/", cluster_)};
  co.timeout_ms = 2000;
  std::unique_ptr<Client> client;
  Status open = Client::Open(co, &client);
  ASSERT_TRUE(open.ok()) << open.ToString();
  PutOptions two;
  two.replicas = 2;
  std::string data = Block(64 << 10, 11);
  Status put = client->Put("via-etcd", data.data(), data.size(), two);
  ASSERT_TRUE(put.ok()) << put.ToString();
  // The stores learn what they hold through heartbeats; the new leader
  // rebuilds from them.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  auto old = Leader();
  ASSERT_TRUE(old.ok());
  masters_[MasterIndex(old->address)]->Signal(SIGKILL);
  masters_[MasterIndex(old->address)]->Wait(5000);
  // The same client, given only etcd, reaches the new leader: a new block
  // goes in and reads back. (That every block a live store holds survives
  // is HaDefaultsTest's to show; here the old block may only be itself or,
  // were its notice not yet at its store, a miss.)
  std::string more = Block(4096, 12);
  std::string got;
  Status s;
  for (uint64_t until = MonoMs() + 30000; MonoMs() < until;) {
    s = client->Put("via-etcd-after", more.data(), more.size());
    if (s.ok()) s = client->Get("via-etcd-after", &got);
    if (s.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(s.ok()) << "no put and get through etcd 30 s after the kill: " << s.ToString();
  EXPECT_TRUE(got == more);
  auto now = Leader();
  ASSERT_TRUE(now.ok());
  EXPECT_NE(now->address, old->address);
  s = client->Get("via-etcd", &got);
  if (s.ok()) {
    EXPECT_TRUE(got == data) << "the block written before the kill came back wrong";
  } else {
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  }
}

// A malformed etcd spec, or one mixed with addresses, fails Open clearly.
TEST(EtcdMasterSpecTest, MalformedSpecsAreRefusedAtOpen) {
  std::unique_ptr<Client> client;
  ClientOptions co;
  co.masters = {"etcd://127.0.0.1:2379"};  // no /CLUSTER
  Status s = Client::Open(co, &client);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("CLUSTER"), std::string::npos) << s.ToString();
  co.masters = {"etcd://127.0.0.1:2379/c", "127.0.0.1:7000"};
  s = Client::Open(co, &client);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace shelf
