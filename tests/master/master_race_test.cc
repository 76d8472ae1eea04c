// Races replayed deterministically: with named sync points, and by
// ordering a store's reports against a replace of the key; plus a
// randomized multi-threaded run checked against the master's invariants.
#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/sync_point.h"
#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// A store's heartbeat long-polls for orders, holding a pointer to its Node
// while it waits; a step-down meanwhile frees every Node, and a waiter
// that then read its Node would read freed memory. The waiter checks the
// reset epoch first and tells the store to register again.
TEST_F(MasterFixture, AStepDownDuringAHeartbeatLongPollFreesNothingInUse) {
  MasterOptions o;
  o.node_ttl_ms = 10000;  // the long poll waits up to half of it
  Make(o);
  Register("a", 64 * kMiB);
  std::atomic<bool> answered{false};
  absl::Status status;
  v1::HeartbeatResponse resp;
  std::thread store([&] {
    v1::HeartbeatRequest hb;
    hb.set_node_id("a");
    hb.set_incarnation(1);
    hb.set_wait_for_orders_ms(3000);
    status = master_->Heartbeat(hb, &resp);
    answered.store(true);
  });
  clock_.WaitForWaiters(1);  // the heartbeat waits for orders
  EXPECT_FALSE(answered.load()) << "the heartbeat did not wait for orders";
  master_->electable().StepDown("elsewhere:1");
  // The clock stands still: only the step-down can end the wait.
  for (uint64_t t0 = MonoMs(); !answered.load() && MonoMs() - t0 < 10000;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(answered.load()) << "the waiting heartbeat was not woken";
  if (!answered.load()) clock_.Advance(o.node_ttl_ms);  // let it end
  store.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(resp.reregister());
}

// The ticker judged silence as `now - last_heartbeat` with `now` read
// before it took the lock: a heartbeat that got the lock first stamped a
// later time, the unsigned difference wrapped, and a live store was
// declared dead, its replicas dropped. A block whose other replica sat on
// a store really killed was then gone: the kill -9 fault test, run under
// AddressSanitizer, once read NOT_FOUND for 65 committed blocks. With a
// TTL of a minute, no store here may die.
TEST_F(MasterFixture, AHeartbeatRacingTheTickerNeverKillsALiveStore) {
  MasterOptions o;
  o.node_ttl_ms = 60000;
  Make(o, Clock::Real());  // real threads racing on real time
  Register("a", 16 * kMiB);
  Register("b", 16 * kMiB);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> beats{0}, told_to_reregister{0};
  std::vector<std::thread> threads;
  for (const char* id : {"a", "b"}) {
    threads.emplace_back([&, id] {
      while (!stop.load()) {
        v1::HeartbeatResponse hb;
        if (Heartbeat(id, 1, {}, &hb).ok() && hb.reregister()) told_to_reregister.fetch_add(1);
        beats.fetch_add(1);
      }
    });
  }
  uint64_t ticks = 0;
  for (uint64_t until = MonoMs() + 1500; MonoMs() < until; ++ticks) master_->Tick();
  stop.store(true);
  for (auto& th : threads) th.join();
  EXPECT_EQ(master_->metrics().nodes_died.Value(), 0u)
      << "in " << ticks << " ticks and " << beats.load() << " heartbeats";
  EXPECT_EQ(told_to_reregister.load(), 0u);
}

#ifdef SHELF_SYNC_POINTS
// The same race, placed exactly: at the moment the ticker reads the clock,
// time moves on and a heartbeat, stamped with the later time, gets in
// before the ticker compares wherever the ticker does not hold the lock.
// Read before the lock, `now` was older than the stamp and the silence
// wrapped; read under it, the heartbeat waits for the tick to end.
TEST_F(MasterFixture, AHeartbeatStampedAfterTheTickerReadTheClockNeverKillsALiveStore) {
  MasterOptions o;
  o.node_ttl_ms = 60000;
  Make(o);
  Register("a", 16 * kMiB);
  const std::thread::id ticker = std::this_thread::get_id();
  std::atomic<bool> locked{false};  // the ticker holds the master's lock
  SyncPoint::Get()->SetCallBack("Master::Tick:Locked", [&](void*) { locked.store(true); });
  SyncPoint::Get()->EnableProcessing();
  Mutex mu;
  CondVar cv;
  bool heartbeat_read = false;  // guarded by mu
  std::thread store;
  absl::Status status;
  v1::HeartbeatResponse resp;
  std::atomic<int> ticker_reads{0};
  clock_.SetReadHook([&] {
    if (std::this_thread::get_id() != ticker) {
      MutexLock lock(&mu);  // the heartbeat read the clock
      heartbeat_read = true;
      cv.SignalAll();
      return;
    }
    if (ticker_reads.fetch_add(1) != 0) return;
    clock_.Advance(1);
    store = std::thread([&] { status = Heartbeat("a", 1, {}, &resp); });
    {
      MutexLock lock(&mu);
      while (!heartbeat_read) cv.Wait(&mu);
    }
    // Nothing else holds the lock: without the ticker holding it, the
    // heartbeat gets in now.
    if (!locked.load()) store.join();
  });
  master_->Tick();
  clock_.SetReadHook(nullptr);
  if (store.joinable()) store.join();
  SyncPoint::Get()->DisableProcessing();
  SyncPoint::Get()->ClearAll();
  EXPECT_EQ(ticker_reads.load(), 1);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_FALSE(resp.reregister());
  EXPECT_EQ(master_->metrics().nodes_died.Value(), 0u);
}

// A put that finds DRAM full orders demotions and waits; the store's
// report, arriving while it waits, frees room and the put proceeds
// without dropping anything.
TEST_F(MasterFixture, PutWaitsForDemotionInsteadOfDropping) {
  MasterOptions o;
  o.demote_wait_ms = 5000;
  Make(o);
  Register("a", 4 * kMiB, 64 * kMiB);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  SyncPoint::Get()->LoadDependency({{"Master::PutStart:WaitForRoom", "Master::Heartbeat:Start"}});
  SyncPoint::Get()->EnableProcessing();
  std::thread store([&] {
    v1::HeartbeatResponse hb;
    ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());  // runs once the put waits
    std::vector<v1::TierMoveResult> done;
    for (const auto& m : hb.moves()) {
      if (m.kind() != v1::TierMove::DEMOTE) continue;
      v1::TierMoveResult r;
      r.set_move_id(m.move_id());
      r.set_key(m.key());
      r.set_ok(true);
      done.push_back(r);
    }
    v1::HeartbeatResponse hb2;
    ASSERT_TRUE(Heartbeat("a", 1, done, &hb2).ok());
  });
  absl::Status s;
  v1::PutStartResponse r = Start("new", kMiB, 1, &s);
  store.join();
  SyncPoint::Get()->DisableProcessing();
  EXPECT_EQ(SyncPoint::Get()->Count("Master::PutStart:WaitForRoom"), 1);
  SyncPoint::Get()->ClearAll();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  // Nothing was dropped: every old block is still readable from some tier.
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Lookup("k" + std::to_string(i), false).found());
  EXPECT_EQ(master_->metrics().evictions.Value(), 0u);
}

// A commit racing a put timeout: the reaper runs first, the commit then
// finds nothing, and no half block ever becomes visible.
TEST_F(MasterFixture, LateCommitAfterReclaimIsRejected) {
  Register("a", 16 * kMiB);
  v1::PutStartResponse r = Start("k", kMiB);
  SyncPoint::Get()->LoadDependency({{"Test:Reclaimed", "Master::PutCommit:Start"}});
  SyncPoint::Get()->EnableProcessing();
  absl::Status commit;
  std::thread writer([&] { commit = Commit(r.put_id()); });
  clock_.Advance(350);  // past the put timeout of 300 ms
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
  master_->Tick();
  SHELF_SYNC_POINT("Test:Reclaimed");
  writer.join();
  SyncPoint::Get()->DisableProcessing();
  SyncPoint::Get()->ClearAll();
  EXPECT_EQ(commit.code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Lookup("k").found());
  EXPECT_EQ(DramUsed(), 0u);
}
#endif

// The DEMOTE orders in a heartbeat's response, by key.
std::map<std::string, v1::TierMove> Demotions(const v1::HeartbeatResponse& hb) {
  std::map<std::string, v1::TierMove> out;
  for (const v1::TierMove& m : hb.moves()) {
    if (m.kind() == v1::TierMove::DEMOTE) out[m.key()] = m;
  }
  return out;
}

// What a store reports for an order it ran, its generation echoed.
v1::TierMoveResult Reported(const v1::TierMove& m, bool ok) {
  v1::TierMoveResult r;
  r.set_move_id(m.move_id());
  r.set_key(m.key());
  r.set_generation(m.generation());
  r.set_ok(ok);
  if (!ok) r.set_error("checksum mismatch");
  return r;
}

bool OrdersDrop(const v1::HeartbeatResponse& hb, const std::string& key) {
  for (const v1::TierMove& m : hb.moves()) {
    if (m.kind() == v1::TierMove::DROP_SSD && m.key() == key) return true;
  }
  return false;
}

// A master that demotes from 20% full down to 10%, with one store of 8
// MiB of DRAM: two 1 MiB puts start the demotion of both.
class DemotionReportTest : public MasterFixture {
 protected:
  void SetUp() override {
    MasterOptions o = TestOptions();
    o.evict_high = 0.2;
    o.evict_low = 0.1;
    o.demote_lead_ms = 0;  // the watermarks alone
    Make(o);
    Register("a", 8 * kMiB, 64 * kMiB);
  }

  // The demotions ordered since the last heartbeat, by key.
  std::map<std::string, v1::TierMove> Orders() {
    v1::HeartbeatResponse hb;
    EXPECT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
    return Demotions(hb);
  }

  // Reports `r`; whether the response orders `key` dropped from SSD.
  bool ReportDrops(const v1::TierMoveResult& r, const std::string& key) {
    v1::HeartbeatResponse hb;
    EXPECT_TRUE(Heartbeat("a", 1, {r}, &hb).ok());
    return OrdersDrop(hb, key);
  }

  void RemoveKeys(const std::vector<std::string>& keys) {
    v1::RemoveRequest rm;
    for (const std::string& k : keys) rm.add_keys(k);
    v1::RemoveResponse resp;
    ASSERT_TRUE(master_->Remove(rm, &resp).ok());
  }
};

// A store that registered again while its demotion ran (the same process:
// its DRAM blocks come back as they were, no demotion pending) reports the
// demotion done. Its SSD copy is in no index: it is dropped, not left to
// take space and come back with a later inventory. The same report again,
// after one that was applied, keeps the copy.
TEST_F(DemotionReportTest, AReportOfADemotionTheMasterNoLongerAwaitsDropsTheCopy) {
  ASSERT_TRUE(Put("k0", kMiB).ok());
  ASSERT_TRUE(Put("k1", kMiB).ok());
  std::map<std::string, v1::TierMove> first = Orders();
  ASSERT_EQ(first.count("k0"), 1u);
  // Applied, then the same report again (a heartbeat answer lost).
  EXPECT_FALSE(ReportDrops(Reported(first["k0"], true), "k0"));
  EXPECT_FALSE(ReportDrops(Reported(first["k0"], true), "k0"));
  EXPECT_EQ(Peek("k0").replicas(0).tier(), v1::TIER_SSD);
  // The store registers again before it reports the next demotion.
  std::map<std::string, v1::TierMove> next;
  for (int i = 2; next.empty() && i < 8; ++i) {
    ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
    next = Orders();
  }
  ASSERT_FALSE(next.empty());
  const v1::TierMove order = next.begin()->second;
  Register("a", 8 * kMiB, 64 * kMiB);  // same incarnation: orphans back in DRAM
  ASSERT_EQ(Peek(order.key()).replicas(0).tier(), v1::TIER_DRAM);
  EXPECT_TRUE(ReportDrops(Reported(order, true), order.key()));
  EXPECT_TRUE(Peek(order.key()).found());
}

// A key removed and put again while its demotion ran; the new commit's own
// demotion is ordered before the old one's report arrives. The old report
// once matched the new commit by key: the master freed the new bytes' DRAM
// while the store's SSD held the old ones. The report now names its
// commit, and is not applied to another.
TEST_F(DemotionReportTest, ADemotionReportForAReplacedKeyIsNotAppliedToItsNewCommit) {
  ASSERT_TRUE(Put("k0", kMiB).ok());
  ASSERT_TRUE(Put("k1", kMiB).ok());
  std::map<std::string, v1::TierMove> first = Orders();
  ASSERT_EQ(first.count("k0"), 1u);
  ASSERT_NE(first["k0"].generation(), 0u);
  RemoveKeys({"k0"});
  ASSERT_TRUE(Put("k0", kMiB).ok());
  ASSERT_TRUE(Put("f0", kMiB).ok());  // 20% full again: the new k0 is demoted too
  std::map<std::string, v1::TierMove> second = Orders();
  ASSERT_EQ(second.count("k0"), 1u);
  ASSERT_NE(second["k0"].generation(), first["k0"].generation());
  const uint64_t ok_before = master_->metrics().demotions_ok.Value();

  // The old demotion's report: stale. The new commit stays in DRAM, and
  // the old copy is not dropped: the new demotion, behind it in the
  // store's queue, overwrites it.
  EXPECT_FALSE(ReportDrops(Reported(first["k0"], true), "k0"));
  v1::ObjectLocation loc = Peek("k0");
  ASSERT_TRUE(loc.found());
  ASSERT_EQ(loc.replicas_size(), 1);
  EXPECT_EQ(loc.replicas(0).tier(), v1::TIER_DRAM);
  EXPECT_EQ(loc.generation(), second["k0"].generation());
  EXPECT_EQ(master_->metrics().demotions_stale.Value(), 1u);
  EXPECT_EQ(master_->metrics().demotions_ok.Value(), ok_before);

  // Its own report moves it.
  EXPECT_FALSE(ReportDrops(Reported(second["k0"], true), "k0"));
  loc = Peek("k0");
  ASSERT_TRUE(loc.found());
  EXPECT_EQ(loc.replicas(0).tier(), v1::TIER_SSD);
  EXPECT_EQ(master_->metrics().demotions_ok.Value(), ok_before + 1);
}

// A stale report with no later demotion of the key on its way drops the
// copy it wrote. With one on its way, the copy stays for that demotion to
// overwrite; when that one fails (its DRAM range changed under it, say),
// its report drops the copy instead.
TEST_F(DemotionReportTest, StaleDemotionCopiesAreDroppedWhenNothingOverwritesThem) {
  // Each put past 10% full demotes the oldest committed block.
  for (const char* k : {"k0", "k1", "k2"}) ASSERT_TRUE(Put(k, kMiB).ok());
  std::map<std::string, v1::TierMove> first = Orders();
  ASSERT_EQ(first.count("k0"), 1u);
  ASSERT_EQ(first.count("k1"), 1u);
  RemoveKeys({"k0", "k1"});
  ASSERT_TRUE(Put("k1", kMiB).ok());  // demotes k2, not itself
  EXPECT_TRUE(ReportDrops(Reported(first["k1"], true), "k1"));
  EXPECT_EQ(Peek("k1").replicas(0).tier(), v1::TIER_DRAM);

  ASSERT_TRUE(Put("k0", kMiB).ok());
  ASSERT_TRUE(Put("f0", kMiB).ok());  // demotes the new k0
  std::map<std::string, v1::TierMove> second = Orders();
  ASSERT_EQ(second.count("k0"), 1u);
  EXPECT_FALSE(ReportDrops(Reported(first["k0"], true), "k0"));
  EXPECT_TRUE(ReportDrops(Reported(second["k0"], false), "k0"));
  v1::ObjectLocation loc = Peek("k0");
  ASSERT_TRUE(loc.found());
  EXPECT_EQ(loc.replicas(0).tier(), v1::TIER_DRAM);
  EXPECT_EQ(master_->metrics().demotions_stale.Value(), 2u);
  EXPECT_EQ(master_->metrics().demotions_failed.Value(), 1u);
}

// Many threads, random operations on a small key space; the invariants
// (allocator accounting equals index + open puts + deferred frees) hold.
TEST_F(MasterFixture, RandomizedConcurrentOperationsKeepInvariants) {
  MasterOptions o;
  o.lease_ms = 5;
  o.put_timeout_ms = 50;
  o.node_ttl_ms = 60000;
  o.demote_wait_ms = 5;
  Make(o, Clock::Real());  // leases and puts expire while the threads run
  Register("a", 8 * kMiB, 16 * kMiB);
  Register("b", 8 * kMiB);
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      for (int i = 0; i < 3000; ++i) {
        std::string key = "k" + std::to_string(rng() % 64);
        switch (rng() % 6) {
          case 0:
          case 1: {
            v1::PutStartResponse r = Start(key, 4096 * (1 + rng() % 64), 1 + rng() % 2);
            if (r.state() == v1::PUT_STARTED && rng() % 4 != 0) Commit(r.put_id()).IgnoreError();
            break;
          }
          case 2:
            Lookup(key, rng() % 2 == 0);
            break;
          case 3: {
            v1::RemoveRequest rm;
            rm.add_keys(key);
            v1::RemoveResponse resp;
            master_->Remove(rm, &resp).IgnoreError();
            break;
          }
          case 4: {
            v1::HeartbeatResponse hb;
            Heartbeat("a", 1, {}, &hb).IgnoreError();
            std::vector<v1::TierMoveResult> done;
            for (const auto& m : hb.moves()) {
              if (m.kind() != v1::TierMove::DEMOTE) continue;
              v1::TierMoveResult res;
              res.set_move_id(m.move_id());
              res.set_key(m.key());
              res.set_ok(rng() % 5 != 0);
              // Most reports name their commit, as stores do; some, as
              // from a store that does not, leave the master the key.
              if (rng() % 4 != 0) res.set_generation(m.generation());
              done.push_back(res);
            }
            Heartbeat("a", 1, done, &hb).IgnoreError();
            break;
          }
          default:
            master_->Tick();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  master_->CheckInvariants();
}

}  // namespace
}  // namespace shelf::master
