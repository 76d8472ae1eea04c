// shelf-bench resp: the same redis-benchmark runs against redis-server and
// against shelf-resp in front of a Shelf cluster started here.
//
// Redis runs with persistence off, --maxmemory equal to the cluster's DRAM
// and allkeys-lru, so both systems have the same memory to cache in. A row
// is (value size, clients, pipeline); each row runs `redis-benchmark -t
// set,get -d SIZE -c C [-P 16] -n N -r N` first against Redis, then against
// shelf-resp, with N = --row-bytes / SIZE. Both are emptied (FLUSHALL)
// before each row. The figures are redis-benchmark's own requests per
// second; docs/benchmarks.md ("shelf-bench resp") says what they mean.
// With --tls every row goes over TLS on both sides (redis-server's tls-port,
// shelf-resp's --tls-listen), with certificates made here by the openssl CLI.
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/units.h"
#include "testing/local_cluster.h"
#include "tools/bench/redis_peer.h"

namespace shelf::bench {

bool StopRequested();  // main.cc

namespace {

struct RespRow {
  uint64_t size = 0;
  int clients = 1;
  int pipeline = 1;
  uint64_t requests = 0;
  std::map<std::string, double> redis, shelf;  // "SET"/"GET" -> requests per second
};

// Runs redis-benchmark; returns test name -> requests/s from its --csv
// output ("SET","1234.56",...), or an error with its output.
absl::StatusOr<std::map<std::string, double>> RunBenchmark(const std::string& binary, int port,
                                                           const std::string& tls_args,
                                                           const RespRow& row) {
  std::string cmd = absl::StrCat(
      binary, " -h 127.0.0.1 -p ", port, tls_args, " -t set,get -d ", row.size, " -c ", row.clients,
      " -n ", row.requests, " -r ", row.requests,
      row.pipeline > 1 ? absl::StrCat(" -P ", row.pipeline) : std::string(), " --csv 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::InternalError("cannot run " + binary);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  std::map<std::string, double> rps;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    if (f.size() < 2) continue;
    std::string name(absl::StripPrefix(absl::StripSuffix(f[0], "\""), "\""));
    std::string value(absl::StripPrefix(absl::StripSuffix(f[1], "\""), "\""));
    double v = 0;
    if ((name == "SET" || name == "GET") && absl::SimpleAtod(value, &v)) rps[name] = v;
  }
  if (rc != 0 || rps.size() != 2) {
    return absl::InternalError(absl::StrCat("redis-benchmark failed (status ", rc, "): ", out));
  }
  return rps;
}

absl::Status Flush(const std::string& cli, int port) {
  std::string cmd = absl::StrCat(cli, " -h 127.0.0.1 -p ", port, " FLUSHALL 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::InternalError("cannot run " + cli);
  char buf[256] = {0};
  size_t n = fread(buf, 1, sizeof(buf) - 1, p);
  buf[n] = 0;
  int rc = pclose(p);
  if (rc != 0 || std::string(buf).rfind("OK", 0) != 0) {
    return absl::InternalError(absl::StrCat("FLUSHALL on port ", port, ": ", buf));
  }
  return absl::OkStatus();
}

// A CA and a server certificate for 127.0.0.1 under `dir`, by the openssl
// CLI (Debian's openssl package).
absl::Status MakeCertificates(const std::string& dir) {
  std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string cmd = absl::StrCat(
      "cd '", dir, "' && ( printf 'subjectAltName=IP:127.0.0.1\\n' > server.ext",
      " && openssl req -x509 ", ec, " -days 2 -keyout ca.key -out ca.crt -subj /CN=bench-ca",
      " && openssl req ", ec, " -keyout server.key -out server.csr -subj /CN=127.0.0.1",
      " && openssl x509 -req -days 2 -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial",
      " -extfile server.ext -out server.crt ) > certs.log 2>&1");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("openssl failed making certificates in ", dir));
  }
  return absl::OkStatus();
}

double GeoMean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x > 0 ? x : 1e-9);
  return std::exp(log_sum / static_cast<double>(v.size()));
}

}  // namespace

int RespBench(int argc, char** argv) {
  std::string sizes_text = "64KiB,1MiB,4MiB", clients_text = "1,8", work_dir;
  std::string redis_server = "/usr/bin/redis-server", redis_benchmark = "/usr/bin/redis-benchmark";
  std::string redis_cli = "/usr/bin/redis-cli";
  uint64_t row_bytes = 2ull << 30, dram_size = 0;
  int64_t stores = 2, pipeline = 16;
  bool quick = false, tls = false;
  Flags flags("shelf-bench resp",
              "redis-benchmark against redis-server and against shelf-resp on a Shelf cluster");
  flags.AddString("sizes", &sizes_text, "value sizes, comma-separated");
  flags.AddString("clients", &clients_text, "redis-benchmark -c values, comma-separated");
  flags.AddInt("pipeline", &pipeline, "the -P of the pipelined rows (each row also runs without)");
  flags.AddSize("row-bytes", &row_bytes,
                "bytes each row sets (-n = row-bytes / size); scale "
                "down on a small machine");
  flags.AddInt("stores", &stores, "stores in the cluster");
  flags.AddSize("dram-size", &dram_size,
                "DRAM per store (0: enough for a row, 1.5 x row-bytes over the stores)");
  flags.AddString("redis-server", &redis_server, "redis-server binary");
  flags.AddString("redis-benchmark", &redis_benchmark, "redis-benchmark binary");
  flags.AddString("redis-cli", &redis_cli, "redis-cli binary (FLUSHALL between rows)");
  flags.AddString("work-dir", &work_dir, "keep the cluster's and Redis's logs here");
  flags.AddBool("quick", &quick, "a small smoke run: 64KiB and 1MiB, -c 1, 16 MiB per row");
  flags.AddBool("tls", &tls,
                "every row over TLS on both sides (redis-server's tls-port, shelf-resp's "
                "--tls-listen)");
  flags.ParseOrExit(argc, argv);
  if (quick) {
    if (!flags.WasSet("sizes")) sizes_text = "64KiB,1MiB";
    if (!flags.WasSet("clients")) clients_text = "1";
    if (!flags.WasSet("row-bytes")) row_bytes = 16ull << 20;
  }
  std::vector<uint64_t> sizes;
  for (absl::string_view s : absl::StrSplit(sizes_text, ',', absl::SkipEmpty())) {
    absl::StatusOr<uint64_t> v = ParseSize(s);
    if (!v.ok() || *v == 0) {
      std::fprintf(stderr, "shelf-bench resp: bad --sizes entry '%s'\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(*v);
  }
  std::vector<int> clients;
  for (absl::string_view s : absl::StrSplit(clients_text, ',', absl::SkipEmpty())) {
    int c = 0;
    if (!absl::SimpleAtoi(s, &c) || c < 1) {
      std::fprintf(stderr, "shelf-bench resp: bad --clients entry\n");
      return 2;
    }
    clients.push_back(c);
  }
  for (const std::string& b : {redis_server, redis_benchmark, redis_cli}) {
    if (access(b.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "shelf-bench resp: no %s (Debian: redis-server, redis-tools)\n",
                   b.c_str());
      return 1;
    }
  }
  if (sizes.empty() || clients.empty() || stores < 1 || pipeline < 1) {
    std::fprintf(stderr, "shelf-bench resp: empty --sizes/--clients or bad --stores/--pipeline\n");
    return 2;
  }
  if (dram_size == 0) dram_size = std::max<uint64_t>(row_bytes * 3 / 2 / stores, 128ull << 20);

  LocalCluster::Options co;
  co.stores = static_cast<int>(stores);
  co.dram_bytes = dram_size;
  co.work_dir = work_dir;
  auto cluster = LocalCluster::Start(co);
  if (!cluster.ok()) {
    std::fprintf(stderr, "shelf-bench resp: cannot start a cluster: %s\n",
                 std::string(cluster.status().message()).c_str());
    return 1;
  }
  std::string dir = (*cluster)->work_dir();
  std::string ready = dir + "/resp.addr";
  std::vector<std::string> resp_args = {(*cluster)->bin_dir() + "/shelf-resp",
                                        "--master",
                                        (*cluster)->master_address(),
                                        "--listen",
                                        "127.0.0.1:0",
                                        "--enable-flush",
                                        "--ready-file",
                                        ready};
  std::vector<std::string> redis_args = {"--maxmemory",
                                         std::to_string(dram_size * static_cast<uint64_t>(stores)),
                                         "--maxmemory-policy", "allkeys-lru"};
  std::string tls_args;
  int redis_tls_port = 0;
  if (tls) {
    absl::Status s = MakeCertificates(dir);
    absl::StatusOr<int> port = FreeLoopbackPort();
    if (!s.ok() || !port.ok()) {
      std::fprintf(stderr, "shelf-bench resp: %s\n",
                   std::string((s.ok() ? port.status() : s).message()).c_str());
      return 1;
    }
    redis_tls_port = *port;
    resp_args.insert(resp_args.end(), {"--tls-listen", "127.0.0.1:0", "--tls-cert",
                                       dir + "/server.crt", "--tls-key", dir + "/server.key"});
    redis_args.insert(redis_args.end(),
                      {"--tls-port", std::to_string(redis_tls_port), "--tls-cert-file",
                       dir + "/server.crt", "--tls-key-file", dir + "/server.key",
                       "--tls-ca-cert-file", dir + "/ca.crt", "--tls-auth-clients", "no"});
    tls_args = absl::StrCat(" --tls --cacert '", dir, "/ca.crt'");
  }
  auto resp = Process::Spawn(resp_args, dir + "/resp.log");
  if (!resp.ok()) {
    std::fprintf(stderr, "shelf-bench resp: %s\n", std::string(resp.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::string> addr = WaitForFileLine(ready, 20000, resp->get());
  if (!addr.ok()) {
    std::fprintf(stderr, "shelf-bench resp: shelf-resp did not start: %s\n",
                 std::string(addr.status().message()).c_str());
    return 1;
  }
  int shelf_port = std::stoi(addr->substr(addr->rfind(':') + 1));
  int shelf_bench_port = shelf_port;
  if (tls) {  // the ready file's second line
    std::ifstream f(ready);
    std::string plain, tls_addr;
    if (!(f >> plain >> tls_addr)) {
      std::fprintf(stderr, "shelf-bench resp: no TLS address in %s\n", ready.c_str());
      return 1;
    }
    shelf_bench_port = std::stoi(tls_addr.substr(tls_addr.rfind(':') + 1));
  }
  auto redis = RedisServer::Start(redis_server, dir, redis_args);
  if (!redis.ok()) {
    std::fprintf(stderr, "shelf-bench resp: %s\n", std::string(redis.status().message()).c_str());
    return 1;
  }
  int redis_port = (*redis)->port();
  int redis_bench_port = tls ? redis_tls_port : redis_port;

  std::vector<RespRow> rows;
  for (uint64_t size : sizes) {
    for (int c : clients) {
      for (int p : {1, static_cast<int>(pipeline)}) {
        RespRow row;
        row.size = size;
        row.clients = c;
        row.pipeline = p;
        row.requests = std::max<uint64_t>(row_bytes / size, 16);
        rows.push_back(row);
        if (pipeline == 1) break;
      }
    }
  }
  std::printf("%-8s %7s %8s %8s | %12s %12s %7s | %12s %12s %7s\n", "size", "clients", "pipeline",
              "requests", "redis set/s", "shelf set/s", "ratio", "redis get/s", "shelf get/s",
              "ratio");
  std::string error;
  for (RespRow& row : rows) {
    if (StopRequested()) break;
    for (auto [port, bench_port, out] :
         {std::make_tuple(redis_port, redis_bench_port, &row.redis),
          std::make_tuple(shelf_port, shelf_bench_port, &row.shelf)}) {
      absl::Status f = Flush(redis_cli, port);
      absl::StatusOr<std::map<std::string, double>> r =
          f.ok() ? RunBenchmark(redis_benchmark, bench_port, tls_args, row) : f;
      if (!r.ok()) {
        error = std::string(r.status().message());
        break;
      }
      *out = *r;
    }
    if (!error.empty()) break;
    std::printf("%-8s %7d %8d %8llu | %12.0f %12.0f %7.2f | %12.0f %12.0f %7.2f\n",
                FormatBytes(row.size).c_str(), row.clients, row.pipeline,
                static_cast<unsigned long long>(row.requests), row.redis["SET"], row.shelf["SET"],
                row.shelf["SET"] / row.redis["SET"], row.redis["GET"], row.shelf["GET"],
                row.shelf["GET"] / row.redis["GET"]);
    std::fflush(stdout);
  }
  // Ratios: the geometric mean over a size's rows (clients x pipeline);
  // min: the lowest ratio of any row and op.
  auto ratio = [&](const std::string& op, uint64_t size) {
    std::vector<double> v;
    for (const RespRow& r : rows) {
      if (r.size == size && r.redis.count(op) && r.shelf.count(op)) {
        v.push_back(r.shelf.at(op) / r.redis.at(op));
      }
    }
    return GeoMean(v);
  };
  double min_ratio = 0;
  bool any = false;
  Json row_json = Json::array();
  for (const RespRow& r : rows) {
    if (!r.redis.count("SET") || !r.shelf.count("SET")) continue;
    for (const char* op : {"SET", "GET"}) {
      double x = r.shelf.at(op) / r.redis.at(op);
      min_ratio = any ? std::min(min_ratio, x) : x;
      any = true;
    }
    Json o = Json::object();
    o["size"] = r.size;
    o["clients"] = r.clients;
    o["pipeline"] = r.pipeline;
    o["requests"] = r.requests;
    o["redis_set"] = r.redis.at("SET");
    o["shelf_set"] = r.shelf.at("SET");
    o["redis_get"] = r.redis.at("GET");
    o["shelf_get"] = r.shelf.at("GET");
    row_json.push_back(o);
  }
  auto or_null = [](double v) { return v > 0 ? Json(v) : Json(nullptr); };
  Json o = Json::object();
  o["bench"] = "resp";
  o["stopped"] = StopRequested();
  o["tls"] = tls;
  o["resp_get_1m_vs_redis"] = or_null(ratio("GET", 1ull << 20));
  o["resp_set_1m_vs_redis"] = or_null(ratio("SET", 1ull << 20));
  o["resp_get_64k_vs_redis"] = or_null(ratio("GET", 64ull << 10));
  o["resp_min_vs_redis"] = or_null(any ? min_ratio : 0);
  o["errors"] = static_cast<uint64_t>(error.empty() ? 0 : 1);
  if (!error.empty()) o["error"] = error;
  o["rows"] = row_json;
  std::printf("%s\n", JsonDump(o).c_str());
  return error.empty() ? 0 : 1;
}

}  // namespace shelf::bench
