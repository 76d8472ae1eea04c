// TLS on the control plane, with certificates the test makes with openssl:
// a master serving TLS (--tls-cert/--tls-key), stores, clients and shelfctl
// that verify it (--tls-ca) work end to end; plaintext callers and callers
// that trust another CA fail.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/fault/fault_util.h"

namespace shelf {
namespace {

using fault::BlockBytes;
using fault::RunShell;
using fault::ShellQuote;

constexpr char kSecret[] = "tls-test-secret-0123456789abcdef";

// A CA and a server certificate for 127.0.0.1 / localhost signed by it.
absl::Status MakeCertificates(const std::string& dir, const std::string& name) {
  std::string d = ShellQuote(dir);
  std::ofstream(dir + "/san.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  const std::vector<std::string> steps = {
      absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                   "-days 1 -subj /CN=",
                   name, "-ca -keyout ", d, "/", name, "-ca.key -out ", d, "/", name, "-ca.pem"),
      absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                   "-subj /CN=localhost -keyout ",
                   d, "/", name, "-server.key -out ", d, "/", name, "-server.csr"),
      absl::StrCat("openssl x509 -req -days 1 -in ", d, "/", name, "-server.csr -CA ", d, "/", name,
                   "-ca.pem -CAkey ", d, "/", name, "-ca.key -CAcreateserial -out ", d, "/", name,
                   "-server.pem -extfile ", d, "/san.ext"),
  };
  for (const std::string& step : steps) {
    std::string out;
    if (RunShell(step, &out) != 0) {
      return absl::InternalError(absl::StrCat("'", step, "' failed: ", out));
    }
  }
  return absl::OkStatus();
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RunShell("command -v openssl") != 0) GTEST_SKIP() << "openssl is not installed";
    std::string tmpl = (std::filesystem::temp_directory_path() / "shelf-tls-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(MakeCertificates(dir_, "good").ok());
    ASSERT_TRUE(MakeCertificates(dir_, "other").ok());
    ca_ = dir_ + "/good-ca.pem";
    secret_file_ = dir_ + "/secret";
    std::ofstream(secret_file_) << kSecret << "\n";
    ::chmod(secret_file_.c_str(), 0600);
    const std::string bin = TestBinDir();
    auto master =
        Process::Spawn({bin + "/shelf-master", "--listen", "127.0.0.1:0", "--ready-file",
                        dir_ + "/master.addr", "--secret-file", secret_file_, "--tls-cert",
                        dir_ + "/good-server.pem", "--tls-key", dir_ + "/good-server.key"},
                       dir_ + "/master.log");
    ASSERT_TRUE(master.ok()) << master.status();
    master_ = *std::move(master);
    auto addr = WaitForFileLine(dir_ + "/master.addr", 15000, master_.get());
    ASSERT_TRUE(addr.ok()) << addr.status();
    address_ = *addr;
    auto store = Process::Spawn(
        {bin + "/shelf-store", "--master", address_, "--listen", "127.0.0.1:0", "--dram-size",
         "16MiB", "--node-id", "tls-store", "--run-dir", dir_ + "/store.run", "--ready-file",
         dir_ + "/store.addr", "--secret-file", secret_file_, "--tls-ca", ca_},
        dir_ + "/store.log");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_TRUE(WaitForFileLine(dir_ + "/store.addr", 15000, store_.get()).ok());
    // The store registers over TLS: the probe (also over TLS) sees it live.
    fault::FaultProbe probe(address_, kSecret, ca_);
    ASSERT_TRUE(probe
                    .WaitFor(
                        [](const v1::StatusResponse& st) {
                          return st.nodes_size() == 1 && st.nodes(0).state() == v1::NODE_LIVE;
                        },
                        15000)
                    .ok())
        << "the store did not register over TLS; see " << dir_ << "/store.log";
  }

  void TearDown() override {
    store_.reset();
    master_.reset();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  int Shelfctl(const std::vector<std::string>& args, std::string* out) {
    std::string cmd = ShellQuote(TestBinDir() + "/shelfctl") + " --master " + ShellQuote(address_) +
                      " --secret-file " + ShellQuote(secret_file_);
    for (const std::string& a : args) cmd += " " + ShellQuote(a);
    return RunShell(cmd, out);
  }

  std::string dir_, ca_, secret_file_, address_;
  std::unique_ptr<Process> master_, store_;
};

TEST_F(TlsTest, ClientsThatVerifyTheMasterWorkOthersFail) {
  ClientOptions co;
  co.masters = {address_};
  co.secret = kSecret;
  co.tls_ca = ca_;
  co.timeout_ms = 5000;
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  std::string data = BlockBytes(100000, 3);
  Status s = client->Put("tls-block", data.data(), data.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string got;
  ASSERT_TRUE(client->Get("tls-block", &got).ok());
  EXPECT_TRUE(got == data);

  std::string out;
  EXPECT_EQ(Shelfctl({"--tls-ca", ca_, "stat", "tls-block"}, &out), 0) << out;
  // Plaintext to a TLS master: the handshake never completes.
  EXPECT_EQ(Shelfctl({"--timeout", "2s", "status"}, &out), 4) << out;
  // A CA that did not sign the master's certificate.
  EXPECT_EQ(Shelfctl({"--timeout", "2s", "--tls-ca", dir_ + "/other-ca.pem", "status"}, &out), 4)
      << out;

  for (const std::string& ca : {std::string(), dir_ + "/other-ca.pem"}) {
    ClientOptions bad = co;
    bad.tls_ca = ca;
    bad.timeout_ms = 2000;
    std::unique_ptr<Client> plain;
    ASSERT_TRUE(Client::Open(bad, &plain).ok());
    Status ps = plain->Get("tls-block", &got);
    EXPECT_EQ(ps.code(), StatusCode::kUnavailable) << "ca '" << ca << "': " << ps.ToString();
    ps = plain->Put("plain-block", data.data(), data.size());
    EXPECT_FALSE(ps.ok());
  }
  fault::FaultProbe plain_probe(address_, kSecret);
  EXPECT_EQ(plain_probe.Status().status().code(), absl::StatusCode::kUnavailable);
  // Nothing the failed callers tried went through.
  fault::FaultProbe probe(address_, kSecret, ca_);
  absl::StatusOr<v1::StatusResponse> st = probe.Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->objects(), 1u);
}

}  // namespace
}  // namespace shelf
