// Runs Prometheus's own checker (`promtool check metrics`, Debian package
// `prometheus`) over rendered output: once for a registry with every metric
// type, escaping and edge values, and once for the whole catalogue in
// docs/metrics.md, so a documented name that breaks the conventions fails
// here. Skips when promtool is not installed.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/prom.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace shelf {
namespace prom {
namespace {

constexpr const char* kPromtool = "/usr/bin/promtool";

struct CheckResult {
  int exit_code = -1;
  std::string output;
};

// Writes `text` to a temporary file and runs promtool over it.
CheckResult Promtool(const std::string& text) {
  CheckResult result;
  const char* tmp = getenv("TMPDIR");
  std::string path =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/shelf_metrics_promtool_XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) {
    result.output = "mkstemp failed";
    return result;
  }
  bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written) {
    unlink(path.c_str());
    result.output = "write failed";
    return result;
  }
  std::string command = std::string(kPromtool) + " check metrics < '" + path + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe != nullptr) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
    int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  unlink(path.c_str());
  return result;
}

class PromtoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPromtool, X_OK) != 0) {
      GTEST_SKIP() << kPromtool << " not found: install the Debian package `prometheus` "
                   << "to check the exposition format";
    }
  }
};

TEST_F(PromtoolTest, CheckerCatchesBrokenOutput) {
  // Proves the harness reports failures, so a pass below means something.
  CheckResult bad = Promtool("# TYPE broken counter\nbroken{ 1\n");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
}

TEST_F(PromtoolTest, EveryTypeIsValid) {
  Exposition registry;
  prometheus::Registry& reg = registry.registry();
  Family<Counter>& ops = AddCounter(reg, "test_ops_total", "Operations by result.");
  Child(ops, {{"op", "get"}, {"result", "ok"}}).Increment(7);
  Child(ops, {{"op", "put"}, {"result", "quote\" back\\slash\nnewline"}}).Increment();
  AddUnlabelledCounter(reg, "test_unlabeled_total", "Help with \\ and\na newline.");
  Family<Gauge>& used = AddGauge(reg, "test_used_bytes", "Bytes used.");
  Child(used, {{"node", "n1"}, {"tier", "dram"}}).Set(137438953472.0);
  Child(used, {{"node", "n1"}, {"tier", "ssd"}}).Set(0.5);
  Child(used, {{"node", "n2"}, {"tier", "dram"}}).Set(-std::numeric_limits<double>::infinity());
  Child(used, {{"node", "n3"}, {"tier", "dram"}}).Set(std::numeric_limits<double>::quiet_NaN());
  Family<Histogram>& latency = AddHistogram(reg, "test_rpc_seconds", "RPC latency.");
  for (double v : {0.00001, 0.0003, 0.02, 3.0, 60.0}) {
    Child(latency, {{"method", "Lookup"}}).Observe(v);
  }
  Child(latency, {{"method", "PutStart"}});
  Child(AddHistogram(reg, "test_size_bytes", "Sizes."), {}, ExponentialBuckets(4096, 4, 6))
      .Observe(1 << 20);
  CallbackHandle nodes = registry.AddCallbackGauge("test_nodes", "Nodes by state.", {"state"}, [] {
    return std::vector<GaugeSample>{{{"live"}, 3}, {{"dead"}, 0}};
  });
  CallbackHandle leader =
      registry.AddCallbackGauge("test_is_leader", "1 on the leader.", [] { return 1.0; });

  std::string text = registry.Render();
  CheckResult r = Promtool(text);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- input ---\n" << text;
}

// Reads the catalogue rows of docs/metrics.md:
//   | `shelf_x_total` | counter | `tier`, `node` | meaning |
struct CatalogueEntry {
  std::string name;
  std::string type;
  std::vector<std::string> labels;
};

std::vector<CatalogueEntry> ReadCatalogue(const std::string& path) {
  std::vector<CatalogueEntry> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `shelf_", 0) != 0) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    // cells[0] is empty (before the first '|').
    if (cells.size() < 5) continue;
    CatalogueEntry e;
    e.name = std::string(absl::StripAsciiWhitespace(cells[1]));
    e.name.erase(std::remove(e.name.begin(), e.name.end(), '`'), e.name.end());
    e.type = std::string(absl::StripAsciiWhitespace(cells[2]));
    for (absl::string_view label : absl::StrSplit(cells[3], ',')) {
      std::string l(absl::StripAsciiWhitespace(label));
      l.erase(std::remove(l.begin(), l.end(), '`'), l.end());
      if (!l.empty() && l != "-") e.labels.push_back(l);
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<CatalogueEntry> Catalogue() {
  return ReadCatalogue(TestSourceDir() + "/docs/metrics.md");
}

// Registers each documented metric with one made-up child, as the master,
// store and client will (a bad name or label aborts here).
void RegisterCatalogue(const std::vector<CatalogueEntry>& catalogue, Exposition* registry) {
  prometheus::Registry& r = registry->registry();
  for (const CatalogueEntry& e : catalogue) {
    Labels labels;
    for (const std::string& l : e.labels) labels[l] = "v_" + l;
    if (e.type == "counter") {
      Child(AddCounter(r, e.name, "Documented."), labels).Increment(3);
    } else if (e.type == "gauge") {
      Child(AddGauge(r, e.name, "Documented."), labels).Set(2);
    } else if (e.type == "histogram") {
      Child(AddHistogram(r, e.name, "Documented."), labels).Observe(0.001);
    } else {
      ADD_FAILURE() << e.name << ": unknown type '" << e.type << "'";
    }
  }
}

TEST(CatalogueTest, DocumentedNamesRegister) {
  std::vector<CatalogueEntry> catalogue = Catalogue();
  std::set<std::string> names;
  for (const CatalogueEntry& e : catalogue) names.insert(e.name);
  ASSERT_EQ(names.size(), catalogue.size()) << "a name is documented twice";
  // Every name the master, store and client register.
  for (const char* expected : {"shelf_master_lookups_total",
                               "shelf_master_lookup_hits_total",
                               "shelf_master_puts_total",
                               "shelf_master_evictions_total",
                               "shelf_master_demotions_total",
                               "shelf_master_leases_granted_total",
                               "shelf_master_objects",
                               "shelf_master_puts_in_flight",
                               "shelf_master_capacity_bytes",
                               "shelf_master_used_bytes",
                               "shelf_master_nodes",
                               "shelf_master_is_leader",
                               "shelf_master_term",
                               "shelf_master_rpc_seconds",
                               "shelf_master_rpc_errors_total",
                               "shelf_store_read_bytes_total",
                               "shelf_store_written_bytes_total",
                               "shelf_store_capacity_bytes",
                               "shelf_store_used_bytes",
                               "shelf_store_connections",
                               "shelf_store_demotions_total",
                               "shelf_store_promotions_total",
                               "shelf_store_checksum_failures_total",
                               "shelf_store_ssd_op_seconds",
                               "shelf_client_ops_total",
                               "shelf_client_op_seconds",
                               "shelf_client_bytes_total",
                               "shelf_client_prefix_hits_total",
                               "shelf_client_prefix_lookups_total"}) {
    EXPECT_EQ(names.count(expected), 1u) << expected << " missing from docs/metrics.md";
  }
  for (const CatalogueEntry& e : catalogue) {
    if (e.name == "shelf_master_capacity_bytes") {
      EXPECT_EQ(e.labels, (std::vector<std::string>{"node", "tier"}));
    }
  }
  Exposition registry;
  RegisterCatalogue(catalogue, &registry);
  EXPECT_NE(registry.Render().find("shelf_store_read_bytes_total{tier=\"v_tier\","
                                   "transport=\"v_transport\"} 3\n"),
            std::string::npos);
}

TEST_F(PromtoolTest, DocumentedCatalogueIsValid) {
  Exposition registry;
  RegisterCatalogue(Catalogue(), &registry);
  std::string text = registry.Render();
  CheckResult r = Promtool(text);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- input ---\n" << text;
}

}  // namespace
}  // namespace prom
}  // namespace shelf
