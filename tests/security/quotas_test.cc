// Quotas per principal and tenant against a real master and real stores run
// with --credentials (docs/security.md, "Quotas"): a tenant or a principal
// over its stored bytes quota gets RESOURCE_EXHAUSTED naming the quota and
// whose it is, and gets room back as blocks are removed; a flood by one
// tenant that fills the cluster evicts its own blocks, not another's within
// its guaranteed share nor another's soft-pinned ones; the pin TTL cap; the puts-in-flight limit; a
// SIGHUP that raises a quota.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/credentials.h"
#include "common/net.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/credentials_file.h"
#include "testing/http_probe.h"
#include "testing/wait_for.h"

namespace shelf {
namespace {

constexpr char kDataSecret[] = "quotas-test-data-plane-secret-0123456";
constexpr char kCredentials[] =
    "eng-a    engine   team-a   secret-of-engine-a-0123456789   puts=2 pin_ttl=10s\n"
    "eng-b    engine   team-b   secret-of-engine-b-0123456789\n"
    "eng-q    engine   team-q   secret-of-engine-q-0123456789\n"
    "eng-l    engine   team-l   secret-of-engine-l-0123456789   leased=512KiB\n"
    "store-1  store    -        secret-of-the-store-0123456789   nodes=*\n"
    "ops      admin    -        secret-of-the-admin-0123456789\n"
    "eng-p1   engine   team-p   secret-of-engine-p1-0123456789  dram=512KiB\n"
    "eng-p2   engine   team-p   secret-of-engine-p2-0123456789\n"
    "tenant=team-b  guarantee=4MiB\n"
    "tenant=team-p  dram=1MiB\n";
constexpr char kTeamQ[] = "tenant=team-q  dram=1MiB ssd=512KiB pinned=256KiB\n";
constexpr size_t kSmall = 256 << 10;

// The master's /metrics (a plain HTTP/1.0 GET; "" on failure).
std::string Scrape(uint16_t port) { return HttpGet(port, "/metrics"); }

// The value of the sample of `name` whose labels include every `labels`
// (each `k="v"`); -1 when there is none.
double Sample(const std::string& text, const std::string& name,
              const std::vector<std::string>& labels) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name + "{")) continue;
    size_t close_brace = line.find('}');
    if (close_brace == absl::string_view::npos) continue;
    absl::string_view set = line.substr(0, close_brace);
    bool all = true;
    for (const std::string& l : labels) all &= absl::StrContains(set, l);
    double v = 0;
    if (all && absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(close_brace + 1)), &v)) {
      return v;
    }
  }
  return -1;
}

std::string SecretOf(const std::string& name) { return SecretIn(kCredentials, name); }

class QuotasTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    credentials_ = WriteCredentialsFile("shelf-quota", std::string(kCredentials) + kTeamQ, &dir_);
    EXPECT_FALSE(credentials_.empty());
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.secret = kDataSecret;
    o.stores = 1;
    o.dram_bytes = 16ull << 20;
    o.master_args = {"--credentials", credentials_, "--metrics-listen", "127.0.0.1:0"};
    // One segment that every tenant shares, so that a flood meets the
    // other tenants' blocks (tenant arenas, the default with principals,
    // keep tenants apart outright).
    o.store_args = {"--credentials", credentials_, "--principal", "store-1", "--shm-arena", "0"};
    o.admin_token = PrincipalToken("ops", SecretOf("ops"));
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.principal = "ops";
    co.principal_secret = SecretOf("ops");
    return co;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<Client> As(const std::string& principal) {
    ClientOptions co = DefaultClientOptions();
    co.principal = principal;
    co.principal_secret = SecretOf(principal);
    return OpenClient(co);
  }

  v1::MasterService::Stub* MasterStub() {
    if (master_stub_ == nullptr) {
      auto ch = MakeChannel(cluster_->master_address(), TlsFiles());
      EXPECT_TRUE(ch.ok());
      master_stub_ = v1::MasterService::NewStub(*ch);
      admin_stub_ = v1::AdminService::NewStub(*ch);
    }
    return master_stub_.get();
  }
  static void Prepare(grpc::ClientContext* ctx, const std::string& principal) {
    PrepareContext(ctx, PrincipalToken(principal, SecretOf(principal)), 20000);
  }
  grpc::Status Pin(const std::string& principal, const std::string& key, uint64_t ttl_ms,
                   bool hard = false) {
    MasterStub();
    v1::PinRequest req;
    req.set_key(key);
    req.set_ttl_ms(ttl_ms);
    req.set_hard(hard);
    v1::PinResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, principal);
    return admin_stub_->Pin(&ctx, req, &resp);
  }
  // A put started and left open (its bytes never written).
  grpc::Status StartPut(const std::string& principal, const std::string& key,
                        v1::PutStartResponse* resp) {
    v1::PutStartRequest req;
    req.set_key(key);
    req.set_size(kSmall);
    req.set_checksum(1);
    grpc::ClientContext ctx;
    Prepare(&ctx, principal);
    return MasterStub()->PutStart(&ctx, req, resp);
  }

  // Lookups of `keys` as `principal`, taking leases.
  grpc::Status Lookup(const std::string& principal, const std::vector<std::string>& keys) {
    v1::LookupRequest req;
    for (const std::string& k : keys) req.add_keys(k);
    v1::LookupResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, principal);
    return MasterStub()->Lookup(&ctx, req, &resp);
  }

  // Its real port, from the ready file: --metrics-listen asks for any.
  uint16_t metrics_port() const { return cluster_->master_metrics_port(); }
  std::string dir_, credentials_;
  std::unique_ptr<v1::MasterService::Stub> master_stub_;
  std::unique_ptr<v1::AdminService::Stub> admin_stub_;
};

TEST_F(QuotasTest, OverItsDramQuotaATenantIsRefusedNamingTheQuota) {
  auto q = As("eng-q");
  auto b = As("eng-b");
  ASSERT_NE(q, nullptr);
  ASSERT_NE(b, nullptr);
  std::string value(kSmall, 'q');
  for (int i = 0; i < 4; ++i) {  // 4 x 256 KiB: exactly the 1 MiB quota
    Status s = q->Put(absl::StrCat("k", i), value.data(), value.size());
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  Status over = q->Put("k4", value.data(), value.size());
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted) << over.ToString();
  EXPECT_TRUE(absl::StrContains(over.ToString(), "quota dram")) << over.ToString();
  EXPECT_TRUE(absl::StrContains(over.ToString(), "team-q")) << over.ToString();
  // The master's metrics say the same, for that tenant alone.
  std::string metrics = Scrape(metrics_port());
  EXPECT_EQ(
      Sample(metrics, "shelf_master_tenant_stored_bytes", {"tenant=\"team-q\"", "tier=\"dram\""}),
      static_cast<double>(4 * kSmall))
      << metrics;
  EXPECT_EQ(
      Sample(metrics, "shelf_master_quota_refusals_total", {"tenant=\"team-q\"", "quota=\"dram\""}),
      1.0);
  // Another tenant is not held to it.
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(b->Put(absl::StrCat("k", i), value.data(), value.size()).ok());
  }
  // A removal gives the room back.
  ASSERT_TRUE(q->Remove("k0").ok());
  Status again = q->Put("k4", value.data(), value.size());
  EXPECT_TRUE(again.ok()) << again.ToString();
  // Pinned bytes: 256 KiB, so one block.
  EXPECT_TRUE(Pin("eng-q", "k1", 0).ok());
  grpc::Status second = Pin("eng-q", "k2", 0);
  EXPECT_EQ(second.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(second.error_message(), "quota pinned")) << second.error_message();
  // Re-pinning the same key replaces its pin.
  EXPECT_TRUE(Pin("eng-q", "k1", 0).ok());
}

// The attack on a quota in object bytes: blocks of one byte each hold a
// whole allocation granule (4 KiB) of a tier, so a tenant counted by its
// bytes filled an SSD tier of 256 MiB while its quota saw 75 KB. Charged
// by the granule, team-q's 1 MiB holds 256 of them, and its metrics say
// the room they hold.
TEST_F(QuotasTest, TinyBlocksAreChargedTheRoomTheyHold) {
  auto q = As("eng-q");
  ASSERT_NE(q, nullptr);
  constexpr int kFit = (1 << 20) / 4096;
  for (int i = 0; i < kFit; ++i) {
    Status s = q->Put(absl::StrCat("tiny", i), "x", 1);
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  Status over = q->Put("tiny-over", "x", 1);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted) << over.ToString();
  EXPECT_TRUE(absl::StrContains(over.ToString(), "quota dram")) << over.ToString();
  EXPECT_EQ(Sample(Scrape(metrics_port()), "shelf_master_tenant_stored_bytes",
                   {"tenant=\"team-q\"", "tier=\"dram\""}),
            static_cast<double>(kFit * 4096));
  // Removing one gives back one granule: one more tiny block fits.
  ASSERT_TRUE(q->Remove("tiny0").ok());
  EXPECT_TRUE(q->Put("tiny-over", "x", 1).ok());
}

// A tenant at its DRAM quota can still replace a key's value: the commit
// frees the old bytes (PutOptions.replace), so they do not count twice.
TEST_F(QuotasTest, ATenantAtItsQuotaCanReplaceAKey) {
  auto q = As("eng-q");
  ASSERT_NE(q, nullptr);
  std::string value(kSmall, 'q'), other(kSmall, 'r');
  for (int i = 0; i < 4; ++i) {  // exactly the 1 MiB quota
    ASSERT_TRUE(q->Put(absl::StrCat("r", i), value.data(), value.size()).ok()) << i;
  }
  PutOptions replace;
  replace.replace = true;
  Status s = q->Put("r0", other.data(), other.size(), replace);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string got;
  ASSERT_TRUE(q->Get("r0", &got).ok());
  EXPECT_EQ(got, other);
  // A new key is still over the quota.
  EXPECT_EQ(q->Put("r4", value.data(), value.size()).code(), StatusCode::kResourceExhausted);
}

TEST_F(QuotasTest, APrincipalsStoredBytesQuotaCountsWhatItStoredWithinItsTenants) {
  auto p1 = As("eng-p1");  // dram=512KiB of its own
  auto p2 = As("eng-p2");  // none: only team-p's 1 MiB
  ASSERT_NE(p1, nullptr);
  ASSERT_NE(p2, nullptr);
  std::string value(kSmall, 'p');
  for (const char* key : {"a0", "a1"}) ASSERT_TRUE(p1->Put(key, value.data(), kSmall).ok()) << key;
  Status over = p1->Put("a2", value.data(), kSmall);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted) << over.ToString();
  EXPECT_TRUE(absl::StrContains(over.ToString(), "quota dram of principal 'eng-p1'"))
      << over.ToString();
  // The other principal of the tenant still writes, up to the tenant's total.
  for (const char* key : {"b0", "b1"}) {
    Status s = p2->Put(key, value.data(), kSmall);
    ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
  }
  Status tenant_full = p2->Put("b2", value.data(), kSmall);
  EXPECT_EQ(tenant_full.code(), StatusCode::kResourceExhausted) << tenant_full.ToString();
  EXPECT_TRUE(absl::StrContains(tenant_full.ToString(), "quota dram of tenant 'team-p'"))
      << tenant_full.ToString();
  // A removal gives the bytes back to the principal that stored them, and
  // to the tenant.
  ASSERT_TRUE(p1->Remove("a0").ok());
  Status again = p1->Put("a2", value.data(), kSmall);
  EXPECT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(p1->Put("a3", value.data(), kSmall).code(), StatusCode::kResourceExhausted);
  // Whoever of the tenant removes it.
  ASSERT_TRUE(p2->Remove("a1").ok());
  Status after = p1->Put("a3", value.data(), kSmall);
  EXPECT_TRUE(after.ok()) << after.ToString();
}

TEST_F(QuotasTest, SighupRaisesAQuota) {
  auto q = As("eng-q");
  ASSERT_NE(q, nullptr);
  std::string value(kSmall, 'q');
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q->Put(absl::StrCat("k", i), value.data(), kSmall).ok());
  ASSERT_EQ(q->Put("k4", value.data(), kSmall).code(), StatusCode::kResourceExhausted);
  std::ofstream(credentials_, std::ios::trunc) << kCredentials << "tenant=team-q dram=2MiB\n";
  ASSERT_EQ(::kill(cluster_->master_process()->pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitFor([&] { return q->Put("k4", value.data(), kSmall).ok(); }, 20000));
}

TEST_F(QuotasTest, AFloodEvictsTheFloodersBlocksNotAnotherTenantsWithinItsShare) {
  auto a = As("eng-a");
  auto b = As("eng-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // team-b: 2 MiB, within its 4 MiB guaranteed share, written first (so
  // least recently used when the flood comes).
  std::string bv(kSmall, 'b');
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(b->Put(absl::StrCat("b", i), bv.data(), bv.size()).ok());
  }
  // team-q, without a share, soft-pins one block.
  auto q = As("eng-q");
  ASSERT_NE(q, nullptr);
  ASSERT_TRUE(q->Put("pinned", bv.data(), bv.size()).ok());
  ASSERT_TRUE(Pin("eng-q", "pinned", 0).ok());
  // team-a writes three times the cluster's 16 MiB.
  std::string av(1 << 20, 'a');
  for (int i = 0; i < 48; ++i) {
    Status s = a->Put(absl::StrCat("a", i), av.data(), av.size());
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  for (int i = 0; i < 8; ++i) {
    std::string got;
    Status s = b->Get(absl::StrCat("b", i), &got);
    EXPECT_TRUE(s.ok()) << "b" << i << ": " << s.ToString();
    EXPECT_EQ(got, bv);
  }
  std::vector<bool> kept;
  ASSERT_TRUE(q->Exists({"pinned"}, &kept).ok());
  EXPECT_EQ(kept, std::vector<bool>{true});
  // The flood's oldest blocks made the room.
  std::vector<bool> present;
  ASSERT_TRUE(a->Exists({"a0", "a47"}, &present).ok());
  EXPECT_EQ(present, (std::vector<bool>{false, true}));
}

TEST_F(QuotasTest, PinTtlIsCapped) {
  auto a = As("eng-a");
  ASSERT_NE(a, nullptr);
  Status put = a->Put("k", "v", 1);
  ASSERT_TRUE(put.ok()) << put.ToString();
  grpc::Status long_pin = Pin("eng-a", "k", 60000);
  EXPECT_EQ(long_pin.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(long_pin.error_message(), "quota pin_ttl"))
      << long_pin.error_message();
  EXPECT_EQ(Pin("eng-a", "k", 0).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Pin("eng-a", "k", 0, /*hard=*/true).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(Pin("eng-a", "k", 5000).ok());
  // Another principal without a cap pins as long as it likes.
  auto b = As("eng-b");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->Put("k", "v", 1).ok());
  EXPECT_TRUE(Pin("eng-b", "k", 0).ok());
  // A put that pins at its commit is held to the same cap, before it
  // stores anything.
  PutOptions too_long;
  too_long.soft_pin_ttl_ms = 60000;
  Status refused = a->Put("pinned-at-put", "v", 1, too_long);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  std::vector<bool> present;
  ASSERT_TRUE(a->Exists({"pinned-at-put"}, &present).ok());
  EXPECT_EQ(present, std::vector<bool>{false});
  PutOptions within;
  within.soft_pin_ttl_ms = 5000;
  Status pinned = a->Put("pinned-at-put", "v", 1, within);
  ASSERT_TRUE(pinned.ok()) << pinned.ToString();
  EXPECT_EQ(a->Remove("pinned-at-put").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(a->Remove("pinned-at-put", Deadline(), /*force=*/true).ok());
}

TEST_F(QuotasTest, PutsInFlightAreLimited) {
  v1::PutStartResponse r1, r2, r3;
  ASSERT_TRUE(StartPut("eng-a", "p1", &r1).ok());
  ASSERT_TRUE(StartPut("eng-a", "p2", &r2).ok());
  ASSERT_EQ(r2.state(), v1::PUT_STARTED);
  grpc::Status third = StartPut("eng-a", "p3", &r3);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(third.error_message(), "quota puts")) << third.error_message();
  EXPECT_TRUE(absl::StrContains(third.error_message(), "eng-a")) << third.error_message();
  // Another principal's puts do not count.
  v1::PutStartResponse rb;
  EXPECT_TRUE(StartPut("eng-b", "p3", &rb).ok());
  // An abort ends one: the next starts.
  v1::PutAbortRequest abort;
  abort.add_put_ids(r1.put_id());
  v1::PutAbortResponse aborted;
  grpc::ClientContext ctx;
  Prepare(&ctx, "eng-a");
  ASSERT_TRUE(MasterStub()->PutAbort(&ctx, abort, &aborted).ok());
  EXPECT_TRUE(StartPut("eng-a", "p3", &r3).ok());
}

TEST_F(QuotasTest, LeasedBytesAreLimitedUntilGivenBack) {
  auto l = As("eng-l");
  ASSERT_NE(l, nullptr);
  std::string value(kSmall, 'l');
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l->Put(absl::StrCat("k", i), value.data(), value.size()).ok());
  }
  // 2 x 256 KiB under leases: the 512 KiB quota is reached.
  ASSERT_TRUE(Lookup("eng-l", {"k0", "k1"}).ok());
  grpc::Status over = Lookup("eng-l", {"k2"});
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(over.error_message(), "quota leased")) << over.error_message();
  // A lookup without a lease is not held to it.
  v1::LookupRequest peek;
  peek.add_keys("k2");
  peek.set_no_lease(true);
  v1::LookupResponse found;
  grpc::ClientContext ctx;
  Prepare(&ctx, "eng-l");
  EXPECT_TRUE(MasterStub()->Lookup(&ctx, peek, &found).ok());
  // Giving one lease back makes room.
  v1::ReleaseLeasesRequest release;
  release.add_keys("k0");
  v1::ReleaseLeasesResponse released;
  grpc::ClientContext ctx2;
  Prepare(&ctx2, "eng-l");
  ASSERT_TRUE(MasterStub()->ReleaseLeases(&ctx2, release, &released).ok());
  EXPECT_TRUE(Lookup("eng-l", {"k2"}).ok());
}

// With an SSD tier: demoted blocks move from the tenant's DRAM count to its
// SSD count, which has a quota of its own.
class QuotasTieredTest : public QuotasTest {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = QuotasTest::ClusterOptions();
    o.ssd_bytes = 64ull << 20;
    return o;
  }
};

TEST_F(QuotasTieredTest, DemotionMovesBytesFromTheDramCountToTheSsdCount) {
  auto q = As("eng-q");
  ASSERT_NE(q, nullptr);
  std::string value(kSmall, 'q');
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(q->Put(absl::StrCat("k", i), value.data(), value.size()).ok());
  }
  ASSERT_EQ(q->Put("k4", value.data(), kSmall).code(), StatusCode::kResourceExhausted);
  // The admin evicts the store's DRAM: every block is demoted to its SSD.
  MasterStub();
  v1::EvictRequest evict;
  evict.set_bytes(16ull << 20);
  v1::EvictResponse evicted;
  grpc::ClientContext ctx;
  Prepare(&ctx, "ops");
  ASSERT_TRUE(admin_stub_->Evict(&ctx, evict, &evicted).ok());
  const std::vector<std::string> dram = {"tenant=\"team-q\"", "tier=\"dram\""};
  const std::vector<std::string> ssd = {"tenant=\"team-q\"", "tier=\"ssd\""};
  EXPECT_TRUE(WaitFor(
      [&] {
        std::string m = Scrape(metrics_port());
        return Sample(m, "shelf_master_tenant_stored_bytes", dram) == 0 &&
               Sample(m, "shelf_master_tenant_stored_bytes", ssd) == 4.0 * kSmall;
      },
      20000))
      << Scrape(metrics_port());
  // Its DRAM quota has room again, but its SSD holds 1 MiB, over 512 KiB.
  Status over = q->Put("k4", value.data(), kSmall);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.ToString(), "quota ssd")) << over.ToString();
  // Removing two brings it back to its quota.
  ASSERT_TRUE(q->Remove("k0").ok());
  ASSERT_TRUE(q->Remove("k1").ok());
  Status again = q->Put("k4", value.data(), kSmall);
  EXPECT_TRUE(again.ok()) << again.ToString();
}

}  // namespace
}  // namespace shelf
