// shelf-bench master: the metadata master's throughput and memory.
//
//   in-process  a Master object (server/master/master.h), one fake store
//               registered with a DRAM segment of --segment-size; objects
//               of --object-bytes under 16-byte content keys, one replica:
//               PutStart+PutCommit objects/s while filling, then Lookup
//               (1 key and 64 keys per call) and MatchPrefix (64-key chains)
//               keys/s on 1 and 2 threads
//   memory      bytes per object from the process's RSS growth (and the
//               heap's, mallinfo2) between the empty master and
//               --objects-small objects (put) and --objects objects (the
//               rest registered as fake stores' inventories, 1M per store,
//               as after a failover; this also times that ingest). The
//               bench keeps no per-object state of its own: keys are
//               recomputed from their index
//   gRPC        a shelf-master process on loopback, a fake store
//               registered through MasterService.RegisterStore, objects put
//               with BatchPutStart+PutCommit, then MatchPrefix keys/s with
//               1, 16 and 64 keys per call from --grpc-threads threads
//   --stores N  a different bench (master_stores_bench.cc): one shelf-master
//               with N simulated stores heartbeating, at a cluster's scale
//   --no-read-grants  the in-process master mints no read grants (what
//               they cost: a Lookup or MatchPrefix hit mints one per replica)
//   --inline-stores  reads ask without `store_table` (each replica carries
//               its store's endpoint, as before libshelf asked for a table)
//   --tenant T  the in-process master keeps tenant namespaces and tenants'
//               quotas (a credentials table with one engine of tenant T):
//               every key is kept as "T/" + its content key
// Goals it reports against: >= 2M lookups/s in-process on one core,
// >= 200k keys/s over gRPC with 64-key batches, <= 200 bytes per object.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/rpc.h"
#include "common/units.h"
#include "proto/shelf.grpc.pb.h"
#include "server/master/master.h"
#include "testing/local_cluster.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/proc_stats.h"

namespace shelf::bench {

bool StopRequested();                          // main.cc: SIGINT/SIGTERM arrived
int MasterStoresBench(int argc, char** argv);  // master_stores_bench.cc: --stores N

namespace {

constexpr size_t kChain = 64;         // keys per batched Lookup and per MatchPrefix chain
constexpr size_t kRequestPool = 256;  // prebuilt gRPC requests each thread cycles through
// Keys in the prebuilt in-process requests of each thread: enough that the
// objects they touch do not all stay in the CPU caches.
constexpr size_t kPoolKeys = 65536;
constexpr size_t kCommitBatch = 1024;

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Set once from --key-bytes and --tenant, before any thread starts.
size_t g_key_bytes = 16;
std::string g_key_prefix;  // "TENANT/" with --tenant: the kept form of a tenant's key

// The key of object i as the master keeps it: g_key_prefix, then
// g_key_bytes pseudo-random bytes (16 is a 128-bit chained block hash, as
// the SDK's content keys are).
std::string KeyOf(uint64_t i) {
  std::string k(g_key_prefix.size() + g_key_bytes, '\0');
  std::memcpy(k.data(), g_key_prefix.data(), g_key_prefix.size());
  uint64_t x = i;
  for (size_t off = g_key_prefix.size(); off < k.size(); off += 8) {
    x = SplitMix(x ^ 0x5bd1e9955bd1e995ull);
    std::memcpy(&k[off], &x, std::min<size_t>(8, k.size() - off));
  }
  return k;
}

double ThreadCpuSeconds() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Heap bytes in use; trims the heap first, so call it before RssBytes.
uint64_t HeapBytes() {
  malloc_trim(0);
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

constexpr char kFakeNode[] = "bench-store-0";  // the store puts go to

// A fake store's registration; store i > 0 is named bench-store-i.
v1::RegisterStoreRequest FakeStore(uint64_t segment_bytes, int i = 0) {
  v1::RegisterStoreRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::StoreEndpoint* ep = req.mutable_endpoint();
  ep->set_node_id(i == 0 ? std::string(kFakeNode) : absl::StrCat("bench-store-", i));
  ep->set_data_address("127.0.0.1:9");  // never dialled
  ep->set_host_id("bench-host");
  ep->add_transports(v1::TRANSPORT_TCP);
  v1::SegmentInfo* seg = req.add_segments();
  seg->set_segment_id(0);
  seg->set_capacity_bytes(segment_bytes);
  seg->set_tier(v1::TIER_DRAM);
  req.set_incarnation(1);
  return req;
}

struct Rate {
  uint64_t keys = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // of the thread(s) doing the work (in-process) or of the master
  Samples lat_us;          // per call
  uint64_t errors = 0;
  std::string error;
  double per_s() const { return seconds > 0 ? keys / seconds : 0; }
  // Per CPU-second: what one core does, whatever else the machine runs.
  double per_cpu_s() const { return cpu_seconds > 0 ? keys / cpu_seconds : 0; }
};

constexpr uint64_t kHeartbeatEvery = 4096;  // puts between the fake store's heartbeats

v1::HeartbeatRequest FakeHeartbeat() {
  v1::HeartbeatRequest hb;
  hb.set_node_id(kFakeNode);
  hb.set_incarnation(1);
  return hb;
}

// In-process: fills objects [from, to) with PutStart + PutCommit. The fake
// store heartbeats as a real one would (every ~4k puts here), which drains
// what the master queues for it.
absl::Status Fill(master::Master* master, uint64_t from, uint64_t to, uint64_t object_bytes,
                  Rate* rate) {
  v1::PutStartRequest req;
  req.set_size(object_bytes);
  req.mutable_options()->set_replicas(1);
  v1::PutStartResponse resp;
  v1::PutCommitRequest commit;
  v1::PutCommitResponse cresp;
  uint64_t start = MonoUs();
  double cpu0 = ThreadCpuSeconds();
  for (uint64_t i = from; i < to; ++i) {
    if ((i & 4095) == 0 && StopRequested()) break;
    req.set_key(KeyOf(i));
    req.set_checksum(i);
    resp.Clear();
    absl::Status s = master->PutStart(req, "", "bench", &resp);
    if (!s.ok()) return s;
    if (resp.state() != v1::PUT_STARTED) return absl::InternalError("PutStart did not start a put");
    commit.add_put_ids(resp.put_id());
    if (commit.put_ids_size() == static_cast<int>(kCommitBatch) || i + 1 == to) {
      cresp.Clear();
      master->PutCommit(commit, "bench", &cresp);
      for (const v1::RpcStatus& st : cresp.statuses()) {
        if (st.code() != 0) return absl::InternalError(st.message());
      }
      commit.clear_put_ids();
    }
    ++rate->keys;
    if ((i + 1) % kHeartbeatEvery == 0 || i + 1 == to) {
      v1::HeartbeatResponse hresp;
      if (absl::Status hs = master->Heartbeat(FakeHeartbeat(), &hresp); !hs.ok()) return hs;
    }
  }
  rate->seconds += (MonoUs() - start) / 1e6;
  rate->cpu_seconds += ThreadCpuSeconds() - cpu0;
  return absl::OkStatus();
}

// In-process: adds objects [from, to) as the inventories of new fake
// stores (1M objects each), as stores re-registering with a new leader do.
// Much faster than puts, so the large memory point is quick to reach.
absl::Status Grow(master::Master* master, uint64_t from, uint64_t to, uint64_t object_bytes,
                  uint64_t segment_bytes, Rate* rate) {
  constexpr uint64_t kPerStore = 1000000;
  int store = 1;
  for (uint64_t base = from; base < to && !StopRequested(); base += kPerStore, ++store) {
    v1::RegisterStoreRequest req = FakeStore(segment_bytes, store);
    uint64_t n = std::min(kPerStore, to - base);
    req.mutable_inventory()->Reserve(static_cast<int>(n));
    for (uint64_t i = 0; i < n; ++i) {
      v1::InventoryEntry* e = req.add_inventory();
      e->set_key(KeyOf(base + i));
      e->set_size(object_bytes);
      e->set_checksum(base + i);
      e->set_tier(v1::TIER_DRAM);
      e->set_segment_id(0);
      e->set_offset(i * ((object_bytes + 4095) / 4096 * 4096));
    }
    v1::RegisterStoreResponse resp;
    uint64_t t0 = MonoUs();
    double cpu0 = ThreadCpuSeconds();
    absl::Status s = master->RegisterStore(req, &resp);
    rate->seconds += (MonoUs() - t0) / 1e6;
    rate->cpu_seconds += ThreadCpuSeconds() - cpu0;
    if (!s.ok()) return s;
    rate->keys += n;
  }
  return absl::OkStatus();
}

enum class ReadKind { kLookup1, kLookup64, kMatchPrefix64 };

// In-process reads of random present objects on `threads` threads.
Rate InProcessReads(master::Master* master, uint64_t objects, ReadKind kind, int threads,
                    double seconds, bool store_table) {
  size_t keys_per_call = kind == ReadKind::kLookup1 ? 1 : kChain;
  std::vector<Rate> per(threads);
  std::atomic<bool> go{false};
  std::vector<std::thread> th;
  th.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    th.emplace_back([&, t] {
      // Requests are built first, so the timing is the master's alone.
      size_t pool = kPoolKeys / keys_per_call;
      std::vector<v1::LookupRequest> lookups(kind == ReadKind::kMatchPrefix64 ? 0 : pool);
      std::vector<v1::MatchPrefixRequest> matches(kind == ReadKind::kMatchPrefix64 ? pool : 0);
      uint64_t x = SplitMix(t + 1);
      for (size_t r = 0; r < pool; ++r) {
        x = SplitMix(x);
        uint64_t first = x % (objects - keys_per_call + 1);
        for (size_t k = 0; k < keys_per_call; ++k) {
          if (kind == ReadKind::kMatchPrefix64) {
            matches[r].set_store_table(store_table);
            matches[r].add_keys(KeyOf(first + k));
          } else {
            lookups[r].set_store_table(store_table);
            lookups[r].add_keys(
                KeyOf(kind == ReadKind::kLookup1 ? first : SplitMix(x + k) % objects));
          }
        }
      }
      while (!go.load()) std::this_thread::yield();
      v1::LookupResponse lresp;
      v1::MatchPrefixResponse mresp;
      Rate& rate = per[t];
      uint64_t start = MonoUs();
      double cpu0 = ThreadCpuSeconds();
      uint64_t until = start + static_cast<uint64_t>(seconds * 1e6);
      for (size_t i = 0;; ++i) {
        size_t r = i % pool;
        absl::Status s;
        size_t found = 0;
        if (kind == ReadKind::kMatchPrefix64) {
          mresp.Clear();
          s = master->MatchPrefix(matches[r], &mresp);
          found = mresp.matched();
        } else {
          lresp.Clear();
          s = master->Lookup(lookups[r], &lresp);
          for (const v1::ObjectLocation& o : lresp.objects()) found += o.found() ? 1 : 0;
        }
        if (!s.ok() || found != keys_per_call) {
          ++rate.errors;
          if (rate.error.empty())
            rate.error = s.ok() ? "a present key was not found" : std::string(s.message());
        }
        rate.keys += keys_per_call;
        if ((i & 63) == 0 && (MonoUs() >= until || StopRequested())) break;
      }
      rate.seconds = (MonoUs() - start) / 1e6;
      rate.cpu_seconds = ThreadCpuSeconds() - cpu0;
    });
  }
  go.store(true);
  for (std::thread& t : th) t.join();
  Rate total;
  for (const Rate& r : per) {
    total.keys += r.keys;
    total.seconds = std::max(total.seconds, r.seconds);
    total.cpu_seconds += r.cpu_seconds;
    total.errors += r.errors;
    if (total.error.empty()) total.error = r.error;
  }
  return total;
}

// gRPC: MatchPrefix chains of `batch` present keys from `threads` threads,
// each on its own channel (its own connection).
Rate GrpcMatchPrefix(const std::string& address, pid_t master_pid, uint64_t objects, size_t batch,
                     int threads, double seconds, bool store_table) {
  std::vector<Rate> per(threads);
  std::vector<std::vector<double>> lat(threads);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> th;
  std::string token = AuthToken("");
  th.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    th.emplace_back([&, t] {
      grpc::ChannelArguments args;
      args.SetInt("shelf.bench.channel", t);  // distinct args: a connection per thread
      args.SetMaxReceiveMessageSize(64 << 20);
      auto stub = v1::MasterService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
      std::vector<v1::MatchPrefixRequest> reqs(kRequestPool);
      uint64_t x = SplitMix(t + 100);
      for (auto& req : reqs) {
        x = SplitMix(x);
        uint64_t first = x % (objects - batch + 1);
        for (size_t k = 0; k < batch; ++k) req.add_keys(KeyOf(first + k));
        req.set_store_table(store_table);
      }
      v1::MatchPrefixResponse resp;
      {
        grpc::ClientContext ctx;  // connect before the clock starts
        PrepareContext(&ctx, token, 10000);
        stub->MatchPrefix(&ctx, reqs[0], &resp);
      }
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      Rate& rate = per[t];
      uint64_t start = MonoUs();
      uint64_t until = start + static_cast<uint64_t>(seconds * 1e6);
      for (size_t i = 0; MonoUs() < until && !StopRequested(); ++i) {
        grpc::ClientContext ctx;
        PrepareContext(&ctx, token, 10000);
        resp.Clear();
        uint64_t t0 = MonoUs();
        grpc::Status s = stub->MatchPrefix(&ctx, reqs[i % kRequestPool], &resp);
        lat[t].push_back(static_cast<double>(MonoUs() - t0));
        if (!s.ok() || resp.matched() != batch) {
          ++rate.errors;
          if (rate.error.empty()) rate.error = s.ok() ? "short match" : s.error_message();
          continue;
        }
        rate.keys += batch;
      }
      rate.seconds = (MonoUs() - start) / 1e6;
    });
  }
  while (ready.load() < threads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  double master_cpu0 = ProcessCpuSeconds(master_pid);
  go.store(true);
  for (std::thread& t : th) t.join();
  Rate total;
  total.cpu_seconds = ProcessCpuSeconds(master_pid) - master_cpu0;
  for (int t = 0; t < threads; ++t) {
    total.keys += per[t].keys;
    total.seconds = std::max(total.seconds, per[t].seconds);
    total.errors += per[t].errors;
    if (total.error.empty()) total.error = per[t].error;
    for (double v : lat[t]) total.lat_us.Add(v);
  }
  return total;
}

// Starts a shelf-master, registers a fake store and puts `objects` objects.
absl::Status PrepareGrpcMaster(LocalCluster* cluster, uint64_t objects, uint64_t object_bytes,
                               uint64_t segment_bytes, Rate* put_rate) {
  auto channel = MakeChannel(cluster->master_address(), TlsFiles());
  if (!channel.ok()) return channel.status();
  auto stub = v1::MasterService::NewStub(*channel);
  std::string token = AuthToken("");
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token, 10000);
    v1::RegisterStoreResponse resp;
    absl::Status s = FromGrpc(stub->RegisterStore(&ctx, FakeStore(segment_bytes), &resp));
    if (!s.ok()) return s;
  }
  uint64_t start = MonoUs();
  for (uint64_t base = 0; base < objects && !StopRequested(); base += kCommitBatch) {
    v1::BatchPutStartRequest req;
    uint64_t n = std::min<uint64_t>(kCommitBatch, objects - base);
    for (uint64_t i = base; i < base + n; ++i) {
      v1::PutStartRequest* p = req.add_puts();
      p->set_key(KeyOf(i));
      p->set_size(object_bytes);
      p->set_checksum(i);
      p->mutable_options()->set_replicas(1);
    }
    v1::BatchPutStartResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token, 30000);
    absl::Status s = FromGrpc(stub->BatchPutStart(&ctx, req, &resp));
    if (!s.ok()) return s;
    v1::PutCommitRequest commit;
    for (int i = 0; i < resp.results_size(); ++i) {
      if (resp.statuses_size() > i && resp.statuses(i).code() != 0) {
        return absl::InternalError(resp.statuses(i).message());
      }
      commit.add_put_ids(resp.results(i).put_id());
    }
    v1::PutCommitResponse cresp;
    grpc::ClientContext cctx;
    PrepareContext(&cctx, token, 30000);
    s = FromGrpc(stub->PutCommit(&cctx, commit, &cresp));
    if (!s.ok()) return s;
    put_rate->keys += n;
    grpc::ClientContext hctx;
    PrepareContext(&hctx, token, 30000);
    v1::HeartbeatResponse hresp;
    s = FromGrpc(stub->Heartbeat(&hctx, FakeHeartbeat(), &hresp));
    if (!s.ok()) return s;
  }
  put_rate->seconds = (MonoUs() - start) / 1e6;
  return absl::OkStatus();
}

std::string Count(uint64_t n) {
  if (n >= 1000000 && n % 1000000 == 0) return absl::StrCat(n / 1000000, "M");
  if (n >= 1000 && n % 1000 == 0) return absl::StrCat(n / 1000, "k");
  return absl::StrCat(n);
}

}  // namespace

int MasterBench(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--stores", 8) == 0) return MasterStoresBench(argc, argv);
  }
  int64_t objects_small = 1000000, objects = 10000000, grpc_objects = 65536, grpc_threads = 4;
  int64_t key_bytes = 16;
  uint64_t object_bytes = 4096, segment_bytes = 64ull << 40;
  double seconds = 2.0;
  bool quick = false, json_only = false, no_grpc = false, no_read_grants = false;
  bool inline_stores = false;
  std::string tenant;
  Flags flags("shelf-bench master",
              "the master's lookups, prefix matches and puts per second, "
              "and its bytes per object");
  flags.AddInt("objects-small", &objects_small,
               "objects for the read figures and the first "
               "memory point");
  flags.AddInt("objects", &objects, "objects for the second memory point");
  flags.AddSize("object-bytes", &object_bytes, "size of each object");
  flags.AddInt("key-bytes", &key_bytes, "bytes per key (content keys are 16)");
  flags.AddSize("segment-size", &segment_bytes, "the fake store's DRAM segment");
  flags.AddDouble("seconds", &seconds, "time per throughput figure");
  flags.AddInt("grpc-objects", &grpc_objects, "objects in the gRPC master");
  flags.AddInt("grpc-threads", &grpc_threads, "client threads for the gRPC figures");
  flags.AddBool("no-grpc", &no_grpc, "skip the gRPC figures");
  flags.AddBool("no-read-grants", &no_read_grants,
                "in-process master: mint no read grants (their cost)");
  flags.AddBool("inline-stores", &inline_stores,
                "reads ask without store_table: every replica carries its store (the old answer)");
  flags.AddString("tenant", &tenant,
                  "in-process master: keep tenant namespaces and quotas, keys as TENANT/KEY");
  flags.AddBool("quick", &quick, "tiny run for smoke tests (20k and 100k objects, 0.2 s figures)");
  flags.AddBool("json-only", &json_only, "print only the JSON line");
  flags.ParseOrExit(argc, argv);
  if (quick) {
    if (!flags.WasSet("objects-small")) objects_small = 20000;
    if (!flags.WasSet("objects")) objects = 100000;
    if (!flags.WasSet("seconds")) seconds = 0.2;
    if (!flags.WasSet("grpc-objects")) grpc_objects = 4096;
  }
  if (objects_small < static_cast<int64_t>(kChain) || objects < objects_small ||
      grpc_objects < static_cast<int64_t>(kChain) || grpc_threads < 1 || seconds <= 0 ||
      object_bytes == 0 || key_bytes < 8 ||
      static_cast<size_t>(key_bytes) + (tenant.empty() ? 0 : tenant.size() + 1) > kKeyBytesMax ||
      (!tenant.empty() && !ValidTenantName(tenant))) {
    std::fprintf(stderr,
                 "shelf-bench master: need %zu <= --objects-small <= --objects, "
                 "--grpc-objects >= %zu, --grpc-threads >= 1, --key-bytes 8..%zu "
                 "(with the tenant's prefix), a valid --tenant name\n",
                 kChain, kChain, kKeyBytesMax);
    return 2;
  }
  g_key_bytes = static_cast<size_t>(key_bytes);
  if (!tenant.empty()) g_key_prefix = absl::StrCat(tenant, "/");
  uint64_t n_small = static_cast<uint64_t>(objects_small), n_big = static_cast<uint64_t>(objects);
  std::string error;

  // In-process master. Memory is measured from here on.
  uint64_t rss0 = 0, heap0 = 0, rss_small = 0, heap_small = 0, rss_big = 0, heap_big = 0;
  Rate fill_small, fill_big;
  Rate reads[3][2];  // [lookup1, lookup64, match64][1 thread, 2 threads]
  {
    master::MasterOptions mo;
    mo.node_ttl_ms = 24ull * 3600 * 1000;
    mo.put_timeout_ms = 24ull * 3600 * 1000;
    mo.read_grants = !no_read_grants;
    if (!tenant.empty()) {
      // One engine of the tenant, no quota limits: the master still
      // accounts what each tenant holds, per stored and dropped object.
      PrincipalEntry engine;
      engine.principal.name = "bench-engine";
      engine.principal.role = Role::kEngine;
      engine.principal.tenant = tenant;
      engine.secret = "bench-secret";
      std::vector<PrincipalEntry> entries;
      entries.push_back(std::move(engine));
      mo.credentials = Authenticator::FromEntries(std::move(entries));
      mo.tenant_namespaces = true;
    }
    master::Master master(mo);
    v1::RegisterStoreResponse rresp;
    absl::Status s = master.RegisterStore(FakeStore(segment_bytes), &rresp);
    if (!s.ok()) {
      std::fprintf(stderr, "shelf-bench master: RegisterStore: %s\n",
                   std::string(s.message()).c_str());
      return 1;
    }
    heap0 = HeapBytes();
    rss0 = RssBytes();
    s = Fill(&master, 0, n_small, object_bytes, &fill_small);
    heap_small = HeapBytes();
    rss_small = RssBytes();
    if (json_only) std::fprintf(stderr, "master: %s objects in\n", Count(n_small).c_str());
    const ReadKind kinds[3] = {ReadKind::kLookup1, ReadKind::kLookup64, ReadKind::kMatchPrefix64};
    for (int k = 0; k < 3 && s.ok(); ++k) {
      for (int t = 0; t < 2 && !StopRequested(); ++t) {
        reads[k][t] = InProcessReads(&master, n_small, kinds[k], t + 1, seconds, !inline_stores);
      }
    }
    if (s.ok() && n_big > n_small && !StopRequested()) {
      s = Grow(&master, n_small, n_big, object_bytes, segment_bytes, &fill_big);
      heap_big = HeapBytes();
      rss_big = RssBytes();
      if (json_only) std::fprintf(stderr, "master: %s objects in\n", Count(n_big).c_str());
    } else {
      rss_big = rss_small;
      heap_big = heap_small;
    }
    if (!s.ok()) error = absl::StrCat("in-process: ", s.message());
  }
  uint64_t in_small = fill_small.keys, in_big = fill_small.keys + fill_big.keys;
  auto per_object = [](uint64_t after, uint64_t before, uint64_t n) {
    return n > 0 && after > before ? static_cast<double>(after - before) / n : 0.0;
  };
  double bpo_small = per_object(rss_small, rss0, in_small);
  double bpo_big = per_object(rss_big, rss0, in_big);
  double heap_small_bpo = per_object(heap_small, heap0, in_small);
  double heap_big_bpo = per_object(heap_big, heap0, in_big);

  // gRPC master.
  const size_t kGrpcBatches[3] = {1, 16, 64};
  Rate grpc[3];
  Rate grpc_fill;
  if (!no_grpc && error.empty() && !StopRequested()) {
    LocalCluster::Options co;
    co.stores = 0;
    co.master_args = {"--node-ttl", "24h", "--put-timeout", "24h"};
    auto cluster = LocalCluster::Start(co);
    absl::Status s = cluster.ok() ? PrepareGrpcMaster(cluster->get(), grpc_objects, object_bytes,
                                                      segment_bytes, &grpc_fill)
                                  : cluster.status();
    for (int b = 0; b < 3 && s.ok() && !StopRequested(); ++b) {
      grpc[b] = GrpcMatchPrefix((*cluster)->master_address(), (*cluster)->master_process()->pid(),
                                grpc_objects, kGrpcBatches[b], static_cast<int>(grpc_threads),
                                seconds, !inline_stores);
      if (grpc[b].errors > 0 && grpc[b].keys == 0) s = absl::UnavailableError(grpc[b].error);
    }
    if (!s.ok()) error = absl::StrCat("gRPC: ", s.message());
  }

  uint64_t errors = 0;
  for (auto& row : reads) {
    for (Rate& r : row) errors += r.errors;
  }
  for (Rate& r : grpc) errors += r.errors;
  // Goals, judged per CPU-second (what one core does) so that a busy
  // machine does not fail them; the wall-clock rates are shown too.
  bool goal_lookup = reads[1][0].per_cpu_s() >= 2e6;
  bool goal_grpc = grpc[2].per_s() >= 2e5 || grpc[2].per_cpu_s() >= 2e5;
  bool goal_memory = bpo_big > 0 && bpo_big <= 200;
  if (!json_only) {
    std::printf(
        "\nShelf master: in-process master::Master and a shelf-master over gRPC on loopback\n\n");
    std::printf("  in-process, %s objects of %s, %lld-byte keys, one replica, read grants %s%s\n",
                Count(n_small).c_str(), FormatBytes(object_bytes).c_str(),
                static_cast<long long>(key_bytes), no_read_grants ? "off" : "on",
                tenant.empty() ? "" : absl::StrCat(", tenant ", tenant).c_str());
    std::printf("  %-34s %12s %12s %12s %12s\n", "keys/s (per CPU-second)", "1 thread", "per CPU-s",
                "2 threads", "per CPU-s");
    const char* names[3] = {"Lookup, 1 key/call", "Lookup, 64 keys/call",
                            "MatchPrefix, 64-key chain"};
    for (int k = 0; k < 3; ++k) {
      std::printf("  %-34s %12.0f %12.0f %12.0f %12.0f\n", names[k], reads[k][0].per_s(),
                  reads[k][0].per_cpu_s(), reads[k][1].per_s(), reads[k][1].per_cpu_s());
    }
    std::printf("  %-34s %12.0f %12.0f\n", "PutStart+PutCommit (objects/s)", fill_small.per_s(),
                fill_small.per_cpu_s());
    if (fill_big.keys > 0) {
      std::printf("  %-34s %12.0f %12.0f   (%s to %s objects)\n", "RegisterStore inventory (obj/s)",
                  fill_big.per_s(), fill_big.per_cpu_s(), Count(n_small).c_str(),
                  Count(n_big).c_str());
    }
    std::printf("\n  memory per object  %8s %8s\n", "RSS", "heap");
    std::printf("  at %-15s %8.0f %8.0f bytes\n", Count(in_small).c_str(), bpo_small,
                heap_small_bpo);
    std::printf("  at %-15s %8.0f %8.0f bytes\n", Count(in_big).c_str(), bpo_big, heap_big_bpo);
    if (grpc[0].keys + grpc[1].keys + grpc[2].keys > 0) {
      std::printf("\n  gRPC, %s objects, %lld client threads, each on its own connection\n",
                  Count(grpc_objects).c_str(), static_cast<long long>(grpc_threads));
      std::printf("  %-20s %12s %16s %10s %10s\n", "MatchPrefix", "keys/s", "per master CPU-s",
                  "p50 us", "p99 us");
      for (int b = 0; b < 3; ++b) {
        std::printf(
            "  %-20s %12.0f %16.0f %10.0f %10.0f\n",
            absl::StrCat(kGrpcBatches[b], " key", kGrpcBatches[b] > 1 ? "s" : "", "/call").c_str(),
            grpc[b].per_s(), grpc[b].per_cpu_s(), grpc[b].lat_us.Percentile(50),
            grpc[b].lat_us.Percentile(99));
      }
      std::printf("  %-20s %12.0f  (BatchPutStart+PutCommit, 1024 per call)\n", "puts (objects/s)",
                  grpc_fill.per_s());
    }
    std::printf(
        "\n  goals: >= 2M lookups per CPU-second (64 keys/call): %s\n"
        "         >= 200k keys/s over gRPC at 64 keys/call: %s\n"
        "         <= 200 bytes per object at %s objects: %s\n",
        goal_lookup ? "met" : "MISSED",
        grpc[2].keys == 0 ? "not run" : (goal_grpc ? "met" : "MISSED"), Count(in_big).c_str(),
        goal_memory ? "met" : "MISSED");
    std::printf("  errors %llu%s%s\n\n", static_cast<unsigned long long>(errors),
                error.empty() ? "" : "; ", error.c_str());
  }
  Json o = Json::object();
  o["bench"] = "master";
  o["stopped"] = StopRequested();
  o["key_bytes"] = key_bytes;
  o["read_grants"] = !no_read_grants;
  o["store_table"] = !inline_stores;
  o["tenant"] = tenant;
  o["objects_small"] = in_small;
  o["objects"] = in_big;
  o["object_bytes"] = object_bytes;
  o["lookups_per_s_1t"] = reads[1][0].per_cpu_s();
  o["lookups_per_s_1t_wall"] = reads[1][0].per_s();
  o["lookups_per_s_2t_wall"] = reads[1][1].per_s();
  o["lookups_per_s_1t_b1"] = reads[0][0].per_cpu_s();
  o["lookups_per_s_1t_b1_wall"] = reads[0][0].per_s();
  o["lookups_per_s_2t_b1_wall"] = reads[0][1].per_s();
  o["matchprefix_keys_per_s_1t"] = reads[2][0].per_cpu_s();
  o["matchprefix_keys_per_s_1t_wall"] = reads[2][0].per_s();
  o["matchprefix_keys_per_s_2t_wall"] = reads[2][1].per_s();
  o["puts_per_s"] = fill_small.per_cpu_s();
  o["puts_per_s_wall"] = fill_small.per_s();
  o["inventory_objects_per_s"] = fill_big.per_cpu_s();
  o["bytes_per_object_1m"] = bpo_small;
  o["bytes_per_object_10m"] = bpo_big;
  o["heap_bytes_per_object_1m"] = heap_small_bpo;
  o["heap_bytes_per_object_10m"] = heap_big_bpo;
  o["grpc_threads"] = grpc_threads;
  o["grpc_matchprefix_keys_per_s_b1"] = grpc[0].per_s();
  o["grpc_matchprefix_keys_per_s_b16"] = grpc[1].per_s();
  o["grpc_matchprefix_keys_per_s_b64"] = grpc[2].per_s();
  o["grpc_matchprefix_keys_per_master_cpu_s_b64"] = grpc[2].per_cpu_s();
  o["grpc_matchprefix_p50_us_b64"] = grpc[2].lat_us.Percentile(50);
  o["grpc_matchprefix_p99_us_b64"] = grpc[2].lat_us.Percentile(99);
  o["grpc_puts_per_s"] = grpc_fill.per_s();
  o["goal_lookups"] = goal_lookup;
  o["goal_grpc"] = goal_grpc;
  o["goal_memory"] = goal_memory;
  o["errors"] = errors;
  o["error"] = error;
  std::printf("%s\n", JsonDump(o).c_str());
  return error.empty() && errors == 0 ? 0 : 1;
}

}  // namespace shelf::bench
