// shelf-bench kv: end-to-end puts and gets through libshelf against a
// cluster, next to the same workload against redis-server through hiredis.
//
// Three systems run every row, one right after another, so each Shelf row
// has a Redis row measured moments before it on the same machine:
//   redis  as many redis-servers (persistence off) as the cluster has
//          stores, keys sharded client-side, through hiredis: SET/GET, and
//          for batched rows pipelines cut to --redis-pipeline-bytes, sent
//          to every server at once (RedisShards)
//   shm    libshelf with its defaults: a same-host store is read through its
//          shared-memory segment (one memcpy) and written through the store
//          under the put's grant (copied from the client's staging memfd;
//          with --shared-values, straight from the values' shared memory)
//   tcp    libshelf with allow_shm=false: the TCP data plane over loopback
// Shelf get rows run twice: cold (clients without a location cache: every
// get asks the master) and warm (shm-warm, tcp-warm: clients whose location
// cache holds every key, read once before the row).
// A row is (put|get, block size, threads, single|batch). A put row writes
// new keys (a key that exists makes a Shelf put free, so rewriting one
// would measure nothing); the get row reads those keys back; then they are
// removed (FLUSHALL for Redis) before the next row.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/mutex.h"
#include "common/units.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/kv_support.h"
#include "tools/bench/redis_peer.h"

namespace shelf::bench {

bool StopRequested();  // main.cc: SIGINT/SIGTERM arrived

namespace {

constexpr const char* kSystems[] = {"redis", "shm", "tcp"};
constexpr uint64_t kIdsPerThreadShift = 32;  // key ids of thread t start at t << 32
struct Row {
  std::string system;
  bool put = false;
  bool batch = false;
  uint64_t size = 0;
  int threads = 0;
  size_t batch_n = 1;  // blocks per op: --batch, less where the row would exceed --row-bytes-max
  // Results.
  uint64_t ops = 0, blocks = 0, bytes = 0, errors = 0, mismatches = 0;
  double seconds = 0, p50_us = 0, p99_us = 0;
  std::string first_error;
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  double ops_per_s() const { return seconds > 0 ? blocks / seconds : 0; }
  std::string op() const { return put ? "put" : "get"; }
  std::string mode() const { return batch ? absl::StrCat("x", batch_n) : "single"; }
};

struct Config {
  std::vector<uint64_t> sizes;
  std::vector<int> threads;
  int batch = 16;
  double seconds = 1.0;
  uint64_t row_bytes_max = 256ull << 20;
  bool client_per_thread = false;
  // Put values in shared host memory (AllocateSharedHostMemory), which a
  // same-host store copies from directly, instead of private memory.
  bool shared_values = false;
  uint64_t timeout_ms = 60000;
};

// A put thread's value buffers: private memory, or shared host memory.
class ValueBuffer {
 public:
  ValueBuffer(size_t bytes, bool shared) {
    void* p = nullptr;
    if (shared && AllocateSharedHostMemory(bytes, &p).ok()) {
      shared_ = static_cast<char*>(p);
    } else {
      if (shared) std::fprintf(stderr, "shelf-bench kv: no shared host memory; values private\n");
      private_.resize(bytes);
    }
  }
  ~ValueBuffer() {
    if (shared_ != nullptr) static_cast<void>(FreeSharedHostMemory(shared_));
  }
  ValueBuffer(const ValueBuffer&) = delete;
  ValueBuffer& operator=(const ValueBuffer&) = delete;
  char* data() { return shared_ != nullptr ? shared_ : private_.data(); }

 private:
  char* shared_ = nullptr;
  std::vector<char> private_;
};

// What one worker thread's op reports.
struct OpResult {
  uint64_t blocks = 0;  // blocks moved
  uint64_t errors = 0;
  uint64_t mismatches = 0;
  std::string error;  // the first error's text
};

// The op index of the untimed warm-up op each thread runs first: it pays
// for first-touch costs (connections, buffers, allocator growth) of both
// Shelf and Redis outside the figures.
constexpr uint64_t kWarmupOp = UINT64_MAX;

// Holds a row's workers until every one is warm, then lets them go at once
// with the row's deadline.
struct StartGate {
  Mutex mu;
  CondVar cv;  // signalled when warm grows and when go is set
  int warm ABSL_GUARDED_BY(mu) = 0;
  bool go ABSL_GUARDED_BY(mu) = false;
  uint64_t deadline_us ABSL_GUARDED_BY(mu) = 0;
};

// Runs row->threads workers; each first calls op(thread, kWarmupOp), then,
// once all are warm, op(thread, i) for i = 0, 1, ... until the row's time is
// up, `quota` ops are done, or a stop is requested. Fills the row's
// results; latency is per op (per batch for batches).
template <typename Op>
void RunRow(const Config& cfg, uint64_t quota, Row* row, Op op) {
  struct PerThread {
    std::vector<double> lat_us;
    uint64_t ops = 0, blocks = 0, errors = 0, mismatches = 0;
    std::string error;
  };
  std::vector<PerThread> per(row->threads);
  StartGate gate;
  std::vector<std::thread> workers;
  workers.reserve(row->threads);
  for (int t = 0; t < row->threads; ++t) {
    workers.emplace_back([&, t] {
      op(t, kWarmupOp);
      uint64_t deadline_us;
      {
        MutexLock lock(&gate.mu);
        ++gate.warm;
        gate.cv.SignalAll();
        while (!gate.go) gate.cv.Wait(&gate.mu);
        deadline_us = gate.deadline_us;
      }
      PerThread& p = per[t];
      for (uint64_t i = 0; i < quota && !StopRequested(); ++i) {
        uint64_t t0 = MonoUs();
        if (t0 >= deadline_us) break;
        OpResult r = op(t, i);
        p.lat_us.push_back(static_cast<double>(MonoUs() - t0));
        ++p.ops;
        p.blocks += r.blocks;
        p.errors += r.errors;
        p.mismatches += r.mismatches;
        if (p.error.empty()) p.error = r.error;
      }
    });
  }
  uint64_t start;
  {
    MutexLock lock(&gate.mu);
    while (gate.warm != row->threads) gate.cv.Wait(&gate.mu);
    start = MonoUs();
    gate.deadline_us = start + static_cast<uint64_t>(cfg.seconds * 1e6);
    gate.go = true;
  }
  gate.cv.SignalAll();
  for (std::thread& w : workers) w.join();
  row->seconds = (MonoUs() - start) / 1e6;
  Samples lat;
  for (const PerThread& p : per) {
    for (double v : p.lat_us) lat.Add(v);
    row->ops += p.ops;
    row->blocks += p.blocks;
    row->errors += p.errors;
    row->mismatches += p.mismatches;
    if (row->first_error.empty()) row->first_error = p.error;
  }
  row->bytes = row->blocks * row->size;
  row->p50_us = lat.Percentile(50);
  row->p99_us = lat.Percentile(99);
}

// The handles of one system for one row.
struct Target {
  std::string system;
  std::vector<Client*> clients;                     // Shelf: per thread (may all be the same)
  std::vector<std::unique_ptr<RedisShards>> redis;  // Redis: per thread
  bool redis_system() const { return system == "redis"; }
};

std::string KeyOf(const std::string& prefix, uint64_t id) { return absl::StrCat(prefix, id); }

// Put row: thread t writes ids (t << 32) + n, n = 0, 1, ...; `written`
// gets the ids that were stored, for the get row.
void PutRow(const Config& cfg, const Blocks& blocks, const std::string& prefix, Target* target,
            Row* row, std::vector<uint64_t>* written) {
  size_t per_op = row->batch_n;
  uint64_t quota = std::max<uint64_t>(
      1, cfg.row_bytes_max / (row->size * per_op * static_cast<uint64_t>(row->threads)));
  // Each thread owns per_op buffers, filled (and so faulted in) up front;
  // an op only restamps their ids.
  std::vector<std::unique_ptr<ValueBuffer>> bufs;
  for (int t = 0; t < row->threads; ++t) {
    bufs.push_back(std::make_unique<ValueBuffer>(per_op * row->size, cfg.shared_values));
    for (size_t j = 0; j < per_op; ++j) {
      blocks.Fill(0, bufs.back()->data() + j * row->size, row->size);
    }
  }
  std::vector<std::vector<uint64_t>> ids(row->threads);
  RunRow(cfg, quota, row, [&](int t, uint64_t i) {
    OpResult r;
    char* base = bufs[t]->data();
    // The warm-up op writes one block, under an id above those of the
    // timed ops: enough to open connections and fault in buffers.
    bool warmup = i == kWarmupOp;
    bool batch = row->batch && !warmup;
    size_t n_blocks = batch ? per_op : 1;
    uint64_t index = warmup ? (1ull << (kIdsPerThreadShift - 1)) : i * per_op;
    uint64_t first = (static_cast<uint64_t>(t) << kIdsPerThreadShift) + index;
    if (target->redis_system()) {
      RedisShards* conn = target->redis[t].get();
      absl::Status s;
      if (!batch) {
        Blocks::Stamp(first, base);
        s = conn->Set(KeyOf(prefix, first), base, row->size);
      } else {
        std::vector<RedisItem> items(n_blocks);
        for (size_t j = 0; j < n_blocks; ++j) {
          Blocks::Stamp(first + j, base + j * row->size);
          items[j] = RedisItem{KeyOf(prefix, first + j), base + j * row->size, row->size};
        }
        s = conn->PipelinedSet(items);
      }
      if (s.ok()) {
        r.blocks = n_blocks;
        for (size_t j = 0; j < n_blocks; ++j) ids[t].push_back(first + j);
      } else {
        r.errors = n_blocks;
        r.error = std::string(s.message());
      }
      return r;
    }
    Client* client = target->clients[t];
    if (!batch) {
      Blocks::Stamp(first, base);
      Status s = client->Put(KeyOf(prefix, first), base, row->size);
      if (s.ok()) {
        r.blocks = 1;
        ids[t].push_back(first);
      } else {
        r.errors = 1;
        r.error = s.ToString();
      }
      return r;
    }
    std::vector<PutItem> items(n_blocks);
    for (size_t j = 0; j < n_blocks; ++j) {
      Blocks::Stamp(first + j, base + j * row->size);
      items[j] = PutItem{KeyOf(prefix, first + j), base + j * row->size, row->size};
    }
    std::vector<Status> statuses;
    Status s = client->BatchPut(items, &statuses);
    for (size_t j = 0; j < n_blocks; ++j) {
      const Status& st = s.ok() ? statuses[j] : s;
      if (st.ok()) {
        ++r.blocks;
        ids[t].push_back(first + j);
      } else {
        ++r.errors;
        if (r.error.empty()) r.error = st.ToString();
      }
    }
    return r;
  });
  // Interleave the threads' ids so every get thread reads blocks of all.
  written->clear();
  for (size_t n = 0;; ++n) {
    bool any = false;
    for (const auto& v : ids) {
      if (n < v.size()) {
        written->push_back(v[n]);
        any = true;
      }
    }
    if (!any) break;
  }
}

// Get row: thread t reads the written ids round-robin from its own start.
void GetRow(const Config& cfg, const Blocks& blocks, const std::string& prefix,
            const std::vector<uint64_t>& ids, Target* target, Row* row) {
  size_t per_op = row->batch_n;
  std::vector<std::vector<char>> bufs(row->threads, std::vector<char>(row->size, 1));
  std::vector<std::vector<std::string>> values(row->threads);
  size_t n = ids.size();
  RunRow(cfg, UINT64_MAX, row, [&](int t, uint64_t i) {
    OpResult r;
    size_t start = (n * static_cast<size_t>(t)) / static_cast<size_t>(row->threads);
    // The warm-up op reads one block (any); its result is not counted.
    bool warmup = i == kWarmupOp;
    if (warmup) i = n / 2;
    bool batch = row->batch && !warmup;
    size_t n_blocks = batch ? per_op : 1;
    if (!batch) {
      uint64_t id = ids[(start + i) % n];
      std::string key = KeyOf(prefix, id);
      char* buf = bufs[t].data();
      size_t got = 0;
      bool ok;
      if (target->redis_system()) {
        absl::Status s = target->redis[t]->GetInto(key, buf, row->size, &got);
        ok = s.ok();
        if (!ok) r.error = std::string(s.message());
      } else {
        Status s = target->clients[t]->GetInto(key, buf, row->size, &got);
        ok = s.ok();
        if (!ok) r.error = s.ToString();
      }
      if (!ok) {
        r.errors = 1;
      } else if (!blocks.Check(id, buf, got, row->size)) {
        r.mismatches = 1;
      } else {
        r.blocks = 1;
      }
      return r;
    }
    std::vector<std::string> keys(n_blocks);
    std::vector<uint64_t> batch_ids(n_blocks);
    for (size_t j = 0; j < n_blocks; ++j) {
      batch_ids[j] = ids[(start + i * n_blocks + j) % n];
      keys[j] = KeyOf(prefix, batch_ids[j]);
    }
    std::vector<std::string>& vals = values[t];
    std::vector<bool> ok(n_blocks, false);
    if (target->redis_system()) {
      size_t missing = 0;
      absl::Status s = target->redis[t]->PipelinedGet(keys, row->size, &vals, &missing);
      if (!s.ok()) {
        r.error = std::string(s.message());
      } else {
        for (size_t j = 0; j < n_blocks; ++j) ok[j] = vals[j].size() == row->size;
        if (missing > 0) r.error = "redis: missing keys";
      }
    } else {
      std::vector<Status> statuses;
      Status s = target->clients[t]->BatchGet(keys, &vals, &statuses);
      for (size_t j = 0; j < n_blocks; ++j) {
        ok[j] = s.ok() && statuses[j].ok();
        if (!ok[j] && r.error.empty()) r.error = s.ok() ? statuses[j].ToString() : s.ToString();
      }
    }
    for (size_t j = 0; j < n_blocks; ++j) {
      if (!ok[j]) {
        ++r.errors;
      } else if (!blocks.Check(batch_ids[j], vals[j].data(), vals[j].size(), row->size)) {
        ++r.mismatches;
      } else {
        ++r.blocks;
      }
    }
    return r;
  });
}

// Removes a row's keys so the next row starts with empty stores.
void Cleanup(const std::string& prefix, const std::vector<uint64_t>& ids, Target* target) {
  if (target->redis_system()) {
    if (!target->redis.empty()) target->redis[0]->FlushAll().IgnoreError();
    return;
  }
  // One BatchRemove per kBatchItemsMax keys, the batches spread over the
  // clients.
  size_t workers = std::min<size_t>(target->clients.size(), 8);
  size_t batches = (ids.size() + kBatchItemsMax - 1) / kBatchItemsMax;
  std::vector<std::thread> th;
  for (size_t w = 0; w < workers; ++w) {
    th.emplace_back([&, w] {
      std::vector<std::string> keys;
      std::vector<Status> statuses;
      for (size_t b = w; b < batches; b += workers) {
        keys.clear();
        size_t end = std::min(ids.size(), (b + 1) * kBatchItemsMax);
        for (size_t i = b * kBatchItemsMax; i < end; ++i) keys.push_back(KeyOf(prefix, ids[i]));
        target->clients[w]->BatchRemove(keys, &statuses).ok();  // best effort
      }
    });
  }
  for (std::thread& t : th) t.join();
}

// Writes `bytes` in 4 MiB blocks through `target` and removes them again,
// so that the rows find the stores' segment pages (and Redis's allocator)
// already faulted in, as in a long-running deployment.
void Prewarm(const Blocks& blocks, uint64_t max_size, const std::string& prefix, uint64_t bytes,
             Target* target) {
  const uint64_t size = std::min<uint64_t>(4ull << 20, max_size);
  std::vector<char> buf(size);
  blocks.Fill(0, buf.data(), size);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id * size < bytes && !StopRequested(); ++id) {
    bool ok = target->redis_system()
                  ? target->redis[0]->Set(KeyOf(prefix, id), buf.data(), size).ok()
                  : target->clients[0]->Put(KeyOf(prefix, id), buf.data(), size).ok();
    if (!ok) break;  // full: warm enough
    ids.push_back(id);
  }
  Cleanup(prefix, ids, target);
}

// Fills the location caches of `clients` with the row's keys (untimed):
// two passes, a heartbeat apart, so a key the store had not yet recorded
// by key at the first is cached at the second.
void FillCaches(const std::string& prefix, const std::vector<uint64_t>& ids,
                const std::vector<Client*>& clients) {
  std::vector<Client*> distinct = clients;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (int pass = 0; pass < 2 && !StopRequested(); ++pass) {
    if (pass == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
    for (Client* c : distinct) {
      std::vector<std::string> keys, values;
      std::vector<Status> statuses;
      for (size_t i = 0; i < ids.size(); i += kBatchItemsMax) {
        keys.clear();
        for (size_t j = i; j < std::min(ids.size(), i + kBatchItemsMax); ++j) {
          keys.push_back(KeyOf(prefix, ids[j]));
        }
        c->BatchGet(keys, &values, &statuses).ok();  // best effort: misses stay cold
      }
    }
  }
}

}  // namespace

int KvBench(int argc, char** argv) {
  std::string master, sizes_text = "64KiB,1MiB,4MiB", threads_text = "1,4,16", work_dir;
  std::string redis_binary = "/usr/bin/redis-server", systems_text = "redis,shm,tcp";
  int64_t stores = 2, batch = 16;
  uint64_t dram_size = 1536ull << 20, row_bytes_max = 256ull << 20;
  int64_t redis_servers = 0;
  uint64_t redis_pipeline_bytes = 4ull << 20;
  double seconds = 1.0;
  bool quick = false, json_only = false, no_redis = false, client_per_thread = false;
  bool shared_values = false;
  bool grant_row = true;
  Flags flags("shelf-bench kv",
              "puts and gets through libshelf (shared memory and TCP) next to redis-server");
  flags.AddString("master", &master, "use this cluster instead of starting one");
  flags.AddInt("stores", &stores, "stores in the cluster the bench starts");
  flags.AddSize("dram-size", &dram_size, "DRAM segment per store");
  flags.AddString("sizes", &sizes_text, "block sizes, comma-separated");
  flags.AddString("threads", &threads_text, "client thread counts, comma-separated");
  flags.AddInt("batch", &batch,
               "blocks per BatchPut/BatchGet and per Redis pipeline (fewer where threads x batch x "
               "block would exceed --row-bytes-max)");
  flags.AddDouble("seconds", &seconds, "time limit of each row");
  flags.AddSize("row-bytes-max", &row_bytes_max,
                "a put row stops after writing this much (at least one op per thread), and no "
                "row has more in flight");
  flags.AddBool("client-per-thread", &client_per_thread,
                "give each thread its own Client (default: one Client shared by all threads)");
  flags.AddBool("shared-values", &shared_values,
                "put values from shared host memory (AllocateSharedHostMemory), which a "
                "same-host store copies from directly, for every system (default: private "
                "memory, which shm puts stage first)");
  flags.AddString("redis-server", &redis_binary, "redis-server binary for the baseline");
  flags.AddBool("no-redis", &no_redis, "skip the Redis rows");
  flags.AddInt("redis-servers", &redis_servers,
               "redis-servers of the baseline, keys sharded over them (0: as many as --stores)");
  flags.AddSize("redis-pipeline-bytes", &redis_pipeline_bytes,
                "values per Redis pipeline of a batched row, at most (at least one value)");
  flags.AddString("systems", &systems_text, "systems to run, of redis,shm,tcp");
  flags.AddBool("quick", &quick,
                "tiny run for smoke tests: 64KiB,1MiB x 1,4 threads, 0.2 s rows, small stores");
  flags.AddBool("json-only", &json_only, "print only the JSON line");
  flags.AddBool("grant-row", &grant_row, "measure read grants on vs off (two more clusters)");
  flags.AddString("work-dir", &work_dir, "keep the cluster's and Redis's logs here");
  flags.ParseOrExit(argc, argv);
  if (quick) {
    if (!flags.WasSet("sizes")) sizes_text = "64KiB,1MiB";
    if (!flags.WasSet("threads")) threads_text = "1,4";
    if (!flags.WasSet("seconds")) seconds = 0.2;
    if (!flags.WasSet("dram-size")) dram_size = 256ull << 20;
    if (!flags.WasSet("row-bytes-max")) row_bytes_max = 32ull << 20;
  }
  Config cfg;
  auto sizes = ParseSizes(sizes_text);
  auto threads = ParseInts(threads_text, 1, 256);
  if (!sizes.ok() || !threads.ok() || batch < 1 || batch > static_cast<int64_t>(kBatchItemsMax) ||
      seconds <= 0) {
    std::fprintf(stderr,
                 "shelf-bench kv: bad --sizes, --threads, --batch (1..%zu) or --seconds%s%s\n",
                 kBatchItemsMax, sizes.ok() ? "" : ": ",
                 sizes.ok() ? "" : std::string(sizes.status().message()).c_str());
    return 2;
  }
  cfg.sizes = *sizes;
  cfg.threads = *threads;
  cfg.batch = static_cast<int>(batch);
  cfg.seconds = seconds;
  cfg.row_bytes_max = row_bytes_max;
  cfg.client_per_thread = client_per_thread;
  cfg.shared_values = shared_values;
  int max_threads = *std::max_element(cfg.threads.begin(), cfg.threads.end());
  uint64_t max_size = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());

  // Processes: the cluster (unless given), then Redis.
  std::unique_ptr<LocalCluster> cluster;
  if (master.empty()) {
    LocalCluster::Options co;
    co.stores = static_cast<int>(stores);
    co.dram_bytes = dram_size;
    co.work_dir = work_dir;
    co.wait_populated = true;  // rows start once the populators are done
    // Leases outlast the slowest get op on a busy 2-core machine, and end
    // soon enough that the ranges of a row's removed blocks (freed when
    // their leases end) are free again a few rows later.
    co.master_args = {"--lease", "3s"};
    auto c = LocalCluster::Start(co);
    if (!c.ok()) {
      std::fprintf(stderr, "shelf-bench kv: cannot start a cluster: %s\n",
                   std::string(c.status().message()).c_str());
      return 1;
    }
    cluster = *std::move(c);
    master = cluster->master_address();
  }
  std::string redis_note;
  std::vector<std::unique_ptr<RedisServer>> redis;
  std::vector<int> redis_ports;
  if (redis_servers <= 0) redis_servers = cluster ? stores : 1;
  std::string scratch_dir;
  no_redis = no_redis || !absl::StrContains(systems_text, "redis");
  if (!no_redis) {
    std::string dir = cluster ? cluster->work_dir() : work_dir;
    if (dir.empty()) {
      char tmpl[] = "/tmp/shelf-bench-redis-XXXXXX";
      if (mkdtemp(tmpl) != nullptr) scratch_dir = dir = tmpl;
    }
    for (int64_t i = 0; i < redis_servers && redis_note.empty(); ++i) {
      std::string d = absl::StrCat(dir.empty() ? "/tmp" : dir, "/redis-", i);
      std::filesystem::create_directories(d);
      auto r = RedisServer::Start(redis_binary, d);
      if (r.ok()) {
        redis_ports.push_back((*r)->port());
        redis.push_back(*std::move(r));
      } else {
        redis_note = std::string(r.status().message());
        std::fprintf(stderr, "shelf-bench kv: no Redis baseline: %s\n", redis_note.c_str());
        redis.clear();
      }
    }
  } else {
    redis_note = "--no-redis";
  }

  // Clients: per system, one shared or one per thread.
  std::vector<std::unique_ptr<Client>> clients;
  auto open_client = [&](bool shm, size_t cache_entries) -> Client* {
    ClientOptions o;
    o.masters = {master};
    o.allow_shm = shm;
    o.location_cache_entries = cache_entries;
    o.timeout_ms = cfg.timeout_ms;
    std::unique_ptr<Client> c;
    if (Status s = Client::Open(o, &c); !s.ok()) {
      std::fprintf(stderr, "shelf-bench kv: %s\n", s.ToString().c_str());
      return nullptr;
    }
    clients.push_back(std::move(c));
    return clients.back().get();
  };
  std::vector<Target> targets;
  std::map<std::string, Target> warm_targets;  // by cold system
  for (const char* sys : kSystems) {
    if (!absl::StrContains(absl::StrCat(",", systems_text, ","), absl::StrCat(",", sys, ","))) {
      continue;
    }
    Target t;
    t.system = sys;
    if (t.redis_system()) {
      if (redis.empty()) continue;
      for (int i = 0; i < max_threads; ++i) {
        auto conn = RedisShards::Connect(redis_ports, redis_pipeline_bytes);
        if (!conn.ok()) {
          std::fprintf(stderr, "shelf-bench kv: %s\n",
                       std::string(conn.status().message()).c_str());
          return 1;
        }
        t.redis.push_back(*std::move(conn));
      }
    } else {
      bool shm = t.system == "shm";
      Target& warm = warm_targets[t.system];
      warm.system = t.system + "-warm";
      for (int i = 0; i < max_threads; ++i) {
        Client* c = (i == 0 || cfg.client_per_thread) ? open_client(shm, 0) : t.clients[0];
        Client* w = (i == 0 || cfg.client_per_thread) ? open_client(shm, 1 << 20) : warm.clients[0];
        if (c == nullptr || w == nullptr) return 1;
        t.clients.push_back(c);
        warm.clients.push_back(w);
      }
    }
    targets.push_back(std::move(t));
  }

  std::string run_prefix = absl::StrCat("kv/", getpid(), "/", MonoUs() % 1000000, "/");
  Blocks blocks(max_size, cfg.sizes);
  if (!StopRequested()) {
    uint64_t row_max = row_bytes_max;
    for (Target& t : targets) {
      if (t.redis_system()) {
        Prewarm(blocks, max_size, run_prefix + "warm/", std::min<uint64_t>(row_max, 256ull << 20),
                &t);
      } else if (t.system == "shm" && cluster != nullptr) {
        // 90% of the cluster's DRAM, under the master's eviction watermark.
        Prewarm(blocks, max_size, run_prefix + "warm/", stores * dram_size / 10 * 9, &t);
      }
    }
  }
  std::vector<Row> rows;
  size_t total_rows = cfg.sizes.size() * cfg.threads.size() * 2 * targets.size() * 3;
  const std::string load_start = LoadAverage();
  Progress progress("kv", total_rows);
  auto print_row = [&](const Row& r, double redis_gbps) {
    if (json_only) return;
    std::printf("  %-4s %-6s %7s %3d  %-5s %8.3f %9.0f %9.0f %9.0f  %7s%s\n", r.op().c_str(),
                r.mode().c_str(), FormatBytes(r.size).c_str(), r.threads, r.system.c_str(),
                r.gbps(), r.ops_per_s(), r.p50_us, r.p99_us,
                r.system == "redis" ? "" : Ratio(r.gbps(), redis_gbps).c_str(),
                r.errors + r.mismatches
                    ? absl::StrCat("  errors ", r.errors, " mismatches ", r.mismatches).c_str()
                    : "");
    std::fflush(stdout);
  };
  if (!json_only) {
    std::printf("\nShelf kv: libshelf vs redis-server, %s, %s per row%s\n",
                cluster ? absl::StrCat(stores, " local stores x ", FormatBytes(dram_size)).c_str()
                        : master.c_str(),
                absl::StrFormat("%.1f s", cfg.seconds).c_str(),
                cfg.client_per_thread ? ", a Client per thread" : ", one shared Client");
    if (!redis_note.empty()) std::printf("  (no Redis rows: %s)\n", redis_note.c_str());
    std::printf("  redis: %zu servers, keys sharded by hash, pipelines of at most %s\n",
                redis.size(), FormatBytes(redis_pipeline_bytes).c_str());
    std::printf("  load average at start: %s (an idle machine reads near 0)\n", load_start.c_str());
    std::printf("\n  %-4s %-6s %7s %3s  %-5s %8s %9s %9s %9s  %7s\n", "op", "mode", "block", "thr",
                "sys", "GB/s", "blocks/s", "p50 us", "p99 us", "vs redis");
  }
  size_t done = 0;
  for (uint64_t size : cfg.sizes) {
    for (int nthreads : cfg.threads) {
      for (bool batch_mode : {false, true}) {
        double redis_gbps[2] = {0, 0};  // put, get
        for (Target& target : targets) {
          if (StopRequested()) break;
          std::string prefix = absl::StrCat(run_prefix, target.system, "/", size, "/", nthreads,
                                            batch_mode ? "b/" : "s/");
          std::vector<uint64_t> written;
          Row put{target.system, true, batch_mode, size, nthreads};
          if (batch_mode) {
            // A row moves at most --row-bytes-max at once: fewer blocks per
            // op where threads x batch x size would exceed it.
            uint64_t fit = row_bytes_max / (size * static_cast<uint64_t>(nthreads));
            put.batch_n = static_cast<size_t>(
                std::max<uint64_t>(1, std::min<uint64_t>(fit, static_cast<uint64_t>(cfg.batch))));
          }
          PutRow(cfg, blocks, prefix, &target, &put, &written);
          if (target.redis_system()) redis_gbps[0] = put.gbps();
          print_row(put, redis_gbps[0]);
          rows.push_back(put);
          Row get{target.system, false, batch_mode, size, nthreads};
          get.batch_n = put.batch_n;
          if (!written.empty() && !StopRequested()) {
            GetRow(cfg, blocks, prefix, written, &target, &get);
          } else if (written.empty()) {
            get.errors = 1;
            get.first_error = "the put row stored nothing";
          }
          if (target.redis_system()) redis_gbps[1] = get.gbps();
          print_row(get, redis_gbps[1]);
          rows.push_back(get);
          if (auto w = warm_targets.find(target.system);
              w != warm_targets.end() && !written.empty() && !StopRequested()) {
            FillCaches(prefix, written, w->second.clients);
            Row warm{w->second.system, false, batch_mode, size, nthreads};
            warm.batch_n = put.batch_n;
            GetRow(cfg, blocks, prefix, written, &w->second, &warm);
            print_row(warm, redis_gbps[1]);
            rows.push_back(warm);
          }
          Cleanup(prefix, written, &target);
          done += 2;
          if (json_only || !isatty(STDOUT_FILENO)) progress.Update(done, "");
        }
      }
    }
  }

  // Shelf/Redis GB/s per matching row; the minimum over the get rows of
  // 1 MiB and up is the headline.
  auto find = [&](const Row& like, const char* system) -> const Row* {
    for (const Row& r : rows) {
      if (r.system == system && r.put == like.put && r.batch == like.batch && r.size == like.size &&
          r.threads == like.threads) {
        return &r;
      }
    }
    return nullptr;
  };
  const char* const kShelf[] = {"shm", "tcp", "shm-warm", "tcp-warm"};
  double mins[4][2] = {};  // [kShelf][get|put]
  bool have[4][2] = {};
  uint64_t errors = 0, mismatches = 0;
  std::string first_error;
  Json row_json = Json::array();
  for (const Row& r : rows) {
    errors += r.errors;
    mismatches += r.mismatches;
    if (first_error.empty() && !r.first_error.empty()) {
      first_error = absl::StrCat(r.system, " ", r.op(), ": ", r.first_error);
    }
    const Row* base = r.system == "redis" ? nullptr : find(r, "redis");
    Json o = Json::object();
    o["sys"] = r.system;
    o["op"] = r.op();
    o["batch"] = static_cast<uint64_t>(r.batch_n);
    o["block_bytes"] = r.size;
    o["threads"] = r.threads;
    o["gbps"] = r.gbps();
    o["blocks_per_s"] = r.ops_per_s();
    o["p50_us"] = r.p50_us;
    o["p99_us"] = r.p99_us;
    o["errors"] = r.errors + r.mismatches;
    if (base != nullptr && base->gbps() > 0) {
      double ratio = r.gbps() / base->gbps();
      o["vs_redis"] = ratio;
      int s = 0;
      while (s < 3 && r.system != kShelf[s]) ++s;
      int p = r.put ? 1 : 0;
      if (r.size >= (1ull << 20)) {
        mins[s][p] = have[s][p] ? std::min(mins[s][p], ratio) : ratio;
        have[s][p] = true;
      }
    }
    row_json.push_back(o);
  }
  ClientStats shm_stats, tcp_stats;
  for (const Target& t : targets) {
    if (t.system == "shm") shm_stats = t.clients[0]->stats();
    if (t.system == "tcp") tcp_stats = t.clients[0]->stats();
  }
  if (!json_only) {
    std::printf("\n  Shelf/Redis GB/s, smallest over the rows of 1 MiB blocks and up:\n");
    auto min_text = [&](int s, int p) {
      return have[s][p] ? absl::StrFormat("%.2fx", mins[s][p]) : std::string("-");
    };
    std::printf("    get: shm %s, tcp %s; warm: shm %s, tcp %s\n", min_text(0, 0).c_str(),
                min_text(1, 0).c_str(), min_text(2, 0).c_str(), min_text(3, 0).c_str());
    std::printf("    put: shm %s, tcp %s\n",
                have[0][1] ? absl::StrFormat("%.2fx", mins[0][1]).c_str() : "-",
                have[1][1] ? absl::StrFormat("%.2fx", mins[1][1]).c_str() : "-");
    std::printf("  bytes loaded by the shm client: %s through shared memory, %s over tcp%s\n",
                FormatBytes(shm_stats.bytes_loaded_shm).c_str(),
                FormatBytes(shm_stats.bytes_loaded_tcp).c_str(),
                cfg.client_per_thread ? " (its first Client)" : "");
    std::printf("  errors %llu, mismatches %llu%s%s\n\n", static_cast<unsigned long long>(errors),
                static_cast<unsigned long long>(mismatches),
                first_error.empty() ? "" : "; first: ", first_error.c_str());
  }
  Json o = Json::object();
  o["bench"] = "kv";
  o["redis"] = !redis.empty();
  o["redis_servers"] = redis.size();
  o["redis_pipeline_bytes"] = redis_pipeline_bytes;
  o["load_avg_start"] = load_start;
  o["load_avg_end"] = LoadAverage();
  if (have[2][0]) o["shm_warm_vs_redis_min"] = mins[2][0];
  if (have[3][0]) o["tcp_warm_vs_redis_min"] = mins[3][0];
  o["stopped"] = StopRequested();
  o["seconds_per_row"] = cfg.seconds;
  o["batch"] = cfg.batch;
  o["client_per_thread"] = cfg.client_per_thread;
  if (have[1][0])
    o["tcp_vs_redis_min"] = mins[1][0];
  else
    o["tcp_vs_redis_min"] = nullptr;
  if (have[0][0])
    o["shm_vs_redis_min"] = mins[0][0];
  else
    o["shm_vs_redis_min"] = nullptr;
  if (have[1][1]) o["tcp_vs_redis_put_min"] = mins[1][1];
  if (have[0][1]) o["shm_vs_redis_put_min"] = mins[0][1];
  o["shm_bytes_loaded_shm"] = shm_stats.bytes_loaded_shm;
  o["tcp_bytes_loaded_shm"] = tcp_stats.bytes_loaded_shm;
  o["errors"] = errors;
  o["mismatches"] = mismatches;
  o["rows"] = row_json;
  if (grant_row && !StopRequested()) o["read_grants"] = ReadGrantRow(cfg.seconds, json_only);
  if (!json_only) std::printf("  load average at end: %s\n", LoadAverage().c_str());
  targets.clear();
  warm_targets.clear();
  clients.clear();
  redis.clear();
  cluster.reset();
  if (!scratch_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(scratch_dir, ec);
  }
  std::printf("%s\n", JsonDump(o).c_str());
  return errors == 0 && mismatches == 0 ? 0 : 1;
}

}  // namespace shelf::bench
