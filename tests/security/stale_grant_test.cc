// The attack on grants that outlive their blocks (docs/security.md, "Grants
// bound to their blocks"), performed against a real master and store run
// with principals and tenants: tenant A puts a block with raw calls (so it
// holds the write grant), looks it up (its read grant), removes it, and
// waits for tenant B's put to be given the same range. A then presents its
// old grants, still within their lifetimes: they must read nothing of B's
// block and write nothing into it.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/write_grant.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/credentials_file.h"
#include "tests/fault/fault_util.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {
namespace {

using fault::BlockBytes;

constexpr char kDataSecret[] = "stale-grant-test-data-plane-secret-01";
constexpr char kCredentials[] =
    "# NAME ROLE TENANT SECRET\n"
    "eng-a    engine   team-a   secret-of-engine-a-0123456789\n"
    "eng-b    engine   team-b   secret-of-engine-b-0123456789\n"
    "store-1  store    -        secret-of-the-store-0123456789   nodes=*\n"
    "ops      admin    -        secret-of-the-admin-0123456789\n";
constexpr uint64_t kBlockBytes = 256 << 10;

std::string SecretOf(const std::string& name) { return SecretIn(kCredentials, name); }

class StaleGrantTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    credentials_ = WriteCredentialsFile("shelf-stale", kCredentials, &dir_);
    EXPECT_FALSE(credentials_.empty());
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    // One store, so that B's put is placed where A's block was.
    o.stores = 1;
    o.dram_bytes = 32ull << 20;
    o.secret = kDataSecret;
    o.master_args = {"--credentials", credentials_};
    // One segment, where another tenant's put can reuse the range (tenant
    // arenas, the default with principals, keep tenants apart outright).
    o.store_args = {"--credentials", credentials_, "--principal", "store-1", "--shm-arena", "0"};
    o.admin_token = PrincipalToken("ops", SecretOf("ops"));
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.principal = "eng-b";  // client_ is the victim
    co.principal_secret = SecretOf("eng-b");
    co.allow_shm = false;
    return co;
  }
  void SetUp() override {
    ClusterFixture::SetUp();
    if (HasFatalFailure()) return;
    auto channel = MakeChannel(cluster_->master_address(), TlsFiles());
    ASSERT_TRUE(channel.ok()) << channel.status();
    master_ = v1::MasterService::NewStub(*channel);
    // Every engine host has the data-plane secret: the attacker too.
    transport::TcpDataClient::Options o;
    o.secret = kDataSecret;
    raw_ = std::make_unique<transport::TcpDataClient>(o);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<grpc::ClientContext> As(const std::string& principal) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    PrepareContext(ctx.get(), PrincipalToken(principal, SecretOf(principal)), 20000);
    return ctx;
  }

  // Tenant A's block `key`, put with raw calls: its write grant and DRAM
  // replica in *grant and *replica, its read credential in *credential.
  void AttackerPut(const std::string& key, const std::string& data, v1::WriteGrant* grant,
                   v1::Replica* replica, std::string* credential) {
    v1::PutStartRequest req;
    req.set_key(key);
    req.set_size(data.size());
    req.set_checksum(BlockChecksum(data.data(), data.size()));
    v1::PutStartResponse started;
    grpc::Status s = master_->PutStart(As("eng-a").get(), req, &started);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(started.state(), v1::PUT_STARTED);
    ASSERT_EQ(started.grants_size(), 1);
    *grant = started.grants(0);
    const v1::Replica& r = started.replicas(0);
    ASSERT_TRUE(raw_->Write(r.store().data_address(), ToWireGrant(*grant), r.segment_id(),
                            r.offset(), data.data(), data.size(), MonoMs() + 10000)
                    .ok());
    v1::PutCommitRequest commit;
    commit.add_put_ids(started.put_id());
    v1::PutCommitResponse committed;
    ASSERT_TRUE(master_->PutCommit(As("eng-a").get(), commit, &committed).ok());
    ASSERT_EQ(committed.statuses_size(), 1);
    ASSERT_EQ(committed.statuses(0).code(), 0) << committed.statuses(0).message();
    absl::StatusOr<v1::Replica> located = LocateDramReplica(
        master_.get(), PrincipalToken("eng-a", SecretOf("eng-a")), key, credential);
    ASSERT_TRUE(located.ok()) << located.status();
    *replica = *located;
  }

  void AttackerRemove(const std::string& key) {
    v1::RemoveRequest req;
    req.add_keys(key);
    v1::RemoveResponse resp;
    ASSERT_TRUE(master_->Remove(As("eng-a").get(), req, &resp).ok());
    ASSERT_EQ(resp.statuses_size(), 1);
    ASSERT_EQ(resp.statuses(0).code(), 0) << resp.statuses(0).message();
  }

  // Where the victim's block `key` lies (its DRAM replica).
  v1::Replica VictimReplica(const std::string& key) {
    std::string credential;
    absl::StatusOr<v1::Replica> r = LocateDramReplica(
        master_.get(), PrincipalToken("eng-b", SecretOf("eng-b")), key, &credential);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::Replica();
  }

  std::string dir_, credentials_;
  std::unique_ptr<v1::MasterService::Stub> master_;
  std::unique_ptr<transport::TcpDataClient> raw_;
};

// The attack as found: remove your own block, let another tenant's put
// reuse its range, read it with the old read grant, overwrite it with the
// old write grant.
TEST_F(StaleGrantTest, ARemovedBlocksGrantsNeitherReadNorWriteTheBlockThatReusesItsRange) {
  const std::string mine = BlockBytes(kBlockBytes, 1);
  v1::WriteGrant write_grant;
  v1::Replica old;
  std::string read_credential;
  ASSERT_NO_FATAL_FAILURE(AttackerPut("x", mine, &write_grant, &old, &read_credential));
  ASSERT_NO_FATAL_FAILURE(AttackerRemove("x"));

  const std::string theirs = BlockBytes(kBlockBytes, 2);
  ASSERT_TRUE(client_->Put("secret", theirs.data(), theirs.size()).ok());
  const v1::Replica reused = VictimReplica("secret");
  // The attack needs the range given again; the allocator takes the lowest
  // free range that fits, which A's block has just freed.
  ASSERT_EQ(reused.store().node_id(), old.store().node_id());
  ASSERT_EQ(reused.segment_id(), old.segment_id());
  ASSERT_EQ(reused.offset(), old.offset());
  const std::string store = old.store().data_address();

  // READ of the range under A's read grant: refused, nothing of B's.
  std::string got(kBlockBytes, '\0');
  absl::Status read = raw_->Read(store, old.segment_id(), old.offset(), kBlockBytes, got.data(),
                                 MonoMs() + 10000, read_credential);
  EXPECT_EQ(read.code(), absl::StatusCode::kPermissionDenied) << read;
  EXPECT_FALSE(got == theirs) << "tenant A read tenant B's block";
  // READ_KEY of A's key under the same grant: the store's record of it
  // may lag the remove; it must not serve the range's new bytes.
  got.assign(kBlockBytes, '\0');
  absl::string_view kept_key;
  ASSERT_TRUE(transport::wire::DecodeReadCredential(read_credential, &kept_key).ok());
  absl::Status by_key =
      raw_->ReadKey(store, kept_key, kBlockBytes, got.data(), MonoMs() + 10000, 0,
                    absl::string_view(read_credential).substr(0, transport::wire::kReadGrantBytes));
  EXPECT_FALSE(by_key.ok()) << "a removed block read by key";
  EXPECT_FALSE(got == theirs) << "tenant A read tenant B's block by its own key";

  // WRITE of the range under A's write grant (its 30 s have not passed).
  const std::string evil = BlockBytes(kBlockBytes, 666);
  absl::Status write = raw_->Write(store, ToWireGrant(write_grant), old.segment_id(), old.offset(),
                                   evil.data(), evil.size(), MonoMs() + 10000);
  EXPECT_EQ(write.code(), absl::StatusCode::kPermissionDenied) << write;

  // B's block is whole.
  std::string back;
  Status s = client_->Get("secret", &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(back == theirs);
}

// The refusals are bound to the allocation, not to the range: the range's
// new holder reads and writes it as before, and A's own block put again
// elsewhere reads under its new grant.
TEST_F(StaleGrantTest, TheRangesNewHolderAndANewGrantOfTheOldKeyWorkAsBefore) {
  const std::string mine = BlockBytes(kBlockBytes, 3);
  v1::WriteGrant first_grant;
  v1::Replica first;
  std::string first_credential;
  ASSERT_NO_FATAL_FAILURE(AttackerPut("y", mine, &first_grant, &first, &first_credential));
  ASSERT_NO_FATAL_FAILURE(AttackerRemove("y"));
  const std::string theirs = BlockBytes(kBlockBytes, 4);
  ASSERT_TRUE(client_->Put("z", theirs.data(), theirs.size()).ok());

  // A's key put again: a new range, new grants, which work.
  v1::WriteGrant second_grant;
  v1::Replica second;
  std::string second_credential;
  ASSERT_NO_FATAL_FAILURE(AttackerPut("y", mine, &second_grant, &second, &second_credential));
  EXPECT_GT(second_grant.range_seq(), first_grant.range_seq());
  std::string got(kBlockBytes, '\0');
  ASSERT_TRUE(raw_->Read(second.store().data_address(), second.segment_id(), second.offset(),
                         kBlockBytes, got.data(), MonoMs() + 10000, second_credential)
                  .ok());
  EXPECT_TRUE(got == mine);
  // B reads its block, twice (the second from the location cache).
  for (int i = 0; i < 2; ++i) {
    std::string back;
    ASSERT_TRUE(client_->Get("z", &back).ok());
    EXPECT_TRUE(back == theirs);
  }
}

}  // namespace
}  // namespace shelf
