// Runs client/examples/engine_example as an engine would: two requests that
// share a system prompt. The first computes and stores every block; the
// second finds the shared prefix, loads it and computes only the rest.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <string>

#include "testing/local_cluster.h"
#include "testing/test_paths.h"

namespace shelf {
namespace {

// Runs the example with `args`; returns its exit status and output.
int RunExample(LocalCluster* cluster, const std::vector<std::string>& args, std::string* out) {
  static int runs = 0;
  std::string log = cluster->work_dir() + "/example" + std::to_string(runs++) + ".log";
  std::vector<std::string> argv = {TestBinDir() + "/shelf_engine_example", "--master",
                                   cluster->master_address()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = Process::Spawn(argv, log);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return -1;
  int status = (*p)->Wait(60000);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return status;
}

TEST(EngineExampleTest, SecondRequestLoadsTheSharedPrefix) {
  LocalCluster::Options o;
  o.stores = 2;
  o.bin_dir = TestBinDir();
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::string out;
  // 8 blocks of 256 tokens; the first 4 blocks are the shared prompt.
  int status = RunExample(
      cluster->get(),
      {"--tokens", "2048", "--block-tokens", "256", "--shared-tokens", "1024", "--seed", "1"},
      &out);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("match prefix: 0 of 8 blocks cached"), std::string::npos) << out;
  EXPECT_NE(out.find("store: 8 of 8 computed blocks stored"), std::string::npos) << out;

  status = RunExample(
      cluster->get(),
      {"--tokens", "2048", "--block-tokens", "256", "--shared-tokens", "1024", "--seed", "2"},
      &out);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("match prefix: 4 of 8 blocks cached"), std::string::npos) << out;
  EXPECT_NE(out.find("load: 4 blocks loaded into the KV pool, 4 computed"), std::string::npos)
      << out;
  EXPECT_NE(out.find("store: 4 of 4 computed blocks stored"), std::string::npos) << out;

  // The same request again is a full hit.
  status = RunExample(
      cluster->get(),
      {"--tokens", "2048", "--block-tokens", "256", "--shared-tokens", "1024", "--seed", "2"},
      &out);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("match prefix: 8 of 8 blocks cached"), std::string::npos) << out;
  EXPECT_NE(out.find("store: 0 of 0 computed blocks stored"), std::string::npos) << out;
}

TEST(EngineExampleTest, WithoutAMasterItPrintsUsage) {
  std::string log = ::testing::TempDir() + "/engine_example_usage.log";
  auto p = Process::Spawn({TestBinDir() + "/shelf_engine_example"}, log);
  ASSERT_TRUE(p.ok()) << p.status();
  int status = (*p)->Wait(30000);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
}

}  // namespace
}  // namespace shelf
