// etcd as an attack surface (docs/security.md, "etcd"), across real
// processes: a real etcd, one shelf-master campaigning through it, one
// shelf-store and a client that both find the master through etcd.
//
// A fake leader: a process overwrites etcd's leader key with its own
// address and answers every registration and heartbeat with the largest
// term there is. Stores and clients must not follow it, and the cluster
// keeps serving through the real master. With etcd's authentication on,
// the fake's write is refused outright; with TLS and client certificates, a
// caller without one signed by etcd's CA gets nowhere. An overwritten key is
// repaired by the masters (the leader, or a standby once the leader is gone)
// without an operator.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coord/election.h"
#include "coord/etcd_client.h"
#include "coord/master_locator.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "testing/wait_for.h"
#include "tests/coord/etcd_harness.h"
#include "tests/fault/fault_util.h"

namespace shelf {
namespace {

using fault::RunShell;
using fault::ShellQuote;

constexpr uint64_t kHugeTerm = std::numeric_limits<uint64_t>::max();

// A fake for fault injection, not a master: it answers RegisterStore and
// Heartbeat with term 2^64-1 (and asks every heartbeat to register again,
// so that a store would take that term) and counts the calls it gets.
class FakeMaster final : public v1::MasterService::Service {
 public:
  grpc::Status RegisterStore(grpc::ServerContext*, const v1::RegisterStoreRequest*,
                             v1::RegisterStoreResponse* resp) override {
    ++calls;
    ++registrations;
    resp->set_term(kHugeTerm);
    resp->set_heartbeat_interval_ms(100);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse* resp) override {
    ++calls;
    resp->set_term(kHugeTerm);
    resp->set_reregister(true);
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::atomic<int> registrations{0};
};

class EtcdSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "shelf-etcdsec-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    cluster_ = absl::StrCat("sec", getpid());
  }
  void TearDown() override {
    stores_.clear();
    masters_.clear();
    if (fake_server_ != nullptr) fake_server_->Shutdown();
    etcd_.reset();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // Starts etcd (plain, or with `tls`); false when the test was skipped.
  bool StartEtcd(const coord::testing::EtcdTls* tls = nullptr,
                 std::vector<std::string> extra_args = {}) {
    auto etcd = coord::testing::EtcdProcess::Start(tls, std::move(extra_args));
    if (!etcd.ok() && absl::IsNotFound(etcd.status())) {
      skipped_ = true;
      return false;
    }
    EXPECT_TRUE(etcd.ok()) << etcd.status();
    if (!etcd.ok()) return false;
    etcd_ = *std::move(etcd);
    return true;
  }

  std::string MasterSpec() const {
    return absl::StrCat("etcd://", etcd_->endpoint(), "/", cluster_);
  }

  // One more master (logging to m<index>.log, m.log for the first); its
  // address.
  absl::StatusOr<std::string> StartMaster(const std::vector<std::string>& etcd_flags) {
    std::string name = masters_.empty() ? "m" : absl::StrCat("m", masters_.size());
    std::string ready = absl::StrCat(dir_, "/", name, ".addr");
    std::vector<std::string> argv = {TestBinDir() + "/shelf-master",
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--ready-file",
                                     ready,
                                     "--etcd",
                                     etcd_->endpoint(),
                                     "--cluster",
                                     cluster_};
    argv.insert(argv.end(), etcd_flags.begin(), etcd_flags.end());
    auto m = Process::Spawn(argv, absl::StrCat(dir_, "/", name, ".log"));
    if (!m.ok()) return m.status();
    masters_.push_back(*std::move(m));
    return WaitForFileLine(ready, 15000, masters_.back().get());
  }

  // One master and one store, both given `etcd_flags`.
  absl::Status StartCluster(const std::vector<std::string>& etcd_flags) {
    auto addr = StartMaster(etcd_flags);
    if (!addr.ok()) return addr.status();
    master_addr_ = *addr;

    std::string store_ready = dir_ + "/s.addr";
    std::vector<std::string> sargv = {TestBinDir() + "/shelf-store",
                                      "--master",
                                      MasterSpec(),
                                      "--listen",
                                      "127.0.0.1:0",
                                      "--dram-size",
                                      "32MiB",
                                      "--node-id",
                                      "store0",
                                      "--run-dir",
                                      dir_ + "/s.run",
                                      "--ready-file",
                                      store_ready};
    sargv.insert(sargv.end(), etcd_flags.begin(), etcd_flags.end());
    auto s = Process::Spawn(sargv, dir_ + "/s.log");
    if (!s.ok()) return s.status();
    stores_.push_back(*std::move(s));
    auto saddr = WaitForFileLine(store_ready, 15000, stores_.back().get());
    return saddr.ok() ? absl::OkStatus() : saddr.status();
  }

  // A client through etcd; waits until a put works (the store registered).
  std::unique_ptr<Client> OpenClient(const ClientOptions& base) {
    ClientOptions co = base;
    co.masters = {MasterSpec()};
    co.timeout_ms = 5000;
    std::unique_ptr<Client> client;
    Status s = Client::Open(co, &client);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return nullptr;
    bool up = WaitFor([&] { return client->Put("warmup", "x", 1).ok(); }, 30000, 100);
    EXPECT_TRUE(up) << "no put succeeded; master log: " << dir_ << "/m.log";
    return up ? std::move(client) : nullptr;
  }

  // Puts and reads back `n` blocks; false at the first failure.
  static bool PutsAndGetsWork(Client* client, const std::string& prefix, int n) {
    for (int i = 0; i < n; ++i) {
      std::string key = absl::StrCat(prefix, i);
      std::string data(4096, static_cast<char>('a' + i % 26));
      std::string got;
      if (!client->Put(key, data.data(), data.size()).ok()) return false;
      if (!client->Get(key, &got).ok() || got != data) return false;
    }
    return true;
  }

  std::string StartFakeMaster() {
    fake_ = std::make_unique<FakeMaster>();
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(fake_.get());
    fake_server_ = builder.BuildAndStart();
    EXPECT_NE(port, 0);
    return absl::StrCat("127.0.0.1:", port);
  }

  std::string WriteFile(const std::string& name, const std::string& content, mode_t mode) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    chmod(path.c_str(), mode);
    return path;
  }

  std::string EtcdCtl(const std::string& args) {
    std::string out;
    int rc = RunShell(
        absl::StrCat("ETCDCTL_API=3 etcdctl --endpoints=", etcd_->endpoint(), " ", args), &out);
    EXPECT_EQ(rc, 0) << "etcdctl " << args << ": " << out;
    return out;
  }

  std::string LeaderKey() const { return coord::LeaderElection::LeaderKey(cluster_); }

  // Waits (generously) until etcd's leader key is intact and names one of
  // `addresses`; that leader, or nullopt.
  std::optional<coord::LeaderInfo> WaitForIntactLeader(coord::EtcdClient* etcd,
                                                       const std::vector<std::string>& addresses) {
    std::optional<coord::LeaderInfo> found;
    WaitFor(
        [&] {
          auto leader = coord::LeaderElection::GetLeader(etcd, cluster_);
          if (!leader.ok() || !leader->intact) return false;
          if (std::find(addresses.begin(), addresses.end(), leader->address) == addresses.end()) {
            return false;
          }
          found = *leader;
          return true;
        },
        60000, 50);
    return found;
  }

  std::string ReadLog(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::string dir_, cluster_, master_addr_;
  bool skipped_ = false;
  std::unique_ptr<coord::testing::EtcdProcess> etcd_;
  std::vector<std::unique_ptr<Process>> masters_, stores_;
  std::unique_ptr<FakeMaster> fake_;
  std::unique_ptr<grpc::Server> fake_server_;
};

// Without etcd authentication anyone may write the leader key. A fake that
// overwrites it with its own address and claims term 2^64-1 is not
// followed: the key's create revision is not its term and the key was
// written after its election, so stores and clients keep the real master
// and nobody calls the fake. The master repairs the key: it deletes the
// overwritten key and is elected again under a new term, so a client
// started after the overwrite finds it through etcd and the cluster serves.
TEST_F(EtcdSecurityTest, FakeLeaderIsNotFollowed) {
  if (!StartEtcd()) {
    if (skipped_) GTEST_SKIP() << "no etcd binary";
    return;
  }
  ASSERT_TRUE(StartCluster({}).ok());
  std::unique_ptr<Client> client = OpenClient({});
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(PutsAndGetsWork(client.get(), "before-", 5));

  auto locator = coord::MasterLocator::Create(MasterSpec());
  ASSERT_TRUE(locator.ok()) << locator.status();
  auto etcd = coord::EtcdClient::Connect(etcd_->endpoint());
  ASSERT_TRUE(etcd.ok());
  auto leader = coord::LeaderElection::GetLeader(etcd->get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_TRUE(leader->intact);
  EXPECT_EQ(leader->address, master_addr_);
  EXPECT_TRUE((*locator)->VerifyLeader(master_addr_, static_cast<uint64_t>(leader->term)).ok());

  std::string fake = StartFakeMaster();
  // Without a lease: left alone, the key would outlive the master.
  auto put = (*etcd)->Put(LeaderKey(), fake);
  ASSERT_TRUE(put.ok()) << put.status();

  // The fake's claim does not check out against etcd: refused while the
  // key is overwritten, or unverifiable (UNAVAILABLE) in the moment between
  // the repair's delete and the new election.
  absl::Status claim = (*locator)->VerifyLeader(fake, kHugeTerm);
  EXPECT_TRUE(absl::IsPermissionDenied(claim) || absl::IsUnavailable(claim)) << claim;

  // The key is intact again, names the real master, under a new term.
  std::optional<coord::LeaderInfo> repaired = WaitForIntactLeader(etcd->get(), {master_addr_});
  ASSERT_TRUE(repaired.has_value())
      << "the leader key was not repaired; master log: " << dir_ << "/m.log";
  EXPECT_GT(repaired->term, leader->term);
  EXPECT_NE(repaired->lease_id, 0);
  EXPECT_TRUE((*locator)->VerifyLeader(master_addr_, static_cast<uint64_t>(repaired->term)).ok());
  claim = (*locator)->VerifyLeader(fake, kHugeTerm);
  EXPECT_TRUE(absl::IsPermissionDenied(claim)) << claim;
  EXPECT_NE(ReadLog("m.log").find("deleted a leader key overwritten since its election"),
            std::string::npos);

  // The client that was running, and one started after the overwrite, both
  // serve through the real master (once the store has registered under the
  // new term; generous, as CI is loaded).
  EXPECT_TRUE(WaitFor([&] { return PutsAndGetsWork(client.get(), "after-", 5); }, 60000, 200))
      << "store log: " << dir_ << "/s.log";
  ClientOptions later;
  later.masters = {MasterSpec()};
  later.timeout_ms = 5000;
  std::unique_ptr<Client> late_client;
  Status opened = Client::Open(later, &late_client);
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  EXPECT_TRUE(WaitFor([&] { return PutsAndGetsWork(late_client.get(), "late-", 5); }, 60000, 200));
  EXPECT_EQ(fake_->calls.load(), 0) << "a store or client called the fake master";
  EXPECT_EQ((*locator)->Current(), master_addr_);
  EXPECT_TRUE(masters_[0]->Running());
}

// The leader dies and its key is overwritten without a lease before the
// lease expires, so the key would stay forever. The standby finds the key
// overwritten, waits one lease TTL for a change, deletes it (guarded by the
// revision it read) and is elected: the cluster has an intact leader key
// again, naming the standby, and serves, without an operator.
TEST_F(EtcdSecurityTest, AnOverwrittenKeyOfADeadLeaderIsRepairedByAStandby) {
  if (!StartEtcd()) {
    if (skipped_) GTEST_SKIP() << "no etcd binary";
    return;
  }
  ASSERT_TRUE(StartCluster({}).ok());
  auto standby = StartMaster({});
  ASSERT_TRUE(standby.ok()) << standby.status();
  std::unique_ptr<Client> client = OpenClient({});
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(PutsAndGetsWork(client.get(), "before-", 5));
  auto etcd = coord::EtcdClient::Connect(etcd_->endpoint());
  ASSERT_TRUE(etcd.ok());
  auto leader = coord::LeaderElection::GetLeader(etcd->get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  ASSERT_EQ(leader->address, master_addr_);

  std::string fake = StartFakeMaster();
  masters_[0]->Signal(SIGKILL);
  masters_[0]->Wait(10000);
  // Detaches the key from the dead leader's lease (or, should that lease
  // have expired already, creates a key without one): either way a key
  // nobody trusts and that does not expire.
  ASSERT_TRUE((*etcd)->Put(LeaderKey(), fake).ok());

  std::optional<coord::LeaderInfo> repaired = WaitForIntactLeader(etcd->get(), {*standby});
  ASSERT_TRUE(repaired.has_value()) << "no intact leader key; standby log: " << dir_ << "/m1.log";
  EXPECT_GT(repaired->term, leader->term);
  EXPECT_NE(ReadLog("m1.log").find("deleted a leader key overwritten since its election"),
            std::string::npos);

  EXPECT_TRUE(WaitFor([&] { return PutsAndGetsWork(client.get(), "after-", 5); }, 60000, 200))
      << "store log: " << dir_ << "/s.log";
  EXPECT_EQ(fake_->calls.load(), 0) << "a store or client called the fake master";
}

// A fake that makes itself leader the way etcd allows anyone with write
// access (it deletes the leader key and creates it anew under its own
// lease) but claims term 2^64-1 rather than the key's create revision: the
// store calls it, and is asked to register, but does not take its term.
// Had it, the real master's terms would all look older and be refused for
// good. Once the fake is gone the real master leads again and the cluster
// serves.
TEST_F(EtcdSecurityTest, ALeaderClaimingAnotherTermCannotFenceOutTheRealOne) {
  if (!StartEtcd()) {
    if (skipped_) GTEST_SKIP() << "no etcd binary";
    return;
  }
  ASSERT_TRUE(StartCluster({}).ok());
  std::unique_ptr<Client> client = OpenClient({});
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(PutsAndGetsWork(client.get(), "before-", 5));

  std::string fake = StartFakeMaster();
  auto etcd = coord::EtcdClient::Connect(etcd_->endpoint());
  ASSERT_TRUE(etcd.ok());
  auto lease = (*etcd)->LeaseGrant(30);
  ASSERT_TRUE(lease.ok()) << lease.status();
  // The real master campaigns again the moment its key goes: take it over
  // by revoking its lease (it must get a new one first), and try again
  // should it still win the race.
  bool taken = false;
  for (int attempt = 0; attempt < 50 && !taken; ++attempt) {
    auto holder = coord::LeaderElection::GetLeader(etcd->get(), cluster_);
    if (holder.ok() && holder->lease_id != 0) {
      (*etcd)->LeaseRevoke(holder->lease_id).IgnoreError();
    }
    auto created = (*etcd)->CreateIfAbsent(LeaderKey(), fake, lease->id);
    ASSERT_TRUE(created.ok()) << created.status();
    taken = created->created;
  }
  ASSERT_TRUE(taken) << "the real master kept winning the leader key";

  // The store follows etcd to the fake and tries to register there.
  ASSERT_TRUE(WaitFor([&] { return fake_->registrations.load() >= 2; }, 30000, 50))
      << "the store never called the fake";
  ASSERT_TRUE((*etcd)->LeaseRevoke(lease->id).ok());  // the fake goes away

  // The real master leads again under a new term.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto leader = coord::LeaderElection::GetLeader(etcd->get(), cluster_);
        return leader.ok() && leader->address == master_addr_;
      },
      30000, 50));
  // Past the node TTL (3 s by default), the master serves only from stores
  // that registered with it under its new term: one that took the fake's
  // term would refuse the real one's answers and be declared dead.
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  bool back = WaitFor([&] { return PutsAndGetsWork(client.get(), "after-", 3); }, 30000, 200);
  EXPECT_TRUE(back) << "the cluster did not serve again; store log: " << dir_ << "/s.log";
  std::ifstream log(dir_ + "/s.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("term refused"), std::string::npos) << text;
}

// With etcd's authentication on, the fake's write of the leader key is
// refused (no credentials, or a user that may only read), the cluster
// runs with --etcd-user-file, and a user file others may read is refused.
TEST_F(EtcdSecurityTest, WithEtcdAuthTheFakeCannotWriteTheLeaderKey) {
  if (RunShell("command -v etcdctl") != 0) GTEST_SKIP() << "etcdctl is not installed";
  if (!StartEtcd()) {
    if (skipped_) GTEST_SKIP() << "no etcd binary";
    return;
  }
  EtcdCtl("user add root:root-pw --interactive=false");
  EtcdCtl("user add shelf:shelf-pw --interactive=false");
  EtcdCtl("role add shelf");
  EtcdCtl("role grant-permission shelf --prefix=true readwrite /shelf/");
  EtcdCtl("user grant-role shelf shelf");
  EtcdCtl("user add reader:reader-pw --interactive=false");
  EtcdCtl("role add reader");
  EtcdCtl("role grant-permission reader --prefix=true read /shelf/");
  EtcdCtl("user grant-role reader reader");
  EtcdCtl("auth enable");

  std::string user_file = WriteFile("etcd-user", "shelf:shelf-pw\n", 0600);
  std::string loose = WriteFile("etcd-user-loose", "shelf:shelf-pw\n", 0644);
  {
    // Refused before it is used, like every credential file.
    std::string out;
    int rc = RunShell(absl::StrCat(TestBinDir(), "/shelf-master --listen 127.0.0.1:0 --etcd ",
                                   etcd_->endpoint(), " --etcd-user-file ", ShellQuote(loose)),
                      &out);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("--etcd-user-file"), std::string::npos) << out;
  }

  ASSERT_TRUE(StartCluster({"--etcd-user-file", user_file}).ok());
  ClientOptions co;
  co.etcd_user_file = user_file;
  std::unique_ptr<Client> client = OpenClient(co);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(PutsAndGetsWork(client.get(), "auth-", 5));

  std::string fake = StartFakeMaster();
  auto anonymous = coord::EtcdClient::Connect(etcd_->endpoint());
  ASSERT_TRUE(anonymous.ok());
  auto put = (*anonymous)->Put(LeaderKey(), fake);
  EXPECT_FALSE(put.ok()) << "etcd took a write without credentials";
  coord::EtcdOptions reader_options;
  reader_options.user_file = WriteFile("etcd-reader", "reader:reader-pw\n", 0600);
  auto reader = coord::EtcdClient::Connect(etcd_->endpoint(), reader_options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  put = (*reader)->Put(LeaderKey(), fake);
  EXPECT_TRUE(absl::IsPermissionDenied(put.status())) << put.status();
  auto leader = coord::LeaderElection::GetLeader(reader->get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->address, master_addr_);
  EXPECT_TRUE(leader->intact);

  coord::EtcdOptions wrong;
  wrong.user_file = WriteFile("etcd-wrong", "shelf:not-the-password\n", 0600);
  auto impostor = coord::EtcdClient::Connect(etcd_->endpoint(), wrong);
  ASSERT_TRUE(impostor.ok());
  EXPECT_FALSE((*impostor)->Put(LeaderKey(), fake).ok());

  ASSERT_TRUE(PutsAndGetsWork(client.get(), "auth-after-", 5));
  EXPECT_EQ(fake_->calls.load(), 0);
}

// etcd's simple tokens expire when unused (here after 1 s): the client
// authenticates again and the call goes through, for unary calls and for a
// watch created after the expiry alike.
TEST_F(EtcdSecurityTest, AnExpiredEtcdTokenIsRenewed) {
  if (RunShell("command -v etcdctl") != 0) GTEST_SKIP() << "etcdctl is not installed";
  if (!StartEtcd(nullptr, {"--auth-token-ttl=1"})) {
    if (skipped_) GTEST_SKIP() << "no etcd binary";
    return;
  }
  EtcdCtl("user add root:root-pw --interactive=false");
  EtcdCtl("user add shelf:shelf-pw --interactive=false");
  EtcdCtl("role add shelf");
  EtcdCtl("role grant-permission shelf --prefix=true readwrite /shelf/");
  EtcdCtl("user grant-role shelf shelf");
  EtcdCtl("auth enable");
  coord::EtcdOptions options;
  options.user_file = WriteFile("etcd-user", "shelf:shelf-pw\n", 0600);
  auto etcd = coord::EtcdClient::Connect(etcd_->endpoint(), options);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  ASSERT_TRUE((*etcd)->Put("/shelf/t/a", "1").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // the token expires
  auto put = (*etcd)->Put("/shelf/t/b", "2");
  EXPECT_TRUE(put.ok()) << put.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  std::atomic<int> events{0};
  coord::WatchOptions watch_options;
  watch_options.on_events = [&](const std::vector<coord::WatchEvent>& e, int64_t) {
    events += static_cast<int>(e.size());
  };
  auto watch = (*etcd)->Watch("/shelf/t/c", watch_options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE((*etcd)->Put("/shelf/t/c", "3").ok());
  EXPECT_TRUE(WaitFor([&] { return events.load() >= 1; }, 10000, 20));
  (*watch)->Cancel();
}

// etcd over TLS requiring client certificates: the cluster runs with
// --etcd-ca/--etcd-cert/--etcd-key; a caller with a certificate from
// another CA, or none, cannot write the leader key.
TEST_F(EtcdSecurityTest, EtcdOverTlsWithClientCertificates) {
  if (RunShell("command -v openssl") != 0) GTEST_SKIP() << "openssl is not installed";
  ASSERT_TRUE(fault::MakeTestCertificates(dir_, "etcd").ok());
  ASSERT_TRUE(fault::MakeTestCertificates(dir_, "other").ok());
  coord::testing::EtcdTls tls;
  tls.cert_file = dir_ + "/etcd.pem";
  tls.key_file = dir_ + "/etcd.key";
  tls.ca_file = dir_ + "/etcd-ca.pem";
  tls.client_cert_auth = true;
  tls.client.tls_ca_file = tls.ca_file;
  tls.client.tls_cert_file = tls.cert_file;
  tls.client.tls_key_file = tls.key_file;
  if (!StartEtcd(&tls)) {
    if (skipped_) GTEST_SKIP() << "no etcd binary";
    return;
  }
  std::vector<std::string> flags = {"--etcd-ca",   tls.ca_file,  "--etcd-cert",
                                    tls.cert_file, "--etcd-key", tls.key_file};
  ASSERT_TRUE(StartCluster(flags).ok());
  ClientOptions co;
  co.etcd_ca = tls.ca_file;
  co.etcd_cert = tls.cert_file;
  co.etcd_key = tls.key_file;
  std::unique_ptr<Client> client = OpenClient(co);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(PutsAndGetsWork(client.get(), "tls-", 5));

  std::string fake = StartFakeMaster();
  coord::EtcdOptions quick;
  quick.attempts_max = 1;
  quick.call_timeout_ms = 3000;
  coord::EtcdOptions other = quick;
  other.tls_ca_file = tls.ca_file;
  other.tls_cert_file = dir_ + "/other.pem";
  other.tls_key_file = dir_ + "/other.key";
  auto stranger = coord::EtcdClient::Connect(etcd_->endpoint(), other);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  EXPECT_FALSE((*stranger)->Put(LeaderKey(), fake).ok());
  coord::EtcdOptions no_cert = quick;
  no_cert.tls_ca_file = tls.ca_file;
  auto anonymous = coord::EtcdClient::Connect(etcd_->endpoint(), no_cert);
  ASSERT_TRUE(anonymous.ok()) << anonymous.status();
  EXPECT_FALSE((*anonymous)->Put(LeaderKey(), fake).ok());

  ASSERT_TRUE(PutsAndGetsWork(client.get(), "tls-after-", 5));
  EXPECT_EQ(fake_->calls.load(), 0);
}

}  // namespace
}  // namespace shelf
