// Tenant arenas in the master (docs/security.md, "Tenant arenas"), in
// process: with tenant namespaces, a store that registers several DRAM
// segments (arenas) gets each tenant's blocks only in arenas given to that
// tenant; a tenant whose arenas are full evicts its own blocks, never
// another tenant's; a store whose arenas are all taken refuses a new
// tenant; a re-registration of the same process keeps every arena's tenant.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/master/master_fixture.h"

namespace shelf::master {
namespace {

constexpr uint64_t kArena = 1ull << 20;
constexpr uint64_t kBlock = 256ull << 10;  // 4 per arena

class MasterArenasTest : public MasterFixture {
 protected:
  void SetUp() override {
    MasterOptions o = TestOptions();
    o.tenant_namespaces = true;  // keys below are kept keys, TENANT/KEY
    Make(o);
  }
  // `tenants`: what the store reports each arena held ("-": none).
  void RegisterArenas(uint32_t arenas, uint64_t incarnation = 1,
                      std::vector<std::string> tenants = {}) {
    v1::RegisterStoreRequest req;
    req.set_protocol_version(1);
    req.mutable_endpoint()->set_node_id("s1");
    req.mutable_endpoint()->set_data_address("s1:7100");
    req.mutable_endpoint()->set_host_id("host");
    req.mutable_endpoint()->add_transports(v1::TRANSPORT_TCP);
    for (uint32_t i = 0; i < arenas; ++i) {
      auto* seg = req.add_segments();
      seg->set_segment_id(i);
      seg->set_capacity_bytes(kArena);
      if (i < tenants.size() && tenants[i] != "-") {
        seg->set_bound(true);
        seg->set_tenant(tenants[i]);
      }
    }
    req.set_incarnation(incarnation);
    v1::RegisterStoreResponse resp;
    ASSERT_TRUE(master_->RegisterStore(req, &resp).ok());
  }
  uint32_t ArenaOf(const std::string& key) {
    v1::ObjectLocation loc = Lookup(key, false);
    EXPECT_TRUE(loc.found()) << key;
    return loc.found() ? loc.replicas(0).segment_id() : 999;
  }
};

TEST_F(MasterArenasTest, EachTenantsBlocksLandInArenasOfItsOwn) {
  RegisterArenas(4);
  std::set<uint32_t> a, b;
  for (int i = 0; i < 6; ++i) {  // a and b interleaved: 6 blocks of a fill 2 arenas
    ASSERT_TRUE(Put(absl::StrCat("team-a/", i), kBlock).ok());
    if (i < 3) {
      ASSERT_TRUE(Put(absl::StrCat("team-b/", i), kBlock).ok());
    }
  }
  for (int i = 0; i < 6; ++i) a.insert(ArenaOf(absl::StrCat("team-a/", i)));
  for (int i = 0; i < 3; ++i) b.insert(ArenaOf(absl::StrCat("team-b/", i)));
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(b.size(), 1u);
  for (uint32_t x : a) EXPECT_EQ(b.count(x), 0u) << "arena " << x << " holds both tenants";
}

TEST_F(MasterArenasTest, ATenantWithFullArenasEvictsItsOwnBlocksOnly) {
  RegisterArenas(2);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put(absl::StrCat("team-a/", i), kBlock).ok());
  ASSERT_TRUE(Put("team-b/0", kBlock).ok());  // the other arena, with room for 3 more
  clock_.Advance(1000);                       // leases over
  ASSERT_TRUE(Put("team-a/4", kBlock).ok());
  EXPECT_EQ(ArenaOf("team-a/4"), ArenaOf("team-a/1"));
  EXPECT_TRUE(Lookup("team-b/0", false).found());
  EXPECT_FALSE(Lookup("team-a/0", false).found()) << "the least recently used of team-a goes";
}

TEST_F(MasterArenasTest, AStoreWhoseArenasAreAllTakenRefusesAnotherTenant) {
  RegisterArenas(2);
  ASSERT_TRUE(Put("team-a/0", kBlock).ok());
  ASSERT_TRUE(Put("team-b/0", kBlock).ok());
  absl::Status s = Put("team-c/0", kBlock);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Lookup("team-a/0", false).found());
  EXPECT_TRUE(Lookup("team-b/0", false).found());
}

TEST_F(MasterArenasTest, TheSameProcessRegisteringAgainKeepsItsArenasTenants) {
  RegisterArenas(2);
  ASSERT_TRUE(Put("team-a/0", kBlock).ok());
  const uint32_t arena_a = ArenaOf("team-a/0");
  v1::RemoveRequest req;
  req.add_keys("team-a/0");
  v1::RemoveResponse resp;
  ASSERT_TRUE(master_->Remove(req, &resp).ok());
  RegisterArenas(2);  // same incarnation: the arena, now empty, stays team-a's
  ASSERT_TRUE(Put("team-b/0", kBlock).ok());
  EXPECT_NE(ArenaOf("team-b/0"), arena_a);
  ASSERT_TRUE(Put("team-a/1", kBlock).ok());
  EXPECT_EQ(ArenaOf("team-a/1"), arena_a);
}

TEST_F(MasterArenasTest, ANewMasterLearnsArenasTenantsFromTheStore) {
  // Arena 0 held team-a's blocks before (all gone now): this master never
  // saw them, yet gives arena 0 to nobody else.
  RegisterArenas(2, 7, {"team-a", "-"});
  ASSERT_TRUE(Put("team-b/0", kBlock).ok());
  EXPECT_EQ(ArenaOf("team-b/0"), 1u);
  EXPECT_FALSE(Put("team-c/0", kBlock).ok());
  ASSERT_TRUE(Put("team-a/0", kBlock).ok());
  EXPECT_EQ(ArenaOf("team-a/0"), 0u);
}

TEST_F(MasterArenasTest, OneSegmentStoresAndOpenClustersAreUnchanged) {
  Register("s2", 4 * kBlock);  // one segment: every tenant shares it
  ASSERT_TRUE(Put("team-a/0", kBlock).ok());
  ASSERT_TRUE(Put("team-b/0", kBlock).ok());
  ASSERT_TRUE(Put("team-c/0", kBlock).ok());
  EXPECT_EQ(ArenaOf("team-a/0"), ArenaOf("team-c/0"));
}

}  // namespace
}  // namespace shelf::master
