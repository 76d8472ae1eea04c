// Tenant arenas over rdma (docs/security.md, "One-sided RDMA"), on the
// simulated RDMA device (this machine has no RDMA NIC; the device is
// in-process, so the store runs in this process too, with its real data
// server): a real shelf-master with --credentials and two tenants, a store
// of arenas. Each tenant's client reads its own blocks over rdma; the store
// tells an arena's rkey only against a read grant into that arena: tenant
// A's grant for tenant B's arena, or a forged one, is PERMISSION_DENIED and
// reveals no rkey, a connection with no grant at all exposes nothing, and a
// queue pair exposing one arena reads no other, whatever rkey it is given.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/testing_hooks.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "server/store/store.h"
#include "shelf/client.h"
#include "testing/credentials_file.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/client/fake_cuda_runtime.h"
#include "transport/rdma/connection_info.h"
#include "transport/rdma/rdma_engine.h"
#include "transport/rdma/simulated_verbs.h"
#include "transport/tcp_client.h"

namespace shelf {
namespace {

constexpr char kSecret[] = "client-rdma-tenant-data-plane-secret";
constexpr char kCredentials[] =
    "eng-a    engine   team-a   secret-of-engine-a-0123456789\n"
    "eng-b    engine   team-b   secret-of-engine-b-0123456789\n"
    "store-1  store    -        secret-of-the-store-0123456789   nodes=*\n"
    "ops      admin    -        secret-of-the-admin-0123456789\n";
constexpr uint64_t kArenaBytes = 16ull << 20;  // 4 arenas of the 64 MiB
constexpr size_t kBlock = 1 << 20;

std::string SecretOf(const std::string& name) { return SecretIn(kCredentials, name); }

std::string Block(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class ClientRdmaTenantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    credentials_ = WriteCredentialsFile("shelf-rdma-tenant", kCredentials, &dir_);
    ASSERT_FALSE(credentials_.empty());
    LocalCluster::Options o;
    o.stores = 0;
    o.secret = kSecret;
    o.bin_dir = TestBinDir();
    o.master_args = {"--credentials", credentials_};
    o.admin_token = PrincipalToken("ops", SecretOf("ops"));
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    store::StoreOptions so;
    so.master = cluster_->master_address();
    so.master_token = PrincipalToken("store-1", SecretOf("store-1"));
    so.listen = "127.0.0.1:0";
    so.dram_size = 64ull << 20;
    so.secret = kSecret;
    so.hugepages = false;
    so.shm = false;  // same host: the client would use shared memory
    so.rdma_device = "sim1";
    so.rdma_verbs = &sim_;
    so.shm_arena_bytes = kArenaBytes;
    auto store = store::Store::Start(so);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    store_thread_ = std::thread([this] { store_->Run(); });
    while (!store_->registered()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    internal::SetDevicesForTesting(&sim_, &cuda_);
  }
  void TearDown() override {
    internal::SetDevicesForTesting(nullptr, nullptr);
    stub_.reset();
    if (store_ != nullptr) store_->Stop();
    if (store_thread_.joinable()) store_thread_.join();
    store_.reset();
    cluster_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    transport::rdma::SimulatedVerbs::Stats s = sim_.stats();
    EXPECT_EQ(s.live_contexts + s.live_pds + s.live_mrs + s.live_cqs + s.live_qps, 0)
        << "simulated objects leaked";
  }

  std::unique_ptr<Client> As(const std::string& principal) {
    ClientOptions co;
    co.masters = {cluster_->master_address()};
    co.secret = kSecret;
    co.principal = principal;
    co.principal_secret = SecretOf(principal);
    co.timeout_ms = 20000;
    co.allow_shm = false;
    co.rdma_device = "sim0";
    co.rdma_store_pull_puts = true;
    co.location_cache_entries = 0;  // every get asks the master, with a fresh grant
    std::unique_ptr<Client> c;
    Status s = Client::Open(co, &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }

  // The DRAM replica of `key` as `principal` looks it up, and the read
  // credential (its read grant, then the key) a client presents with it.
  v1::Replica Locate(const std::string& principal, const std::string& key,
                     std::string* credential) {
    if (stub_ == nullptr) {
      auto ch = MakeChannel(cluster_->master_address(), TlsFiles());
      EXPECT_TRUE(ch.ok());
      stub_ = v1::MasterService::NewStub(*ch);
    }
    absl::StatusOr<v1::Replica> r = LocateDramReplica(
        stub_.get(), PrincipalToken(principal, SecretOf(principal)), key, credential);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::Replica();
  }

  // One block put by each tenant (bytes picked by `seed_a`, `seed_b`),
  // its DRAM replica, and each tenant's read credential for its own.
  struct OneBlockEach {
    std::string data_a, data_b, cred_a, cred_b;
    v1::Replica ra, rb;
  };
  void PutOneBlockEach(int seed_a, int seed_b, OneBlockEach* out) {
    std::unique_ptr<Client> a = As("eng-a");
    std::unique_ptr<Client> b = As("eng-b");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    out->data_a = Block(kBlock, seed_a);
    out->data_b = Block(kBlock, seed_b);
    ASSERT_TRUE(a->Put("a-0", out->data_a.data(), out->data_a.size()).ok());
    ASSERT_TRUE(b->Put("b-0", out->data_b.data(), out->data_b.size()).ok());
    out->ra = Locate("eng-a", "a-0", &out->cred_a);
    out->rb = Locate("eng-b", "b-0", &out->cred_b);
    ASSERT_NE(out->ra.segment_id(), out->rb.segment_id());
  }

  // A raw client on the simulated device, which asks the store's data
  // server for queue pairs by hand, reading into `local` (kBlock bytes).
  struct RawClient {
    std::string local = std::string(kBlock, '\0');
    std::unique_ptr<transport::rdma::RdmaEngine> engine;
    std::optional<transport::rdma::MemoryRegion> region;  // of local, in engine
  };
  void OpenRawClient(RawClient* c) {
    transport::rdma::RdmaEngine::Options eo;
    eo.device_name = "sim0";
    auto engine = transport::rdma::RdmaEngine::Open(&sim_, eo);
    ASSERT_TRUE(engine.ok()) << engine.status();
    c->engine = std::move(*engine);
    auto region = c->engine->RegisterMemory(c->local.data(), c->local.size(),
                                            transport::rdma::MemoryKind::kHost,
                                            transport::rdma::MemoryAccess::kLocal);
    ASSERT_TRUE(region.ok()) << region.status();
    c->region.emplace(*region);
  }

  std::string dir_, credentials_;
  transport::rdma::SimulatedVerbs sim_;
  FakeCudaRuntime cuda_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<store::Store> store_;
  std::thread store_thread_;
  std::unique_ptr<v1::MasterService::Stub> stub_;
};

TEST_F(ClientRdmaTenantTest, EachTenantReadsItsOwnArenaOverRdma) {
  std::unique_ptr<Client> a = As("eng-a");
  std::unique_ptr<Client> b = As("eng-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  uint64_t total_a = 0, total_b = 0;
  // Puts first: their connections carry no read grant and expose nothing;
  // the gets then ask again, with the grant of their lookup.
  for (int i = 0; i < 3; ++i) {
    const std::string da = Block(kBlock - size_t{4096} * i, 10 + i);
    const std::string db = Block(kBlock - size_t{8192} * i, 50 + i);
    ASSERT_TRUE(a->Put(absl::StrCat("a-", i), da.data(), da.size()).ok());
    ASSERT_TRUE(b->Put(absl::StrCat("b-", i), db.data(), db.size()).ok());
    total_a += da.size();
    total_b += db.size();
  }
  for (int i = 0; i < 3; ++i) {
    std::string got;
    ASSERT_TRUE(a->Get(absl::StrCat("a-", i), &got).ok()) << i;
    ASSERT_TRUE(got == Block(kBlock - size_t{4096} * i, 10 + i)) << i;
    ASSERT_TRUE(b->Get(absl::StrCat("b-", i), &got).ok()) << i;
    ASSERT_TRUE(got == Block(kBlock - size_t{8192} * i, 50 + i)) << i;
  }
  for (auto [c, total] : {std::pair{a.get(), total_a}, std::pair{b.get(), total_b}}) {
    ClientStats st = c->stats();
    EXPECT_EQ(st.bytes_stored_rdma, total);
    EXPECT_EQ(st.bytes_loaded_rdma, total);
    EXPECT_EQ(st.bytes_loaded_tcp, 0u);
  }
  std::string cred;
  EXPECT_NE(Locate("eng-a", "a-0", &cred).segment_id(), Locate("eng-b", "b-0", &cred).segment_id())
      << "the tenants share an arena";
}

TEST_F(ClientRdmaTenantTest, AnArenasRkeyIsToldOnlyForAReadGrantIntoIt) {
  OneBlockEach put;
  ASSERT_NO_FATAL_FAILURE(PutOneBlockEach(1, 2, &put));
  const auto& [data_a, data_b, cred_a, cred_b, ra, rb] = put;
  RawClient raw;
  ASSERT_NO_FATAL_FAILURE(OpenRawClient(&raw));
  std::string& local = raw.local;
  auto ep = raw.engine->CreateEndpoint({});
  ASSERT_TRUE(ep.ok()) << ep.status();
  auto info = (*ep)->LocalInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  transport::TcpDataClient control(transport::TcpDataClient::Options{kSecret, 5000, 0});
  auto fd = control.Dial(store_->data_address(), MonoMs() + 5000);
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto connect = [&](uint32_t arena, const std::string& credential) {
    return control.RdmaConnect(*fd, arena, *info, credential, MonoMs() + 5000);
  };

  // Tenant A's grant for B's arena: refused, no rkey.
  absl::StatusOr<std::string> remote = connect(rb.segment_id(), cred_a);
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kPermissionDenied) << remote.status();
  // A forged grant (B's, one MAC byte changed): refused.
  std::string forged = cred_b;
  forged[transport::wire::kReadGrantBytes - 1] ^= 1;
  remote = connect(rb.segment_id(), forged);
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kPermissionDenied) << remote.status();
  // Garbage where the grant goes: refused.
  remote = connect(rb.segment_id(), "not a grant");
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kPermissionDenied) << remote.status();
  // No grant: a queue pair (a put's, which the store pulls through) that
  // exposes nothing: no address, no length, no rkey.
  remote = connect(rb.segment_id(), "");
  ASSERT_TRUE(remote.ok()) << remote.status();
  absl::StatusOr<transport::rdma::ConnectionInfo> told =
      transport::rdma::DecodeConnectionInfo(*remote);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->segment.rkey, 0u);
  EXPECT_EQ(told->segment.addr, 0u);
  EXPECT_EQ(told->segment.length, 0u);

  // A's own grant for A's arena: that arena's region, and its bytes over
  // a one-sided READ.
  remote = connect(ra.segment_id(), cred_a);
  ASSERT_TRUE(remote.ok()) << remote.status();
  told = transport::rdma::DecodeConnectionInfo(*remote);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->segment.length, kArenaBytes);
  ASSERT_TRUE((*ep)->Connect(*remote).ok());
  transport::rdma::RdmaBatchResult r =
      (*ep)->Execute({{transport::rdma::RdmaOpKind::kRead, local.data(), ra.length(), ra.offset()}},
                     MonoMs() + 5000);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(local.substr(0, ra.length()) == data_a);

  ep->reset();
  close(*fd);
}

TEST_F(ClientRdmaTenantTest, AQueuePairOfOneArenaCannotReadAnotherUnderItsRkey) {
  OneBlockEach put;
  ASSERT_NO_FATAL_FAILURE(PutOneBlockEach(3, 4, &put));
  const auto& [data_a, data_b, cred_a, cred_b, ra, rb] = put;
  // One raw client holding both tenants' grants: a queue pair exposing A's
  // arena, and one exposing B's, which tells B's address and rkey.
  RawClient raw;
  ASSERT_NO_FATAL_FAILURE(OpenRawClient(&raw));
  std::string& local = raw.local;
  transport::TcpDataClient control(transport::TcpDataClient::Options{kSecret, 5000, 0});
  std::vector<int> fds;
  auto expose = [&](uint32_t arena, const std::string& credential) {
    std::unique_ptr<transport::rdma::RdmaEndpoint> ep;
    auto made = raw.engine->CreateEndpoint({});
    EXPECT_TRUE(made.ok()) << made.status();
    auto fd = control.Dial(store_->data_address(), MonoMs() + 5000);
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!made.ok() || !fd.ok()) return ep;
    fds.push_back(*fd);
    auto remote =
        control.RdmaConnect(*fd, arena, *(*made)->LocalInfo(), credential, MonoMs() + 5000);
    EXPECT_TRUE(remote.ok()) << remote.status();
    if (remote.ok() && (*made)->Connect(*remote).ok()) ep = *std::move(made);
    return ep;
  };
  std::unique_ptr<transport::rdma::RdmaEndpoint> ep_a = expose(ra.segment_id(), cred_a);
  std::unique_ptr<transport::rdma::RdmaEndpoint> ep_b = expose(rb.segment_id(), cred_b);
  ASSERT_TRUE(ep_a != nullptr && ep_b != nullptr);
  const transport::rdma::RemoteSegment seg_b = *ep_b->remote_segment();
  const transport::rdma::RdmaOp into_b{transport::rdma::RdmaOpKind::kRead, local.data(),
                                       rb.length(), seg_b.addr + rb.offset(), seg_b.rkey};

  // A's queue pair reads A's arena, but B's bytes under B's real rkey and
  // address it does not: each arena is in a protection domain of its own.
  transport::rdma::RdmaBatchResult r =
      ep_a->Execute({{transport::rdma::RdmaOpKind::kRead, local.data(), ra.length(), ra.offset()}},
                    MonoMs() + 5000);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(local.substr(0, ra.length()) == data_a);
  r = ep_a->Execute({&into_b, 1}, MonoMs() + 5000);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kPermissionDenied) << r.status;
  EXPECT_FALSE(local.substr(0, rb.length()) == data_b);
  // B's queue pair, the same READ: B's bytes.
  r = ep_b->Execute({&into_b, 1}, MonoMs() + 5000);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(local.substr(0, rb.length()) == data_b);

  ep_a.reset();
  ep_b.reset();
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace shelf
