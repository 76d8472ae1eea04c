// shelf-bench kv-events --router-view: what a KV-aware router following the
// master's event stream (docs/events.md) knows of where blocks are. A local
// cluster of small stores replays the bundled trace (each request's blocks
// as keys trace/<hash_id>; the misses put), with the master publishing in
// both encodings; two routers in the bench follow it, one decoding vLLM's
// map form, one llm-d's array form. Each keeps, per block hash, the stores
// it last heard the block stored on. At the end, every block of the trace
// is located through the master (Client::Locate) and each router's view is
// compared with it: blocks it places on a store that holds them, blocks it
// misses, entries it keeps for blocks a store no longer holds. The lag of a
// block is the time from its put's return to the router's receiving its
// BlockStored (0 when the event came first).
#include <xxhash.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/units.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_zmq.h"
#include "tools/bench/trace.h"

namespace shelf::bench {

bool StopRequested();  // main.cc

namespace {

// A router's picture of the cluster, rebuilt from one stream.
class Router {
 public:
  Router(const std::string& endpoint, bool array)
      : array_(array),
        sub_(endpoint, "kv@", [this](const std::vector<std::string>& frames) { Take(frames); }) {}

  // The stores the router places `hash` on (any medium).
  std::set<std::string> Where(uint64_t hash) {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<std::string> out;
    auto it = where_.find(hash);
    if (it == where_.end()) return out;
    for (const auto& [node, medium] : it->second) out.insert(node);
    return out;
  }
  // When each BlockStored of `hash` arrived (MonoUs).
  std::vector<uint64_t> StoredAt(uint64_t hash) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = stored_at_.find(hash);
    return it == stored_at_.end() ? std::vector<uint64_t>() : it->second;
  }
  uint64_t batches() const { return batches_.load(); }
  uint64_t undecodable() const { return undecodable_.load(); }

 private:
  void Take(const std::vector<std::string>& frames) {
    std::vector<std::string> topic = absl::StrSplit(frames[0], '@');
    if (topic.size() != 3) {
      undecodable_.fetch_add(1);
      return;
    }
    try {
      Apply(topic[1], frames[2]);
      batches_.fetch_add(1);
    } catch (const std::exception&) {
      undecodable_.fetch_add(1);
    }
  }

  // One event: its type, hashes and medium, whichever the form.
  struct Event {
    std::string type, medium;
    std::vector<uint64_t> hashes;
  };
  Event Decode(const msgpack::object& e) const {
    Event out;
    if (array_) {
      const msgpack::object_array& a = e.via.array;
      out.type = a.ptr[0].as<std::string>();
      if (out.type == "AllBlocksCleared") return out;
      out.hashes = a.ptr[1].as<std::vector<uint64_t>>();
      out.medium = a.ptr[out.type == "BlockStored" ? 6 : 2].as<std::string>();
      return out;
    }
    for (uint32_t i = 0; i < e.via.map.size; ++i) {
      const msgpack::object_kv& f = e.via.map.ptr[i];
      std::string k = f.key.as<std::string>();
      if (k == "type") out.type = f.val.as<std::string>();
      if (k == "block_hashes") out.hashes = f.val.as<std::vector<uint64_t>>();
      if (k == "medium") out.medium = f.val.as<std::string>();
    }
    return out;
  }

  void Apply(const std::string& node, const std::string& payload) {
    msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
    const msgpack::object& batch = oh.get();
    const msgpack::object* events = nullptr;
    if (array_) {
      if (batch.type != msgpack::type::ARRAY || batch.via.array.size != 3) throw std::exception();
      events = &batch.via.array.ptr[1];
    } else {
      for (uint32_t i = 0; batch.type == msgpack::type::MAP && i < batch.via.map.size; ++i) {
        if (batch.via.map.ptr[i].key.as<std::string>() == "events") {
          events = &batch.via.map.ptr[i].val;
        }
      }
    }
    if (events == nullptr || events->type != msgpack::type::ARRAY) throw std::exception();
    const uint64_t now = MonoUs();
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t j = 0; j < events->via.array.size; ++j) {
      Event e = Decode(events->via.array.ptr[j]);
      if (e.type == "AllBlocksCleared") {
        for (auto& [hash, places] : where_) {
          for (auto it = places.begin(); it != places.end();) {
            it = it->first == node ? places.erase(it) : std::next(it);
          }
        }
        continue;
      }
      for (uint64_t h : e.hashes) {
        if (e.type == "BlockStored") {
          where_[h].insert({node, e.medium});
          stored_at_[h].push_back(now);
        } else if (e.type == "BlockRemoved") {
          auto it = where_.find(h);
          if (it != where_.end()) it->second.erase({node, e.medium});
        }
      }
    }
  }

  const bool array_;
  std::atomic<uint64_t> batches_{0}, undecodable_{0};
  std::mutex mu_;
  // Per block hash: the (node, medium) pairs it is stored on.
  std::unordered_map<uint64_t, std::set<std::pair<std::string, std::string>>> where_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> stored_at_;
  SubscriberThread sub_;  // last: stopped before the state it fills goes
};

std::map<std::string, std::string> ReadyLines(const LocalCluster& c) {
  std::ifstream in(c.work_dir() + "/master.addr");
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    size_t sp = line.rfind(' ');
    if (sp != std::string::npos) out[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace

int RouterViewBench(int argc, char** argv) {
  std::string trace = DefaultTracePath();
  int64_t requests = 2000, stores = 3;
  uint64_t block_bytes = 16 << 10, dram_bytes = 32ull << 20;
  bool router_view = true;
  Flags flags("shelf-bench kv-events --router-view",
              "how many blocks a router following the KV event stream places on the store "
              "that holds them, in both encodings, over a replay of the bundled trace");
  flags.AddBool("router-view", &router_view, "this mode");
  flags.AddString("trace", &trace, "trace file (JSON lines)");
  flags.AddInt("requests", &requests, "requests of the trace replayed (0: all)");
  flags.AddInt("stores", &stores, "stores of the cluster");
  flags.AddSize("block-size", &block_bytes, "bytes per block");
  flags.AddSize("dram-size", &dram_bytes, "DRAM of each store (small: evictions happen)");
  flags.ParseOrExit(argc, argv);
  if (requests < 0 || stores < 1 || block_bytes == 0) {
    std::fprintf(stderr, "kv-events: need --requests >= 0, --stores >= 1, --block-size > 0\n");
    return 2;
  }
  auto reqs = ReadTrace(trace, static_cast<size_t>(requests));
  if (!reqs.ok()) {
    std::fprintf(stderr, "kv-events: %s\n", std::string(reqs.status().message()).c_str());
    return 1;
  }
  LocalCluster::Options o;
  o.stores = static_cast<int>(stores);
  o.dram_bytes = dram_bytes;
  o.wait_populated = true;
  o.master_args = {"--events-listen",       "0", "--events-encoding", "map",
                   "--events-other-listen", "0"};
  auto c = LocalCluster::Start(o);
  if (!c.ok()) {
    std::fprintf(stderr, "kv-events: %s\n", std::string(c.status().message()).c_str());
    return 1;
  }
  std::map<std::string, std::string> ends = ReadyLines(**c);
  if (ends.count("events") == 0 || ends.count("events-other") == 0) {
    std::fprintf(stderr, "kv-events: the master wrote no events endpoints\n");
    return 1;
  }
  Router map_router(ends["events"], /*array=*/false);
  Router array_router(ends["events-other"], /*array=*/true);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // ZMQ's slow joiner

  ClientOptions co;
  co.masters = {(*c)->master_address()};
  std::unique_ptr<Client> client;
  if (Status st = Client::Open(co, &client); !st.ok()) {
    std::fprintf(stderr, "kv-events: %s\n", st.ToString().c_str());
    return 1;
  }
  const std::string data(block_bytes, 'r');
  // Per block hash: when each put of it started and returned (MonoUs).
  std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> puts;
  std::set<std::string> keys_seen;
  uint64_t blocks_put = 0, put_errors = 0;
  const uint64_t start_us = MonoUs();
  for (const TraceRequest& r : *reqs) {
    if (StopRequested()) break;
    std::vector<std::string> keys;
    for (uint64_t id : r.hash_ids) keys.push_back(absl::StrCat("trace/", id));
    std::vector<bool> present;
    if (!client->Exists(keys, &present).ok()) present.assign(keys.size(), false);
    std::vector<PutItem> items;
    for (size_t k = 0; k < keys.size(); ++k) {
      keys_seen.insert(keys[k]);
      if (!present[k]) items.push_back(PutItem{keys[k], data.data(), data.size()});
    }
    if (items.empty()) continue;
    std::vector<Status> st;
    const uint64_t t0 = MonoUs();
    Status s = client->BatchPut(items, &st);
    const uint64_t t1 = MonoUs();
    for (size_t k = 0; k < items.size(); ++k) {
      if (!s.ok() || !st[k].ok()) {
        ++put_errors;
        continue;
      }
      ++blocks_put;
      puts[XXH3_64bits(items[k].key.data(), items[k].key.size())].push_back({t0, t1});
    }
  }
  const double replay_s = (MonoUs() - start_us) / 1e6;
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // the stream catches up

  // Where the blocks are, by the master.
  std::unordered_map<uint64_t, std::set<std::string>> truth;
  for (const std::string& key : keys_seen) {
    std::vector<NodeRun> runs;
    if (!client->Locate({key}, &runs).ok()) continue;
    std::set<std::string>& nodes = truth[XXH3_64bits(key.data(), key.size())];
    for (const NodeRun& n : runs) {
      if (n.blocks >= 1) nodes.insert(n.node_id);
    }
  }
  struct View {
    const char* name;
    Router* router;
    uint64_t placed = 0, missed = 0, stale = 0;
    std::vector<double> lag_ms;
  } views[2] = {{"map", &map_router}, {"array", &array_router}};
  uint64_t held = 0;
  for (const auto& [hash, nodes] : truth) held += nodes.size();
  for (View& v : views) {
    for (const auto& [hash, nodes] : truth) {
      std::set<std::string> seen = v.router->Where(hash);
      for (const std::string& n : nodes) (seen.count(n) ? v.placed : v.missed) += 1;
      for (const std::string& n : seen) v.stale += nodes.count(n) == 0;
    }
    for (const auto& [hash, ranges] : puts) {
      std::vector<uint64_t> at = v.router->StoredAt(hash);
      for (const auto& [t0, t1] : ranges) {
        // The first BlockStored received after this put started.
        uint64_t best = UINT64_MAX;
        for (uint64_t t : at) {
          if (t >= t0) best = std::min(best, t);
        }
        if (best != UINT64_MAX) v.lag_ms.push_back(best > t1 ? (best - t1) / 1e3 : 0.0);
      }
    }
  }
  std::printf("kv-events --router-view: %zu requests of %s, %lld stores of %s DRAM, %s blocks\n",
              reqs->size(), trace.c_str(), static_cast<long long>(stores),
              FormatBytes(dram_bytes).c_str(), FormatBytes(block_bytes).c_str());
  std::printf(
      "  replay %.1f s: %llu blocks put (%llu failed), %zu distinct, %llu replicas held "
      "at the end\n",
      replay_s, static_cast<unsigned long long>(blocks_put),
      static_cast<unsigned long long>(put_errors), keys_seen.size(),
      static_cast<unsigned long long>(held));
  Json j = Json::object();
  j["bench"] = "kv-events-router-view";
  j["requests"] = static_cast<int64_t>(reqs->size());
  j["blocks_put"] = blocks_put;
  j["replicas_held"] = held;
  for (View& v : views) {
    double placed_pct = held > 0 ? 100.0 * v.placed / held : 100.0;
    double p50 = Percentile(v.lag_ms, 0.5), p99 = Percentile(v.lag_ms, 0.99);
    std::printf(
        "  %-5s router: placed %llu of %llu (%.2f%%), missed %llu, stale %llu, "
        "lag p50 %.2f ms p99 %.2f ms over %zu puts, %llu batches (%llu undecodable)\n",
        v.name, static_cast<unsigned long long>(v.placed), static_cast<unsigned long long>(held),
        placed_pct, static_cast<unsigned long long>(v.missed),
        static_cast<unsigned long long>(v.stale), p50, p99, v.lag_ms.size(),
        static_cast<unsigned long long>(v.router->batches()),
        static_cast<unsigned long long>(v.router->undecodable()));
    std::string p = v.name;
    j[p + "_placed_pct"] = placed_pct;
    j[p + "_missed"] = v.missed;
    j[p + "_stale"] = v.stale;
    j[p + "_lag_p50_ms"] = p50;
    j[p + "_lag_p99_ms"] = p99;
  }
  std::printf("%s\n", JsonDump(j).c_str());
  return 0;
}

}  // namespace shelf::bench
