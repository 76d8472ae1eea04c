// Checks the Grafana dashboard (deploy/grafana/shelf.json) against the
// metric catalogue (docs/metrics.md) with check_dashboard.py: importable
// JSON, data source as a variable, only documented metric names, the
// required views, and (when promtool is installed) queries that parse.
// Skips when Debian's /usr/bin/python3 is missing.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace {

constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kPromtool = "/usr/bin/promtool";

const std::string kSource = shelf::TestSourceDir();
const std::string kDashboard = kSource + "/deploy/grafana/shelf.json";
const std::string kDocs = kSource + "/docs/metrics.md";

struct CheckRun {
  int exit_code = -1;
  std::string output;
};

CheckRun Check(const std::string& dashboard, bool with_promtool) {
  std::string command = std::string(kPython) + " '" + kSource +
                        "/tests/metrics/check_dashboard.py' '" + dashboard + "' '" + kDocs + "'";
  if (with_promtool) command += std::string(" ") + kPromtool;
  command += " 2>&1";
  CheckRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPython, X_OK) != 0) {
      GTEST_SKIP() << kPython << " not found: cannot run check_dashboard.py";
    }
  }
};

TEST_F(DashboardTest, MatchesCatalogue) {
  bool promtool = access(kPromtool, X_OK) == 0;
  if (!promtool) {
    std::cerr << kPromtool << " not found: PromQL syntax of the queries is not checked\n";
  }
  CheckRun run = Check(kDashboard, promtool);
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST_F(DashboardTest, CatchesAnUndocumentedMetric) {
  std::ifstream in(kDashboard);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_FALSE(text.str().empty());
  std::string bad = absl::StrReplaceAll(
      text.str(), {{"shelf_master_evictions_total", "shelf_master_evicted_total"}});
  ASSERT_NE(bad, text.str());

  const char* tmp = getenv("TMPDIR");
  std::string path =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/shelf_dashboard_XXXXXX";
  int fd = mkstemp(path.data());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
  close(fd);
  CheckRun run = Check(path, false);
  unlink(path.c_str());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("shelf_master_evicted_total"), std::string::npos) << run.output;
}

}  // namespace
