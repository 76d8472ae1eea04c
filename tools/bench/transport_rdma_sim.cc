// shelf-bench transport's rdma rows: RdmaTransport against a DataServer
// with an RdmaStoreAcceptor, on the SIMULATED verbs device
// (transport/rdma/simulated_verbs.h) in this process. The simulated device
// moves bytes with memcpy, so these rows say that reads (one-sided READs)
// and puts (store pulls under a grant: RDMA_PULL on the control
// connection, then a READ posted by the store) return the right bytes, and
// what each op costs in software around the device (work requests,
// completions, the pull's round trip on the control connection). They say
// nothing about a NIC's bandwidth.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/json.h"
#include "tools/bench/bench_util.h"
#if SHELF_WITH_RDMA
#include "transport/data_server.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/simulated_verbs.h"
#include "transport/wire.h"
#endif

namespace shelf::bench {

namespace wire = transport::wire;

bool StopRequested();  // main.cc

#if SHELF_WITH_RDMA
namespace {

constexpr uint64_t kSimBytes = 64ull << 20;  // segment, source and destination each
constexpr char kGrantKey[] = "bench-rdma-sim";
constexpr char kNode[] = "sim-store";
const wire::GrantScope kScope{kNode, 1, 1};  // node, incarnation, term

// The store's side: one segment; writes checked against their grants.
class SegmentHandler : public transport::DataHandler {
 public:
  explicit SegmentHandler(uint64_t bytes) : segment_(bytes, 0) {}
  char* base() { return segment_.data(); }
  absl::StatusOr<Region> Segment(uint32_t id) override {
    if (id != 0) return absl::NotFoundError("no such segment");
    return Region{segment_.data(), segment_.size()};
  }
  absl::Status CheckWrite(const wire::Grant& grant, uint32_t segment_id, uint64_t offset,
                          uint64_t length) override {
    return wire::VerifyGrant(kGrantKey, kScope, grant, segment_id, offset, length, UnixMs());
  }
  absl::Status ReadKey(absl::string_view, std::string*) override {
    return absl::NotFoundError("no SSD tier");
  }

 private:
  std::vector<char> segment_;
};

struct SimMeasure {
  uint64_t bytes = 0;
  double seconds = 0;
  uint64_t errors = 0;
  std::string error;
  Samples lat_us;
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

template <typename Fn>
void TimedSim(double seconds, uint64_t batch_bytes, SimMeasure* m, Fn fn) {
  const uint64_t start = MonoUs();
  const uint64_t until = start + static_cast<uint64_t>(seconds * 1e6);
  do {
    const uint64_t t0 = MonoUs();
    absl::Status s = fn();
    m->lat_us.Add(static_cast<double>(MonoUs() - t0));
    if (s.ok()) {
      m->bytes += batch_bytes;
    } else if (m->errors++ == 0) {
      m->error = std::string(s.message());
    }
  } while (MonoUs() < until && !StopRequested());
  m->seconds += (MonoUs() - start) / 1e6;
}

std::string Bytes(uint64_t b) {
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return absl::StrCat(b >> 20, "MiB");
  if (b >= 1024 && b % 1024 == 0) return absl::StrCat(b >> 10, "KiB");
  return absl::StrCat(b, "B");
}

}  // namespace

Json RdmaSimulatedRows(const std::vector<uint64_t>& sizes, const std::vector<int>& batches,
                       double seconds, bool print, uint64_t* errors, uint64_t* mismatches) {
  Json rows = Json::array();
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "shelf-bench transport: rdma (simulated): %s\n", what.c_str());
    ++*errors;
    return rows;
  };
  transport::rdma::SimulatedVerbs sim;
  transport::rdma::RdmaEngine::Options so;
  so.device_name = "sim1";
  auto store_engine = transport::rdma::RdmaEngine::Open(&sim, so);
  if (!store_engine.ok()) return fail(std::string(store_engine.status().message()));
  SegmentHandler handler(kSimBytes);
  auto acceptor = std::make_unique<transport::rdma::RdmaStoreAcceptor>(store_engine->get());
  if (absl::Status s = acceptor->AddSegment(0, handler.base(), kSimBytes); !s.ok()) {
    return fail(std::string(s.message()));
  }
  transport::DataServer::Options dso;
  dso.listen = HostPort{"127.0.0.1", 0};
  dso.rdma = acceptor.get();
  auto server = transport::DataServer::Start(dso, &handler);
  if (!server.ok()) return fail(std::string(server.status().message()));
  transport::rdma::RdmaTransport::Options co;
  co.device.device_name = "sim0";
  co.store_pull_writes = true;
  auto client = transport::rdma::RdmaTransport::Open(&sim, co);
  if (!client.ok()) return fail(std::string(client.status().message()));
  std::vector<char> src(kSimBytes), dst(kSimBytes);
  auto hs = (*client)->RegisterMemory(src.data(), src.size(), transport::MemoryKind::kHost);
  auto hd = (*client)->RegisterMemory(dst.data(), dst.size(), transport::MemoryKind::kHost);
  if (!hs.ok() || !hd.ok()) return fail("cannot register memory");
  transport::Peer store;
  store.node_id = kNode;
  store.incarnation = 1;
  store.set_route(transport::Kind::kRdma, (*server)->bound().ToString());

  if (print) {
    std::printf(
        "\nrdma on the SIMULATED verbs device (in-process store data server; bytes move by "
        "memcpy):\ncorrectness and per-op overhead only, not a NIC's bandwidth\n\n");
    std::printf("  %-6s %5s %-11s %8s %9s %11s   %-6s %8s\n", "block", "batch", "op", "GB/s",
                "p50 us", "us per op", "memcpy", "GB/s");
  }
  uint64_t put_id = 1;
  for (uint64_t size : sizes) {
    for (int batch : batches) {
      if (StopRequested()) return rows;
      const uint64_t batch_bytes = size * static_cast<uint64_t>(batch);
      if (batch_bytes > kSimBytes) continue;  // larger cells: tcp and shm rows only
      std::vector<transport::Op> reads(batch), writes(batch);
      for (int j = 0; j < batch; ++j) {
        for (transport::Op* op : {&reads[j], &writes[j]}) {
          op->peer = &store;
          op->local_offset = j * size;
          op->remote_offset = j * size;
          op->length = size;
        }
        reads[j].kind = transport::OpKind::kRead;
        reads[j].local = *hd;
        writes[j].kind = transport::OpKind::kWrite;
        writes[j].local = *hs;
        wire::Grant g;
        g.put_id = put_id++;
        g.offset = j * size;
        g.length = size;
        g.expires_unix_ms = UnixMs() + uint64_t{24} * 3600 * 1000;
        g.mac = wire::GrantMac(kGrantKey, kScope, g);
        writes[j].grant = wire::EncodeGrant(g);
      }
      // Correctness, outside the timings: a fresh pattern is pulled into the
      // segment, checked there, then read back and checked byte for byte.
      for (uint64_t k = 0; k < batch_bytes; ++k) src[k] = static_cast<char>(k * 131 + put_id);
      std::memset(dst.data(), 0, batch_bytes);
      absl::Status check = (*client)->Execute(writes, MonoMs() + 60000);
      if (check.ok() && std::memcmp(handler.base(), src.data(), batch_bytes) != 0) ++*mismatches;
      if (check.ok()) check = (*client)->Execute(reads, MonoMs() + 60000);
      if (check.ok() && std::memcmp(dst.data(), src.data(), batch_bytes) != 0) ++*mismatches;
      if (!check.ok()) fail(absl::StrCat(Bytes(size), " x", batch, ": ", check.message()));
      SimMeasure m[2], mem;
      TimedSim(seconds, batch_bytes, &m[0],
               [&] { return (*client)->Execute(reads, MonoMs() + 60000); });
      TimedSim(seconds, batch_bytes, &m[1],
               [&] { return (*client)->Execute(writes, MonoMs() + 60000); });
      TimedSim(seconds, batch_bytes, &mem, [&] {
        std::memcpy(dst.data(), src.data(), batch_bytes);
        return absl::OkStatus();
      });
      for (int d = 0; d < 2; ++d) {
        *errors += m[d].errors;
        const char* op = d == 0 ? "read" : "write(pull)";
        const double per_op = m[d].lat_us.Percentile(50) / batch;
        if (print) {
          std::printf("  %-6s %5d %-11s %8.3f %9.0f %11.1f   %-6s %8.3f%s%s\n", Bytes(size).c_str(),
                      batch, op, m[d].gbps(), m[d].lat_us.Percentile(50), per_op, "", mem.gbps(),
                      m[d].error.empty() ? "" : "  error: ", m[d].error.c_str());
        }
        Json o = Json::object();
        o["path"] = "rdma_simulated";
        o["op"] = d == 0 ? "read" : "write";
        o["block_bytes"] = size;
        o["batch"] = batch;
        o["gbps"] = m[d].gbps();
        o["p50_us"] = m[d].lat_us.Percentile(50);
        o["p99_us"] = m[d].lat_us.Percentile(99);
        o["us_per_op"] = per_op;
        o["baseline"] = "memcpy";
        o["baseline_gbps"] = mem.gbps();
        o["simulated"] = true;
        rows.push_back(o);
      }
    }
  }
  (*client)->UnregisterMemory(*hs).IgnoreError();
  (*client)->UnregisterMemory(*hd).IgnoreError();
  client->reset();
  server->reset();
  acceptor.reset();
  return rows;
}
#else
Json RdmaSimulatedRows(const std::vector<uint64_t>&, const std::vector<int>&, double, bool print,
                       uint64_t*, uint64_t*) {
  if (print) std::printf("\nrdma rows: this build has no RDMA (libibverbs not found)\n");
  return Json::array();
}
#endif

}  // namespace shelf::bench
