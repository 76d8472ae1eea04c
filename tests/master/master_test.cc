// The master's state machine, in process: placement, two-phase puts,
// leases, pins, eviction and demotion, liveness, limits.
#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST_F(MasterFixture, TwoPhasePutIsInvisibleUntilCommitAndDedups) {
  Register("a", 64 * kMiB);
  v1::PutStartResponse r = Start("k", kMiB);
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  ASSERT_EQ(r.replicas_size(), 1);
  ASSERT_EQ(r.grants_size(), 1);
  EXPECT_EQ(r.grants(0).mac().size(), 32u);
  EXPECT_FALSE(Lookup("k").found());
  EXPECT_EQ(Start("k", kMiB).state(), v1::PUT_IN_FLIGHT);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  EXPECT_TRUE(Lookup("k").found());
  EXPECT_EQ(Start("k", kMiB).state(), v1::PUT_ALREADY_EXISTS);
  EXPECT_EQ(Commit(r.put_id()).code(), absl::StatusCode::kNotFound);  // no double commit
  EXPECT_EQ(master_->metrics().dedup_hits.Value(), 1u);
}

// docs/master.md and proto/shelf.proto quote these values.
static_assert(kKeyBytesMax == 256 && kBatchItemsMax == 1024 && kReplicasMax == 8 &&
              kProtocolVersion == 1);

TEST_F(MasterFixture, LimitsAreInvalidArgument) {
  Register("a", 64 * kMiB);
  absl::Status s;
  Start("", 10, 1, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // Each message names the limit from shelf/limits.h.
  Start(std::string(kKeyBytesMax + 1, 'x'), 10, 1, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), std::to_string(kKeyBytesMax))) << s;
  Start("k", 0, 1, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Start("k", 2ull << 30, 1, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Start("k", 10, kReplicasMax + 1, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), std::to_string(kReplicasMax))) << s;
  v1::LookupRequest big;
  for (size_t i = 0; i <= kBatchItemsMax; ++i) big.add_keys("k");
  v1::LookupResponse resp;
  s = master_->Lookup(big, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), std::to_string(kBatchItemsMax))) << s;
  v1::MatchPrefixRequest none;
  v1::MatchPrefixResponse mresp;
  EXPECT_EQ(master_->MatchPrefix(none, &mresp).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DramUsed(), 0u);
}

TEST_F(MasterFixture, NoStoresIsUnavailableAndTooFewIsExhaustedUnlessBestEffort) {
  absl::Status s;
  Start("k", 10, 1, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  Register("a", 64 * kMiB);
  Register("b", 64 * kMiB);
  Start("k", kMiB, 3, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(DramUsed(), 0u);  // nothing leaked by the failed attempt
  v1::PutOptions best;
  best.set_best_effort(true);
  v1::PutStartResponse r = Start("k", kMiB, 3, &s, best);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(r.replicas_size(), 2);
  EXPECT_NE(r.replicas(0).store().node_id(), r.replicas(1).store().node_id());
}

TEST_F(MasterFixture, PlacementPrefersLocalSpreadsLabelsAndSkipsDrained) {
  Register("a", 64 * kMiB, 0, "h1", 1, {{"zone", "z1"}});
  Register("b", 64 * kMiB, 0, "h2", 1, {{"zone", "z1"}});
  Register("c", 64 * kMiB, 0, "h3", 1, {{"zone", "z2"}});
  v1::PutOptions local;
  local.set_prefer_local(true);
  local.set_client_host_id("h2");
  for (int i = 0; i < 5; ++i) {
    v1::PutStartResponse r = Start("l" + std::to_string(i), kMiB, 1, nullptr, local);
    ASSERT_EQ(r.replicas_size(), 1);
    EXPECT_EQ(r.replicas(0).store().node_id(), "b");
  }
  v1::PutOptions spread;
  spread.set_spread_label("zone");
  for (int i = 0; i < 5; ++i) {
    v1::PutStartResponse r = Start("s" + std::to_string(i), kMiB, 2, nullptr, spread);
    ASSERT_EQ(r.replicas_size(), 2);
    bool has_c = r.replicas(0).store().node_id() == "c" || r.replicas(1).store().node_id() == "c";
    EXPECT_TRUE(has_c) << "replicas not spread over zones";
  }
  v1::DrainRequest drain;
  drain.set_node("c");
  v1::DrainResponse dresp;
  ASSERT_TRUE(master_->Drain(drain, &dresp).ok());
  EXPECT_EQ(dresp.node().state(), v1::NODE_DRAINING);
  for (int i = 0; i < 5; ++i) {
    v1::PutStartResponse r = Start("d" + std::to_string(i), kMiB, 1);
    EXPECT_NE(r.replicas(0).store().node_id(), "c");
  }
}

// An expired put's range waits out the grant skew too: a store whose
// clock runs behind the master's still takes frames under its grants.
TEST_F(MasterFixture, AnExpiredPutsRangeWaitsOutTheGrantSkew) {
  MasterOptions o = TestOptions();
  o.grant_skew_ms = 200;
  Make(o);
  Register("a", 64 * kMiB);
  Start("k", kMiB);
  v1::HeartbeatResponse hb;
  for (uint64_t step : {301, 198, 2}) {  // expired; then within the skew; then past it
    clock_.Advance(step);
    ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
    master_->Tick();
    EXPECT_EQ(DramUsed(), step == 2 ? 0u : kMiB) << step;
  }
}

TEST_F(MasterFixture, PutTimeoutReclaimsAndLateCommitFails) {
  Register("a", 64 * kMiB);
  v1::PutStartResponse r = Start("k", kMiB);
  EXPECT_EQ(r.expires_unix_ms(), clock_.UnixMs() + 300);
  EXPECT_EQ(DramUsed(), kMiB);
  // The put times out 300 ms after it started; a heartbeat keeps the node
  // (TTL 300 ms) alive meanwhile.
  clock_.Advance(299);
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
  master_->Tick();
  EXPECT_EQ(DramUsed(), kMiB) << "reclaimed before its timeout";
  clock_.Advance(1);
  master_->Tick();
  EXPECT_EQ(DramUsed(), 0u);
  EXPECT_EQ(Commit(r.put_id()).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Lookup("k").found());
  EXPECT_EQ(master_->metrics().puts_expired.Value(), 1u);
}

TEST_F(MasterFixture, RemoveHonoursLeases) {
  Register("a", 8 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  v1::ObjectLocation loc = Lookup("k");  // takes a 200 ms lease
  ASSERT_TRUE(loc.found());
  uint64_t offset = loc.replicas(0).offset();
  v1::RemoveRequest rm;
  rm.add_keys("k");
  v1::RemoveResponse rresp;
  ASSERT_TRUE(master_->Remove(rm, &rresp).ok());
  EXPECT_EQ(rresp.statuses(0).code(), 0);
  EXPECT_FALSE(Lookup("k").found());
  // The leased range is not reused while the lease runs: fill the rest.
  for (int i = 0; i < 3; ++i) {
    v1::PutStartResponse r = Start("n" + std::to_string(i), kMiB);
    ASSERT_EQ(r.state(), v1::PUT_STARTED);
    EXPECT_NE(r.replicas(0).offset(), offset);
    ASSERT_TRUE(Commit(r.put_id()).ok());
  }
  clock_.Advance(199);
  master_->Tick();
  EXPECT_EQ(DramUsed(), 4 * kMiB) << "freed under its lease";
  clock_.Advance(1);
  master_->Tick();  // the lease ended: the deferred free happens
  EXPECT_EQ(DramUsed(), 3 * kMiB);
}

TEST_F(MasterFixture, EvictionSkipsLeasedAndPinnedAndFailsFastWhenNothingIsEvictable) {
  MasterOptions o;
  o.lease_ms = 5000;
  o.evict_high = 1.0;  // evict only when full, so the test sees each choice
  o.evict_low = 0.99;
  o.demote_wait_ms = 100;
  Make(o);
  Register("a", 4 * kMiB);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  v1::PinRequest pin;
  pin.set_key("k0");
  pin.set_hard(true);
  // Hard pins are capped at 10% of the node's DRAM by default.
  EXPECT_EQ(master_->Pin(pin).code(), absl::StatusCode::kResourceExhausted);
  pin.set_hard(false);
  ASSERT_TRUE(master_->Pin(pin).ok());  // soft pin: evicted last
  Lookup("k1");                         // leased
  // A new put must evict: the least recently used unleased, unpinned one
  // is k2 (k1 is leased, k0 soft-pinned).
  ASSERT_TRUE(Put("new", kMiB).ok());
  EXPECT_TRUE(Lookup("k0", false).found());
  EXPECT_TRUE(Lookup("k1", false).found());
  EXPECT_FALSE(Lookup("k2", false).found());
  // Pinned keys are not removed without force.
  v1::RemoveRequest rm;
  rm.add_keys("k0");
  v1::RemoveResponse rresp;
  ASSERT_TRUE(master_->Remove(rm, &rresp).ok());
  EXPECT_EQ(rresp.statuses(0).code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  // Everything leased: a put fails fast with RESOURCE_EXHAUSTED.
  for (const char* k : {"k0", "k1", "k3", "new"}) Lookup(k);
  // It does not wait for room: the clock stands still, so a put that
  // waited for demote_wait_ms would never return.
  absl::Status s;
  Start("blocked", kMiB, 1, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(clock_.waiters(), 0u);
}

// Without an SSD tier nothing can be demoted, and a drop frees room at
// once: the watermarks must not keep a tenth of the DRAM empty.
TEST_F(MasterFixture, DramOnlyEvictionDropsOnlyWhatAPutNeeds) {
  MasterOptions o;  // the default watermarks, 0.95 / 0.85
  o.demote_wait_ms = 100;
  Make(o);
  Register("a", 20 * kMiB);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  master_->Tick();
  EXPECT_EQ(DramUsed(), 20 * kMiB);  // full, past the high mark: nothing dropped
  EXPECT_EQ(master_->metrics().evictions.Value(), 0u);
  ASSERT_TRUE(Put("new", kMiB).ok());
  EXPECT_EQ(DramUsed(), 20 * kMiB);  // one block made room for one
  EXPECT_EQ(master_->metrics().evictions.Value(), 1u);
  // Its only copy: counted as a put's drop.
  EXPECT_EQ(master_->metrics().put_drops.Value(), 1u);
  EXPECT_FALSE(Peek("k0").found());  // the least recently used
  EXPECT_TRUE(Peek("k1").found());
}

// Lookups keep the lists in exact LRU order: the block read least recently
// goes first, whatever the order the blocks were put in.
TEST_F(MasterFixture, EvictionFollowsTheOrderOfLookups) {
  Register("a", 4 * kMiB);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  Lookup("k1", false);
  Lookup("k0", false);  // recency now k2 < k3 < k1 < k0
  ASSERT_TRUE(Put("n0", kMiB).ok());
  ASSERT_TRUE(Put("n1", kMiB).ok());
  EXPECT_FALSE(Peek("k2").found());
  EXPECT_FALSE(Peek("k3").found());
  ASSERT_TRUE(Put("n2", kMiB).ok());
  EXPECT_FALSE(Peek("k1").found());  // read before k0, so it goes first
  EXPECT_TRUE(Peek("k0").found());
}

// With every store full, a put goes to the store whose least recently
// used block is the oldest: the stores evict as one LRU.
TEST_F(MasterFixture, FullStoresTakeAPutWhereTheOldestBlockIs) {
  Register("a", 2 * kMiB);
  Register("b", 2 * kMiB);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  std::vector<std::string> on_a, on_b;
  for (int i = 0; i < 4; ++i) {
    std::string k = "k" + std::to_string(i);
    (Peek(k).replicas(0).store().node_id() == "a" ? on_a : on_b).push_back(k);
  }
  ASSERT_EQ(on_a.size(), 2u);  // the most free space first: one each in turn
  clock_.Advance(5);
  for (const std::string& k : on_a) Lookup(k, false);  // b now holds the oldest
  // Each store's two oldest go in turn: b, b, a, a, b, b, ...
  for (int round = 0; round < 8; ++round) {
    clock_.Advance(5);
    std::string k = "n" + std::to_string(round);
    ASSERT_TRUE(Put(k, kMiB).ok());
    EXPECT_EQ(Peek(k).replicas(0).store().node_id(), round / 2 % 2 == 0 ? "b" : "a") << round;
  }
  for (const std::string& k : on_a) EXPECT_FALSE(Peek(k).found());
  EXPECT_EQ(master_->metrics().evictions.Value(), 8u);
}

// A peek (monitoring) neither leases nor counts as an access.
TEST_F(MasterFixture, PeekLookupLeavesLeaseAndOrderAlone) {
  Register("a", 2 * kMiB);
  ASSERT_TRUE(Put("k0", kMiB).ok());
  ASSERT_TRUE(Put("k1", kMiB).ok());
  v1::ObjectLocation loc = Peek("k0");
  ASSERT_TRUE(loc.found());
  EXPECT_EQ(loc.lease_expires_unix_ms(), 0u);
  ASSERT_TRUE(Put("n0", kMiB).ok());
  EXPECT_FALSE(Peek("k0").found());  // still the least recently used
  EXPECT_TRUE(Peek("k1").found());
  EXPECT_EQ(master_->metrics().leases_granted.Value(), 0u);
}

// A lease ends when every reader that took it gives it back, not only when
// it runs out: eviction then takes the block in its LRU turn.
TEST_F(MasterFixture, ReleasedLeasesLetEvictionTakeTheBlock) {
  MasterOptions o;
  o.lease_ms = 60000;  // never runs out during the test
  o.demote_wait_ms = 100;
  Make(o);
  Register("a", 2 * kMiB);
  ASSERT_TRUE(Put("k0", kMiB).ok());
  ASSERT_TRUE(Put("k1", kMiB).ok());
  Lookup("k0");
  Lookup("k0");  // two readers of k0
  Lookup("k1");  // recency k0 < k1
  auto release = [this](const std::vector<std::string>& keys) {
    v1::ReleaseLeasesRequest req;
    for (const std::string& k : keys) req.add_keys(k);
    return master_->ReleaseLeases(req);
  };
  ASSERT_TRUE(release({"k0", "k1", "unknown"}).ok());
  // k0 still has a reader: the put takes k1, although k0 is older.
  ASSERT_TRUE(Put("n0", kMiB).ok());
  EXPECT_TRUE(Peek("k0").found());
  EXPECT_FALSE(Peek("k1").found());
  // The last reader of k0 gives it back (a release more is ignored): the
  // next put takes k0, older than n0.
  ASSERT_TRUE(release({"k0", "k0"}).ok());
  ASSERT_TRUE(Put("n1", kMiB).ok());
  EXPECT_FALSE(Peek("k0").found());
  EXPECT_TRUE(Peek("n0").found());
  EXPECT_EQ(master_->metrics().leases_released.Value(), 2u);
  // Too many keys is refused.
  v1::ReleaseLeasesRequest big;
  for (size_t i = 0; i <= kBatchItemsMax; ++i) big.add_keys("k");
  EXPECT_EQ(master_->ReleaseLeases(big).code(), absl::StatusCode::kInvalidArgument);
}

// A block removed while readers hold its lease keeps its space until the
// lease ends, or until every reader has given the lease back: a reader that
// removes what it has just read (its release still on the way) gets the
// space back with the release, not a lease later. Releases name the commit:
// one without generations, or of another commit, frees nothing.
TEST_F(MasterFixture, ARemovedBlocksSpaceReturnsWhenItsReadersGiveTheLeaseBack) {
  MasterOptions o;
  o.lease_ms = 60000;  // never runs out unless the clock is moved
  Make(o);
  Register("a", 4 * kMiB);
  ASSERT_TRUE(Put("k0", kMiB).ok());
  ASSERT_TRUE(Put("k1", kMiB).ok());
  const uint64_t k0 = Lookup("k0").generation();
  ASSERT_EQ(Lookup("k0").generation(), k0);  // two readers of k0
  const uint64_t k1 = Lookup("k1").generation();
  auto remove = [this](const std::string& key) {
    v1::RemoveRequest req;
    req.add_keys(key);
    v1::RemoveResponse resp;
    ASSERT_TRUE(master_->Remove(req, &resp).ok());
    ASSERT_EQ(resp.statuses(0).code(), 0);
  };
  auto release = [this](const std::string& key, const uint64_t* generation) {
    v1::ReleaseLeasesRequest req;
    req.add_keys(key);
    if (generation != nullptr) req.add_generations(*generation);
    ASSERT_TRUE(master_->ReleaseLeases(req).ok());
  };
  remove("k0");
  remove("k1");
  EXPECT_EQ(DramUsed(), 2 * kMiB);  // both wait for their readers
  const uint64_t other = k0 + 1000;
  release("k0", nullptr);
  release("k0", &other);
  release("k0", &k0);  // the first of k0's two readers
  EXPECT_EQ(DramUsed(), 2 * kMiB);
  release("k0", &k0);  // the last
  EXPECT_EQ(DramUsed(), kMiB);
  EXPECT_EQ(master_->metrics().removed_leases_released.Value(), 1u);
  release("k0", &k0);  // one more: nothing left to give back
  // A key put again is a new commit: a release of the old one is not its.
  ASSERT_TRUE(Put("k0", kMiB).ok());
  ASSERT_NE(Lookup("k0").generation(), k0);
  remove("k0");
  release("k0", &k0);
  EXPECT_EQ(DramUsed(), 2 * kMiB);
  // Unreleased, k1's space comes back when its lease runs out.
  clock_.Advance(60001);
  master_->Tick();
  EXPECT_EQ(DramUsed(), 0u);
  release("k1", &k1);  // after the lease: ignored
  EXPECT_EQ(master_->metrics().removed_leases_released.Value(), 1u);
}

// A block demoted while read keeps its DRAM range for its readers; the
// last reader's release gives the range back at once, not a lease later,
// as a remove's does. Removed after its demotion, its readers' releases
// still free the range it left; unreleased, the lease's end does.
TEST_F(MasterFixture, ADemotedBlocksDramReturnsWhenItsReadersGiveTheLeaseBack) {
  MasterOptions o = TestOptions();
  o.lease_ms = 60000;  // never runs out unless the clock is moved
  Make(o);
  Register("a", 4 * kMiB, 64 * kMiB);
  std::map<std::string, uint64_t> generation_of;
  for (int i = 0; i < 4; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(Put(key, kMiB).ok());
    generation_of[key] = Lookup(key).generation();
    ASSERT_EQ(Lookup(key).generation(), generation_of[key]);  // two readers of each
  }
  // Over the high watermark: demotions ordered at each tick, run by the
  // store and reported, until three blocks are on SSD.
  v1::HeartbeatResponse hb;
  std::vector<v1::TierMoveResult> results;
  const uint64_t used = DramUsed();
  for (int round = 0; round < 10 && results.size() < 3; ++round) {
    master_->Tick();
    ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
    std::vector<v1::TierMoveResult> done;
    for (const v1::TierMove& m : hb.moves()) {
      // An order not acknowledged comes again in the next answer.
      const bool known =
          std::any_of(results.begin(), results.end(),
                      [&](const v1::TierMoveResult& r) { return r.key() == m.key(); });
      if (m.kind() != v1::TierMove::DEMOTE || known) continue;
      v1::TierMoveResult r;
      r.set_move_id(m.move_id());
      r.set_key(m.key());
      r.set_ok(true);
      done.push_back(r);
    }
    ASSERT_TRUE(Heartbeat("a", 1, done, &hb).ok());
    results.insert(results.end(), done.begin(), done.end());
  }
  ASSERT_GE(results.size(), 3u) << "the test needs three demoted blocks";
  EXPECT_EQ(DramUsed(), used) << "a demoted block's readers still read its DRAM range";
  auto release = [this](const std::string& key, uint64_t generation) {
    v1::ReleaseLeasesRequest req;
    req.add_keys(key);
    req.add_generations(generation);
    ASSERT_TRUE(master_->ReleaseLeases(req).ok());
  };
  // The first: released by both its readers while it stays, on SSD.
  const std::string first = results[0].key();
  ASSERT_EQ(Lookup(first, false).replicas(0).tier(), v1::TIER_SSD);
  release(first, generation_of[first]);
  EXPECT_EQ(DramUsed(), used);
  release(first, generation_of[first]);
  EXPECT_EQ(DramUsed(), used - kMiB);
  EXPECT_EQ(master_->metrics().moved_leases_released.Value(), 1u);
  // The second: read once more from SSD, then removed; the releases of its
  // three readers, the last after the remove, free the range it left.
  const std::string second = results[1].key();
  ASSERT_EQ(Lookup(second).generation(), generation_of[second]);
  release(second, generation_of[second]);
  v1::RemoveRequest remove;
  remove.add_keys(second);
  v1::RemoveResponse removed;
  ASSERT_TRUE(master_->Remove(remove, &removed).ok());
  ASSERT_EQ(removed.statuses(0).code(), 0);
  release(second, generation_of[second]);
  EXPECT_EQ(DramUsed(), used - kMiB) << "freed before its last reader gave the lease back";
  release(second, generation_of[second]);
  EXPECT_EQ(DramUsed(), used - 2 * kMiB);
  EXPECT_EQ(master_->metrics().removed_leases_released.Value(), 1u);
  // The third, never released: its range comes back when the lease runs out.
  clock_.Advance(60001);
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());  // the store stays live
  master_->Tick();
  EXPECT_EQ(DramUsed(), used - results.size() * kMiB);
  EXPECT_EQ(master_->metrics().moved_leases_released.Value(), 1u);
}

TEST_F(MasterFixture, DemotionProtocolMovesReplicasToSsd) {
  Register("a", 4 * kMiB, 64 * kMiB);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  master_->Tick();  // over the high watermark: demotions ordered
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
  ASSERT_GT(hb.moves_size(), 0);
  std::vector<v1::TierMoveResult> results;
  for (const v1::TierMove& m : hb.moves()) {
    if (m.kind() == v1::TierMove::RECORD) continue;  // notices ride along
    EXPECT_EQ(m.kind(), v1::TierMove::DEMOTE);
    EXPECT_EQ(m.size(), kMiB);
    v1::TierMoveResult r;
    r.set_move_id(m.move_id());
    r.set_key(m.key());
    r.set_ok(true);
    results.push_back(r);
  }
  uint64_t used_before = DramUsed();
  v1::HeartbeatResponse hb2;
  ASSERT_TRUE(Heartbeat("a", 1, results, &hb2).ok());
  EXPECT_EQ(DramUsed(), used_before - results.size() * kMiB);
  v1::ObjectLocation loc = Lookup(results[0].key(), false);
  ASSERT_TRUE(loc.found());
  EXPECT_EQ(loc.replicas(0).tier(), v1::TIER_SSD);
  EXPECT_EQ(master_->metrics().demotions_ok.Value(), results.size());
}

TEST_F(MasterFixture, FailedDemotionKeepsTheDramReplica) {
  Register("a", 4 * kMiB, 64 * kMiB);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  master_->Tick();
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
  const v1::TierMove* demote = nullptr;
  for (const v1::TierMove& m : hb.moves()) {
    if (m.kind() == v1::TierMove::DEMOTE && demote == nullptr) demote = &m;
  }
  ASSERT_NE(demote, nullptr);
  v1::TierMoveResult r;
  r.set_move_id(demote->move_id());
  r.set_key(demote->key());
  r.set_ok(false);
  r.set_error("disk full");
  v1::HeartbeatResponse hb2;
  ASSERT_TRUE(Heartbeat("a", 1, {r}, &hb2).ok());
  v1::ObjectLocation loc = Lookup(r.key(), false);
  ASSERT_TRUE(loc.found());
  EXPECT_EQ(loc.replicas(0).tier(), v1::TIER_DRAM);
  EXPECT_EQ(master_->metrics().demotions_failed.Value(), 1u);
}

TEST_F(MasterFixture, DeadNodeLosesItsReplicasAndAbortsItsPuts) {
  MasterOptions o;
  o.node_ttl_ms = 300;
  o.put_timeout_ms = 10000;  // the open put outlives its node
  Make(o);
  Register("a", 64 * kMiB);
  Register("b", 64 * kMiB);
  ASSERT_TRUE(Put("both", kMiB, 2).ok());
  v1::PutStartResponse open = Start("open", kMiB, 2);
  clock_.Advance(200);
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("b", 1, {}, &hb).ok());
  clock_.Advance(100);  // a: silent for exactly its TTL, still live
  master_->Tick();
  EXPECT_EQ(Lookup("both", false).replicas_size(), 2);
  clock_.Advance(1);  // a: 301 ms silent; b: 101 ms
  master_->Tick();
  v1::ObjectLocation loc = Lookup("both", false);
  ASSERT_TRUE(loc.found());
  ASSERT_EQ(loc.replicas_size(), 1);
  EXPECT_EQ(loc.replicas(0).store().node_id(), "b");
  EXPECT_EQ(Commit(open.put_id()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(master_->metrics().puts_expired.Value(), 0u) << "aborted by the death, not expired";
  // A heartbeat from the dead node asks it to register again.
  ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
  EXPECT_TRUE(hb.reregister());
}

// A store declared dead while its process lives on (a stall longer than
// the TTL) registers again with the same incarnation. Its inventory lists
// only the blocks whose RECORD notices reached it; the rest come back from
// what the index held when it died, at their old ranges. A record of a
// range that the index had given to a newer block is stale and loses.
TEST_F(MasterFixture, AStoreDeclaredDeadButAliveGetsBackBlocksItWasNeverToldOf) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("told", kMiB).ok());
  ASSERT_TRUE(Put("untold", kMiB).ok());
  v1::ObjectLocation told = Lookup("told", false);
  v1::ObjectLocation untold = Lookup("untold", false);
  ASSERT_TRUE(told.found() && untold.found());
  clock_.Advance(301);  // TTL 300 ms, no heartbeat: no notice was delivered
  master_->Tick();
  ASSERT_FALSE(Lookup("untold", false).found());
  ASSERT_EQ(DramUsed(), 0u);

  std::vector<v1::InventoryEntry> inv(2);
  inv[0].set_key("told");
  inv[0].set_tier(v1::TIER_DRAM);
  inv[0].set_offset(told.replicas(0).offset());
  inv[0].set_size(kMiB);
  inv[0].set_checksum(42);
  inv[1] = inv[0];  // an older block's record of the range "untold" now holds
  inv[1].set_key("stale");
  inv[1].set_offset(untold.replicas(0).offset());
  Register("a", 16 * kMiB, 0, "host", 1, {}, inv);
  for (const v1::ObjectLocation& before : {told, untold}) {
    v1::ObjectLocation now = Lookup(before.key(), false);
    ASSERT_TRUE(now.found()) << before.key();
    ASSERT_EQ(now.replicas_size(), 1);
    EXPECT_EQ(now.replicas(0).offset(), before.replicas(0).offset()) << before.key();
  }
  EXPECT_FALSE(Lookup("stale", false).found());
  EXPECT_EQ(DramUsed(), 2 * kMiB);
  // Their ranges are taken: a new block goes elsewhere.
  ASSERT_TRUE(Put("new", kMiB).ok());
  uint64_t off = Lookup("new", false).replicas(0).offset();
  EXPECT_NE(off, told.replicas(0).offset());
  EXPECT_NE(off, untold.replicas(0).offset());
}

// A restarted store (a new incarnation) has fresh memory: nothing of what
// the index held comes back but what its inventory lists.
TEST_F(MasterFixture, ARestartedStoreGetsNoOrphansBack) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  clock_.Advance(301);  // past the TTL of 300 ms
  master_->Tick();
  Register("a", 16 * kMiB, 0, "host", 2);
  EXPECT_FALSE(Lookup("k", false).found());
  EXPECT_EQ(DramUsed(), 0u);
}

TEST_F(MasterFixture, ReRegistrationRestoresSsdInventory) {
  std::vector<v1::InventoryEntry> inv;
  for (int i = 0; i < 3; ++i) {
    v1::InventoryEntry e;
    e.set_key("ssd" + std::to_string(i));
    e.set_size(kMiB);
    e.set_checksum(7);
    e.set_tier(v1::TIER_SSD);
    inv.push_back(e);
  }
  Register("a", 8 * kMiB, 64 * kMiB, "h", 1, {}, inv);
  v1::ObjectLocation loc = Lookup("ssd1", false);
  ASSERT_TRUE(loc.found());
  EXPECT_EQ(loc.replicas(0).tier(), v1::TIER_SSD);
  EXPECT_EQ(loc.checksum(), 7u);
  // Same node, new incarnation (a restart), fewer blocks: the index follows.
  inv.pop_back();
  clock_.Advance(301);  // the old process fell silent: a live one keeps its node id
  Register("a", 8 * kMiB, 64 * kMiB, "h", 2, {}, inv);
  EXPECT_TRUE(Lookup("ssd0", false).found());
  EXPECT_FALSE(Lookup("ssd2", false).found());
}

TEST_F(MasterFixture, MatchPrefixStopsAtFirstMiss) {
  Register("a", 64 * kMiB);
  for (const char* k : {"p0", "p1", "p3"}) ASSERT_TRUE(Put(k, 4096).ok());
  v1::MatchPrefixRequest req;
  for (const char* k : {"p0", "p1", "p2", "p3"}) req.add_keys(k);
  v1::MatchPrefixResponse resp;
  ASSERT_TRUE(master_->MatchPrefix(req, &resp).ok());
  EXPECT_EQ(resp.matched(), 2u);
  EXPECT_EQ(resp.objects_size(), 2);
  EXPECT_GT(resp.objects(0).lease_expires_unix_ms(), 0u);
}

TEST_F(MasterFixture, PromotionAddsADramCopyBesideTheSsdOne) {
  Register("a", 8 * kMiB, 64 * kMiB, "h", 1, {}, {SsdEntry("cold", kMiB, 9)});
  uint64_t id = Promote("a", 1, "cold", kMiB, 9);
  ASSERT_NE(id, 0u);
  ASSERT_TRUE(CommitPromotion("a", id).ok());
  v1::ObjectLocation loc = Lookup("cold", false);
  ASSERT_EQ(loc.replicas_size(), 2);
  EXPECT_EQ(loc.replicas(0).tier(), v1::TIER_DRAM);  // DRAM sorts first
  EXPECT_EQ(loc.replicas(1).tier(), v1::TIER_SSD);
  // A second promotion of the same block is a no-op.
  EXPECT_EQ(Promote("a", 1, "cold", kMiB, 9), 0u);
  // A wrong checksum never promotes.
  EXPECT_EQ(Promote("a", 1, "cold", kMiB, 10), 0u);
}

// A TTL so large that the expiry would wrap is "until unpinned".
TEST_F(MasterFixture, ASoftPinOfAHugeTtlDoesNotWrap) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  v1::PinRequest pin;
  pin.set_key("k");
  pin.set_ttl_ms(UINT64_MAX - 5);
  ASSERT_TRUE(master_->Pin(pin).ok());
  v1::RemoveRequest rm;
  rm.add_keys("k");
  v1::RemoveResponse resp;
  ASSERT_TRUE(master_->Remove(rm, &resp).ok());
  EXPECT_EQ(resp.statuses(0).code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
}

// A soft pin with a TTL protects its block until exactly then.
TEST_F(MasterFixture, ASoftPinEndsAfterItsTtl) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  v1::PinRequest pin;
  pin.set_key("k");
  pin.set_ttl_ms(1000);
  ASSERT_TRUE(master_->Pin(pin).ok());
  v1::StatRequest stat;
  stat.set_key("k");
  v1::StatResponse st;
  ASSERT_TRUE(master_->Stat(stat, &st).ok());
  EXPECT_TRUE(st.pinned());
  EXPECT_EQ(st.pin_expires_unix_ms(), clock_.UnixMs() + 1000);
  v1::RemoveRequest rm;
  rm.add_keys("k");
  // Keep the node alive (TTL 300 ms) while the pin runs.
  for (int i = 0; i < 9; ++i) {
    clock_.Advance(111);
    v1::HeartbeatResponse hb;
    ASSERT_TRUE(Heartbeat("a", 1, {}, &hb).ok());
    master_->Tick();
  }
  v1::RemoveResponse early;
  ASSERT_TRUE(master_->Remove(rm, &early).ok());  // 999 ms in
  EXPECT_EQ(early.statuses(0).code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  clock_.Advance(1);
  v1::RemoveResponse done;
  ASSERT_TRUE(master_->Remove(rm, &done).ok());
  EXPECT_EQ(done.statuses(0).code(), 0);
}

// A store declared dead keeps its orphans for kOrphansKeepTtls TTLs: the
// same process registering again before then gets its blocks back, after
// then it does not.
TEST_F(MasterFixture, OrphansAreKeptForTheirTtlsThenForgotten) {
  Register("a", 16 * kMiB);
  Register("b", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB, 2).ok());  // one replica on each
  clock_.Advance(1);
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("b", 1, {}, &hb).ok());
  clock_.Advance(300);  // TTL 300 ms: a dies now, b 1 ms later
  master_->Tick();
  clock_.Advance(1);
  master_->Tick();
  ASSERT_FALSE(Lookup("k", false).found());
  // a's orphans are kept until exactly now, b's 1 ms more.
  clock_.Advance(kOrphansKeepTtls * 300 - 1);
  master_->Tick();
  Register("a", 16 * kMiB);
  EXPECT_FALSE(Lookup("k", false).found()) << "a got back orphans past their time";
  Register("b", 16 * kMiB);
  v1::ObjectLocation loc = Lookup("k", false);
  ASSERT_TRUE(loc.found()) << "b lost its orphans early";
  ASSERT_EQ(loc.replicas_size(), 1);
  EXPECT_EQ(loc.replicas(0).store().node_id(), "b");
}

// A heartbeat with nothing to carry is held for wait_for_orders_ms, at
// most half the TTL, by the master's clock.
TEST_F(MasterFixture, AHeartbeatLongPollEndsAtHalfTheTtl) {
  MasterOptions o;
  o.node_ttl_ms = 1000;
  Make(o);
  Register("a", 64 * kMiB);
  absl::Status status;
  v1::HeartbeatResponse resp;
  std::thread store([&] {
    v1::HeartbeatRequest hb;
    hb.set_node_id("a");
    hb.set_incarnation(1);
    hb.set_wait_for_orders_ms(3000);
    status = master_->Heartbeat(hb, &resp);
  });
  clock_.WaitForWaiters(1);
  clock_.Advance(499);
  EXPECT_EQ(clock_.waiters(), 1u) << "the long poll ended early";
  clock_.Advance(1);
  store.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(resp.reregister());
  EXPECT_EQ(resp.moves_size(), 0);
}

// A long poll ends as soon as an order for its own store is queued, and
// an order for another store leaves it waiting: each store's heartbeat
// waits on its own wake (docs/master.md, "Scale").
TEST_F(MasterFixture, ALongPollIsWokenByItsOwnStoresOrdersOnly) {
  MasterOptions o;
  o.node_ttl_ms = 1000;
  Make(o);
  v1::InventoryEntry e;
  e.set_key("on-a");
  e.set_size(kMiB);
  e.set_checksum(7);
  e.set_tier(v1::TIER_SSD);
  Register("a", 64 * kMiB, 64 * kMiB, "h", 1, {}, {e});
  Register("b", 64 * kMiB, 64 * kMiB);
  auto long_poll = [this](const std::string& id, v1::HeartbeatResponse* resp) {
    v1::HeartbeatRequest hb;
    hb.set_node_id(id);
    hb.set_incarnation(1);
    hb.set_wait_for_orders_ms(3000);
    EXPECT_TRUE(master_->Heartbeat(hb, resp).ok());
  };
  v1::HeartbeatResponse a_resp, b_resp;
  std::thread a([&] { long_poll("a", &a_resp); });
  std::thread b([&] { long_poll("b", &b_resp); });
  clock_.WaitForWaiters(2);
  // Removing a's SSD block orders a DROP_SSD to a alone; the clock stands
  // still, so only that order can end a's poll.
  v1::RemoveRequest rm;
  rm.add_keys("on-a");
  v1::RemoveResponse rresp;
  ASSERT_TRUE(master_->Remove(rm, &rresp).ok());
  a.join();
  ASSERT_EQ(a_resp.moves_size(), 1);
  EXPECT_EQ(a_resp.moves(0).kind(), v1::TierMove::DROP_SSD);
  EXPECT_EQ(a_resp.moves(0).key(), "on-a");
  EXPECT_EQ(clock_.waiters(), 1u) << "b's long poll ended on a's order";
  clock_.Advance(500);  // half the TTL: b's poll ends empty
  b.join();
  EXPECT_FALSE(b_resp.reregister());
  EXPECT_EQ(b_resp.moves_size(), 0);
}

// A commit's RECORD notice ends its store's long poll notice_delay_ms
// later, carrying the notices queued meanwhile: the store learns of fresh
// commits within that, not a whole poll later (what a leader's death can
// lose, docs/ha.md).
TEST_F(MasterFixture, ANoticeEndsALongPollAfterTheNoticeDelay) {
  MasterOptions o;
  o.node_ttl_ms = 10000;  // the poll could wait 5 s
  o.notice_delay_ms = 20;
  Make(o);
  Register("a", 64 * kMiB);
  v1::HeartbeatResponse resp;
  std::atomic<bool> answered{false};
  std::atomic<std::thread::id> store_thread{};
  std::atomic<int> store_reads{0};
  std::thread store([&] {
    store_thread.store(std::this_thread::get_id());
    v1::HeartbeatRequest hb;
    hb.set_node_id("a");
    hb.set_incarnation(1);
    hb.set_wait_for_orders_ms(3000);
    EXPECT_TRUE(master_->Heartbeat(hb, &resp).ok());
    answered.store(true);
  });
  clock_.WaitForWaiters(1);
  // From here the poll reads the clock once: woken by the notice, to
  // time the delay, which it then waits out.
  clock_.SetReadHook([&] {
    if (std::this_thread::get_id() == store_thread.load()) store_reads.fetch_add(1);
  });
  ASSERT_TRUE(Put("first", kMiB).ok());
  while (store_reads.load() == 0) std::this_thread::yield();
  clock_.WaitForWaiters(1);
  clock_.SetReadHook(nullptr);
  ASSERT_TRUE(Put("second", kMiB).ok());
  clock_.Advance(19);
  EXPECT_FALSE(answered.load()) << "the poll ended before the notice delay";
  clock_.Advance(1);
  store.join();
  ASSERT_EQ(resp.moves_size(), 2);
  EXPECT_EQ(resp.moves(0).kind(), v1::TierMove::RECORD);
  EXPECT_EQ(resp.moves(0).key(), "first");
  EXPECT_EQ(resp.moves(1).key(), "second");
}

// A put that finds DRAM full orders demotions and waits demote_wait_ms
// (100 ms) by the master's clock for them to free room; then it drops the
// least recently used block instead.
TEST_F(MasterFixture, APutWaitsForRoomUntilTheDemoteWaitEndsThenDrops) {
  Register("a", 4 * kMiB, 64 * kMiB);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put("k" + std::to_string(i), kMiB).ok());
  absl::Status s;
  v1::PutStartResponse r;
  std::thread writer([&] { r = Start("new", kMiB, 1, &s); });
  clock_.WaitForWaiters(1);  // its demotions are ordered; it waits
  clock_.Advance(99);
  EXPECT_EQ(clock_.waiters(), 1u) << "the put stopped waiting early";
  clock_.Advance(1);
  writer.join();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  EXPECT_GE(master_->metrics().evictions.Value(), 1u);
}

// Lists every page of a listing.
std::vector<std::string> ListAll(Master* master, const std::string& pattern, bool regex,
                                 uint32_t count, int* pages) {
  std::vector<std::string> all;
  std::string cursor;
  *pages = 0;
  while (true) {
    v1::ListKeysRequest req;
    req.set_cursor(cursor);
    req.set_pattern(pattern);
    req.set_regex(regex);
    req.set_count(count);
    v1::ListKeysResponse resp;
    EXPECT_TRUE(master->ListKeys(req, &resp).ok());
    ++*pages;
    for (const std::string& k : resp.keys()) all.push_back(k);
    if (resp.next_cursor().empty()) return all;
    EXPECT_EQ(resp.next_cursor(), resp.keys(resp.keys_size() - 1));
    cursor = resp.next_cursor();
    if (*pages > 100) return all;
  }
}

TEST_F(MasterFixture, ListKeysPagesInByteOrderByGlobOrRegex) {
  Register("a", 64 * kMiB);
  std::vector<std::string> keys = {"a/1", "a/2", "a/10", "b/1", "b/x", std::string("c\0\xff", 3),
                                   "[x]", "a*b"};
  for (const std::string& k : keys) ASSERT_TRUE(Put(k, 4096).ok());
  int pages = 0;
  std::vector<std::string> all = ListAll(master_.get(), "", false, 3, &pages);
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(all, sorted);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(ListAll(master_.get(), "a/*", false, 1024, &pages),
            (std::vector<std::string>{"a/1", "a/10", "a/2"}));
  EXPECT_EQ(ListAll(master_.get(), "a/?", false, 1, &pages),
            (std::vector<std::string>{"a/1", "a/2"}));
  EXPECT_EQ(ListAll(master_.get(), "[ab]/[^1]*", false, 2, &pages),
            (std::vector<std::string>{"a/2", "b/x"}));
  EXPECT_EQ(ListAll(master_.get(), "\\[x\\]", false, 10, &pages),
            (std::vector<std::string>{"[x]"}));
  EXPECT_EQ(ListAll(master_.get(), "a\\*b", false, 10, &pages), (std::vector<std::string>{"a*b"}));
  EXPECT_EQ(ListAll(master_.get(), "c*", false, 10, &pages),
            (std::vector<std::string>{std::string("c\0\xff", 3)}));
  EXPECT_EQ(ListAll(master_.get(), "/1$", true, 10, &pages),
            (std::vector<std::string>{"a/1", "b/1"}));
  EXPECT_EQ(ListAll(master_.get(), "zzz*", false, 10, &pages), std::vector<std::string>{});
  // Regexes see keys as bytes (any byte, not only UTF-8).
  EXPECT_EQ(ListAll(master_.get(), "^c\\x00\\xff$", true, 10, &pages),
            (std::vector<std::string>{std::string("c\0\xff", 3)}));

  v1::ListKeysRequest bad;
  v1::ListKeysResponse resp;
  bad.set_count(kListKeysMax + 1);
  EXPECT_EQ(master_->ListKeys(bad, &resp).code(), absl::StatusCode::kInvalidArgument);
  bad.set_count(1);
  bad.set_pattern(std::string(kPatternBytesMax + 1, '*'));
  EXPECT_EQ(master_->ListKeys(bad, &resp).code(), absl::StatusCode::kInvalidArgument);
  bad.set_pattern("(");
  bad.set_regex(true);
  EXPECT_EQ(master_->ListKeys(bad, &resp).code(), absl::StatusCode::kInvalidArgument);
  // What RE2 does not do (it could not promise linear time): a clear
  // refusal, not a slow match.
  for (const char* unsupported : {"(a)\\1", "a(?=b)", "(?<!a)b"}) {
    bad.set_pattern(unsupported);
    absl::Status s = master_->ListKeys(bad, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << unsupported;
    EXPECT_TRUE(absl::StrContains(s.message(), "RE2")) << s;
  }
}

TEST_F(MasterFixture, RemoveMatchingKeepsPinnedKeysUnlessForced) {
  Register("a", 64 * kMiB);
  for (const char* k : {"s/1", "s/2", "s/3", "t/1"}) ASSERT_TRUE(Put(k, kMiB).ok());
  v1::PinRequest pin;
  pin.set_key("s/3");
  ASSERT_TRUE(master_->Pin(pin).ok());
  v1::RemoveMatchingRequest req;
  req.set_pattern("^s/");
  req.set_regex(true);
  v1::RemoveMatchingResponse resp;
  ASSERT_TRUE(master_->RemoveMatching(req, &resp).ok());
  EXPECT_EQ(resp.removed(), 2u);
  EXPECT_EQ(resp.pinned(), 1u);
  EXPECT_FALSE(resp.more());
  EXPECT_FALSE(Lookup("s/1", false).found());
  EXPECT_TRUE(Lookup("s/3", false).found());
  EXPECT_TRUE(Lookup("t/1", false).found());
  master_->Tick();
  EXPECT_EQ(DramUsed(), 2 * kMiB);
  EXPECT_EQ(master_->metrics().removes.Value(), 2u);

  v1::RemoveMatchingRequest all;  // "" matches every key
  all.set_force(true);
  resp.Clear();
  ASSERT_TRUE(master_->RemoveMatching(all, &resp).ok());
  EXPECT_EQ(resp.removed(), 2u);
  EXPECT_EQ(resp.pinned(), 0u);
  master_->Tick();
  EXPECT_EQ(DramUsed(), 0u);
  all.set_pattern("[");
  all.set_regex(true);
  EXPECT_EQ(master_->RemoveMatching(all, &resp).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shelf::master
