// Observability across real processes: promtool accepts what the master and
// the stores expose, a real Prometheus scrapes a cluster under load and
// answers a non-zero hit ratio, and shelfctl's --json parses.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/net.h"
#include "shelf/client.h"
#include "testing/http_probe.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"

namespace shelf {
namespace {

bool HaveTool(const char* path) { return access(path, X_OK) == 0; }

TEST(ObservabilityTest, PromtoolAndARealPrometheusReadTheCluster) {
  // Port 0: each daemon binds a free port and names it in its ready file
  // (a port picked here could be taken before the daemon binds it).
  LocalCluster::Options o;
  o.stores = 0;
  o.bin_dir = TestBinDir();
  o.master_args = {"--metrics-listen", "127.0.0.1:0"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const uint16_t master_port = (*cluster)->master_metrics_port();
  ASSERT_NE(master_port, 0);
  std::vector<uint16_t> store_ports;
  for (int i = 0; i < 2; ++i) {
    auto added = (*cluster)->AddStore({"--metrics-listen", "127.0.0.1:0"});
    ASSERT_TRUE(added.ok()) << added.status();
    store_ports.push_back((*cluster)->store_metrics_port(*added));
    ASSERT_NE(store_ports.back(), 0);
  }
  std::string dir = (*cluster)->work_dir();

  // Load: puts, then gets (hits) and a few misses.
  ClientOptions co;
  co.masters = {(*cluster)->master_address()};
  std::unique_ptr<Client> client;
  ASSERT_TRUE(Client::Open(co, &client).ok());
  std::string block(64 << 10, 'x');
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(client->Put(absl::StrCat("obs-", i), block.data(), block.size()).ok());
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 25; ++i) {
      std::string got;
      client->Get(absl::StrCat("obs-", i), &got).code();
    }
  }

  // /health answers on both kinds of process.
  // It is unauthenticated, so it names no term (a fake master would quote
  // it), no address and no node.
  int status = 0;
  std::string health = HttpGet(master_port, "/health", &status);
  EXPECT_NE(health.find("\"role\":\"leader\""), std::string::npos) << health;
  EXPECT_EQ(status, 200);
  EXPECT_EQ(health.find("term"), std::string::npos) << health;
  EXPECT_EQ(health.find("127.0.0.1"), std::string::npos) << health;
  health = HttpGet(store_ports[0], "/health", &status);
  EXPECT_NE(health.find("\"status\":\"ok\""), std::string::npos) << health;
  EXPECT_EQ(health.find("node"), std::string::npos) << health;

  // promtool accepts every exposition.
  std::vector<std::pair<std::string, uint16_t>> targets = {
      {"master", master_port}, {"store0", store_ports[0]}, {"store1", store_ports[1]}};
  for (const auto& [name, port] : targets) {
    std::string text = HttpGet(port, "/metrics");
    ASSERT_NE(text.find("shelf_"), std::string::npos) << name;
    if (name == "master") {
      EXPECT_NE(text.find("shelf_master_lookup_hits_total{tier=\"dram\"}"), std::string::npos);
      EXPECT_NE(text.find("shelf_master_used_bytes{node="), std::string::npos);
    } else {
      EXPECT_NE(text.find("shelf_store_capacity_bytes{tier=\"dram\"}"), std::string::npos);
    }
    if (!HaveTool("/usr/bin/promtool")) continue;
    std::string file = absl::StrCat(dir, "/", name, ".prom");
    std::ofstream(file) << text;
    std::string cmd = absl::StrCat("/usr/bin/promtool check metrics < ", file, " 2>&1");
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    int rc = pclose(p);
    EXPECT_EQ(rc, 0) << name << ": promtool said:\n" << out;
  }

  // shelfctl --json parses into what a script expects.
  std::string json;
  ASSERT_EQ((*cluster)->Shelfctl({"status", "--json"}, &json), 0);
  EXPECT_EQ(JsonParse(json)["leader"], (*cluster)->master_address()) << json;
  ASSERT_EQ((*cluster)->Shelfctl({"segments", "--json"}, &json), 0);
  EXPECT_TRUE(JsonParse(json).is_array()) << json;
  ASSERT_EQ((*cluster)->Shelfctl({"top", "--iterations", "1"}, &json), 0);
  EXPECT_NE(json.find("objects 20"), std::string::npos) << json;

  if (!HaveTool("/usr/bin/prometheus")) {
    GTEST_SKIP() << "prometheus is not installed (Debian package prometheus)";
  }
  uint16_t prom_port = FreePort();
  std::string cfg = dir + "/prometheus.yml";
  std::ofstream(cfg) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                     << "scrape_configs:\n  - job_name: shelf\n    static_configs:\n"
                     << "      - targets: ['127.0.0.1:" << master_port
                     << "', '127.0.0.1:" << store_ports[0] << "', '127.0.0.1:" << store_ports[1]
                     << "']\n";
  auto prom = Process::Spawn(
      {"/usr/bin/prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + dir + "/tsdb",
       absl::StrCat("--web.listen-address=127.0.0.1:", prom_port)},
      dir + "/prometheus.log");
  ASSERT_TRUE(prom.ok());
  std::string query =
      "/api/v1/query?query=sum(shelf_master_lookup_hits_total)/sum(shelf_master_lookups_total)";
  std::string answer;
  uint64_t until = MonoMs() + 60000;
  while (MonoMs() < until) {
    answer = HttpGet(prom_port, query);
    if (answer.find("\"result\":[{") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  // {"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[T,"0.8"]}]}}
  size_t at = answer.find("\"value\":[");
  ASSERT_NE(at, std::string::npos) << "no answer from Prometheus: " << answer;
  size_t q = answer.find('"', answer.find(',', at) + 1);
  double ratio = std::strtod(answer.c_str() + q + 1, nullptr);
  EXPECT_GT(ratio, 0.0) << answer;
  EXPECT_LE(ratio, 1.0) << answer;
  std::printf("Prometheus hit ratio: %.3f\n", ratio);
  // Every target is up.
  std::string up;
  for (uint64_t t = MonoMs() + 20000; MonoMs() < t;) {
    up = HttpGet(prom_port, "/api/v1/query?query=sum(up)");
    if (up.find("\"3\"]") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_NE(up.find("\"3\"]"), std::string::npos) << up;
}

}  // namespace
}  // namespace shelf
