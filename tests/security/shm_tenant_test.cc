// Tenant arenas (docs/security.md, "Tenant arenas") against real processes:
// a shelf-master with --credentials and a shelf-store with --shm-arena, two
// engines of two tenants on this host. Each tenant's blocks land in arenas
// of its own, each engine reads its own blocks through shared memory, and
// the store hands an arena's descriptor only for a read grant into that
// arena: tenant A's grant (or none) for tenant B's arena is PERMISSION_DENIED
// and no descriptor. The handshake itself hands no descriptor at all.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/credentials.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/credentials_file.h"
#include "testing/wait_for.h"
#include "tests/fault/fault_util.h"
#include "transport/shm.h"

namespace shelf {
namespace {

using fault::BlockBytes;

constexpr char kDataSecret[] = "shm-tenant-test-data-plane-secret-0123";
constexpr char kCredentials[] =
    "eng-a    engine   team-a   secret-of-engine-a-0123456789\n"
    "eng-b    engine   team-b   secret-of-engine-b-0123456789\n"
    "reader   engine   team-r   secret-of-the-reader-01234567   read=team-a\n"
    "store-1  store    -        secret-of-the-store-0123456789   nodes=*\n"
    "ops      admin    -        secret-of-the-admin-0123456789\n";
constexpr uint64_t kDramBytes = 32ull << 20;
constexpr uint64_t kArenaBytes = 8ull << 20;  // 4 arenas
constexpr uint64_t kBlockBytes = 256 << 10;

std::string SecretOf(const std::string& name) { return SecretIn(kCredentials, name); }

class ShmTenantTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    credentials_ = WriteCredentialsFile("shelf-arena", kCredentials, &dir_);
    EXPECT_FALSE(credentials_.empty());
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.stores = 1;
    o.dram_bytes = kDramBytes;
    o.ssd_bytes = 64ull << 20;
    o.secret = kDataSecret;
    o.master_args = {"--credentials", credentials_};
    o.store_args = {"--credentials", credentials_,  "--principal",
                    "store-1",       "--shm-arena", absl::StrCat(kArenaBytes)};
    o.admin_token = PrincipalToken("ops", SecretOf("ops"));
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.principal = "ops";
    co.principal_secret = SecretOf("ops");
    co.location_cache_entries = 0;  // every get moves the block
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

  // Puts blocks prefix0..prefix{n-1} through `c` and reads them back.
  void PutAndGet(Client* c, const std::string& prefix, int n, int seed) {
    for (int i = 0; i < n; ++i) {
      const std::string key = absl::StrCat(prefix, i);
      const std::string data = BlockBytes(kBlockBytes, seed + i);
      Status s = c->Put(key, data.data(), data.size());
      ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
      std::string got;
      s = c->Get(key, &got);
      ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
      ASSERT_TRUE(got == data) << key << ": wrong bytes";
    }
  }

  // The DRAM replica of `key` as `principal` looks it up (with its read
  // grant), and the read credential a client sends with it.
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

  // eng-a puts a-0 and eng-b puts b-0 (each read back); their DRAM
  // replicas and read credentials.
  void PutABlockOfEachTenant(v1::Replica* ra, std::string* cred_a, v1::Replica* rb,
                             std::string* cred_b) {
    std::unique_ptr<Client> a = As("eng-a");
    std::unique_ptr<Client> b = As("eng-b");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_NO_FATAL_FAILURE(PutAndGet(a.get(), "a-", 1, 1));
    ASSERT_NO_FATAL_FAILURE(PutAndGet(b.get(), "b-", 1, 100));
    *ra = Locate("eng-a", "a-0", cred_a);
    *rb = Locate("eng-b", "b-0", cred_b);
  }

  std::string Socket() { return absl::StrCat(cluster_->work_dir(), "/store0.run/shm.sock"); }

  std::string dir_, credentials_;
  std::unique_ptr<v1::MasterService::Stub> stub_;
};

TEST_F(ShmTenantTest, EachTenantReadsItsOwnArenasThroughSharedMemory) {
  std::unique_ptr<Client> a = As("eng-a");
  std::unique_ptr<Client> b = As("eng-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  PutAndGet(a.get(), "a-", 4, 1);
  PutAndGet(b.get(), "b-", 4, 100);
  // Both read through their own arenas' mappings, none refused.
  for (Client* c : {a.get(), b.get()}) {
    ClientStats st = c->stats();
    EXPECT_GT(st.bytes_loaded_shm, 0u);
    EXPECT_EQ(st.shm_refusals, 0u);
  }
  // Every block of a tenant sits in an arena of that tenant only.
  std::vector<uint32_t> arenas_a, arenas_b;
  for (int i = 0; i < 4; ++i) {
    std::string cred;
    arenas_a.push_back(Locate("eng-a", absl::StrCat("a-", i), &cred).segment_id());
    arenas_b.push_back(Locate("eng-b", absl::StrCat("b-", i), &cred).segment_id());
  }
  for (uint32_t x : arenas_a) {
    for (uint32_t y : arenas_b) EXPECT_NE(x, y) << "tenants share arena " << x;
  }
  // Another tenant's key stays out of reach through the master.
  std::string v;
  EXPECT_EQ(a->Get("@team-b/b-0", &v).code(), StatusCode::kPermissionDenied);

  // A principal granted read= team-a maps team-a's arenas too, and reads
  // its blocks through them.
  std::unique_ptr<Client> r = As("reader");
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Get("@team-a/a-2", &v).ok());
  EXPECT_TRUE(v == BlockBytes(kBlockBytes, 3));
  EXPECT_EQ(r->stats().bytes_loaded_shm, kBlockBytes);
  EXPECT_EQ(r->stats().shm_refusals, 0u);
}

TEST_F(ShmTenantTest, AClientOfTenantACannotMapTenantBsArena) {
  v1::Replica ra, rb;
  std::string cred_a, cred_b;
  ASSERT_NO_FATAL_FAILURE(PutABlockOfEachTenant(&ra, &cred_a, &rb, &cred_b));
  ASSERT_NE(ra.segment_id(), rb.segment_id());

  // The handshake (any holder of the data-plane secret on an allowed uid)
  // hands no descriptor: the segment is made of arenas.
  transport::ShmAttachments attachments(kDataSecret);
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = attachments.Get(Socket());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->arenas);
  EXPECT_EQ((*m)->base, nullptr);
  EXPECT_EQ((*m)->size, kArenaBytes);
  transport::ShmWriter& channel = *(*m)->writer;

  // Tenant A's grant for B's arena, no grant, a forged one: refused.
  absl::StatusOr<int> fd = channel.MapArena(rb.segment_id(), rb.offset(), rb.length(), cred_a);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "outside granted range")) << fd.status();
  fd = channel.MapArena(rb.segment_id(), ra.offset(), ra.length(), cred_a);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  fd = channel.MapArena(rb.segment_id(), rb.offset(), rb.length(), "");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "needs the read grant")) << fd.status();
  std::string forged = cred_b;
  forged[forged.size() / 4] ^= 1;
  fd = channel.MapArena(rb.segment_id(), rb.offset(), rb.length(), forged);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "does not verify")) << fd.status();

  // A's own arena, for A's grant: sealed, read-only, holding A's block.
  fd = channel.MapArena(ra.segment_id(), ra.offset(), ra.length(), cred_a);
  ASSERT_TRUE(fd.ok()) << fd.status();
  const int seals = fcntl(*fd, F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW), F_SEAL_SHRINK | F_SEAL_GROW);
  struct stat st;
  ASSERT_EQ(fstat(*fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kArenaBytes);
  errno = 0;
  EXPECT_EQ(mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0), MAP_FAILED);
  void* p = mmap(nullptr, kArenaBytes, PROT_READ, MAP_SHARED, *fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_TRUE(std::string(static_cast<const char*>(p) + ra.offset(), ra.length()) ==
              BlockBytes(kBlockBytes, 1));
  munmap(p, kArenaBytes);
  close(*fd);

  // The channel survives refusals: B's own grant maps B's arena.
  fd = channel.MapArena(rb.segment_id(), rb.offset(), rb.length(), cred_b);
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
}

// A demoted block's DRAM record goes once its SSD copy is durable, in
// every arena: the store keys its records by the offset in the whole
// segment, and a DEMOTE order names the arena and the offset in it. A
// record left behind would have the store serve the freed range, reused
// by then, for the key's SSD replica.
TEST_F(ShmTenantTest, ABlockDemotedFromAnyArenaIsReadFromSsd) {
  std::unique_ptr<Client> a = As("eng-a");
  std::unique_ptr<Client> b = As("eng-b");
  PutAndGet(a.get(), "a-", 1, 300);
  PutAndGet(b.get(), "b-", 1, 400);
  std::string credential;
  ASSERT_GT(Locate("eng-b", "b-0", &credential).segment_id(), 0u);  // not the first arena

  auto channel = MakeChannel(cluster_->master_address(), TlsFiles());
  ASSERT_TRUE(channel.ok());
  auto admin = v1::AdminService::NewStub(*channel);
  const std::string ops = PrincipalToken("ops", SecretOf("ops"));
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, ops, 20000);
    v1::EvictRequest evict;
    evict.set_bytes(kDramBytes);
    v1::EvictResponse evicted;
    ASSERT_TRUE(admin->Evict(&ctx, evict, &evicted).ok());
  }
  // Both on SSD alone: their DRAM ranges are free.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::string unused;
        return !LocateDramReplica(stub_.get(), PrincipalToken("eng-a", SecretOf("eng-a")), "a-0",
                                  &unused)
                    .ok() &&
               !LocateDramReplica(stub_.get(), PrincipalToken("eng-b", SecretOf("eng-b")), "b-0",
                                  &unused)
                    .ok();
      },
      30000));
  // Tenant b's next blocks take its arena again, the freed range first.
  PutAndGet(b.get(), "b-next-", 8, 500);
  std::string got;
  Status s = b->Get("b-0", &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(got == BlockBytes(kBlockBytes, 400)) << "wrong bytes";
  s = a->Get("a-0", &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(got == BlockBytes(kBlockBytes, 300)) << "wrong bytes";
}

// The attack on a store started as the quick start and the units start it
// (--credentials, no --shm-arena): an engine of tenant A on the store's host,
// with the data-plane secret every engine host has, passes the same-host
// handshake and maps the DRAM segment, tenant B's blocks included. A store
// that runs as a principal makes arenas unless told otherwise, so the
// handshake hands no descriptor and each tenant's blocks sit apart.
class ShmTenantDefaultTest : public ShmTenantTest {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ShmTenantTest::ClusterOptions();
    o.store_args = {"--credentials", credentials_, "--principal", "store-1"};
    return o;
  }
};

TEST_F(ShmTenantDefaultTest, AStoreOfPrincipalsKeepsTenantsInArenasByDefault) {
  v1::Replica ra, rb;
  std::string cred_a, cred_b;
  ASSERT_NO_FATAL_FAILURE(PutABlockOfEachTenant(&ra, &cred_a, &rb, &cred_b));
  EXPECT_NE(ra.segment_id(), rb.segment_id());

  transport::ShmAttachments attachments(kDataSecret);
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = attachments.Get(Socket());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->arenas);
  EXPECT_EQ((*m)->base, nullptr) << "the handshake mapped the whole segment";
  EXPECT_EQ((*m)->size, kDramBytes / 16);  // 16 arenas of 2 MiB
}

}  // namespace
}  // namespace shelf
