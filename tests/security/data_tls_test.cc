// TLS 1.3 on the data plane (--data-tls), against a real shelf-store with
// certificates the test makes with openssl: a client holding the CA round
// trips blocks; a client trusting another CA is refused at the handshake
// and reads nothing.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/local_cluster.h"
#include "tests/fault/fault_util.h"
#include "transport/tcp_client.h"

namespace shelf {
namespace {

using fault::RunShell;
using fault::ShellQuote;

constexpr char kSecret[] = "data-tls-test-secret-0123456789abcdef";

// A CA and a certificate for 127.0.0.1 / localhost signed by it.
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
      absl::StrCat("chmod 600 ", d, "/", name, "-server.key"),
  };
  for (const std::string& step : steps) {
    std::string out;
    if (RunShell(step, &out) != 0) {
      return absl::InternalError(absl::StrCat("'", step, "' failed: ", out));
    }
  }
  return absl::OkStatus();
}

class DataTlsTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    char tmpl[] = "/tmp/shelf-data-tls-XXXXXX";
    dir_ = mkdtemp(tmpl);
    certs_ok_ = RunShell("command -v openssl") == 0 && MakeCertificates(dir_, "good").ok() &&
                MakeCertificates(dir_, "other").ok();
    o.stores = 1;
    o.dram_bytes = 16ull << 20;
    o.secret = kSecret;
    o.store_args = {"--data-tls", "--data-tls-cert", dir_ + "/good-server.pem", "--data-tls-key",
                    dir_ + "/good-server.key"};
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.allow_shm = false;  // shared memory never leaves the host: tcp is what TLS covers
    co.data_tls = true;
    co.data_tls_ca = dir_ + "/good-ca.pem";
    return co;
  }
  void SetUp() override {
    ClusterFixture::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(certs_ok_) << "openssl could not make the certificates";
  }
  void TearDown() override { RunShell("rm -rf " + ShellQuote(dir_)); }

  std::string dir_;
  bool certs_ok_ = false;
};

TEST_F(DataTlsTest, ClientWithTheCaRoundTrips) {
  std::string small(3000, 's'), big(3 << 20, 'b');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i / 4096);
  ASSERT_TRUE(client_->Put("tls-small", small.data(), small.size()).ok());
  ASSERT_TRUE(client_->Put("tls-big", big.data(), big.size()).ok());
  std::string got;
  ASSERT_TRUE(client_->Get("tls-small", &got).ok());
  EXPECT_EQ(got, small);
  ASSERT_TRUE(client_->Get("tls-big", &got).ok());
  EXPECT_TRUE(got == big);
  // The raw data client too, pipelined reads included.
  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  o.tls = true;
  o.tls_files.ca = dir_ + "/good-ca.pem";
  transport::TcpDataClient raw(o);
  EXPECT_TRUE(raw.Ping(cluster_->store_address(0), MonoMs() + 5000).ok());
}

TEST_F(DataTlsTest, ClientTrustingAnotherCaIsRefused) {
  std::string data(5000, 'd');
  ASSERT_TRUE(client_->Put("tls-guarded", data.data(), data.size()).ok());

  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  o.tls = true;
  o.tls_files.ca = dir_ + "/other-ca.pem";
  transport::TcpDataClient raw(o);
  absl::Status s = raw.Ping(cluster_->store_address(0), MonoMs() + 5000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "certificate")) << s;

  ClientOptions co = DefaultClientOptions();
  co.data_tls_ca = dir_ + "/other-ca.pem";
  co.location_cache_entries = 0;
  std::unique_ptr<Client> wrong = OpenClient(co);
  ASSERT_NE(wrong, nullptr);
  std::string got;
  EXPECT_FALSE(wrong->Get("tls-guarded", &got).ok());
  EXPECT_TRUE(got.empty());
  EXPECT_FALSE(wrong->Put("tls-wrong", data.data(), data.size()).ok());
}

}  // namespace
}  // namespace shelf
