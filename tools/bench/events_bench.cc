// shelf-bench kv-events: what the master's KV event stream (docs/events.md)
// costs the kv workload. Two clusters run side by side, one master with
// --events-listen and a subscriber counting what it receives, one without;
// the phases alternate between them (puts, then lookups, per round), so
// each "on" figure has an "off" figure measured moments before it on the
// same machine. Reported: puts/s and lookups/s (keys) each way, the cost in
// percent (medians over rounds), and events/s published and received.
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/units.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "tools/bench/bench_zmq.h"

namespace shelf::bench {

bool StopRequested();  // main.cc

namespace {

// Counts the events in batches arriving on a PUB endpoint (BlockStored and
// BlockRemoved count one per block hash, as the master emits them).
class EventCounter {
 public:
  explicit EventCounter(const std::string& endpoint)
      : sub_(endpoint, "", [this](const std::vector<std::string>& frames) {
          events_.fetch_add(Count(frames[2]));
        }) {}
  uint64_t events() const { return events_.load(); }

 private:
  static uint64_t Count(const std::string& payload) {
    msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
    const msgpack::object& batch = oh.get();
    if (batch.type != msgpack::type::MAP) return 0;
    uint64_t n = 0;
    for (uint32_t i = 0; i < batch.via.map.size; ++i) {
      const msgpack::object_kv& kv = batch.via.map.ptr[i];
      if (kv.key.as<std::string>() != "events" || kv.val.type != msgpack::type::ARRAY) continue;
      for (uint32_t j = 0; j < kv.val.via.array.size; ++j) {
        const msgpack::object& e = kv.val.via.array.ptr[j];
        uint64_t hashes = 1;
        for (uint32_t k = 0; e.type == msgpack::type::MAP && k < e.via.map.size; ++k) {
          const msgpack::object_kv& f = e.via.map.ptr[k];
          if (f.key.as<std::string>() == "block_hashes" && f.val.type == msgpack::type::ARRAY) {
            hashes = f.val.via.array.size;
          }
        }
        n += hashes;
      }
    }
    return n;
  }

  std::atomic<uint64_t> events_{0};
  SubscriberThread sub_;  // last: stopped before the count goes
};

struct Side {
  std::unique_ptr<LocalCluster> cluster;
  std::vector<std::unique_ptr<Client>> clients;  // one per thread
  std::unique_ptr<EventCounter> counter;
  std::vector<double> puts_per_s, lookups_per_s, events_per_s;
  uint64_t next_id = 0;
};

// Runs `threads` workers for `seconds`; each repeats `op(thread, client)`,
// which returns the keys it handled (0 on error). Returns keys/s.
template <typename Op>
double RunPhase(Side& side, int threads, double seconds, Op op) {
  std::atomic<bool> stop{false};
  std::vector<uint64_t> done(threads, 0);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  uint64_t start = MonoUs();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      while (!stop.load()) done[t] += op(t, side.clients[t].get());
    });
  }
  while (MonoUs() - start < static_cast<uint64_t>(seconds * 1e6) && !StopRequested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop.store(true);
  for (std::thread& w : workers) w.join();
  double elapsed = (MonoUs() - start) / 1e6;
  uint64_t total = 0;
  for (uint64_t d : done) total += d;
  return total / elapsed;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string EventsEndpoint(const LocalCluster& c) {
  std::ifstream in(c.work_dir() + "/master.addr");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("events ", 0) == 0) return line.substr(7);
  }
  return "";
}

}  // namespace

int RouterViewBench(int argc, char** argv);  // router_view_bench.cc

int KvEventsBench(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--router-view") return RouterViewBench(argc, argv);
  }
  int64_t threads = 4, rounds = 3, batch = 32;
  uint64_t block_bytes = 4096, dram_bytes = 1ull << 30, phase_ms = 3000;
  Flags flags("shelf-bench kv-events",
              "puts/s and lookups/s with the master's KV event stream on and off (same run); "
              "with --router-view, what a router following the stream knows (its own flags)");
  flags.AddInt("threads", &threads, "client threads per phase");
  flags.AddInt("rounds", &rounds, "rounds of (puts, lookups) on each side");
  flags.AddInt("batch", &batch, "keys per BatchPut and per MatchPrefix");
  flags.AddSize("block-size", &block_bytes, "bytes per block");
  flags.AddSize("dram-size", &dram_bytes, "DRAM of each cluster's one store");
  flags.AddDurationMs("phase", &phase_ms, "length of each measured phase");
  flags.ParseOrExit(argc, argv);
  if (threads < 1 || rounds < 1 || batch < 1 || batch > static_cast<int64_t>(kBatchItemsMax) ||
      block_bytes == 0) {
    std::fprintf(stderr,
                 "kv-events: need --threads, --rounds >= 1, --batch 1..%zu, --block-size > 0\n",
                 kBatchItemsMax);
    return 2;
  }
  Side sides[2];  // 0: events off, 1: on
  for (int s = 0; s < 2; ++s) {
    LocalCluster::Options o;
    o.stores = 1;
    o.dram_bytes = dram_bytes;
    if (s == 1) o.master_args = {"--events-listen", "0"};
    auto c = LocalCluster::Start(o);
    if (!c.ok()) {
      std::fprintf(stderr, "kv-events: %s\n", std::string(c.status().message()).c_str());
      return 1;
    }
    sides[s].cluster = *std::move(c);
    for (int t = 0; t < threads; ++t) {
      ClientOptions co;
      co.masters = {sides[s].cluster->master_address()};
      std::unique_ptr<Client> client;
      if (Status st = Client::Open(co, &client); !st.ok()) {
        std::fprintf(stderr, "kv-events: %s\n", st.ToString().c_str());
        return 1;
      }
      sides[s].clients.push_back(std::move(client));
    }
  }
  std::string endpoint = EventsEndpoint(*sides[1].cluster);
  if (endpoint.empty()) {
    std::fprintf(stderr, "kv-events: the master wrote no events endpoint\n");
    return 1;
  }
  sides[1].counter = std::make_unique<EventCounter>(endpoint);
  std::string data(block_bytes, 'k');
  const double seconds = phase_ms / 1000.0;
  std::vector<std::vector<std::string>> last_keys(threads);
  for (int r = 0; r < rounds && !StopRequested(); ++r) {
    // Alternate which side goes first, so neither always runs on a machine
    // the other just warmed (or loaded).
    for (int k = 0; k < 2; ++k) {
      Side& side = sides[(r + k) % 2];
      uint64_t events_before = side.counter ? side.counter->events() : 0;
      // Puts: new keys every batch (a key that exists makes a put free).
      std::atomic<uint64_t> next{side.next_id};
      side.puts_per_s.push_back(RunPhase(side, threads, seconds, [&](int t, Client* c) {
        std::vector<std::string> keys;
        std::vector<PutItem> items;
        keys.reserve(batch);
        items.reserve(batch);
        uint64_t first = next.fetch_add(batch);
        for (int64_t i = 0; i < batch; ++i) keys.push_back(absl::StrCat("kv-events/", first + i));
        for (const std::string& key : keys) items.push_back(PutItem{key, data.data(), data.size()});
        std::vector<Status> st;
        if (!c->BatchPut(items, &st).ok()) return uint64_t{0};
        last_keys[t] = std::move(keys);
        return static_cast<uint64_t>(batch);
      }));
      side.next_id = next.load();
      // Lookups: the chain each thread put last, as a router would ask.
      side.lookups_per_s.push_back(RunPhase(side, threads, seconds, [&](int t, Client* c) {
        size_t matched = 0;
        if (!c->MatchPrefix(last_keys[t], &matched).ok()) return uint64_t{0};
        return static_cast<uint64_t>(last_keys[t].size());
      }));
      // Every event comes from the put phase; counted after the lookup
      // phase too, so none still in flight is missed.
      if (side.counter) {
        side.events_per_s.push_back((side.counter->events() - events_before) / seconds);
      }
      // Start the next round empty (a flush: one AllBlocksCleared).
      uint64_t removed = 0;
      if (Status st = side.clients[0]->RemoveMatching("", &removed); !st.ok()) {
        std::fprintf(stderr, "kv-events: flush: %s\n", st.ToString().c_str());
        return 1;
      }
    }
  }
  double puts_off = Median(sides[0].puts_per_s), puts_on = Median(sides[1].puts_per_s);
  double look_off = Median(sides[0].lookups_per_s), look_on = Median(sides[1].lookups_per_s);
  double events = Median(sides[1].events_per_s);
  auto cost = [](double off, double on) { return off > 0 ? 100.0 * (off - on) / off : 0.0; };
  std::printf("kv-events: %lld threads, batch %lld, %s blocks, %lld rounds of %.1f s phases\n",
              static_cast<long long>(threads), static_cast<long long>(batch),
              FormatBytes(block_bytes).c_str(), static_cast<long long>(rounds), seconds);
  std::printf("  puts/s     off %10.0f  on %10.0f  cost %5.1f%%\n", puts_off, puts_on,
              cost(puts_off, puts_on));
  std::printf("  lookups/s  off %10.0f  on %10.0f  cost %5.1f%%\n", look_off, look_on,
              cost(look_off, look_on));
  std::printf("  events/s published while serving the puts (received by a subscriber): %.0f\n",
              events);
  Json j = Json::object();
  j["bench"] = "kv-events";
  j["threads"] = threads;
  j["batch"] = batch;
  j["block_bytes"] = block_bytes;
  j["rounds"] = rounds;
  j["puts_per_s_off"] = puts_off;
  j["puts_per_s_on"] = puts_on;
  j["lookups_per_s_off"] = look_off;
  j["lookups_per_s_on"] = look_on;
  j["put_cost_pct"] = cost(puts_off, puts_on);
  j["lookup_cost_pct"] = cost(look_off, look_on);
  j["events_per_s"] = events;
  std::printf("%s\n", JsonDump(j).c_str());
  return 0;
}

}  // namespace shelf::bench
