// Principals, roles and tenant namespaces against a real master and real
// stores run with --credentials (docs/security.md, "Principals and
// tenants"): a principal x operation matrix where every refused call is
// PERMISSION_DENIED or UNAUTHENTICATED and changes nothing, read-only
// sharing between tenants, and a SIGHUP that adds a principal.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/credentials.h"
#include "common/errno_text.h"
#include "common/net.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/credentials_file.h"
#include "testing/http_probe.h"
#include "testing/raw_peer.h"
#include "testing/test_paths.h"
#include "testing/wait_for.h"
#include "tests/fault/fault_util.h"

namespace shelf {
namespace {

constexpr char kDataSecret[] = "principals-test-data-plane-secret-0123";
constexpr char kCredentials[] =
    "# NAME ROLE TENANT SECRET [read=...]\n"
    "eng-a    engine   team-a   secret-of-engine-a-0123456789\n"
    "eng-b    engine   team-b   secret-of-engine-b-0123456789\n"
    "gw-a     gateway  team-a   secret-of-gateway-a-012345678\n"
    "reader   engine   team-r   secret-of-the-reader-01234567   read=prompts\n"
    "pub      engine   prompts  secret-of-the-publisher-012345\n"
    "store-1  store    -        secret-of-the-store-0123456789   nodes=node-*\n"
    "store-x  store    -        secret-of-store-x-012345678901   nodes=gpu-7\n"
    "ops      admin    -        secret-of-the-admin-0123456789\n";

std::string SecretOf(const std::string& name) { return SecretIn(kCredentials, name); }

class PrincipalsTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    credentials_ = WriteCredentialsFile("shelf-princ", kCredentials, &dir_);
    EXPECT_FALSE(credentials_.empty());
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.secret = kDataSecret;  // the data plane's
    o.master_args = {"--credentials", credentials_, "--metrics-listen", "127.0.0.1:0"};
    o.store_args = {"--credentials", credentials_, "--principal", "store-1"};
    o.admin_token = PrincipalToken("ops", SecretOf("ops"));
    return o;
  }
  // client_ is the admin.
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

  std::unique_ptr<Client> As(const std::string& principal, const std::string& secret = "") {
    ClientOptions co = DefaultClientOptions();
    co.principal = principal;
    co.principal_secret = secret.empty() ? SecretOf(principal) : secret;
    return OpenClient(co);
  }

  void Put(Client* c, const std::string& key, const std::string& value) {
    Status s = c->Put(key, value.data(), value.size());
    ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
  }

  std::string GetOr(Client* c, const std::string& key) {
    std::string v;
    Status s = c->Get(key, &v);
    return s.ok() ? v : std::string(StatusCodeName(s.code()));
  }

  // Every key in the cluster, as kept (the admin's view).
  std::vector<std::string> AllKeys() {
    std::vector<std::string> keys;
    std::string next;
    EXPECT_TRUE(client_->ListKeys("", "", 1024, &keys, &next).ok());
    return keys;
  }

  // Raw stubs carrying `token`.
  v1::MasterService::Stub* MasterStub() {
    if (master_stub_ == nullptr) {
      auto ch = MakeChannel(cluster_->master_address(), TlsFiles());
      EXPECT_TRUE(ch.ok());
      master_stub_ = v1::MasterService::NewStub(*ch);
      admin_stub_ = v1::AdminService::NewStub(*ch);
    }
    return master_stub_.get();
  }
  v1::AdminService::Stub* AdminStub() {
    MasterStub();
    return admin_stub_.get();
  }
  static void Prepare(grpc::ClientContext* ctx, const std::string& principal) {
    PrepareContext(ctx, PrincipalToken(principal, SecretOf(principal)), 20000);
  }
  // As `principal`: looks `key` up (its read grant) and reports its first
  // replica corrupt; the report's answer.
  grpc::Status ReportCorrupt(const std::string& principal, const std::string& key) {
    v1::LookupRequest lookup;
    lookup.add_keys(key);
    lookup.set_no_lease(true);
    v1::LookupResponse found;
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, principal);
      EXPECT_TRUE(MasterStub()->Lookup(&ctx, lookup, &found).ok());
    }
    if (found.objects_size() != 1 || found.objects(0).replicas_size() < 1) {
      ADD_FAILURE() << "no replica of " << key << " for " << principal;
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no replica");
    }
    v1::ReportDataLossRequest report;
    report.set_key(key);
    report.set_generation(found.objects(0).generation());
    *report.mutable_replica() = found.objects(0).replicas(0);
    v1::ReportDataLossResponse unused;
    grpc::ClientContext ctx;
    Prepare(&ctx, principal);
    return MasterStub()->ReportDataLoss(&ctx, report, &unused);
  }

  std::string dir_, credentials_;
  std::unique_ptr<v1::MasterService::Stub> master_stub_;
  std::unique_ptr<v1::AdminService::Stub> admin_stub_;
};

TEST_F(PrincipalsTest, EachTenantHasItsOwnNamespace) {
  auto a = As("eng-a");
  auto b = As("eng-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Put(a.get(), "k", "from-a");
  Put(b.get(), "k", "from-b");
  EXPECT_EQ(GetOr(a.get(), "k"), "from-a");
  EXPECT_EQ(GetOr(b.get(), "k"), "from-b");
  // The gateway of team-a is an engine of team-a.
  auto gw = As("gw-a");
  ASSERT_NE(gw, nullptr);
  EXPECT_EQ(GetOr(gw.get(), "k"), "from-a");
  // The admin sees the kept keys; each tenant lists its own, in its form.
  EXPECT_EQ(AllKeys(), (std::vector<std::string>{"team-a/k", "team-b/k"}));
  std::vector<std::string> keys;
  std::string next;
  ASSERT_TRUE(a->ListKeys("", "*", 100, &keys, &next).ok());
  EXPECT_EQ(keys, std::vector<std::string>{"k"});
  EXPECT_EQ(GetOr(client_.get(), "team-b/k"), "from-b");
  // Batches (BatchPutStart, one Lookup for many keys) too.
  const std::string v1 = "batch one", v2 = "batch two";
  std::vector<Status> statuses;
  ASSERT_TRUE(
      b->BatchPut({{"b1", v1.data(), v1.size()}, {"b2", v2.data(), v2.size()}}, &statuses).ok());
  for (const Status& st : statuses) EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<std::string> values;
  ASSERT_TRUE(b->BatchGet({"b1", "k", "b2"}, &values, &statuses).ok());
  EXPECT_EQ(values, (std::vector<std::string>{v1, "from-b", v2}));
  ASSERT_TRUE(a->BatchGet({"b1", "k"}, &values, &statuses).ok());
  EXPECT_EQ(statuses[0].code(), StatusCode::kNotFound);
  EXPECT_EQ(values[1], "from-a");
  // RemoveMatching within the tenant: team-a's "" removes team-a's keys only.
  uint64_t removed = 0;
  ASSERT_TRUE(a->RemoveMatching("", &removed).ok());
  EXPECT_EQ(removed, 1u);
  EXPECT_EQ(AllKeys(), (std::vector<std::string>{"team-b/b1", "team-b/b2", "team-b/k"}));
}

TEST_F(PrincipalsTest, AnEngineCannotNameAnotherTenantsKeys) {
  auto a = As("eng-a");
  auto b = As("eng-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Put(a.get(), "secret-block", "a's bytes");
  const std::string theirs = "@team-a/secret-block";
  const std::vector<std::string> before = AllKeys();
  std::string v;
  EXPECT_EQ(b->Get(theirs, &v).code(), StatusCode::kPermissionDenied);
  std::vector<bool> present;
  EXPECT_EQ(b->Exists({theirs}, &present).code(), StatusCode::kPermissionDenied);
  size_t matched = 0;
  EXPECT_EQ(b->MatchPrefix({theirs}, &matched).code(), StatusCode::kPermissionDenied);
  std::vector<NodeRun> runs;
  EXPECT_EQ(b->Locate({theirs}, &runs).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(b->Put(theirs, "x", 1).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(b->Put("@team-a/new", "x", 1).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(b->Remove(theirs).code(), StatusCode::kPermissionDenied);
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, "eng-b");
    v1::PinRequest req;
    req.set_key(theirs);
    v1::PinResponse resp;
    EXPECT_EQ(AdminStub()->Pin(&ctx, req, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // Its own names never reach team-a: listing, bulk removal, a plain miss.
  std::vector<std::string> keys;
  std::string next;
  ASSERT_TRUE(b->ListKeys("", "", 100, &keys, &next).ok());
  EXPECT_TRUE(keys.empty());
  uint64_t removed = 7;
  ASSERT_TRUE(b->RemoveMatching("", &removed).ok());
  EXPECT_EQ(removed, 0u);
  EXPECT_EQ(b->Get("secret-block", &v).code(), StatusCode::kNotFound);
  // A key naming the separator stays in b's own namespace.
  EXPECT_EQ(b->Get("team-a/secret-block", &v).code(), StatusCode::kNotFound);
  // Nothing changed.
  EXPECT_EQ(AllKeys(), before);
  EXPECT_EQ(GetOr(a.get(), "secret-block"), "a's bytes");
  // Its own '@' form is its own key.
  Put(b.get(), "@team-b/mine", "b");
  EXPECT_EQ(GetOr(b.get(), "mine"), "b");
}

TEST_F(PrincipalsTest, AnEngineMakesNoAdminOrStoreCalls) {
  auto expect_denied = [&](const char* what, const grpc::Status& s) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << what << ": " << s.error_message();
  };
  for (const char* engine : {"eng-a", "gw-a"}) {
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, engine);
      v1::StatusResponse r;
      expect_denied("Status", AdminStub()->Status(&ctx, v1::StatusRequest(), &r));
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, engine);
      v1::SegmentsResponse r;
      expect_denied("Segments", AdminStub()->Segments(&ctx, v1::SegmentsRequest(), &r));
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, engine);
      v1::StatRequest req;
      req.set_key("k");
      v1::StatResponse r;
      expect_denied("Stat", AdminStub()->Stat(&ctx, req, &r));
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, engine);
      v1::DrainRequest req;
      req.set_node(cluster_->store_address(0));
      v1::DrainResponse r;
      expect_denied("Drain", AdminStub()->Drain(&ctx, req, &r));
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, engine);
      v1::EvictRequest req;
      req.set_bytes(1 << 20);
      v1::EvictResponse r;
      expect_denied("Evict", AdminStub()->Evict(&ctx, req, &r));
    }
    {
      // Registering as a store (taking over store 0's node id).
      grpc::ClientContext ctx;
      Prepare(&ctx, engine);
      v1::StatusResponse st;
      grpc::ClientContext sctx;
      Prepare(&sctx, "ops");
      ASSERT_TRUE(AdminStub()->Status(&sctx, v1::StatusRequest(), &st).ok());
      ASSERT_GT(st.nodes_size(), 0);
      v1::RegisterStoreRequest req;
      req.set_protocol_version(1);
      req.mutable_endpoint()->set_node_id(st.nodes(0).node_id());
      req.mutable_endpoint()->set_data_address("127.0.0.1:1");
      req.set_incarnation(12345);
      v1::RegisterStoreResponse r;
      expect_denied("RegisterStore", MasterStub()->RegisterStore(&ctx, req, &r));
    }
    {
      grpc::ClientContext ctx;
      Prepare(&ctx, engine);
      v1::HeartbeatRequest req;
      v1::HeartbeatResponse r;
      expect_denied("Heartbeat", MasterStub()->Heartbeat(&ctx, req, &r));
    }
  }
  // Both stores still live, nothing drained.
  EXPECT_TRUE(cluster_->WaitForLiveNodes(2, 20000).ok());
  grpc::ClientContext ctx;
  Prepare(&ctx, "ops");
  v1::StatusResponse st;
  ASSERT_TRUE(AdminStub()->Status(&ctx, v1::StatusRequest(), &st).ok());
  for (const auto& n : st.nodes()) {
    EXPECT_EQ(n.state(), v1::NODE_LIVE) << n.node_id();
    EXPECT_NE(n.address(), "127.0.0.1:1");
  }
}

TEST_F(PrincipalsTest, AStoreCredentialIsNoEngine) {
  auto s = As("store-1");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Put("k", "v", 1).code(), StatusCode::kPermissionDenied);
  std::string v;
  EXPECT_EQ(s->Get("k", &v).code(), StatusCode::kPermissionDenied);
  std::vector<bool> present;
  EXPECT_EQ(s->Exists({"k"}, &present).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s->Remove("k").code(), StatusCode::kPermissionDenied);
  std::vector<std::string> keys;
  std::string next;
  EXPECT_EQ(s->ListKeys("", "", 10, &keys, &next).code(), StatusCode::kPermissionDenied);
  grpc::ClientContext ctx;
  Prepare(&ctx, "store-1");
  v1::StatusResponse r;
  EXPECT_EQ(AdminStub()->Status(&ctx, v1::StatusRequest(), &r).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(AllKeys().empty());
}

// The attack: a host holding some store's credential registers a node of
// its choosing, another store's or a new one, whose inventory names a block
// in a tenant's namespace with a checksum of its choosing; the tenant's
// engines would then read whatever that host serves.
TEST_F(PrincipalsTest, AStoreCredentialRegistersNoNodeButItsOwn) {
  auto a = As("eng-a");
  ASSERT_NE(a, nullptr);
  Put(a.get(), "real", "the-real-bytes");
  const std::vector<std::string> before = AllKeys();
  for (const std::string& node : {std::string("node-0"), std::string("rogue")}) {
    v1::RegisterStoreRequest req;
    req.set_protocol_version(1);
    req.set_incarnation(77);
    v1::StoreEndpoint* ep = req.mutable_endpoint();
    ep->set_node_id(node);
    ep->set_data_address("127.0.0.1:1");
    v1::SegmentInfo* seg = req.add_segments();
    seg->set_segment_id(0);
    seg->set_capacity_bytes(1 << 20);
    seg->set_tier(v1::TIER_DRAM);
    v1::InventoryEntry* inv = req.add_inventory();
    inv->set_key("team-a/injected");
    inv->set_size(16);
    inv->set_checksum(12345);
    inv->set_tier(v1::TIER_DRAM);
    inv->set_segment_id(0);
    inv->set_offset(0);
    grpc::ClientContext ctx;
    Prepare(&ctx, "store-x");
    v1::RegisterStoreResponse resp;
    grpc::Status st = MasterStub()->RegisterStore(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << node << ": " << st.error_message();
    // Nor may it heartbeat for a node that is there.
    v1::HeartbeatRequest hb;
    hb.set_node_id(node);
    grpc::ClientContext hctx;
    Prepare(&hctx, "store-x");
    v1::HeartbeatResponse hresp;
    EXPECT_EQ(MasterStub()->Heartbeat(&hctx, hb, &hresp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << node;
  }
  EXPECT_EQ(AllKeys(), before);
  std::string v;
  EXPECT_EQ(a->Get("injected", &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(GetOr(a.get(), "real"), "the-real-bytes");
  // The cluster's own stores (store-1, nodes=node-*) still register and serve.
  v1::StatusResponse status;
  grpc::ClientContext sctx;
  Prepare(&sctx, "ops");
  ASSERT_TRUE(AdminStub()->Status(&sctx, v1::StatusRequest(), &status).ok());
  ASSERT_GE(status.nodes_size(), 1);
  for (const v1::NodeStatus& n : status.nodes()) {
    EXPECT_EQ(n.state(), v1::NODE_LIVE) << n.node_id();
    EXPECT_TRUE(absl::StartsWith(n.node_id(), "node-")) << n.node_id();
  }
}

TEST_F(PrincipalsTest, UnknownPrincipalsAndWrongSecretsAreUnauthenticated) {
  auto wrong = As("eng-a", "not-the-secret-of-engine-a-000");
  auto unknown = As("nobody", "a-secret-nobody-was-given-0000");
  ASSERT_NE(wrong, nullptr);
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(wrong->Put("k", "v", 1).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(unknown->Put("k", "v", 1).code(), StatusCode::kUnauthenticated);
  // The data plane's secret is no gRPC credential here.
  ClientOptions co = DefaultClientOptions();
  co.principal.clear();
  co.principal_secret.clear();
  auto bare = OpenClient(co);
  ASSERT_NE(bare, nullptr);
  std::vector<bool> present;
  EXPECT_EQ(bare->Exists({"k"}, &present).code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(AllKeys().empty());
}

TEST_F(PrincipalsTest, SharingIsReadOnly) {
  auto pub = As("pub");
  auto reader = As("reader");
  auto b = As("eng-b");
  ASSERT_NE(pub, nullptr);
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(b, nullptr);
  Put(pub.get(), "system-prompt", "You are helpful.");
  EXPECT_EQ(GetOr(reader.get(), "@prompts/system-prompt"), "You are helpful.");
  size_t matched = 0;
  ASSERT_TRUE(reader->MatchPrefix({"@prompts/system-prompt"}, &matched).ok());
  EXPECT_EQ(matched, 1u);
  // ... twice: the second read may come from the location cache.
  EXPECT_EQ(GetOr(reader.get(), "@prompts/system-prompt"), "You are helpful.");
  EXPECT_EQ(reader->Put("@prompts/system-prompt", "evil", 4).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(reader->Put("@prompts/other", "evil", 4).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(reader->Remove("@prompts/system-prompt").code(), StatusCode::kPermissionDenied);
  std::string v;
  EXPECT_EQ(b->Get("@prompts/system-prompt", &v).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(GetOr(pub.get(), "system-prompt"), "You are helpful.");
  EXPECT_EQ(AllKeys(), std::vector<std::string>{"prompts/system-prompt"});
}

// The attack on data loss reports: a principal with read access to a
// shared tenant looks a block up (its read grant is what a report must
// present) and reports the replica corrupt, which dropped it from the
// index, pinned or not. A report drops replicas as a remove does, so only
// a principal that may write the key may make one.
TEST_F(PrincipalsTest, AReaderOfASharedTenantCannotDropItsBlocksByReportingThemCorrupt) {
  auto pub = As("pub");
  ASSERT_NE(pub, nullptr);
  Put(pub.get(), "shared-doc", "the shared block");
  grpc::Status s = ReportCorrupt("reader", "@prompts/shared-doc");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(GetOr(pub.get(), "shared-doc"), "the shared block");
}

// The attack: a principal that may write a key (and so read it) reports
// its intact replica corrupt to have it dropped, pinned or not: the
// master has its store check the bytes first, and they are fine.
TEST_F(PrincipalsTest, AWritersReportOfAnIntactReplicaDropsNothing) {
  auto a = As("eng-a");
  ASSERT_NE(a, nullptr);
  Put(a.get(), "intact", "bytes that are fine");
  {
    v1::PinRequest pin;
    pin.set_key("intact");
    v1::PinResponse pinned;
    grpc::ClientContext ctx;
    Prepare(&ctx, "eng-a");
    grpc::Status s = AdminStub()->Pin(&ctx, pin, &pinned);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  grpc::Status s = ReportCorrupt("eng-a", "intact");
  ASSERT_TRUE(s.ok()) << s.error_message();
  // The store answers on its next heartbeat: the report is refuted.
  auto refuted = [&] {
    const std::string metrics = HttpGet(cluster_->master_metrics_port(), "/metrics");
    return metrics.find("shelf_master_data_loss_refuted_total 1") != std::string::npos;
  };
  EXPECT_TRUE(WaitFor(refuted, 20000));
  EXPECT_EQ(GetOr(a.get(), "intact"), "bytes that are fine");
  EXPECT_EQ(AllKeys(), std::vector<std::string>{"team-a/intact"});
}

TEST_F(PrincipalsTest, SighupReloadAddsAPrincipal) {
  const std::string secret = "secret-of-the-newcomer-0123456";
  auto late = As("eng-c", secret);
  ASSERT_NE(late, nullptr);
  std::vector<bool> present;
  EXPECT_EQ(late->Exists({"k"}, &present).code(), StatusCode::kUnauthenticated);
  std::ofstream(credentials_, std::ios::app) << "eng-c engine team-c " << secret << "\n";
  ASSERT_EQ(::kill(cluster_->master_process()->pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitFor([&] { return late->Exists({"k"}, &present).ok(); }, 20000));
  Put(late.get(), "k", "c");
  EXPECT_EQ(GetOr(late.get(), "k"), "c");
  EXPECT_EQ(AllKeys(), std::vector<std::string>{"team-c/k"});
  // The others still authenticate.
  auto a = As("eng-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->Exists({"k"}, &present).code(), StatusCode::kOk);
}

TEST_F(PrincipalsTest, ShelfctlCallsAsItsPrincipal) {
  std::string out;
  EXPECT_EQ(
      cluster_->Shelfctl({"--credentials", credentials_, "--principal", "ops", "status"}, &out), 0)
      << out;
  // An engine may put and read its own keys, not look at the cluster.
  const std::string file = dir_ + "/block";
  std::ofstream(file) << "block of team-a";
  EXPECT_EQ(
      cluster_->Shelfctl(
          {"--credentials", credentials_, "--principal", "eng-a", "put", "ctl-key", file}, &out),
      0)
      << out;
  // (5: UNAUTHENTICATED or PERMISSION_DENIED.)
  EXPECT_EQ(
      cluster_->Shelfctl({"--credentials", credentials_, "--principal", "eng-a", "status"}, &out),
      5)
      << out;
  EXPECT_EQ(AllKeys(), std::vector<std::string>{"team-a/ctl-key"});
}

// With TLS the token is checked before the request body is read, by the
// master's AuthMetadataProcessor: principals there too.
// A shelf-master alone with --credentials and TLS (certificates made by
// openssl in a fresh directory).
class PrincipalsTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (fault::RunShell("command -v openssl") != 0) GTEST_SKIP() << "openssl is not installed";
    std::string tmpl = (std::filesystem::temp_directory_path() / "shelf-princ-tls-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(fault::MakeTestCertificates(dir_, "good").ok());
    const std::string credentials = dir_ + "/credentials";
    std::ofstream(credentials) << kCredentials;
    ::chmod(credentials.c_str(), 0600);
  }
  void TearDown() override {
    master_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  // Starts the master serving TLS with good.pem, and `extra` flags; sets
  // address_.
  void StartMaster(const std::vector<std::string>& extra) {
    const std::string bin = TestBinDir();
    std::vector<std::string> argv = {
        bin + "/shelf-master", "--listen",      "127.0.0.1:0",         "--ready-file",
        dir_ + "/master.addr", "--credentials", dir_ + "/credentials", "--tls-cert",
        dir_ + "/good.pem",    "--tls-key",     dir_ + "/good.key"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto master = Process::Spawn(argv, dir_ + "/master.log");
    ASSERT_TRUE(master.ok()) << master.status();
    master_ = *std::move(master);
    auto addr = WaitForFileLine(dir_ + "/master.addr", 15000, master_.get());
    ASSERT_TRUE(addr.ok()) << addr.status();
    address_ = *addr;
  }

  // libshelf as eng-a over `tls` reaches the master (a lookup of an
  // absent key answers NOT_FOUND).
  void ExpectEngineAWorks(const TlsFiles& tls) {
    ClientOptions co;
    co.masters = {address_};
    co.tls_ca = tls.ca;
    co.tls_cert = tls.cert;
    co.tls_key = tls.key;
    co.principal = "eng-a";
    co.principal_secret = SecretOf("eng-a");
    co.timeout_ms = 20000;
    std::unique_ptr<Client> client;
    ASSERT_TRUE(Client::Open(co, &client).ok());
    std::string v;
    EXPECT_EQ(client->Get("absent", &v).code(), StatusCode::kNotFound);
  }

  // The port of the master's --metrics-listen (its ready file's "metrics"
  // line); 0 when it has none.
  uint16_t MetricsPort() const {
    std::ifstream in(dir_ + "/master.addr");
    for (std::string line; std::getline(in, line);) {
      if (!absl::StartsWith(line, "metrics ")) continue;
      auto hp = ParseHostPort(line.substr(8));
      if (hp.ok()) return hp->port;
    }
    return 0;
  }

  std::string dir_, address_;
  std::unique_ptr<Process> master_;
};

TEST_F(PrincipalsTlsTest, PrincipalsAreCheckedBeforeTheBodyWithTls) {
  ASSERT_NO_FATAL_FAILURE(StartMaster({}));
  TlsFiles tls;
  tls.ca = dir_ + "/good-ca.pem";
  auto ch = MakeChannel(address_, tls);
  ASSERT_TRUE(ch.ok());
  auto admin = v1::AdminService::NewStub(*ch);
  auto call = [&](const std::string& token) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token, 20000);
    v1::StatusResponse r;
    return admin->Status(&ctx, v1::StatusRequest(), &r).error_code();
  };
  // (The first handshake can take seconds on a loaded machine: retried.)
  EXPECT_TRUE(WaitFor(
      [&] { return call(PrincipalToken("ops", SecretOf("ops"))) == grpc::StatusCode::OK; }, 60000));
  EXPECT_EQ(call(PrincipalToken("eng-a", SecretOf("eng-a"))), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(call(PrincipalToken("ops", "not-the-admins-secret-0000000")),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call(PrincipalToken("nobody", "a-secret-nobody-was-given-0000")),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
  ExpectEngineAWorks(tls);
}

// The attack: a principal's token (a bearer credential: in a log, a core
// dump, a config file) used from a host that holds another principal's
// client certificate. With mutual TLS, the certificate names its principal.
TEST_F(PrincipalsTlsTest, AClientCertificateIsBoundToItsPrincipal) {
  ASSERT_TRUE(fault::MakeClientCertificate(dir_, "good", "eng-a").ok());
  ASSERT_TRUE(fault::MakeClientCertificate(dir_, "good", "ops").ok());
  ASSERT_NO_FATAL_FAILURE(StartMaster({"--tls-ca", dir_ + "/good-ca.pem"}));
  auto status_as = [&](const std::string& cert, const std::string& principal) {
    TlsFiles tls{dir_ + "/" + cert + ".pem", dir_ + "/" + cert + ".key", dir_ + "/good-ca.pem"};
    auto ch = MakeChannel(address_, tls);
    EXPECT_TRUE(ch.ok());
    auto admin = v1::AdminService::NewStub(*ch);
    grpc::ClientContext ctx;
    PrepareContext(&ctx, PrincipalToken(principal, SecretOf(principal)), 20000);
    v1::StatusResponse r;
    grpc::Status st = admin->Status(&ctx, v1::StatusRequest(), &r);
    return st;
  };
  // (The first handshake can take seconds on a loaded machine: retried.)
  EXPECT_TRUE(WaitFor([&] { return status_as("ops", "ops").ok(); }, 60000));
  // The admin's token over the engine's certificate, or over the
  // master's own (CN localhost): refused before the call runs.
  grpc::Status stolen = status_as("eng-a", "ops");
  EXPECT_EQ(stolen.error_code(), grpc::StatusCode::UNAUTHENTICATED) << stolen.error_message();
  EXPECT_NE(stolen.error_message().find("client certificate"), std::string::npos)
      << stolen.error_message();
  EXPECT_EQ(status_as("good", "ops").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Each principal over its own certificate works as before.
  ExpectEngineAWorks(TlsFiles{dir_ + "/eng-a.pem", dir_ + "/eng-a.key", dir_ + "/good-ca.pem"});
}

// The attack: connections that never finish their handshake, each holding
// one of the master's descriptors for gRPC's default 120 s.
TEST_F(PrincipalsTlsTest, ASilentConnectionIsClosedAtTheHandshakeTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartMaster({"--handshake-timeout", "1s"}));
  auto hp = ParseHostPort(address_);
  ASSERT_TRUE(hp.ok());
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<int> fd = TcpConnect(*hp, 5000);
    ASSERT_TRUE(fd.ok()) << fd.status();
    fds.push_back(*fd);
  }
  // Each is closed by the master within a few seconds (recv sees EOF), not
  // held until the 20 s receive timeout below.
  for (int fd : fds) {
    timeval tv{20, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    const ssize_t n = ::recv(fd, &c, 1, 0);
    const int err = errno;
    EXPECT_TRUE(n == 0 || (n < 0 && err == ECONNRESET)) << n << " " << ErrnoText(err);
    ::close(fd);
  }
}

// The attack: hold as many connections to the master as one host can open
// (here silent TCP connections, which the handshake timeout would close only
// after 30 s), from one source and then from several. The master counts
// what it holds against --max-connections and one source's share of it, and
// shuts down at once what is past them; a client from another source is
// served while the attack holds its share.
TEST_F(PrincipalsTlsTest, ConnectionsPastTheCapOrASourcesShareAreClosedAtOnce) {
  constexpr int kCap = 16, kShare = 8;
  ASSERT_NO_FATAL_FAILURE(StartMaster({"--handshake-timeout", "30s", "--max-connections",
                                       std::to_string(kCap), "--max-connections-per-source",
                                       std::to_string(kShare), "--metrics-listen", "127.0.0.1:0"}));
  const uint16_t metrics_port = MetricsPort();
  ASSERT_NE(metrics_port, 0);
  auto hp = ParseHostPort(address_);
  ASSERT_TRUE(hp.ok());
  // Open connections among `fds` once the master has shut down those it
  // refuses (waits until the count has stayed put for half a second).
  auto settled_open = [](const std::vector<int>& fds) {
    int open = -1, stable_since = -1;
    for (int ms = 0; ms < 10000; ms += 50) {
      int now = 0;
      for (int fd : fds) now += PeerClosed(fd) ? 0 : 1;
      if (now != open) {
        open = now;
        stable_since = ms;
      } else if (ms - stable_since >= 500) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return open;
  };
  auto connect_from = [&](int source, int n) {
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
      const int fd = ConnectFrom(source, hp->port);
      EXPECT_GE(fd, 0) << ErrnoText(errno);
      if (fd >= 0) fds.push_back(fd);
    }
    return fds;
  };
  auto refused = [&](const std::string& rule) {
    return MetricValue(HttpGet(metrics_port, "/metrics"),
                       "shelf_master_connections_refused_total{rule=\"" + rule + "\"}");
  };

  // One host opens three times its share: it keeps its share.
  std::vector<int> host2 = connect_from(2, 3 * kShare);
  EXPECT_EQ(settled_open(host2), kShare);
  EXPECT_EQ(refused("source_share"), 2 * kShare);
  // A second host fills the cap; a third gets nothing.
  std::vector<int> host3 = connect_from(3, kShare);
  EXPECT_EQ(settled_open(host3), kShare);
  std::vector<int> host4 = connect_from(4, 4);
  EXPECT_EQ(settled_open(host4), 0);
  EXPECT_EQ(refused("max_connections"), 4);
  EXPECT_EQ(MetricValue(HttpGet(metrics_port, "/metrics"), "shelf_master_connections"), kCap);

  // The second host lets go: an engine (from 127.0.0.1) is served while the
  // first host still holds its share.
  for (int fd : host3) ::close(fd);
  EXPECT_TRUE(WaitFor(
      [&] {
        return MetricValue(HttpGet(metrics_port, "/metrics"), "shelf_master_connections") == kShare;
      },
      10000));
  TlsFiles tls;
  tls.ca = dir_ + "/good-ca.pem";
  ExpectEngineAWorks(tls);
  EXPECT_EQ(settled_open(host2), kShare);
  for (int fd : host2) ::close(fd);
  for (int fd : host4) ::close(fd);
}

}  // namespace
}  // namespace shelf
