// A removed key stays removed when a store that has not heard of the
// removal registers again (master_unheard.cc): its FORGET notice or
// DROP_SSD order was not delivered yet, or it was dead when the key went.
// Its inventory still lists the block; the master does not index it again
// and tells the store again to drop it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/master/registry/key_filter.h"
#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class UnheardTest : public MasterFixture {
 protected:
  // What store `id` holds of `key` as its inventory would list it.
  v1::InventoryEntry Entry(const std::string& key, const std::string& id) {
    v1::ObjectLocation loc = Peek(key);
    for (const v1::Replica& r : loc.replicas()) {
      if (r.store().node_id() != id) continue;
      v1::InventoryEntry e;
      e.set_key(key);
      e.set_size(loc.size());
      e.set_checksum(loc.checksum());
      e.set_tier(r.tier());
      e.set_segment_id(r.segment_id());
      e.set_offset(r.offset());
      e.set_generation(loc.generation());
      return e;
    }
    ADD_FAILURE() << key << " has no replica on " << id;
    return {};
  }
  // The orders and notices store `id` gets at its next heartbeat.
  std::vector<v1::TierMove> Orders(const std::string& id, uint64_t incarnation) {
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(Heartbeat(id, incarnation, {}, &resp).ok());
    return {resp.moves().begin(), resp.moves().end()};
  }
  // Stores a and b hold k (a replica on each); then a falls silent and is
  // declared dead while b heartbeats on. What a's inventory lists of k.
  v1::InventoryEntry KOnBothThenADies() {
    Register("a", 16 * kMiB);
    Register("b", 16 * kMiB);
    EXPECT_TRUE(Put("k", kMiB, 2).ok());
    Orders("a", 1);
    v1::InventoryEntry k = Entry("k", "a");
    clock_.Advance(TestOptions().node_ttl_ms + 1);
    Orders("b", 1);
    master_->Tick();
    return k;
  }
  // A master made with `o`; store a holds `key` alone, then falls silent
  // and is declared dead. What a's inventory lists of it.
  v1::InventoryEntry OnlyOnAThenADies(const MasterOptions& o, const std::string& key) {
    Make(o);
    Register("a", 16 * kMiB);
    EXPECT_TRUE(Put(key, kMiB).ok());
    Orders("a", 1);
    v1::InventoryEntry e = Entry(key, "a");
    clock_.Advance(o.node_ttl_ms + 1);
    master_->Tick();
    return e;
  }
  // Store a (incarnation 2, restarted) holds k on its SSD tier; then k is
  // removed, and a's next answer carries the DROP_SSD. What a's SSD lists.
  v1::InventoryEntry KOnSsdThenRemoved() {
    Register("a", 16 * kMiB, 64 * kMiB);
    EXPECT_TRUE(Put("k", kMiB).ok());
    Orders("a", 1);
    v1::InventoryEntry k = Entry("k", "a");
    k.set_tier(v1::TIER_SSD);
    k.set_segment_id(0);
    k.set_offset(0);
    clock_.Advance(TestOptions().node_ttl_ms + 1);
    Register("a", 16 * kMiB, 64 * kMiB, "host", 2, {}, {k});
    EXPECT_TRUE(Peek("k").found());
    Orders("a", 2);
    v1::RemoveRequest remove;
    remove.add_keys("k");
    v1::RemoveResponse removed;
    EXPECT_TRUE(master_->Remove(remove, &removed).ok());
    return k;
  }
  static bool Has(const std::vector<v1::TierMove>& moves, v1::TierMove::Kind kind,
                  const std::string& key) {
    for (const v1::TierMove& m : moves) {
      if (m.kind() == kind && m.key() == key) return true;
    }
    return false;
  }
};

TEST_F(UnheardTest, AStoreThatMissedAForgetDoesNotBringTheKeyBack) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  ASSERT_TRUE(Put("j", kMiB).ok());
  Orders("a", 1);  // the RECORD notices arrive
  const v1::InventoryEntry k = Entry("k", "a"), j = Entry("j", "a");
  v1::RemoveRequest remove;
  remove.add_keys("k");
  v1::RemoveResponse removed;
  ASSERT_TRUE(master_->Remove(remove, &removed).ok());
  // The store registers again before its heartbeat brought the FORGET.
  Register("a", 16 * kMiB, 0, "host", 1, {}, {k, j});
  EXPECT_FALSE(Peek("k").found());
  EXPECT_TRUE(Peek("j").found());
  EXPECT_TRUE(Has(Orders("a", 1), v1::TierMove::FORGET, "k"));
}

TEST_F(UnheardTest, AStoreThatMissedAnSsdDropDoesNotBringTheKeyBack) {
  const v1::InventoryEntry k = KOnSsdThenRemoved();
  // Restarted again before the DROP_SSD reached it: its SSD lists k.
  clock_.Advance(TestOptions().node_ttl_ms + 1);
  Register("a", 16 * kMiB, 64 * kMiB, "host", 3, {}, {k});
  EXPECT_FALSE(Peek("k").found());
  EXPECT_TRUE(Has(Orders("a", 3), v1::TierMove::DROP_SSD, "k"));
}

// Orders and notices stay queued until a heartbeat acknowledges them
// (HeartbeatRequest.orders_acked): an answer lost on its way (a call that
// timed out after the master sent it) loses none of them.
TEST_F(UnheardTest, AnAnswerThatWasLostIsSentAgain) {
  const v1::InventoryEntry k = KOnSsdThenRemoved();
  v1::HeartbeatResponse lost;
  ASSERT_TRUE(Heartbeat("a", 2, {}, &lost, /*lost=*/true).ok());
  const std::vector<v1::TierMove> first(lost.moves().begin(), lost.moves().end());
  ASSERT_TRUE(Has(first, v1::TierMove::DROP_SSD, "k"));
  const std::vector<v1::TierMove> again = Orders("a", 2);
  ASSERT_EQ(again.size(), first.size());
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].seq(), first[i].seq());
  EXPECT_FALSE(Has(Orders("a", 2), v1::TierMove::DROP_SSD, "k"));  // acknowledged
}

// The store whose answer was lost registers again (its call failed), the
// same process: its SSD still lists the key whose drop it never got.
TEST_F(UnheardTest, AStoreThatLostTheAnswerWithADropDoesNotBringTheKeyBack) {
  const v1::InventoryEntry k = KOnSsdThenRemoved();
  v1::HeartbeatResponse lost;
  ASSERT_TRUE(Heartbeat("a", 2, {}, &lost, /*lost=*/true).ok());
  Register("a", 16 * kMiB, 64 * kMiB, "host", 2, {}, {k});
  EXPECT_FALSE(Peek("k").found());
  EXPECT_TRUE(Has(Orders("a", 2), v1::TierMove::DROP_SSD, "k"));
}

TEST_F(UnheardTest, AStoreThatLostTheAnswerWithAForgetDoesNotBringTheKeyBack) {
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  Orders("a", 1);  // the RECORD notice arrives
  const v1::InventoryEntry k = Entry("k", "a");
  v1::RemoveRequest remove;
  remove.add_keys("k");
  v1::RemoveResponse removed;
  ASSERT_TRUE(master_->Remove(remove, &removed).ok());
  v1::HeartbeatResponse lost;
  ASSERT_TRUE(Heartbeat("a", 1, {}, &lost, /*lost=*/true).ok());
  ASSERT_TRUE(Has({lost.moves().begin(), lost.moves().end()}, v1::TierMove::FORGET, "k"));
  Register("a", 16 * kMiB, 0, "host", 1, {}, {k});
  EXPECT_FALSE(Peek("k").found());
  EXPECT_TRUE(Has(Orders("a", 1), v1::TierMove::FORGET, "k"));
}

// A drop taken is not a drop run: the store may die before its mover gets
// to it. Until the store reports it ran, a restart listing the key does
// not bring it back; once reported, the master no longer holds it.
TEST_F(UnheardTest, ADropTakenButNotRunDoesNotBringTheKeyBack) {
  const v1::InventoryEntry k = KOnSsdThenRemoved();
  std::vector<v1::TierMove> orders = Orders("a", 2);
  ASSERT_TRUE(Has(orders, v1::TierMove::DROP_SSD, "k"));
  ASSERT_TRUE(Orders("a", 2).empty());            // acknowledged: taken, not yet run
  clock_.Advance(TestOptions().node_ttl_ms + 1);  // killed; restarted
  Register("a", 16 * kMiB, 64 * kMiB, "host", 3, {}, {k});
  EXPECT_FALSE(Peek("k").found());
  orders = Orders("a", 3);
  ASSERT_TRUE(Has(orders, v1::TierMove::DROP_SSD, "k"));
  // Reported run: a later listing of the key is a later copy of it.
  v1::TierMoveResult ran;
  for (const v1::TierMove& m : orders) {
    if (m.kind() == v1::TierMove::DROP_SSD) ran.set_move_id(m.move_id());
  }
  ran.set_key("k");
  ran.set_kind(v1::TierMove::DROP_SSD);
  ran.set_ok(true);
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(Heartbeat("a", 3, {ran}, &resp).ok());
  clock_.Advance(TestOptions().node_ttl_ms + 1);
  Register("a", 16 * kMiB, 64 * kMiB, "host", 4, {}, {k});
  EXPECT_TRUE(Peek("k").found());
}

// A heartbeat sent before the store registered again, answered late: it
// names the earlier registration, so its acknowledgement (of that
// registration's numbers, perhaps another master's) and its reports of
// drops count for nothing; a store that reads the answer registers again.
TEST_F(UnheardTest, ALateHeartbeatOfAnEarlierRegistrationAcknowledgesNothing) {
  const v1::InventoryEntry k = KOnSsdThenRemoved();
  uint64_t earlier = 0;
  {
    MutexLock lock(&stores_mu_);
    earlier = registration_["a"];
  }
  Register("a", 16 * kMiB, 64 * kMiB, "host", 2, {}, {k});  // registered again
  v1::HeartbeatRequest late;
  late.set_node_id("a");
  late.set_incarnation(2);
  late.set_acks_orders(true);
  late.set_orders_acked(UINT64_MAX);
  late.set_registration_id(earlier);
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(master_->Heartbeat(late, &resp).ok());
  EXPECT_TRUE(resp.reregister());
  EXPECT_EQ(resp.moves_size(), 0);
  EXPECT_TRUE(Has(Orders("a", 2), v1::TierMove::DROP_SSD, "k"));
}

// The same process registers again with a drop taken and not yet run: it
// leaves the key out of its inventory and runs the drop later. Until it
// reports the drop, a death and restart listing the key bring nothing
// back; a failed drop counts as not run.
TEST_F(UnheardTest, ADropTakenBeforeASameProcessRegistrationStaysCounted) {
  const v1::InventoryEntry k = KOnSsdThenRemoved();
  std::vector<v1::TierMove> orders = Orders("a", 2);
  ASSERT_TRUE(Has(orders, v1::TierMove::DROP_SSD, "k"));
  Register("a", 16 * kMiB, 64 * kMiB, "host", 2, {}, {});  // k left out: its drop is pending
  v1::TierMoveResult failed;
  for (const v1::TierMove& m : orders) {
    if (m.kind() == v1::TierMove::DROP_SSD) failed.set_move_id(m.move_id());
  }
  failed.set_key("k");
  failed.set_kind(v1::TierMove::DROP_SSD);
  failed.set_ok(false);
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(Heartbeat("a", 2, {failed}, &resp).ok());
  clock_.Advance(TestOptions().node_ttl_ms + 1);
  master_->Tick();                                          // dead
  Register("a", 16 * kMiB, 64 * kMiB, "host", 3, {}, {k});  // restarted
  EXPECT_FALSE(Peek("k").found());
}

TEST_F(UnheardTest, AKeyRemovedWhileItsStoreWasDeadStaysRemoved) {
  const v1::InventoryEntry k = KOnBothThenADies();
  v1::RemoveRequest remove;
  remove.add_keys("k");
  v1::RemoveResponse removed;
  ASSERT_TRUE(master_->Remove(remove, &removed).ok());
  EXPECT_FALSE(Peek("k").found());
  // The same process comes back, its memory intact (orphans and records).
  Register("a", 16 * kMiB, 0, "host", 1, {}, {k});
  EXPECT_FALSE(Peek("k").found());
  EXPECT_TRUE(Has(Orders("a", 1), v1::TierMove::FORGET, "k"));
}

// A replace while a store holding the old value was dead: when the new
// value is gone too, the old one does not come back with that store.
TEST_F(UnheardTest, AValueReplacedWhileItsStoreWasDeadStaysReplaced) {
  const v1::InventoryEntry old = KOnBothThenADies();
  v1::PutStartResponse r = StartReplace("k", kMiB, 7);
  ASSERT_EQ(r.state(), v1::PUT_STARTED);
  ASSERT_TRUE(Commit(r.put_id()).ok());
  clock_.Advance(TestOptions().node_ttl_ms + 1);
  master_->Tick();  // b, the new value's only store, is dead too
  ASSERT_FALSE(Peek("k").found());
  Register("a", 16 * kMiB, 0, "host", 1, {}, {old});
  EXPECT_FALSE(Peek("k").found());
}

// A key held by one store only, put again while that store was dead: the
// new commit is evicted (or lost with its own store), then the dead store
// returns with the old commit on its SSD. The old value must not come back
// (RESP SET, Mooncake upserts: keys that are not content addresses).
TEST_F(UnheardTest, AKeyPutAgainWhileItsStoreWasDeadStaysNewOrGone) {
  for (bool evicted : {true, false}) {
    SCOPED_TRACE(evicted ? "the new commit evicted" : "the new commit's store dead");
    Make(TestOptions());
    Register("a", 16 * kMiB, 64 * kMiB);
    ASSERT_TRUE(Put("k", kMiB).ok());
    ASSERT_TRUE(Put("j", kMiB).ok());
    Orders("a", 1);
    std::vector<v1::InventoryEntry> ssd = {Entry("k", "a"), Entry("j", "a")};
    for (v1::InventoryEntry& e : ssd) {
      e.set_tier(v1::TIER_SSD);
      e.set_segment_id(0);
      e.set_offset(0);
    }
    clock_.Advance(TestOptions().node_ttl_ms + 1);
    master_->Tick();  // a is dead: k and j leave the index
    ASSERT_FALSE(Peek("k").found());
    Register("b", 16 * kMiB);
    v1::PutStartResponse r = StartReplace("k", kMiB, 7);
    ASSERT_EQ(r.state(), v1::PUT_STARTED);
    ASSERT_TRUE(Commit(r.put_id()).ok());
    ASSERT_EQ(Peek("k").checksum(), 7u);
    if (evicted) {
      v1::EvictRequest req;
      req.set_bytes(16 * kMiB);
      req.set_node("b");
      v1::EvictResponse resp;
      ASSERT_TRUE(master_->Evict(req, &resp).ok());
      ASSERT_EQ(resp.evicted_objects(), 1u);
    } else {
      clock_.Advance(TestOptions().node_ttl_ms + 1);
      master_->Tick();  // b is dead
    }
    ASSERT_FALSE(Peek("k").found());
    Register("a", 16 * kMiB, 64 * kMiB, "host", 2, {}, ssd);  // restarted
    EXPECT_FALSE(Peek("k").found());
    EXPECT_TRUE(Peek("j").found());  // not put since: back
    std::vector<v1::TierMove> orders = Orders("a", 2);
    EXPECT_TRUE(Has(orders, v1::TierMove::DROP_SSD, "k"));
    EXPECT_FALSE(Has(orders, v1::TierMove::DROP_SSD, "j"));
    master_->CheckInvariants();
  }
}

// Only commits made while the store was dead keep its copies out: a key
// put before it died comes back with it once every other copy is gone.
TEST_F(UnheardTest, AKeyPutBeforeItsStoreDiedComesBackWithIt) {
  const v1::InventoryEntry k = KOnBothThenADies();
  ASSERT_TRUE(Put("other", kMiB).ok());  // a commit while a is dead
  clock_.Advance(TestOptions().node_ttl_ms + 1);
  master_->Tick();  // b, k's other store, is dead too
  ASSERT_FALSE(Peek("k").found());
  Register("a", 16 * kMiB, 0, "host", 1, {}, {k});  // the same process
  EXPECT_TRUE(Peek("k").found());
}

// Past --dead-store-commits-max keys committed while a store was dead, its
// record is dropped (the filter would refuse much of what it brings back
// anyway): it comes back empty, and is told to drop what it lists.
TEST_F(UnheardTest, AStoreDeadWhileTooManyKeysWereCommittedComesBackEmpty) {
  for (int commits : {3, 4}) {
    SCOPED_TRACE(testing::Message() << commits << " commits while dead");
    MasterOptions o = TestOptions();
    o.dead_store_commits_max = 3;
    const v1::InventoryEntry j = OnlyOnAThenADies(o, "j");
    Register("b", 16 * kMiB);
    for (int i = 0; i < commits; ++i) ASSERT_TRUE(Put("x" + std::to_string(i), kMiB).ok());
    Register("a", 16 * kMiB, 0, "host", 1, {}, {j});  // the same process
    EXPECT_EQ(Peek("j").found(), commits <= 3);
    EXPECT_EQ(Has(Orders("a", 1), v1::TierMove::FORGET, "j"), commits > 3);
  }
}

TEST(KeyFilterTest, HoldsWhatWasAddedAndLittleElse) {
  KeyFilter filter(1 << 16);
  for (int i = 0; i < 5000; ++i) filter.Add("added:" + std::to_string(i));
  EXPECT_EQ(filter.added(), 5000u);
  for (int i = 0; i < 5000; ++i) EXPECT_TRUE(filter.MayContain("added:" + std::to_string(i)));
  // 5,000 keys in 65,536 bits with 7 probes: about 0.2% false positives.
  int false_positives = 0;
  for (int i = 0; i < 100000; ++i)
    false_positives += filter.MayContain("other:" + std::to_string(i));
  EXPECT_LT(false_positives, 1000);
  EXPECT_FALSE(KeyFilter(64).MayContain("anything"));
}

// A pattern removed while a store was dead (RemoveMatching, RESP's DEL
// by pattern and FLUSHALL): the dead store's blocks were not in the index,
// so no key of theirs was noted one by one; the pattern itself is.
TEST_F(UnheardTest, KeysRemovedByPatternWhileTheirStoreWasDeadStayRemoved) {
  MasterOptions o = TestOptions();
  Make(o);
  Register("a", 16 * kMiB);
  std::vector<v1::InventoryEntry> held;
  for (const char* key : {"user:1", "user:2", "keep:1"}) {
    ASSERT_TRUE(Put(key, kMiB).ok());
    held.push_back(Entry(key, "a"));
  }
  Orders("a", 1);
  clock_.Advance(o.node_ttl_ms + 1);
  master_->Tick();  // a is dead; its blocks leave the index
  v1::RemoveMatchingRequest req;
  req.set_pattern("user:*");
  v1::RemoveMatchingResponse resp;
  ASSERT_TRUE(master_->RemoveMatching(req, &resp, "").ok());
  EXPECT_EQ(resp.removed(), 0u);
  // The same process comes back, its memory intact (orphans and records).
  Register("a", 16 * kMiB, 0, "host", 1, {}, held);
  EXPECT_FALSE(Peek("user:1").found());
  EXPECT_FALSE(Peek("user:2").found());
  EXPECT_TRUE(Peek("keep:1").found());
  std::vector<v1::TierMove> orders = Orders("a", 1);
  EXPECT_TRUE(Has(orders, v1::TierMove::FORGET, "user:1"));
  EXPECT_TRUE(Has(orders, v1::TierMove::FORGET, "user:2"));
  EXPECT_FALSE(Has(orders, v1::TierMove::FORGET, "keep:1"));
}

TEST_F(UnheardTest, AFlushWhileAStoreWasDeadLeavesNothingOfItsSsd) {
  MasterOptions o = TestOptions();
  Make(o);
  Register("a", 16 * kMiB, 64 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  v1::InventoryEntry e = Entry("k", "a");
  e.set_tier(v1::TIER_SSD);
  e.set_segment_id(0);
  e.set_offset(0);
  clock_.Advance(o.node_ttl_ms + 1);
  master_->Tick();
  for (const char* pattern : {"x*", "", "y*"}) {  // the flush outlasts what follows
    v1::RemoveMatchingRequest req;
    req.set_pattern(pattern);
    v1::RemoveMatchingResponse resp;
    ASSERT_TRUE(master_->RemoveMatching(req, &resp, "").ok());
  }
  Register("a", 16 * kMiB, 64 * kMiB, "host", 2, {}, {e});  // restarted
  EXPECT_FALSE(Peek("k").found());
  EXPECT_TRUE(Has(Orders("a", 2), v1::TierMove::DROP_SSD, "k"));
}

// A store dead longer than --dead-store-memory: its record of removals is
// dropped (memory stays bounded for nodes that never return), so it comes
// back empty, whatever it lists, and is told to drop it.
TEST_F(UnheardTest, AStoreDeadPastItsMemoryComesBackEmpty) {
  MasterOptions o = TestOptions();
  o.dead_store_memory_ms = 5000;
  const v1::InventoryEntry k = OnlyOnAThenADies(o, "k");
  clock_.Advance(o.dead_store_memory_ms);
  master_->Tick();  // forgotten
  Register("a", 16 * kMiB, 0, "host", 1, {}, {k});
  EXPECT_FALSE(Peek("k").found());
  EXPECT_TRUE(Has(Orders("a", 1), v1::TierMove::FORGET, "k"));
  // Its next death starts a new record.
  ASSERT_TRUE(Put("j", kMiB).ok());
  Orders("a", 1);
  const v1::InventoryEntry j = Entry("j", "a");
  clock_.Advance(o.node_ttl_ms + 1);
  master_->Tick();
  Register("a", 16 * kMiB, 0, "host", 1, {}, {j});
  EXPECT_TRUE(Peek("j").found());
}

// More distinct patterns removed while a store was dead than are kept:
// a key none of the kept patterns matches may have been removed by one
// that was not kept, so the store comes back empty.
TEST_F(UnheardTest, AStoreThatMissedTooManyPatternRemovesComesBackEmpty) {
  MasterOptions o = TestOptions();
  Make(o);
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("keep:1", kMiB).ok());
  Orders("a", 1);
  const v1::InventoryEntry held = Entry("keep:1", "a");
  clock_.Advance(o.node_ttl_ms + 1);
  master_->Tick();
  for (int i = 0; i <= 1024; ++i) {
    v1::RemoveMatchingRequest req;
    req.set_pattern("gone" + std::to_string(i) + ":*");
    v1::RemoveMatchingResponse resp;
    ASSERT_TRUE(master_->RemoveMatching(req, &resp, "").ok());
  }
  Register("a", 16 * kMiB, 0, "host", 1, {}, {held});
  EXPECT_FALSE(Peek("keep:1").found());
}

// A key put again after the pattern went is the index's: a returning
// store's copy of the same bytes is one more replica of it.
TEST_F(UnheardTest, AKeyPutAgainAfterAPatternRemoveIsKept) {
  MasterOptions o = TestOptions();
  Make(o);
  Register("a", 16 * kMiB);
  ASSERT_TRUE(Put("user:1", kMiB).ok());
  const v1::InventoryEntry held = Entry("user:1", "a");
  Orders("a", 1);
  Register("b", 16 * kMiB);
  clock_.Advance(o.node_ttl_ms + 1);
  Orders("b", 1);
  master_->Tick();  // a is dead, b lives
  v1::RemoveMatchingRequest req;
  req.set_pattern("user:*");
  v1::RemoveMatchingResponse resp;
  ASSERT_TRUE(master_->RemoveMatching(req, &resp, "").ok());
  ASSERT_TRUE(Put("user:1", kMiB).ok());  // on b
  Register("a", 16 * kMiB, 0, "host", 1, {}, {held});
  EXPECT_EQ(Peek("user:1").replicas_size(), 2);
}

// A FORGET followed by a RECORD of the same range (the key put there
// again) leaves the new block indexed.
TEST_F(UnheardTest, AKeyPutAgainInTheSameRangeIsKept) {
  Register("a", 2 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  Orders("a", 1);
  const v1::InventoryEntry before = Entry("k", "a");
  v1::RemoveRequest remove;
  remove.add_keys("k");
  v1::RemoveResponse removed;
  ASSERT_TRUE(master_->Remove(remove, &removed).ok());
  ASSERT_TRUE(Put("k", kMiB).ok());  // first fit: the same range
  const v1::InventoryEntry after = Entry("k", "a");
  ASSERT_EQ(after.offset(), before.offset());
  Register("a", 2 * kMiB, 0, "host", 1, {}, {after});
  EXPECT_TRUE(Peek("k").found());
}

TEST_F(UnheardTest, APromotionCommitsOnlyFromItsOwnStore) {
  v1::PromoteCommitRequest commit;
  commit.set_ok(true);
  Register("a", 16 * kMiB, 64 * kMiB);
  Register("b", 16 * kMiB, 64 * kMiB);
  ASSERT_TRUE(Put("k", kMiB).ok());
  const std::string holder = Peek("k").replicas(0).store().node_id();
  const std::string other = holder == "a" ? "b" : "a";
  // k on SSD at `holder` (a restart brought it back there only).
  v1::InventoryEntry e = Entry("k", holder);
  e.set_tier(v1::TIER_SSD);
  e.set_segment_id(0);
  e.set_offset(0);
  clock_.Advance(TestOptions().node_ttl_ms + 1);  // restarted
  Register(holder, 16 * kMiB, 64 * kMiB, "host", 2, {}, {e});
  uint64_t id = Promote(holder, 2, "k", kMiB, 42);
  ASSERT_NE(id, 0u);
  commit.set_promote_id(id);
  commit.set_node_id(other);
  EXPECT_EQ(master_->PromoteCommit(commit).code(), absl::StatusCode::kNotFound);
  commit.set_node_id(holder);
  EXPECT_TRUE(master_->PromoteCommit(commit).ok());
  EXPECT_EQ(Peek("k").replicas_size(), 2);
}

}  // namespace
}  // namespace shelf::master
