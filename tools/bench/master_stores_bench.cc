// shelf-bench master --stores N: one shelf-master process at the scale of
// a large cluster (docs/benchmarks.md, docs/master.md).
//
// The master is a real shelf-master on loopback (default flags). N stores
// are simulated in this process as gRPC clients, each on its own
// connection, doing what a shelf-store does: register, then heartbeat
// forever at the master's interval, long-polling (wait_for_orders_ms =
// interval) as an idle store does; every fourth heartbeat does not wait, as
// one that reports tier-move results, and times the round trip. Steps:
//
//   1. register the N stores with empty inventories; heartbeats start:
//      the master's RSS per store
//   2. each store registers again with its inventory (--objects in all,
//      as stores do with a new leader): inventory objects/s and the
//      master's RSS growth per object
//   3. idle window (heartbeats only): the master's CPU seconds per second
//   4. load window (--seconds): heartbeats go on while client threads,
//      each on its own connection, call Lookup (--batch random keys),
//      MatchPrefix (--batch-key chains) and PutStart+PutCommit (one 4 KiB
//      object) in closed loops: keys/s, calls' p50/p99, the master's CPU
//      seconds per second, RSS and threads
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/mutex.h"
#include "common/rpc.h"
#include "common/units.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/limits.h"
#include "testing/local_cluster.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/proc_stats.h"

namespace shelf::bench {

bool StopRequested();  // main.cc: SIGINT/SIGTERM arrived

namespace {

constexpr uint64_t kObjectBytes = 4096;
constexpr uint64_t kSegmentBytes = 1ull << 40;  // never fills: no eviction
constexpr uint64_t kPutKeyBase = 1ull << 40;    // keys of the load window's puts
constexpr int kRttEvery = 4;                    // every 4th heartbeat does not wait
constexpr int kRegisterThreads = 8;

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Object i's content key: 16 pseudo-random bytes, as a chained block hash.
std::string KeyOf(uint64_t i) {
  std::string k(16, '\0');
  uint64_t a = Mix(i ^ 0x5bd1e9955bd1e995ull), b = Mix(a);
  std::memcpy(&k[0], &a, 8);
  std::memcpy(&k[8], &b, 8);
  return k;
}

std::string NodeId(int i) { return absl::StrCat("sim-store-", i); }

std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, const std::string& tag,
                                          int i) {
  grpc::ChannelArguments args;
  args.SetInt(tag, i);  // distinct arguments: a connection of its own
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// Store i's registration; `first`..`first + count` are its inventory.
v1::RegisterStoreRequest Registration(int i, uint64_t first, uint64_t count) {
  v1::RegisterStoreRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::StoreEndpoint* ep = req.mutable_endpoint();
  ep->set_node_id(NodeId(i));
  ep->set_data_address(absl::StrCat("127.0.0.1:", 10000 + i % 50000));  // never dialled
  ep->set_host_id(absl::StrCat("sim-host-", i));
  ep->add_transports(v1::TRANSPORT_TCP);
  v1::SegmentInfo* seg = req.add_segments();
  seg->set_segment_id(0);
  seg->set_capacity_bytes(kSegmentBytes);
  seg->set_tier(v1::TIER_DRAM);
  req.set_incarnation(1);
  req.mutable_inventory()->Reserve(static_cast<int>(count));
  for (uint64_t k = 0; k < count; ++k) {
    v1::InventoryEntry* e = req.add_inventory();
    e->set_key(KeyOf(first + k));
    e->set_size(kObjectBytes);
    e->set_checksum(first + k);
    e->set_generation(1);
    e->set_tier(v1::TIER_DRAM);
    e->set_segment_id(0);
    e->set_offset(k * kObjectBytes);
  }
  return req;
}

// The simulated stores' heartbeats, driven by gRPC's callback API: a
// reply sends the store's next heartbeat at once (a long poll that was
// held its whole interval leaves nothing to sleep, as in shelf-store).
class Fleet {
 public:
  Fleet(const std::string& address, int stores, uint64_t interval_ms)
      : interval_ms_(interval_ms), token_(AuthToken("")), taken_(stores, 0) {
    for (int i = 0; i < stores; ++i) {
      stubs_.push_back(v1::MasterService::NewStub(OwnChannel(address, "shelf.bench.store", i)));
    }
  }
  ~Fleet() { Stop(); }

  v1::MasterService::Stub* stub(int i) { return stubs_[i].get(); }
  void Start(int i) { Send(i, 1); }
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    stopping_.store(true);
    MutexLock lock(&mu_);
    while (in_flight_ != 0) cv_.Wait(&mu_);
  }
  // Figures count only while measuring.
  void Measure(bool on) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    measuring_ = on;
    if (on) {
      rtt_us_ = Samples();
      held_us_ = Samples();
      beats_ = 0;
    }
  }
  struct Figures {
    Samples rtt_us, held_us;
    uint64_t beats = 0, errors = 0, reregisters = 0;
    std::string error;
  };
  Figures Take() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    Figures f;
    f.rtt_us = rtt_us_;
    f.held_us = held_us_;
    f.beats = beats_;
    f.errors = errors_;
    f.reregisters = reregisters_;
    f.error = error_;
    return f;
  }

 private:
  struct Beat {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    v1::HeartbeatResponse resp;
    uint64_t t0_us = 0;
  };

  void Send(int i, uint64_t seq) ABSL_LOCKS_EXCLUDED(mu_) {
    auto* b = new Beat;
    {
      MutexLock lock(&mu_);
      if (stopping_.load()) {
        delete b;
        return;
      }
      ++in_flight_;
      // As shelf-store: the orders taken so far are acknowledged.
      b->req.set_acks_orders(true);
      b->req.set_orders_acked(taken_[i]);
    }
    b->req.set_node_id(NodeId(i));
    b->req.set_incarnation(1);
    bool poll = seq % kRttEvery != 0;
    if (poll) b->req.set_wait_for_orders_ms(static_cast<uint32_t>(interval_ms_));
    PrepareContext(&b->ctx, token_, 10000 + interval_ms_);
    b->ctx.set_wait_for_ready(true);  // a connection still being made is no error
    b->t0_us = MonoUs();
    stubs_[i]->async()->Heartbeat(&b->ctx, &b->req, &b->resp,
                                  [this, b, i, seq, poll](const grpc::Status& s) {
                                    Done(b, s, i, poll);
                                    Send(i, seq + 1);
                                    MutexLock lock(&mu_);
                                    if (--in_flight_ == 0) cv_.SignalAll();
                                  });
  }

  void Done(Beat* b, const grpc::Status& s, int i, bool poll) ABSL_LOCKS_EXCLUDED(mu_) {
    double us = static_cast<double>(MonoUs() - b->t0_us);
    MutexLock lock(&mu_);
    if (s.ok()) {
      for (const v1::TierMove& m : b->resp.moves()) taken_[i] = std::max(taken_[i], m.seq());
    }
    if (!s.ok()) {
      ++errors_;
      if (error_.empty()) error_ = absl::StrCat("Heartbeat: ", s.error_message());
    } else if (b->resp.reregister()) {
      ++reregisters_;  // declared dead meanwhile: what a slow master does
    } else if (measuring_) {
      ++beats_;
      (poll ? held_us_ : rtt_us_).Add(us);
    }
    delete b;
  }

  const uint64_t interval_ms_;
  const std::string token_;
  std::vector<std::unique_ptr<v1::MasterService::Stub>> stubs_;
  std::atomic<bool> stopping_{false};
  Mutex mu_;
  CondVar cv_;  // in_flight_ reached 0
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> taken_ ABSL_GUARDED_BY(mu_);  // per store: the highest TierMove.seq taken
  bool measuring_ ABSL_GUARDED_BY(mu_) = false;
  Samples rtt_us_ ABSL_GUARDED_BY(mu_);
  Samples held_us_ ABSL_GUARDED_BY(mu_);
  uint64_t beats_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reregisters_ ABSL_GUARDED_BY(mu_) = 0;
  std::string error_ ABSL_GUARDED_BY(mu_);
};

enum class Op { kLookup, kMatch, kPut };

struct OpFigures {
  uint64_t keys = 0, calls = 0, errors = 0;
  Samples lat_us;
  std::string error;
};

// One client thread: `op` in a closed loop on its own connection until
// `stop`, counting while `measuring`.
void Client(const std::string& address, Op op, int t, uint64_t objects, size_t batch,
            const std::atomic<bool>& measuring, const std::atomic<bool>& stop, OpFigures* out) {
  auto stub = v1::MasterService::NewStub(OwnChannel(address, "shelf.bench.client", t));
  std::string token = AuthToken("");
  uint64_t x = Mix(static_cast<uint64_t>(t) + 7);
  uint64_t put_seq = 0;
  while (!stop.load() && !StopRequested()) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token, 30000);
    ctx.set_wait_for_ready(true);
    x = Mix(x);
    uint64_t t0 = MonoUs();
    grpc::Status s;
    size_t keys = 0, want = batch;
    if (op == Op::kLookup) {
      v1::LookupRequest req;
      req.set_store_table(true);  // as libshelf asks
      for (size_t k = 0; k < batch; ++k) req.add_keys(KeyOf(Mix(x + k) % objects));
      t0 = MonoUs();
      v1::LookupResponse resp;
      s = stub->Lookup(&ctx, req, &resp);
      for (const v1::ObjectLocation& o : resp.objects()) keys += o.found() ? 1 : 0;
    } else if (op == Op::kMatch) {
      v1::MatchPrefixRequest req;
      req.set_store_table(true);
      uint64_t first = x % (objects - batch + 1);
      for (size_t k = 0; k < batch; ++k) req.add_keys(KeyOf(first + k));
      t0 = MonoUs();
      v1::MatchPrefixResponse resp;
      s = stub->MatchPrefix(&ctx, req, &resp);
      keys = resp.matched();
    } else {
      want = 1;
      v1::PutStartRequest req;
      req.set_key(KeyOf(kPutKeyBase + (static_cast<uint64_t>(t) << 32) + put_seq++));
      req.set_size(kObjectBytes);
      req.set_checksum(put_seq);
      req.mutable_options()->set_replicas(1);
      v1::PutStartResponse resp;
      s = stub->PutStart(&ctx, req, &resp);
      if (s.ok() && resp.state() == v1::PUT_STARTED) {
        grpc::ClientContext cctx;
        PrepareContext(&cctx, token, 30000);
        v1::PutCommitRequest commit;
        commit.add_put_ids(resp.put_id());
        v1::PutCommitResponse cresp;
        s = stub->PutCommit(&cctx, commit, &cresp);
        if (s.ok() && cresp.statuses_size() == 1 && cresp.statuses(0).code() == 0) keys = 1;
      }
    }
    double us = static_cast<double>(MonoUs() - t0);
    if (!measuring.load()) continue;
    ++out->calls;
    out->keys += keys;
    out->lat_us.Add(us);
    if (!s.ok() || keys != want) {
      ++out->errors;
      if (out->error.empty()) {
        out->error = s.ok() ? absl::StrCat("found ", keys, " of ", want) : s.error_message();
      }
    }
  }
}

// Registers stores [0, n) from a few threads; with inventories, store i
// reports objects [i * per, (i + 1) * per) (the last one the rest).
absl::Status RegisterAll(Fleet* fleet, int n, uint64_t objects, bool with_inventory) {
  std::atomic<int> next{0};
  Mutex mu;
  absl::Status status;  // guarded by mu
  std::string token = AuthToken("");
  uint64_t per = objects / static_cast<uint64_t>(n);
  std::vector<std::thread> th;
  th.reserve(kRegisterThreads);
  for (int t = 0; t < std::min(n, kRegisterThreads); ++t) {
    th.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n && !StopRequested();) {
        uint64_t first = per * static_cast<uint64_t>(i);
        uint64_t count = !with_inventory ? 0 : (i + 1 == n ? objects - first : per);
        grpc::ClientContext ctx;
        PrepareContext(&ctx, token, 120000);
        // A thousand connections opening at once: wait for this one.
        ctx.set_wait_for_ready(true);
        v1::RegisterStoreResponse resp;
        absl::Status s =
            FromGrpc(fleet->stub(i)->RegisterStore(&ctx, Registration(i, first, count), &resp));
        if (!s.ok()) {
          MutexLock lock(&mu);
          if (status.ok()) status = s;
        }
      }
    });
  }
  for (std::thread& t : th) t.join();
  return status;
}

void SleepSeconds(double s) {
  uint64_t until = MonoUs() + static_cast<uint64_t>(s * 1e6);
  while (MonoUs() < until && !StopRequested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int MasterStoresBench(int argc, char** argv) {
  int64_t stores = 1000, objects = 1000000, lookup_threads = 2, match_threads = 2;
  int64_t put_threads = 1, batch = 64;
  uint64_t interval_ms = 500;
  double seconds = 10, idle_seconds = 3;
  bool quick = false, json_only = false;
  Flags flags("shelf-bench master --stores N",
              "one shelf-master with N simulated stores heartbeating and client threads "
              "reading and writing");
  flags.AddInt("stores", &stores, "simulated stores, each on its own connection");
  flags.AddInt("objects", &objects, "objects in the stores' inventories, in all");
  flags.AddInt("lookup-threads", &lookup_threads, "client threads calling Lookup");
  flags.AddInt("match-threads", &match_threads, "client threads calling MatchPrefix");
  flags.AddInt("put-threads", &put_threads, "client threads calling PutStart+PutCommit");
  flags.AddInt("batch", &batch, "keys per Lookup and per MatchPrefix chain");
  flags.AddDurationMs("heartbeat-interval", &interval_ms, "the master's --heartbeat-interval");
  flags.AddDouble("seconds", &seconds, "the load window");
  flags.AddDouble("idle-seconds", &idle_seconds, "the window with heartbeats only");
  flags.AddBool("quick", &quick, "small run for smoke tests (20 stores, 20k objects, 2 s)");
  flags.AddBool("json-only", &json_only, "print only the JSON line");
  flags.ParseOrExit(argc, argv);
  if (quick) {
    if (!flags.WasSet("stores")) stores = 20;
    if (!flags.WasSet("objects")) objects = 20000;
    if (!flags.WasSet("seconds")) seconds = 2;
    if (!flags.WasSet("idle-seconds")) idle_seconds = 0.5;
  }
  if (stores < 1 || batch < 1 || static_cast<size_t>(batch) > kBatchItemsMax ||
      objects < batch * stores || seconds <= 0 || interval_ms == 0) {
    std::fprintf(stderr,
                 "shelf-bench master --stores: need --stores >= 1, --batch 1..%zu, "
                 "--objects >= --batch x --stores\n",
                 kBatchItemsMax);
    return 2;
  }
  const int n = static_cast<int>(stores);
  std::string error;

  LocalCluster::Options co;
  co.stores = 0;
  co.master_args = {"--heartbeat-interval", absl::StrCat(interval_ms, "ms")};
  auto cluster = LocalCluster::Start(co);
  if (!cluster.ok()) {
    std::fprintf(stderr, "shelf-bench master: %s\n",
                 std::string(cluster.status().message()).c_str());
    return 1;
  }
  const std::string address = (*cluster)->master_address();
  const pid_t pid = (*cluster)->master_process()->pid();
  uint64_t rss_empty = ProcessRssBytes(pid);

  Fleet fleet(address, n, interval_ms);
  absl::Status s = RegisterAll(&fleet, n, static_cast<uint64_t>(objects), false);
  for (int i = 0; i < n && s.ok(); ++i) fleet.Start(i);
  SleepSeconds(std::min(1.0, 2.0 * interval_ms / 1000));  // connections settle
  uint64_t rss_stores = ProcessRssBytes(pid);
  uint64_t t_inv = MonoUs();
  if (s.ok()) s = RegisterAll(&fleet, n, static_cast<uint64_t>(objects), true);
  double inv_seconds = (MonoUs() - t_inv) / 1e6;
  uint64_t rss_objects = ProcessRssBytes(pid);
  if (!s.ok()) error = absl::StrCat("RegisterStore: ", s.message());
  if (json_only) std::fprintf(stderr, "master --stores: %d stores, inventories in\n", n);

  // Idle: heartbeats only.
  fleet.Measure(true);
  double cpu0 = ProcessCpuSeconds(pid);
  uint64_t t0 = MonoUs();
  SleepSeconds(idle_seconds);
  double idle_cpu = (ProcessCpuSeconds(pid) - cpu0) / ((MonoUs() - t0) / 1e6);
  Fleet::Figures idle = fleet.Take();
  double idle_beats_per_s = idle.beats / ((MonoUs() - t0) / 1e6);

  // Load.
  std::atomic<bool> measuring{false}, stop{false};
  std::vector<Op> ops;
  for (int64_t i = 0; i < lookup_threads; ++i) ops.push_back(Op::kLookup);
  for (int64_t i = 0; i < match_threads; ++i) ops.push_back(Op::kMatch);
  for (int64_t i = 0; i < put_threads; ++i) ops.push_back(Op::kPut);
  std::vector<OpFigures> per(ops.size());
  std::vector<std::thread> clients;
  if (error.empty()) {
    for (size_t t = 0; t < ops.size(); ++t) {
      clients.emplace_back(Client, address, ops[t], static_cast<int>(t),
                           static_cast<uint64_t>(objects), static_cast<size_t>(batch),
                           std::cref(measuring), std::cref(stop), &per[t]);
    }
  }
  SleepSeconds(0.3);  // clients connect
  fleet.Measure(true);
  measuring.store(true);
  cpu0 = ProcessCpuSeconds(pid);
  t0 = MonoUs();
  SleepSeconds(seconds);
  measuring.store(false);
  double load_seconds = (MonoUs() - t0) / 1e6;
  double load_cpu = (ProcessCpuSeconds(pid) - cpu0) / load_seconds;
  Fleet::Figures load = fleet.Take();
  uint64_t rss_load = ProcessRssBytes(pid), threads = ProcessThreads(pid);
  stop.store(true);
  for (std::thread& t : clients) t.join();
  fleet.Stop();

  OpFigures sum[3];
  uint64_t errors = load.errors + idle.errors;
  for (size_t t = 0; t < ops.size(); ++t) {
    OpFigures& f = sum[static_cast<int>(ops[t])];
    f.keys += per[t].keys;
    f.calls += per[t].calls;
    f.errors += per[t].errors;
    f.lat_us.Merge(per[t].lat_us);
    if (f.error.empty()) f.error = per[t].error;
    errors += per[t].errors;
    if (error.empty() && !per[t].error.empty()) error = per[t].error;
  }
  if (error.empty() && !load.error.empty()) error = load.error;
  double rss_per_store = rss_stores > rss_empty ? double(rss_stores - rss_empty) / n : 0;
  double bytes_per_object =
      rss_objects > rss_stores ? double(rss_objects - rss_stores) / objects : 0;
  auto ms = [](Samples& v, double p) { return v.Percentile(p) / 1000; };
  double lookups = sum[0].keys / load_seconds, matches = sum[1].keys / load_seconds;
  double puts = sum[2].keys / load_seconds, beats = load.beats / load_seconds;
  if (!json_only) {
    std::printf(
        "\nShelf master at scale: one shelf-master, %d simulated stores (heartbeat every "
        "%llu ms, long-polled)\n\n",
        n, static_cast<unsigned long long>(interval_ms));
    std::printf(
        "  master RSS: %.1f MiB empty, +%.0f KiB per store, +%.0f bytes per object "
        "(%lld objects by inventory, %.0f objects/s)\n",
        rss_empty / 1048576.0, rss_per_store / 1024, bytes_per_object,
        static_cast<long long>(objects), inv_seconds > 0 ? objects / inv_seconds : 0);
    std::printf("  idle (heartbeats only): %.0f heartbeats/s, master %.2f CPU s/s\n",
                idle_beats_per_s, idle_cpu);
    std::printf("  load, %.1f s: master %.2f CPU s/s, RSS %.1f MiB, %llu threads\n\n", load_seconds,
                load_cpu, rss_load / 1048576.0, static_cast<unsigned long long>(threads));
    std::printf("  %-34s %12s %10s %10s\n", "", "per s", "p50 ms", "p99 ms");
    std::printf("  %-34s %12.0f %10.2f %10.2f\n", "heartbeat round trip (no wait)", beats,
                ms(load.rtt_us, 50), ms(load.rtt_us, 99));
    std::printf("  %-34s %12s %10.1f %10.1f\n", "heartbeat long poll (held)", "",
                ms(load.held_us, 50), ms(load.held_us, 99));
    std::printf("  %-34s %12.0f %10.2f %10.2f\n",
                absl::StrCat("Lookup keys (", batch, "/call, ", lookup_threads, " thr)").c_str(),
                lookups, ms(sum[0].lat_us, 50), ms(sum[0].lat_us, 99));
    std::printf(
        "  %-34s %12.0f %10.2f %10.2f\n",
        absl::StrCat("MatchPrefix keys (", batch, "/call, ", match_threads, " thr)").c_str(),
        matches, ms(sum[1].lat_us, 50), ms(sum[1].lat_us, 99));
    std::printf("  %-34s %12.0f %10.2f %10.2f\n",
                absl::StrCat("PutStart+PutCommit (", put_threads, " thr)").c_str(), puts,
                ms(sum[2].lat_us, 50), ms(sum[2].lat_us, 99));
    std::printf("  re-registrations (a store declared dead) %llu; errors %llu%s%s\n\n",
                static_cast<unsigned long long>(load.reregisters),
                static_cast<unsigned long long>(errors), error.empty() ? "" : ": ", error.c_str());
  }
  Json o = Json::object();
  o["bench"] = "master-stores";
  o["stopped"] = StopRequested();
  o["stores"] = stores;
  o["objects"] = objects;
  o["batch"] = batch;
  o["heartbeat_interval_ms"] = interval_ms;
  o["heartbeats_per_s"] = beats;
  o["heartbeat_p50_ms"] = ms(load.rtt_us, 50);
  o["heartbeat_p99_ms"] = ms(load.rtt_us, 99);
  o["heartbeat_held_p50_ms"] = ms(load.held_us, 50);
  o["heartbeat_held_p99_ms"] = ms(load.held_us, 99);
  o["reregisters"] = load.reregisters;
  o["lookup_keys_per_s"] = lookups;
  o["lookup_p99_ms"] = ms(sum[0].lat_us, 99);
  o["matchprefix_keys_per_s"] = matches;
  o["matchprefix_p50_ms"] = ms(sum[1].lat_us, 50);
  o["matchprefix_p99_ms"] = ms(sum[1].lat_us, 99);
  o["puts_per_s"] = puts;
  o["put_p99_ms"] = ms(sum[2].lat_us, 99);
  o["master_cpu_s_per_s_idle"] = idle_cpu;
  o["master_cpu_s_per_s"] = load_cpu;
  o["master_rss_bytes"] = rss_load;
  o["master_threads"] = threads;
  o["rss_per_store_bytes"] = rss_per_store;
  o["bytes_per_object"] = bytes_per_object;
  o["inventory_objects_per_s"] = inv_seconds > 0 ? objects / inv_seconds : 0;
  o["errors"] = errors;
  o["error"] = error;
  std::printf("%s\n", JsonDump(o).c_str());
  return error.empty() && errors == 0 ? 0 : 1;
}

}  // namespace shelf::bench
