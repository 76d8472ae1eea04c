// The cluster secret and write grants, against real processes started with
// a secret: every door without the secret stays shut and nothing behind it
// changes; writes need a grant the master signed for that node, range and
// time.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/write_grant.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/fault/fault_util.h"
#include "transport/shm.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {

namespace wire = transport::wire;

namespace {

using fault::BlockBytes;
using fault::ShellQuote;

constexpr char kSecret[] = "security-test-secret-0123456789abcdef";
constexpr char kWrongSecret[] = "not-the-cluster-secret-at-all-0000";

class SecurityTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.dram_bytes = 32ull << 20;
    o.secret = kSecret;
    o.master_args = {"--put-timeout", "2s"};
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.allow_shm = false;
    return co;
  }
  void SetUp() override {
    ClusterFixture::SetUp();
    if (HasFatalFailure()) return;
    probe_ = std::make_unique<fault::FaultProbe>(cluster_->master_address(), kSecret);
    anonymous_ = std::make_unique<fault::FaultProbe>(cluster_->master_address(), "");
    wrong_ = std::make_unique<fault::FaultProbe>(cluster_->master_address(), kWrongSecret);
    std::string data = BlockBytes(10000, 1);
    ASSERT_TRUE(client_->Put("existing", data.data(), data.size()).ok());
  }

  // shelfctl with explicit arguments (no --secret-file added).
  int RawShelfctl(const std::vector<std::string>& args, std::string* out) {
    std::string cmd = ShellQuote(TestBinDir() + "/shelfctl") + " --master " +
                      ShellQuote(cluster_->master_address());
    for (const std::string& a : args) cmd += " " + ShellQuote(a);
    return fault::RunShell(cmd, out);
  }

  std::string Snapshot() {
    absl::StatusOr<fault::ClusterSnapshot> s = probe_->Snapshot();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->ToString() : "";
  }

  // A real grant from the master for a block of `size` on some store.
  v1::PutStartResponse StartPut(const std::string& key, uint64_t size) {
    v1::PutStartRequest req;
    req.set_key(key);
    req.set_size(size);
    std::string data = BlockBytes(size, 7);
    req.set_checksum(BlockChecksum(data.data(), data.size()));
    v1::PutStartResponse resp;
    grpc::Status s = probe_->master()->PutStart(probe_->Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.state(), v1::PUT_STARTED);
    return resp;
  }

  static wire::Grant ToWire(const v1::WriteGrant& g) { return ToWireGrant(g); }

  std::string OtherStore(const std::string& address) {
    return cluster_->store_address(0) == address ? cluster_->store_address(1)
                                                 : cluster_->store_address(0);
  }

  std::unique_ptr<fault::FaultProbe> probe_, anonymous_, wrong_;
};

TEST_F(SecurityTest, GrpcWithoutTheSecretIsUnauthenticatedAndChangesNothing) {
  std::string before = Snapshot();
  for (fault::FaultProbe* p : {anonymous_.get(), wrong_.get()}) {
    v1::StatusResponse st;
    EXPECT_EQ(p->admin()->Status(p->Context().get(), v1::StatusRequest(), &st).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::PutStartRequest put;
    put.set_key("intruder");
    put.set_size(4096);
    v1::PutStartResponse put_resp;
    EXPECT_EQ(p->master()->PutStart(p->Context().get(), put, &put_resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(put_resp.grants_size(), 0) << "a grant leaked to an unauthenticated caller";
    v1::RemoveRequest rm;
    rm.add_keys("existing");
    rm.set_force(true);
    v1::RemoveResponse rm_resp;
    EXPECT_EQ(p->master()->Remove(p->Context().get(), rm, &rm_resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::LookupRequest lk;
    lk.add_keys("existing");
    v1::LookupResponse lk_resp;
    EXPECT_EQ(p->master()->Lookup(p->Context().get(), lk, &lk_resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(lk_resp.objects_size(), 0) << "placements leaked";
    v1::RegisterStoreRequest reg;
    reg.set_protocol_version(1);
    reg.mutable_endpoint()->set_node_id("rogue");
    reg.mutable_endpoint()->set_data_address("127.0.0.1:1");
    reg.add_segments()->set_capacity_bytes(1 << 30);
    v1::RegisterStoreResponse reg_resp;
    EXPECT_EQ(p->master()->RegisterStore(p->Context().get(), reg, &reg_resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(reg_resp.grant_key().empty()) << "the grant key leaked";
    v1::EvictRequest ev;
    ev.set_bytes(1ull << 40);
    v1::EvictResponse ev_resp;
    EXPECT_EQ(p->admin()->Evict(p->Context().get(), ev, &ev_resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::DrainRequest dr;
    dr.set_node(cluster_->store_address(0));
    v1::DrainResponse dr_resp;
    EXPECT_EQ(p->admin()->Drain(p->Context().get(), dr, &dr_resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(Snapshot(), before);
  std::string got;
  EXPECT_TRUE(client_->Get("existing", &got).ok());
}

TEST_F(SecurityTest, ShelfctlWithoutTheSecretExitsFiveAndChangesNothing) {
  std::string before = Snapshot();
  std::string wrong_file = cluster_->work_dir() + "/wrong-secret";
  std::ofstream(wrong_file) << kWrongSecret << "\n";
  ::chmod(wrong_file.c_str(), 0600);
  std::string in = cluster_->work_dir() + "/in.bin";
  std::ofstream(in) << "payload";
  const std::vector<std::vector<std::string>> commands = {
      {"status"},
      {"nodes"},
      {"stat", "existing"},
      {"rm", "existing"},
      {"put", "intruder", in},
      {"drain", cluster_->store_address(0)},
      {"evict", "--bytes", "1000000"},
  };
  for (const auto& cmd : commands) {
    std::string out;
    EXPECT_EQ(RawShelfctl(cmd, &out), 5) << cmd[0] << " without a secret: " << out;
    std::vector<std::string> with_wrong = {"--secret-file", wrong_file};
    with_wrong.insert(with_wrong.end(), cmd.begin(), cmd.end());
    EXPECT_EQ(RawShelfctl(with_wrong, &out), 5) << cmd[0] << " with a wrong secret: " << out;
  }
  EXPECT_EQ(Snapshot(), before);
  std::string out;
  EXPECT_EQ(cluster_->Shelfctl({"stat", "existing"}, &out), 0) << out;
}

TEST_F(SecurityTest, DataPlaneWithAWrongSecretIsRejected) {
  for (const char* secret : {"", kWrongSecret}) {
    transport::TcpDataClient::Options o;
    o.secret = secret;
    transport::TcpDataClient raw(o);
    for (int i = 0; i < cluster_->store_count(); ++i) {
      absl::Status s = raw.Ping(cluster_->store_address(i), MonoMs() + 5000);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
      char buf[64];
      s = raw.Read(cluster_->store_address(i), 0, 0, sizeof(buf), buf, MonoMs() + 5000);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
    }
  }
  // A client library with the wrong secret cannot read either.
  ClientOptions co;
  co.masters = {cluster_->master_address()};
  co.secret = kWrongSecret;
  std::unique_ptr<Client> wrong;
  ASSERT_TRUE(Client::Open(co, &wrong).ok());
  std::string got;
  EXPECT_EQ(wrong->Get("existing", &got).code(), StatusCode::kUnauthenticated);
  transport::TcpDataClient::Options right;
  right.secret = kSecret;
  EXPECT_TRUE(
      transport::TcpDataClient(right).Ping(cluster_->store_address(0), MonoMs() + 5000).ok());
}

TEST_F(SecurityTest, ShmAttachWithAWrongSecretIsRejected) {
  const std::string socket = cluster_->work_dir() + "/store0.run/shm.sock";
  for (const char* secret : {"", kWrongSecret}) {
    transport::ShmAttachments shm(secret);
    absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = shm.Get(socket);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnauthenticated) << m.status();
  }
  transport::ShmAttachments good(kSecret);
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = good.Get(socket);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->size, 32ull << 20);
}

TEST_F(SecurityTest, WritesNeedAValidGrantForThatNodeRangeAndTime) {
  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  transport::TcpDataClient raw(o);
  const uint64_t size = 64 << 10;
  std::string data = BlockBytes(size, 7);
  v1::PutStartResponse put = StartPut("granted", size);
  ASSERT_EQ(put.replicas_size(), 1);
  const std::string store = put.replicas(0).store().data_address();
  wire::Grant grant = ToWire(put.grants(0));
  const uint32_t seg = put.replicas(0).segment_id();
  const uint64_t off = put.replicas(0).offset();
  const uint64_t deadline = MonoMs() + 5000;

  // No grant at all, a forged MAC, a grant whose fields were changed.
  wire::Grant forged = grant;
  forged.mac = std::string(32, '\0');
  EXPECT_EQ(raw.Write(store, forged, seg, off, data.data(), size, deadline).code(),
            absl::StatusCode::kPermissionDenied);
  wire::Grant widened = grant;
  widened.length = 32ull << 20;
  widened.offset = 0;
  EXPECT_EQ(raw.Write(store, widened, seg, 0, data.data(), size, deadline).code(),
            absl::StatusCode::kPermissionDenied);
  wire::Grant extended = grant;
  extended.expires_unix_ms += uint64_t{3600} * 1000;
  EXPECT_EQ(raw.Write(store, extended, seg, off, data.data(), size, deadline).code(),
            absl::StatusCode::kPermissionDenied);
  // The right grant, outside its range (before it, past it).
  if (off >= size) {
    EXPECT_EQ(raw.Write(store, grant, seg, off - size, data.data(), size, deadline).code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(raw.Write(store, grant, seg, off + 4096, data.data(), size, deadline).code(),
            absl::StatusCode::kPermissionDenied);
  // The grant replayed on the other node: it names its node.
  EXPECT_EQ(raw.Write(OtherStore(store), grant, seg, off, data.data(), size, deadline).code(),
            absl::StatusCode::kPermissionDenied);
  // The right grant, on its node and range: accepted.
  EXPECT_TRUE(raw.Write(store, grant, seg, off, data.data(), size, deadline).ok());
  v1::PutCommitRequest commit;
  commit.add_put_ids(put.put_id());
  v1::PutCommitResponse commit_resp;
  ASSERT_TRUE(probe_->master()->PutCommit(probe_->Context().get(), commit, &commit_resp).ok());
  ASSERT_EQ(commit_resp.statuses(0).code(), 0);
  std::string got;
  ASSERT_TRUE(client_->Get("granted", &got).ok());
  EXPECT_TRUE(got == data);

  // After the put's deadline (--put-timeout 2s), the grant is dead: a
  // replay cannot overwrite the committed block.
  std::this_thread::sleep_for(std::chrono::milliseconds(
      std::max<int64_t>(0, static_cast<int64_t>(grant.expires_unix_ms - UnixMs())) + 300));
  std::string evil = BlockBytes(size, 666);
  EXPECT_EQ(raw.Write(store, grant, seg, off, evil.data(), size, MonoMs() + 5000).code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(client_->Get("granted", &got).ok());
  EXPECT_TRUE(got == data);
}

TEST_F(SecurityTest, AReplayedLiveGrantCannotMakeAReaderAcceptWrongBytes) {
  // Documented limit (docs/security.md): within its lifetime a grant that
  // was seen on the wire can be replayed on its own range. The reader's
  // checksum turns that into a miss, never a hit with wrong bytes.
  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  transport::TcpDataClient raw(o);
  const uint64_t size = 64 << 10;
  std::string data = BlockBytes(size, 7);
  v1::PutStartResponse put = StartPut("replayed", size);
  const std::string store = put.replicas(0).store().data_address();
  wire::Grant grant = ToWire(put.grants(0));
  const uint32_t seg = put.replicas(0).segment_id();
  const uint64_t off = put.replicas(0).offset();
  ASSERT_TRUE(raw.Write(store, grant, seg, off, data.data(), size, MonoMs() + 5000).ok());
  v1::PutCommitRequest commit;
  commit.add_put_ids(put.put_id());
  v1::PutCommitResponse commit_resp;
  ASSERT_TRUE(probe_->master()->PutCommit(probe_->Context().get(), commit, &commit_resp).ok());
  std::string evil = BlockBytes(size, 666);
  ASSERT_TRUE(raw.Write(store, grant, seg, off, evil.data(), size, MonoMs() + 5000).ok());
  std::string got;
  Status s = client_->Get("replayed", &got);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_TRUE(got.empty() || got == data);
}

}  // namespace
}  // namespace shelf
