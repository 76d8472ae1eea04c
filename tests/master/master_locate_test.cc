// Master::Locate: per store, the leading run of a chain it holds and the
// tier of each block, built from store inventories so every replica's
// place is known. And how Lookup and MatchPrefix answer: each key of a
// batch in its place, and the stores of their replicas (`store_table`).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kMiB = 1 << 20;

v1::InventoryEntry Entry(const std::string& key, v1::Tier tier, uint64_t offset = 0) {
  v1::InventoryEntry e;
  e.set_key(key);
  e.set_size(kMiB);
  e.set_checksum(7);
  e.set_tier(tier);
  if (tier == v1::TIER_DRAM) e.set_offset(offset);
  return e;
}

v1::LocateResponse Locate(Master* m, const std::vector<std::string>& keys, absl::Status* status) {
  v1::LocateRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  v1::LocateResponse resp;
  *status = m->Locate(req, &resp);
  return resp;
}

std::vector<v1::Tier> Tiers(const v1::NodeRun& n) {
  std::vector<v1::Tier> out;
  for (int t : n.tiers()) out.push_back(static_cast<v1::Tier>(t));
  return out;
}

TEST_F(MasterFixture, LocateGivesEachStoresLeadingRunAndItsTiers) {
  constexpr auto D = v1::TIER_DRAM;
  constexpr auto S = v1::TIER_SSD;
  // a: k0 k1 in DRAM, k2 on SSD. b: k0 in DRAM, k1 on SSD, k3 (after its
  // gap at k2). c: k1 only, so no run from k0.
  Register("a", 16 * kMiB, 64 * kMiB, "ha", 1, {},
           {Entry("k0", D, 0), Entry("k1", D, kMiB), Entry("k2", S)});
  Register("b", 16 * kMiB, 64 * kMiB, "hb", 1, {},
           {Entry("k0", D, 0), Entry("k1", S), Entry("k3", D, kMiB)});
  Register("c", 16 * kMiB, 64 * kMiB, "hc", 1, {}, {Entry("k1", D, 0)});
  uint64_t leases = master_->metrics().leases_granted.Value();

  absl::Status s;
  v1::LocateResponse r = Locate(master_.get(), {"k0", "k1", "k2", "k3", "k4"}, &s);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r.cluster_blocks(), 4u);  // k0..k3 are each somewhere; k4 nowhere
  ASSERT_EQ(r.nodes_size(), 2);
  EXPECT_EQ(r.nodes(0).store().node_id(), "a");
  EXPECT_EQ(r.nodes(0).store().host_id(), "ha");
  EXPECT_EQ(r.nodes(0).blocks(), 3u);
  EXPECT_EQ(r.nodes(0).dram_blocks(), 2u);
  EXPECT_EQ(Tiers(r.nodes(0)), (std::vector<v1::Tier>{D, D, S}));
  EXPECT_EQ(r.nodes(1).store().node_id(), "b");
  EXPECT_EQ(r.nodes(1).blocks(), 2u);
  EXPECT_EQ(r.nodes(1).dram_blocks(), 1u);
  EXPECT_EQ(Tiers(r.nodes(1)), (std::vector<v1::Tier>{D, S}));
  // Read-only: no lease was taken.
  EXPECT_EQ(master_->metrics().leases_granted.Value(), leases);

  // A chain whose first block is nowhere: no node, no cluster run.
  r = Locate(master_.get(), {"k9", "k0"}, &s);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(r.cluster_blocks(), 0u);
  EXPECT_EQ(r.nodes_size(), 0);
  // Starting at k1: c's run counts now, and b's ends at its gap.
  r = Locate(master_.get(), {"k1", "k2"}, &s);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(r.nodes_size(), 3);
  EXPECT_EQ(r.nodes(0).store().node_id(), "a");
  EXPECT_EQ(r.nodes(0).blocks(), 2u);
  // b and c hold one block each; c's is in DRAM, so c ranks first.
  EXPECT_EQ(r.nodes(1).store().node_id(), "c");
  EXPECT_EQ(r.nodes(1).dram_blocks(), 1u);
  EXPECT_EQ(r.nodes(2).store().node_id(), "b");
  EXPECT_EQ(r.nodes(2).dram_blocks(), 0u);

  // A dead store is left out.
  clock_.Advance(301);  // past the 300 ms TTL; only b and c heartbeat
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("b", 1, {}, &hb).ok());
  ASSERT_TRUE(Heartbeat("c", 1, {}, &hb).ok());
  master_->Tick();
  r = Locate(master_.get(), {"k0", "k1", "k2"}, &s);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(r.nodes_size(), 1);
  EXPECT_EQ(r.nodes(0).store().node_id(), "b");
  EXPECT_EQ(r.nodes(0).blocks(), 2u);
}

TEST_F(MasterFixture, LocateRefusesBadChains) {
  Register("a", 16 * kMiB);
  absl::Status s;
  Locate(master_.get(), {}, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Locate(master_.get(), std::vector<std::string>(kBatchItemsMax + 1, "k"), &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Locate(master_.get(), {"k", ""}, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Locate(master_.get(), {std::string(kKeyBytesMax + 1, 'x')}, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

// With `store_table`, an answer names each store once and replicas point
// into that table; without it every replica carries its store, as before.
TEST_F(MasterFixture, AStoreTableNamesEachStoreOnceAndReplicasPointIntoIt) {
  Register("a", 64 * kMiB);
  Register("b", 64 * kMiB);
  const std::vector<std::string> keys = {"t0", "t1", "t2", "t3"};
  for (const std::string& k : keys) ASSERT_TRUE(Put(k, 4096, 2).ok());
  v1::LookupRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.add_keys("absent");
  req.set_no_lease(true);
  v1::LookupResponse inline_resp;
  ASSERT_TRUE(master_->Lookup(req, &inline_resp).ok());
  EXPECT_EQ(inline_resp.stores_size(), 0);
  req.set_store_table(true);
  v1::LookupResponse resp;
  ASSERT_TRUE(master_->Lookup(req, &resp).ok());
  ASSERT_EQ(resp.stores_size(), 2);
  EXPECT_NE(resp.stores(0).node_id(), resp.stores(1).node_id());
  ASSERT_EQ(resp.objects_size(), 5);
  EXPECT_FALSE(resp.objects(4).found());
  for (int i = 0; i < 4; ++i) {
    const v1::ObjectLocation& got = resp.objects(i);
    const v1::ObjectLocation& want = inline_resp.objects(i);
    ASSERT_EQ(got.replicas_size(), 2) << i;
    ASSERT_EQ(want.replicas_size(), 2) << i;
    for (int r = 0; r < 2; ++r) {
      EXPECT_FALSE(got.replicas(r).has_store());
      ASSERT_LT(got.replicas(r).store_index(), 2u);
      // The same store, in the same order, as the inline answer.
      EXPECT_EQ(resp.stores(static_cast<int>(got.replicas(r).store_index())).SerializeAsString(),
                want.replicas(r).store().SerializeAsString());
      EXPECT_EQ(got.replicas(r).offset(), want.replicas(r).offset());
      EXPECT_EQ(got.replicas(r).read_grant().size(), want.replicas(r).read_grant().size());
    }
  }
  v1::MatchPrefixRequest mreq;
  for (const std::string& k : keys) mreq.add_keys(k);
  mreq.set_no_lease(true);
  mreq.set_store_table(true);
  v1::MatchPrefixResponse mresp;
  ASSERT_TRUE(master_->MatchPrefix(mreq, &mresp).ok());
  EXPECT_EQ(mresp.matched(), 4u);
  EXPECT_EQ(mresp.stores_size(), 2);
  for (const v1::ObjectLocation& loc : mresp.objects()) {
    for (const v1::Replica& rep : loc.replicas()) {
      EXPECT_FALSE(rep.has_store());
      EXPECT_LT(rep.store_index(), 2u);
    }
  }
}

// A count-only prefix match says how many blocks match and nothing else:
// no objects, no grants, and no lease (a removed block's range is freed at
// once, where a leased one waits for its lease).
TEST_F(MasterFixture, ACountOnlyMatchReturnsTheCountAndTakesNoLease) {
  Register("a", 64 * kMiB);
  for (const char* k : {"c0", "c1", "l0"}) ASSERT_TRUE(Put(k, kMiB).ok());
  auto match = [&](const std::vector<std::string>& keys, bool count_only) {
    v1::MatchPrefixRequest req;
    for (const std::string& k : keys) req.add_keys(k);
    req.set_count_only(count_only);
    v1::MatchPrefixResponse resp;
    EXPECT_TRUE(master_->MatchPrefix(req, &resp).ok());
    return resp;
  };
  v1::MatchPrefixResponse counted = match({"c0", "c1", "absent", "l0"}, true);
  EXPECT_EQ(counted.matched(), 2u);
  EXPECT_EQ(counted.objects_size(), 0);
  EXPECT_EQ(counted.stores_size(), 0);
  v1::MatchPrefixResponse leased = match({"l0"}, false);
  ASSERT_EQ(leased.objects_size(), 1);
  EXPECT_GT(leased.objects(0).lease_expires_unix_ms(), 0u);
  v1::RemoveRequest rm;
  for (const char* k : {"c0", "c1", "l0"}) rm.add_keys(k);
  v1::RemoveResponse rresp;
  ASSERT_TRUE(master_->Remove(rm, &rresp).ok());
  master_->Tick();
  EXPECT_EQ(DramUsed(), kMiB) << "only the leased block's range waits";
}

// Keys inline in the index (up to 28 bytes) and on the heap, across every
// shard: a batch lookup answers each position, found or not, and a prefix
// match stops at its first miss, whatever lengths and shards the keys have.
TEST_F(MasterFixture, BatchLookupsAnswerKeysOfEveryLengthInOrder) {
  Register("a", 256 * kMiB);
  const size_t lengths[] = {3, 16, 27, 28, 29, 64, kKeyBytesMax};
  std::vector<std::string> present, absent;
  for (int i = 0; i < 140; ++i) {
    size_t len = lengths[i % 7];
    std::string k = absl::StrCat(100 + i);  // three digits: unique
    k.resize(len, static_cast<char>('a' + i % 26));
    (i % 3 == 2 ? absent : present).push_back(k);
  }
  for (size_t i = 0; i < present.size(); ++i) ASSERT_TRUE(Put(present[i], 4096 + i).ok());
  v1::LookupRequest req;
  std::vector<int64_t> want;  // the size, or -1 for a miss
  for (size_t i = 0; i < present.size(); ++i) {
    req.add_keys(present[i]);
    want.push_back(static_cast<int64_t>(4096 + i));
    if (i < absent.size()) {
      req.add_keys(absent[i]);
      want.push_back(-1);
    }
  }
  v1::LookupResponse resp;
  ASSERT_TRUE(master_->Lookup(req, &resp).ok());
  ASSERT_EQ(resp.objects_size(), req.keys_size());
  for (int i = 0; i < req.keys_size(); ++i) {
    const v1::ObjectLocation& o = resp.objects(i);
    EXPECT_EQ(o.key(), req.keys(i)) << i;
    EXPECT_EQ(o.found(), want[i] >= 0) << i;
    if (want[i] >= 0) {
      EXPECT_EQ(o.size(), static_cast<uint64_t>(want[i])) << i;
      EXPECT_GT(o.lease_expires_unix_ms(), 0u) << i;
    }
  }
  v1::MatchPrefixRequest mreq;
  for (size_t i = 0; i < 40; ++i) mreq.add_keys(present[i]);
  mreq.add_keys(absent[0]);
  mreq.add_keys(present[40]);
  v1::MatchPrefixResponse mresp;
  ASSERT_TRUE(master_->MatchPrefix(mreq, &mresp).ok());
  EXPECT_EQ(mresp.matched(), 40u);
  ASSERT_EQ(mresp.objects_size(), 40);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(mresp.objects(i).key(), present[i]) << i;
  master_->CheckInvariants();
}

}  // namespace
}  // namespace shelf::master
