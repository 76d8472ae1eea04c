#include "common/flags.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace shelf {
namespace {

struct Fixture {
  std::string listen = "127.0.0.1:7000";
  uint64_t size = 0;
  uint64_t ttl = 3000;
  bool flag = false;
  double ratio = 0.5;
  Flags flags{"prog", "test"};
  Fixture() {
    flags.AddString("listen", &listen, "addr");
    flags.AddSize("dram-size", &size, "size");
    flags.AddDurationMs("node-ttl", &ttl, "ttl");
    flags.AddBool("mlock", &flag, "bool");
    flags.AddDouble("ratio", &ratio, "double");
  }
};

TEST(Flags, ParsesBothForms) {
  Fixture f;
  const char* argv[] = {"prog", "--listen",   "0.0.0.0:1", "--dram-size=4GiB", "--mlock",
                        "pos",  "--node-ttl", "500ms",     "--ratio=0.25"};
  auto args = f.flags.Parse(9, argv);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(f.listen, "0.0.0.0:1");
  EXPECT_EQ(f.size, 4ull << 30);
  EXPECT_TRUE(f.flag);
  EXPECT_EQ(f.ttl, 500u);
  EXPECT_DOUBLE_EQ(f.ratio, 0.25);
  ASSERT_EQ(args->size(), 1u);
  EXPECT_EQ((*args)[0], "pos");
  EXPECT_TRUE(f.flags.WasSet("listen"));
}

TEST(Flags, UnknownAndBadValuesNameTheFlag) {
  Fixture f;
  const char* a1[] = {"prog", "--nope", "1"};
  auto r1 = f.flags.Parse(3, a1);
  EXPECT_EQ(r1.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r1.status().message().find("--nope"), std::string::npos);
  const char* a2[] = {"prog", "--dram-size", "lots"};
  auto r2 = f.flags.Parse(3, a2);
  EXPECT_NE(r2.status().message().find("--dram-size"), std::string::npos);
  const char* a3[] = {"prog", "--listen"};
  EXPECT_FALSE(f.flags.Parse(2, a3).ok());
}

TEST(Flags, ConfigFileAppliesAndFlagsOverride) {
  Fixture f;
  std::string path = ::testing::TempDir() + "/flags_test.conf";
  std::ofstream(path) << "# comment\nlisten = 10.0.0.1:7000\ndram-size = 1GiB  # trailing\n"
                      << "mlock = true\n";
  std::string arg = "--config=" + path;
  const char* argv[] = {"prog", arg.c_str(), "--dram-size", "2GiB"};
  auto args = f.flags.Parse(4, argv);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(f.listen, "10.0.0.1:7000");
  EXPECT_EQ(f.size, 2ull << 30);  // the command line wins
  EXPECT_TRUE(f.flag);
}

TEST(Flags, ConfigErrorsNameKeyAndLine) {
  Fixture f;
  absl::Status s = f.flags.ParseConfigText("listen = a:1\n\nbogus = 3\n", "x.conf");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x.conf:3"), std::string::npos) << s;
  EXPECT_NE(s.message().find("bogus"), std::string::npos);
  s = f.flags.ParseConfigText("node-ttl = soon\n", "y.conf");
  EXPECT_NE(s.message().find("y.conf:1"), std::string::npos) << s;
  s = f.flags.ParseConfigText("just words\n", "z.conf");
  EXPECT_NE(s.message().find("z.conf:1"), std::string::npos) << s;
}

TEST(Flags, HelpListsFlags) {
  Fixture f;
  const char* argv[] = {"prog", "--help"};
  ASSERT_TRUE(f.flags.Parse(2, argv).ok());
  EXPECT_TRUE(f.flags.help_requested());
  EXPECT_NE(f.flags.Help().find("--dram-size"), std::string::npos);
}

}  // namespace
}  // namespace shelf
