// Checks each daemon makes before it serves anything, against the real
// binaries: credential files other users can read are refused (naming the
// file, its mode and the fix), and a daemon that would listen beyond
// loopback with no credentials refuses to start unless --insecure
// (protected mode).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/fault/fault_util.h"

namespace shelf {
namespace {

using fault::RunShell;
using fault::ShellQuote;

class StartupChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "shelf-startup-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    secret_ = dir_ + "/secret";
    std::ofstream(secret_) << "startup-test-secret-0123456789\n";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Runs a daemon that must refuse to start; returns its exit code (124:
  // it started and was still running after 10 s) and its stderr.
  int Run(const std::string& binary, const std::vector<std::string>& args, std::string* out) {
    std::string cmd = "timeout 10 " + ShellQuote(TestBinDir() + "/" + binary);
    for (const std::string& a : args) cmd += " " + ShellQuote(a);
    return RunShell(cmd + " 2>&1", out);
  }

  std::string dir_, secret_;
};

TEST_F(StartupChecksTest, SecretFilesOthersCanReadAreRefusedWithTheFix) {
  for (mode_t mode : {0644, 0604, 0666}) {
    ASSERT_EQ(::chmod(secret_.c_str(), mode), 0);
    std::string mode_text = absl::StrCat("0", mode >> 6, (mode >> 3) & 7, mode & 7);
    for (const auto& [binary, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"shelf-master", {"--listen", "127.0.0.1:0", "--secret-file", secret_}},
             {"shelf-store",
              {"--master", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--secret-file", secret_}},
             {"shelf-resp",
              {"--master", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--secret-file", secret_}},
             {"shelfctl", {"--master", "127.0.0.1:1", "--secret-file", secret_, "status"}},
         }) {
      std::string out;
      int rc = Run(binary, args, &out);
      // The daemons exit 2 (bad configuration), shelfctl 5 (PERMISSION_DENIED).
      EXPECT_EQ(rc, binary == "shelfctl" ? 5 : 2) << binary << " mode " << mode_text << ": " << out;
      EXPECT_NE(out.find(secret_), std::string::npos) << binary << ": " << out;
      EXPECT_NE(out.find("mode " + mode_text), std::string::npos) << binary << ": " << out;
      EXPECT_NE(out.find("chmod 600"), std::string::npos) << binary << ": " << out;
    }
  }
  // A password file of the RESP gateway and a gRPC private key, too.
  std::string pw = dir_ + "/password";
  std::ofstream(pw) << "hunter2hunter2\n";
  ASSERT_EQ(::chmod(pw.c_str(), 0640 | 0004), 0);
  std::string out;
  EXPECT_EQ(Run("shelf-resp", {"--master", "127.0.0.1:1", "--requirepass-file", pw}, &out), 2)
      << out;
  EXPECT_NE(out.find("--requirepass-file '" + pw + "' has mode 0644"), std::string::npos) << out;
  std::string key = dir_ + "/server.key";
  std::ofstream(key) << "not really a key\n";
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  EXPECT_EQ(
      Run("shelf-master", {"--listen", "127.0.0.1:0", "--tls-cert", key, "--tls-key", key}, &out),
      2)
      << out;
  EXPECT_NE(out.find("--tls-key '" + key + "' has mode 0644"), std::string::npos) << out;
}

TEST_F(StartupChecksTest, PrivateSecretFilesAreAccepted) {
  ASSERT_EQ(::chmod(secret_.c_str(), 0600), 0);
  auto master = Process::Spawn({TestBinDir() + "/shelf-master", "--listen", "127.0.0.1:0",
                                "--secret-file", secret_, "--ready-file", dir_ + "/master.addr"},
                               dir_ + "/master.log");
  ASSERT_TRUE(master.ok());
  EXPECT_TRUE(WaitForFileLine(dir_ + "/master.addr", 15000, master->get()).ok());
}

TEST_F(StartupChecksTest, ProtectedModeRefusesOpenNonLoopbackListeners) {
  struct Case {
    std::string binary;
    std::vector<std::string> args;
    std::string flag;
    std::string fix;
  };
  const std::vector<Case> cases = {
      {"shelf-master", {"--listen", "0.0.0.0:0"}, "--listen 0.0.0.0:0", "--secret-file"},
      {"shelf-master", {"--listen", "[::]:0"}, "--listen [::]:0", "--secret-file"},
      {"shelf-store",
       {"--master", "127.0.0.1:1", "--listen", "0.0.0.0:0"},
       "--listen 0.0.0.0:0",
       "--secret-file"},
      {"shelf-store",
       {"--master", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0"},
       "--admin-listen 0.0.0.0:0",
       "--secret-file"},
      {"shelf-resp",
       {"--master", "127.0.0.1:1", "--listen", "0.0.0.0:0"},
       "--listen 0.0.0.0:0",
       "--requirepass-file"},
  };
  for (const Case& c : cases) {
    std::string out;
    EXPECT_EQ(Run(c.binary, c.args, &out), 2) << c.binary << ": " << out;
    EXPECT_NE(out.find("protected mode: " + c.flag), std::string::npos) << c.binary << ": " << out;
    EXPECT_NE(out.find("--insecure"), std::string::npos) << out;
    EXPECT_NE(out.find(c.fix), std::string::npos) << out;
  }
  // TLS without client authentication encrypts, but lets anyone in: a
  // master with a certificate and no secret, credentials or --tls-ca is
  // refused too (the files are never read: the check comes first).
  std::string key = dir_ + "/server.key";
  std::ofstream(key) << "not read before the protected-mode check\n";
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  std::string out;
  EXPECT_EQ(
      Run("shelf-master", {"--listen", "0.0.0.0:0", "--tls-cert", key, "--tls-key", key}, &out), 2)
      << out;
  EXPECT_NE(out.find("protected mode: --listen 0.0.0.0:0"), std::string::npos) << out;
  EXPECT_NE(out.find("--tls-ca"), std::string::npos) << out;
}

TEST_F(StartupChecksTest, ProtectedModeLetsLoopbackCredentialsOrInsecureStart) {
  ASSERT_EQ(::chmod(secret_.c_str(), 0600), 0);
  const std::string bin = TestBinDir();
  const std::vector<std::vector<std::string>> starts = {
      {"--listen", "0.0.0.0:0", "--insecure"},
      {"--listen", "0.0.0.0:0", "--secret-file", secret_},
      {"--listen", "127.0.0.2:0"},
      {"--listen", "localhost:0"},
  };
  int i = 0;
  for (const auto& args : starts) {
    std::string ready = absl::StrCat(dir_, "/master", i, ".addr");
    std::vector<std::string> argv = {bin + "/shelf-master", "--ready-file", ready};
    argv.insert(argv.end(), args.begin(), args.end());
    auto master = Process::Spawn(argv, absl::StrCat(dir_, "/master", i++, ".log"));
    ASSERT_TRUE(master.ok());
    EXPECT_TRUE(WaitForFileLine(ready, 15000, master->get()).ok()) << args[1];
  }
}

}  // namespace
}  // namespace shelf
