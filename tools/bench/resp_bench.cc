// shelf-bench resp: the same RESP load against redis-server and against
// shelf-resp in front of a Shelf cluster started here.
//
// Redis runs with persistence off, --maxmemory equal to the cluster's DRAM
// and allkeys-lru, so both systems have the same memory to cache in. A row
// is (value size, clients, pipeline); each row runs the bench's own RESP
// load (resp_load.h: N = --row-bytes / SIZE fresh keys, each SET once with
// random bytes of its own and read back once, every GET checked) against
// both servers with the same connections, threads, pipeline depth and
// bytes. Rows alternate which server goes first. Both are emptied
// (FLUSHALL) before each row. docs/benchmarks.md ("shelf-bench resp") says
// what the figures mean. With --tls every row goes over TLS on both sides
// (redis-server's tls-port, shelf-resp's --tls-listen), with certificates
// made here by the openssl CLI. With --redis-benchmark, redis-benchmark's
// GET rows follow against the same two servers (resp_redis_benchmark.h).
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/units.h"
#include "testing/local_cluster.h"
#include "tools/bench/redis_peer.h"
#include "tools/bench/resp_load.h"
#include "tools/bench/resp_redis_benchmark.h"

namespace shelf::bench {

bool StopRequested();  // main.cc

namespace {

struct RespRow {
  uint64_t size = 0;
  int clients = 1;
  int pipeline = 1;
  uint64_t requests = 0;
  bool shelf_first = false;
  RespLoadResult redis, shelf;
};

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
  std::string redis_server = "/usr/bin/redis-server", redis_cli = "/usr/bin/redis-cli";
  uint64_t row_bytes = 2ull << 30, dram_size = 0;
  int64_t stores = 2, pipeline = 16;
  bool quick = false, tls = false, redis_benchmark = false;
  std::string redis_benchmark_bin = "/usr/bin/redis-benchmark";
  std::string rb_sizes_text = "64KiB,1MiB";
  uint64_t rb_bytes = 4ull << 30;
  Flags flags("shelf-bench resp",
              "one RESP load, every value checked, against redis-server and against shelf-resp "
              "on a Shelf cluster");
  flags.AddString("sizes", &sizes_text, "value sizes, comma-separated");
  flags.AddString("clients", &clients_text, "connections (a thread each) per row, comma-separated");
  flags.AddInt("pipeline", &pipeline,
               "commands in flight per connection in the pipelined rows (each row also runs "
               "with 1)");
  flags.AddSize("row-bytes", &row_bytes,
                "bytes each row sets (keys = row-bytes / size); scale down on a small machine");
  flags.AddInt("stores", &stores, "stores in the cluster");
  flags.AddSize("dram-size", &dram_size,
                "DRAM per store (0: enough for a row, 1.5 x row-bytes over the stores)");
  flags.AddString("redis-server", &redis_server, "redis-server binary");
  flags.AddString("redis-cli", &redis_cli, "redis-cli binary (FLUSHALL between rows)");
  flags.AddString("work-dir", &work_dir, "keep the cluster's and Redis's logs here");
  flags.AddBool("quick", &quick, "a small smoke run: 64KiB and 1MiB, -c 1, 16 MiB per row");
  flags.AddBool("tls", &tls,
                "every row over TLS on both sides (redis-server's tls-port, shelf-resp's "
                "--tls-listen)");
  flags.AddBool("redis-benchmark", &redis_benchmark,
                "then redis-benchmark's GET rows (one hot key, -c 4 and 32, -P 1 and 16) "
                "against both servers; not with --tls");
  flags.AddString("redis-benchmark-bin", &redis_benchmark_bin, "redis-benchmark binary");
  flags.AddString("redis-benchmark-sizes", &rb_sizes_text,
                  "value sizes of the redis-benchmark rows");
  flags.AddSize("redis-benchmark-bytes", &rb_bytes,
                "bytes each redis-benchmark row reads per server (-n = bytes / size, at least "
                "2000)");
  flags.ParseOrExit(argc, argv);
  if (redis_benchmark && tls) {
    std::fprintf(stderr, "shelf-bench resp: --redis-benchmark runs over plain TCP only\n");
    return 2;
  }
  if (redis_benchmark && access(redis_benchmark_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "shelf-bench resp: no %s (Debian: redis-tools)\n",
                 redis_benchmark_bin.c_str());
    return 1;
  }
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
  std::vector<uint64_t> rb_sizes;
  for (absl::string_view s : absl::StrSplit(rb_sizes_text, ',', absl::SkipEmpty())) {
    absl::StatusOr<uint64_t> v = ParseSize(s);
    if (!v.ok() || *v == 0) {
      std::fprintf(stderr, "shelf-bench resp: bad --redis-benchmark-sizes entry '%s'\n",
                   std::string(s).c_str());
      return 2;
    }
    rb_sizes.push_back(*v);
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
  for (const std::string& b : {redis_server, redis_cli}) {
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
  co.wait_populated = true;  // the loads start once the populators are done
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
  std::string tls_ca;
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
    tls_ca = dir + "/ca.crt";
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
        row.shelf_first = rows.size() % 2 == 1;
        rows.push_back(row);
        if (pipeline == 1) break;
      }
    }
  }
  std::printf("%-8s %7s %8s %8s %5s | %12s %12s %7s | %12s %12s %7s | %s\n", "size", "clients",
              "pipeline", "keys", "first", "redis set/s", "shelf set/s", "ratio", "redis get/s",
              "shelf get/s", "ratio", "misses redis/shelf");
  std::string error;
  uint64_t mismatches = 0;
  for (size_t ri = 0; ri < rows.size() && !StopRequested(); ++ri) {
    RespRow& row = rows[ri];
    struct Side {
      const char* name;
      int port, bench_port;
      RespLoadResult* out;
    };
    Side sides[2] = {{"redis", redis_port, redis_bench_port, &row.redis},
                     {"shelf", shelf_port, shelf_bench_port, &row.shelf}};
    if (row.shelf_first) std::swap(sides[0], sides[1]);
    for (const Side& side : sides) {
      if (absl::Status f = Flush(redis_cli, side.port); !f.ok()) {
        error = std::string(f.message());
        break;
      }
      RespLoadOptions lo;
      lo.port = side.bench_port;
      lo.tls_ca = tls_ca;
      lo.value_bytes = row.size;
      lo.clients = row.clients;
      lo.pipeline = row.pipeline;
      lo.requests = row.requests;
      lo.key_prefix = absl::StrCat("bench:", getpid(), ":", ri, ":", side.name, ":");
      lo.seed = ri + 1;  // the same bytes for both servers
      *side.out = RunRespLoad(lo);
      mismatches += side.out->mismatches;
      if (!side.out->error.empty()) {
        error = absl::StrCat(side.name, ": ", side.out->error);
        break;
      }
    }
    if (!error.empty()) break;
    std::printf("%-8s %7d %8d %8llu %5s | %12.0f %12.0f %7.2f | %12.0f %12.0f %7.2f | %llu/%llu\n",
                FormatBytes(row.size).c_str(), row.clients, row.pipeline,
                static_cast<unsigned long long>(row.requests), row.shelf_first ? "shelf" : "redis",
                row.redis.set_per_s, row.shelf.set_per_s, row.shelf.set_per_s / row.redis.set_per_s,
                row.redis.get_per_s, row.shelf.get_per_s, row.shelf.get_per_s / row.redis.get_per_s,
                static_cast<unsigned long long>(row.redis.misses),
                static_cast<unsigned long long>(row.shelf.misses));
    std::fflush(stdout);
  }
  std::vector<RedisBenchmarkRow> rb_rows;
  if (redis_benchmark && error.empty() && !StopRequested()) {
    RedisBenchmarkOptions rbo;
    rbo.binary = redis_benchmark_bin;
    rbo.redis_port = redis_port;
    rbo.shelf_port = shelf_port;
    rbo.sizes = rb_sizes;
    rbo.row_bytes = rb_bytes;
    for (int port : {redis_port, shelf_port}) {
      if (absl::Status f = Flush(redis_cli, port); !f.ok()) error = std::string(f.message());
    }
    if (error.empty()) {
      if (absl::Status s = RunRedisBenchmarkRows(rbo, &rb_rows); !s.ok()) {
        error = absl::StrCat("redis-benchmark: ", s.message());
      }
    }
  }
  // A row counts once both servers ran it whole.
  auto done = [](const RespRow& r) {
    return r.redis.set_per_s > 0 && r.shelf.set_per_s > 0 && r.redis.get_per_s > 0 &&
           r.shelf.get_per_s > 0;
  };
  // Ratios: the geometric mean over a size's rows (clients x pipeline);
  // min: the lowest ratio of any row and op.
  auto ratio = [&](bool set, uint64_t size) {
    std::vector<double> v;
    for (const RespRow& r : rows) {
      if (r.size != size || !done(r)) continue;
      v.push_back(set ? r.shelf.set_per_s / r.redis.set_per_s
                      : r.shelf.get_per_s / r.redis.get_per_s);
    }
    return GeoMean(v);
  };
  double min_ratio = 0;
  bool any = false;
  Json row_json = Json::array();
  for (const RespRow& r : rows) {
    if (!done(r)) continue;
    for (double x :
         {r.shelf.set_per_s / r.redis.set_per_s, r.shelf.get_per_s / r.redis.get_per_s}) {
      min_ratio = any ? std::min(min_ratio, x) : x;
      any = true;
    }
    Json o = RespRowJson(r.size, r.clients, r.pipeline, r.requests, r.shelf_first);
    o["redis_set"] = r.redis.set_per_s;
    o["shelf_set"] = r.shelf.set_per_s;
    o["redis_get"] = r.redis.get_per_s;
    o["shelf_get"] = r.shelf.get_per_s;
    o["redis_misses"] = r.redis.misses;
    o["shelf_misses"] = r.shelf.misses;
    row_json.push_back(o);
  }
  auto or_null = [](double v) { return v > 0 ? Json(v) : Json(nullptr); };
  Json o = Json::object();
  o["bench"] = "resp";
  o["stopped"] = StopRequested();
  o["tls"] = tls;
  o["resp_get_1m_vs_redis"] = or_null(ratio(false, 1ull << 20));
  o["resp_set_1m_vs_redis"] = or_null(ratio(true, 1ull << 20));
  o["resp_get_64k_vs_redis"] = or_null(ratio(false, 64ull << 10));
  o["resp_min_vs_redis"] = or_null(any ? min_ratio : 0);
  o["errors"] = static_cast<uint64_t>(error.empty() ? 0 : 1);
  o["mismatches"] = mismatches;
  if (!error.empty()) o["error"] = error;
  o["rows"] = row_json;
  if (redis_benchmark) {
    double rb_min = 0;
    o["redis_benchmark_rows"] = RedisBenchmarkJson(rb_rows, &rb_min);
    o["redis_benchmark_get_min_vs_redis"] = or_null(rb_min);
  }
  std::printf("%s\n", JsonDump(o).c_str());
  return error.empty() && mismatches == 0 ? 0 : 1;
}

}  // namespace shelf::bench
