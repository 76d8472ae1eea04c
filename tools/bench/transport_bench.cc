// shelf-bench transport: the data plane alone, between real processes on
// loopback, next to baselines measured in the same run.
//
// A one-store cluster is started; the bench gets write grants for fixed
// ranges of the store's DRAM segment through the master (BatchPutStart,
// then PutCommit) and from then on moves bytes without the master:
//   tcp  transport::TcpEngine: a batch is one engine batch of READ or
//        WRITE ops on pooled connections, a block of 4 MiB or more striped
//        over --tcp-streams connections
//   shm  transport::ShmEngine: one memcpy per block read from the store's
//        segment, mapped read-only through its shm socket; a write from
//        private memory is copied into the engine's staging memfd, then
//        in by the store under the grant
//   shm-shr a write from shared host memory (transport/shm_sources.h):
//        the store maps it and copies each block in once
//   rdma transport::rdma::RdmaTransport on the SIMULATED verbs device, in this
//        process (transport_rdma_sim.cc): reads and store-pulled puts,
//        every byte checked; correctness and per-op overhead only
// With --session-mac / --data-tls, tcp again on a store of its own with
// session tags (over headers, the default, and over payloads too:
// --session-tag-payload) / TLS 1.3, measured in the same rounds, its ratio
// against plain tcp (docs/benchmarks.md).
// Baselines, each moving the same bytes the same way:
//   socket  a plain blocking-socket peer in a forked process: for a READ,
//           one 16-byte request, then the peer sends the batch's bytes; for
//           a WRITE, a 16-byte header and the bytes, then a 1-byte ack.
//           A batch is one request: the ideal a per-block protocol pays
//           round trips against.
//   memcpy  memcpy between two private buffers of this process
// The shm and memcpy rows cycle, a batch at a time, through
// --shm-working-set (512 MiB) of distinct blocks and store ranges per
// cell, more than a last-level cache holds, so neither side is measured on
// cache-resident bytes.
// The baselines run on one thread and one connection; Shelf's tcp path uses
// what the engine does for a client (parallel ops, striping), so its ratio
// says what the engine adds over one plain socket. A block the engine
// stripes over N connections is also measured against the socket peer on N
// connections at once (socketxN, stripe k of every block on connection k,
// a thread per connection), and its headline ratio is judged against that. A cell (block size,
// batch) alternates Shelf and baseline in rounds, so both see the same
// machine noise; a ratio is the median of the rounds' ratios.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/write_grant.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/net.h"
#include "common/rpc.h"
#include "common/units.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/limits.h"
#include "testing/local_cluster.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/socket_peer.h"
#include "transport/engine.h"
#include "transport/shm_engine.h"
#include "transport/shm_sources.h"
#include "transport/tcp_engine.h"

namespace shelf::bench {

bool StopRequested();  // main.cc: SIGINT/SIGTERM arrived
// transport_rdma_sim.cc: the rdma rows, on the simulated verbs device.
Json RdmaSimulatedRows(const std::vector<uint64_t>& sizes, const std::vector<int>& batches,
                       double seconds, bool print, uint64_t* errors, uint64_t* mismatches);

namespace {

constexpr uint64_t kOpTimeoutMs = 60000;

// Ranges of the store's segment the bench may write, with their grants.
struct Range {
  uint32_t segment = 0;
  uint64_t offset = 0;
  transport::wire::Grant grant;
};

struct StoreRanges {
  std::string data_address;
  std::string shm_socket;
  std::vector<Range> ranges;
};

// Places `count` blocks of `size` bytes through the master and commits
// them, so the ranges stay allocated to the bench for the whole run.
absl::StatusOr<StoreRanges> AllocateRanges(v1::MasterService::Stub* master, const std::string& tag,
                                           uint64_t size, int count,
                                           const std::string& secret = "") {
  StoreRanges out;
  // In batches of at most kBatchItemsMax puts, as the master takes them.
  for (int first = 0; first < count; first += static_cast<int>(kBatchItemsMax)) {
    const int n = std::min(count - first, static_cast<int>(kBatchItemsMax));
    v1::BatchPutStartRequest req;
    for (int i = first; i < first + n; ++i) {
      v1::PutStartRequest* p = req.add_puts();
      p->set_key(absl::StrCat("transport/", tag, "/", size, "/", i));
      p->set_size(size);
      p->mutable_options()->set_replicas(1);
    }
    v1::BatchPutStartResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, AuthToken(secret), 30000);
    absl::Status s = FromGrpc(master->BatchPutStart(&ctx, req, &resp));
    if (!s.ok()) return s;
    if (resp.results_size() != n) return absl::InternalError("malformed BatchPutStart answer");
    v1::PutCommitRequest commit;
    for (int i = 0; i < n; ++i) {
      if (resp.statuses_size() > i && resp.statuses(i).code() != 0) {
        return absl::ResourceExhaustedError(resp.statuses(i).message());
      }
      const v1::PutStartResponse& r = resp.results(i);
      if (r.state() != v1::PUT_STARTED || r.replicas_size() != 1 || r.grants_size() != 1) {
        return absl::InternalError("PutStart did not grant one range");
      }
      const v1::Replica& rep = r.replicas(0);
      const v1::WriteGrant& g = r.grants(0);
      out.data_address = rep.store().data_address();
      out.shm_socket = rep.store().shm_socket();
      Range range;
      range.segment = rep.segment_id();
      range.offset = rep.offset();
      range.grant = ToWireGrant(g);
      out.ranges.push_back(range);
      commit.add_put_ids(r.put_id());
    }
    v1::PutCommitResponse cresp;
    grpc::ClientContext cctx;
    PrepareContext(&cctx, AuthToken(secret), 30000);
    s = FromGrpc(master->PutCommit(&cctx, commit, &cresp));
    if (!s.ok()) return s;
  }
  return out;
}

// One measured figure: bytes over time, and latency per batch.
struct Measure {
  uint64_t bytes = 0;
  double seconds = 0;
  Samples lat_us;
  uint64_t errors = 0;
  std::string error;
  std::vector<double> round_gbps;  // one per round
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// Shelf / baseline: the median over the rounds of the two figures' ratio
// in that round, so that one round disturbed by the machine moves it
// little. 0 when there is none.
double RoundRatio(const Measure& shelf, const Measure& base) {
  std::vector<double> r;
  for (size_t i = 0; i < shelf.round_gbps.size() && i < base.round_gbps.size(); ++i) {
    if (base.round_gbps[i] > 0) r.push_back(shelf.round_gbps[i] / base.round_gbps[i]);
  }
  if (r.empty()) return 0;
  std::sort(r.begin(), r.end());
  return r.size() % 2 ? r[r.size() / 2] : (r[r.size() / 2 - 1] + r[r.size() / 2]) / 2;
}

// Runs fn (one batch) until `seconds` passed, at least once: one round of
// a figure. fn returns a Status; bytes per call are `batch_bytes`.
template <typename Fn>
void Timed(double seconds, uint64_t batch_bytes, Measure* m, Fn fn) {
  uint64_t start = MonoUs();
  uint64_t until = start + static_cast<uint64_t>(seconds * 1e6);
  uint64_t bytes_before = m->bytes;
  do {
    uint64_t t0 = MonoUs();
    absl::Status s = fn();
    uint64_t t1 = MonoUs();
    m->lat_us.Add(static_cast<double>(t1 - t0));
    if (s.ok()) {
      m->bytes += batch_bytes;
    } else {
      ++m->errors;
      if (m->error.empty()) m->error = std::string(s.message());
    }
  } while (MonoUs() < until && !StopRequested());
  double seconds_now = (MonoUs() - start) / 1e6;
  m->round_gbps.push_back(seconds_now > 0 ? (m->bytes - bytes_before) / seconds_now / 1e9 : 0);
  m->seconds += seconds_now;
}

std::string ShortBytes(uint64_t b) {
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return absl::StrCat(b >> 20, "MiB");
  if (b >= 1024 && b % 1024 == 0) return absl::StrCat(b >> 10, "KiB");
  return absl::StrCat(b, "B");
}

struct Cell {
  uint64_t size = 0;
  int batch = 0;
  // [0] read, [1] write
  Measure tcp[2], sock[2], shm[2], mem;
  // A write from shared host memory (transport/shm_sources.h): copied once,
  // by the store, where shm[1] (private memory) is staged first.
  Measure shm_shared;
  // The connections the engine stripes one block of this size over; when
  // more than 1, sock_striped moves each block over as many connections.
  int stripes = 1;
  Measure sock_striped[2];
  std::vector<std::array<Measure, 2>> variants;  // as Variants, next to tcp
};

// A tcp path measured next to plain tcp, on a one-store cluster of its own:
// "tcp+mac" (a cluster secret: every frame carries a session tag over its
// header), "tcp+mac+payload" (tags over payloads too),
// "tcp+tls" (a store with --data-tls, no secret).
struct Variant {
  std::string name;
  std::unique_ptr<LocalCluster> cluster;
  std::vector<StoreRanges> ranges;  // per size
  std::unique_ptr<transport::TcpEngine> engine;
  transport::Peer store;
  transport::MemoryHandle src = 0, dst = 0;
};

absl::StatusOr<std::unique_ptr<Variant>> StartVariant(const std::string& name,
                                                      const LocalCluster::Options& co,
                                                      const transport::TcpEngine::Options& to,
                                                      const std::vector<uint64_t>& sizes,
                                                      int max_batch, std::vector<char>* src_mem,
                                                      std::vector<char>* dst_mem) {
  auto v = std::make_unique<Variant>();
  v->name = name;
  auto cluster = LocalCluster::Start(co);
  if (!cluster.ok()) return cluster.status();
  v->cluster = *std::move(cluster);
  auto channel = MakeChannel(v->cluster->master_address(), TlsFiles());
  if (!channel.ok()) return channel.status();
  auto master = v1::MasterService::NewStub(*channel);
  std::string tag = absl::StrCat(name, "-", getpid());
  for (uint64_t s : sizes) {
    auto r = AllocateRanges(master.get(), tag, s, max_batch, co.secret);
    if (!r.ok()) return r.status();
    v->ranges.push_back(*std::move(r));
  }
  v->engine = std::make_unique<transport::TcpEngine>(to);
  v->store.node_id = name;
  v->store.set_route(transport::Kind::kTcp, v->ranges[0].data_address);
  auto hs =
      v->engine->RegisterMemory(src_mem->data(), src_mem->size(), transport::MemoryKind::kHost);
  auto hd =
      v->engine->RegisterMemory(dst_mem->data(), dst_mem->size(), transport::MemoryKind::kHost);
  if (!hs.ok()) return hs.status();
  if (!hd.ok()) return hd.status();
  v->src = *hs;
  v->dst = *hd;
  return v;
}

}  // namespace

int TransportBench(int argc, char** argv) {
  std::string sizes_text = "64KiB,1MiB,16MiB", batches_text = "1,32", work_dir;
  std::string working_set_text = "512MiB";
  double seconds = 1.5;
  int64_t rounds = 5;
  int64_t tcp_streams = 4;
  bool quick = false, json_only = false, session_mac = false, data_tls = false;
  Flags flags("shelf-bench transport",
              "tcp and shm data planes between real processes, next to a plain socket peer and "
              "memcpy");
  flags.AddString("sizes", &sizes_text, "block sizes, comma-separated");
  flags.AddString("batches", &batches_text, "blocks per batch, comma-separated");
  flags.AddString("shm-working-set", &working_set_text,
                  "bytes of distinct blocks (and store ranges) the shm and memcpy rows cycle "
                  "through per cell, larger than the last-level cache (at most 8192 blocks; 0: "
                  "one batch's)");
  flags.AddDouble("seconds", &seconds, "time per figure per cell, split over the rounds");
  flags.AddInt("rounds", &rounds, "rounds alternating Shelf and baseline, per cell");
  flags.AddInt("tcp-streams", &tcp_streams,
               "tcp connections one block of 4 MiB or more is striped over (1..16)");
  flags.AddBool("quick", &quick, "tiny run for smoke tests (0.05 s per figure, batches 1,4)");
  flags.AddBool("json-only", &json_only, "print only the JSON line");
  flags.AddBool("session-mac", &session_mac,
                "also measure tcp with session tags (a cluster with a secret; header tags and "
                "payload tags), next to plain tcp");
  flags.AddBool("data-tls", &data_tls,
                "also measure tcp over TLS 1.3 (a store with --data-tls, no secret: TLS alone; "
                "certificates made with the openssl command), next to plain tcp");
  flags.AddString("work-dir", &work_dir, "keep the cluster's logs here");
  flags.ParseOrExit(argc, argv);
  if (quick) {
    if (!flags.WasSet("seconds")) seconds = 0.05;
    if (!flags.WasSet("rounds")) rounds = 1;
    if (!flags.WasSet("batches")) batches_text = "1,4";
    if (!flags.WasSet("shm-working-set")) working_set_text = "0";
  }
  std::vector<uint64_t> sizes;
  std::vector<int> batches;
  bool ok = seconds > 0 && rounds >= 1 && tcp_streams >= 1 && tcp_streams <= 16;
  for (absl::string_view p : absl::StrSplit(sizes_text, ',', absl::SkipEmpty())) {
    absl::StatusOr<uint64_t> v = ParseSize(p);
    ok = ok && v.ok() && *v >= 1 && *v <= (256ull << 20);
    if (v.ok()) sizes.push_back(*v);
  }
  for (absl::string_view p : absl::StrSplit(batches_text, ',', absl::SkipEmpty())) {
    int v = 0;
    ok = ok && absl::SimpleAtoi(p, &v) && v >= 1 && v <= 1024;
    batches.push_back(v);
  }
  absl::StatusOr<uint64_t> working_set = ParseSize(working_set_text);
  ok = ok && working_set.ok() && *working_set <= (8ull << 30);
  if (!ok || sizes.empty() || batches.empty()) {
    std::fprintf(stderr,
                 "shelf-bench transport: bad --sizes (1B..256MiB), --batches (1..1024), "
                 "--seconds, --rounds, --tcp-streams (1..16) or --shm-working-set (0..8GiB)\n");
    return 2;
  }
  uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  int max_batch = *std::max_element(batches.begin(), batches.end());
  // Blocks of each size the shm and memcpy rows cycle through: the working
  // set, so that neither side reads or writes cache-resident bytes; the tcp
  // rows use the first batch of them.
  constexpr uint64_t kWorkingSetBlocksMax = 8192;
  auto blocks_for = [&](uint64_t size) {
    return static_cast<int>(std::max<uint64_t>(
        max_batch, std::min<uint64_t>(*working_set / size, kWorkingSetBlocksMax)));
  };
  uint64_t mem_bytes = 0;
  for (uint64_t s : sizes) mem_bytes = std::max(mem_bytes, s * blocks_for(s));

  // The baseline peer first: fork while this process has one thread.
  auto peer = BaselinePeer::Start(max_size);
  if (!peer.ok()) {
    std::fprintf(stderr, "shelf-bench transport: %s\n",
                 std::string(peer.status().message()).c_str());
    return 1;
  }
  if (absl::Status s = (*peer)->Connect(static_cast<int>(tcp_streams)); !s.ok()) {
    std::fprintf(stderr, "shelf-bench transport: baseline peer: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }

  // A one-store cluster holding every size's ranges at once (the variants'
  // clusters hold one batch of each).
  uint64_t segment_bytes = 64ull << 20, variant_segment_bytes = 64ull << 20;
  for (uint64_t s : sizes) {
    segment_bytes += (s + 4095) / 4096 * 4096 * blocks_for(s);
    variant_segment_bytes += (s + 4095) / 4096 * 4096 * max_batch;
  }
  LocalCluster::Options co;
  co.stores = 1;
  co.dram_bytes = segment_bytes;
  co.work_dir = work_dir;
  co.wait_populated = true;                  // cells start once the populator is done
  co.master_args = {"--put-timeout", "1h"};  // grants stay valid for the whole run
  auto cluster = LocalCluster::Start(co);
  if (!cluster.ok()) {
    std::fprintf(stderr, "shelf-bench transport: cannot start a cluster: %s\n",
                 std::string(cluster.status().message()).c_str());
    return 1;
  }
  auto channel = MakeChannel((*cluster)->master_address(), TlsFiles());
  if (!channel.ok()) {
    std::fprintf(stderr, "shelf-bench transport: %s\n",
                 std::string(channel.status().message()).c_str());
    return 1;
  }
  auto master = v1::MasterService::NewStub(*channel);
  std::string tag = absl::StrCat(getpid(), "-", MonoUs() % 1000000);
  std::vector<StoreRanges> ranges;
  for (uint64_t s : sizes) {
    auto r = AllocateRanges(master.get(), tag, s, blocks_for(s));
    if (!r.ok()) {
      std::fprintf(stderr, "shelf-bench transport: cannot place %s blocks: %s\n",
                   ShortBytes(s).c_str(), std::string(r.status().message()).c_str());
      return 1;
    }
    ranges.push_back(*std::move(r));
  }
  transport::TcpEngine::Options to;
  to.streams_per_op = static_cast<size_t>(tcp_streams);
  transport::TcpEngine tcp(to);
  transport::ShmEngine shm("");
  transport::Peer store;
  store.node_id = "bench-store";
  store.host_id = HostId();
  store.set_route(transport::Kind::kTcp, ranges[0].data_address);
  store.set_route(transport::Kind::kShm, ranges[0].shm_socket);
  if (!shm.Reaches(store)) {
    std::fprintf(stderr, "shelf-bench transport: the store offers no shared memory\n");
    return 1;
  }

  // Private buffers, written once so their pages are in place, and
  // registered with both engines.
  std::vector<char> src_mem(mem_bytes), dst_mem(mem_bytes, 0);
  BlockPattern pattern(std::min<uint64_t>(max_size, 1ull << 20));
  for (size_t off = 0; off < src_mem.size(); off += pattern.bytes()) {
    std::vector<char> tmp(pattern.bytes());
    pattern.Fill(off / pattern.bytes(), tmp.data());
    std::memcpy(src_mem.data() + off, tmp.data(), std::min(tmp.size(), src_mem.size() - off));
  }
  // The same source bytes in shared host memory, which the store maps and
  // copies from directly.
  absl::StatusOr<char*> shared_src = transport::AllocateShmSource(src_mem.size());
  if (!shared_src.ok()) {
    std::fprintf(stderr, "shelf-bench transport: shared host memory: %s\n",
                 std::string(shared_src.status().message()).c_str());
    return 1;
  }
  std::memcpy(*shared_src, src_mem.data(), src_mem.size());
  absl::StatusOr<transport::MemoryHandle> shared_handle =
      shm.RegisterMemory(*shared_src, src_mem.size(), transport::MemoryKind::kHost);
  if (!shared_handle.ok()) {
    std::fprintf(stderr, "shelf-bench transport: cannot register memory: %s\n",
                 std::string(shared_handle.status().message()).c_str());
    return 1;
  }
  transport::MemoryHandle handles[2][2];  // [tcp, shm][src, dst]
  transport::Engine* engines[2] = {&tcp, &shm};
  for (int e = 0; e < 2; ++e) {
    auto hs =
        engines[e]->RegisterMemory(src_mem.data(), src_mem.size(), transport::MemoryKind::kHost);
    auto hd =
        engines[e]->RegisterMemory(dst_mem.data(), dst_mem.size(), transport::MemoryKind::kHost);
    if (!hs.ok() || !hd.ok()) {
      std::fprintf(stderr, "shelf-bench transport: cannot register memory: %s\n",
                   std::string((hs.ok() ? hd.status() : hs.status()).message()).c_str());
      return 1;
    }
    handles[e][0] = *hs;
    handles[e][1] = *hd;
  }
  std::vector<std::unique_ptr<Variant>> variants;
  // Session tags over headers (the default), then over payloads too.
  for (int payload = 0; session_mac && payload < 2; ++payload) {
    const std::string name = payload ? "tcp+mac+payload" : "tcp+mac";
    LocalCluster::Options vo = co;
    vo.dram_bytes = variant_segment_bytes;
    vo.work_dir = work_dir.empty() ? "" : work_dir + "/" + (payload ? "mac-payload" : "mac");
    vo.secret = "shelf-bench-transport-secret-0123456789";
    if (payload) vo.store_args.push_back("--session-tag-payload");
    transport::TcpEngine::Options vto = to;
    vto.secret = vo.secret;
    auto v = StartVariant(name, vo, vto, sizes, max_batch, &src_mem, &dst_mem);
    if (!v.ok()) {
      std::fprintf(stderr, "shelf-bench transport: %s: %s\n", name.c_str(),
                   std::string(v.status().message()).c_str());
      return 1;
    }
    variants.push_back(*std::move(v));
  }
  std::string cert_dir;
  if (data_tls) {
    char tmpl[] = "/tmp/shelf-bench-tls-XXXXXX";
    cert_dir = mkdtemp(tmpl) != nullptr ? tmpl : "";
    const std::string d = cert_dir;
    const std::string steps =
        absl::StrCat("cd '", d, "' && echo subjectAltName=IP:127.0.0.1 > san.ext && ",
                     "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ",
                     "-days 1 -subj /CN=bench-ca -keyout ca.key -out ca.pem && ",
                     "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ",
                     "-subj /CN=localhost -keyout store.key -out store.csr && ",
                     "openssl x509 -req -days 1 -in store.csr -CA ca.pem -CAkey ca.key ",
                     "-CAcreateserial -out store.pem -extfile san.ext && chmod 600 store.key");
    std::string cmd = absl::StrCat("(", steps, ") >/dev/null 2>&1");
    if (d.empty() || std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "shelf-bench transport: cannot make TLS certificates with openssl\n");
      return 1;
    }
    LocalCluster::Options vo = co;
    vo.dram_bytes = variant_segment_bytes;
    vo.work_dir = work_dir.empty() ? "" : work_dir + "/tls";
    vo.store_args = {"--data-tls", "--data-tls-cert", d + "/store.pem", "--data-tls-key",
                     d + "/store.key"};
    transport::TcpEngine::Options vto = to;
    vto.tls = true;
    vto.tls_files.ca = d + "/ca.pem";
    auto v = StartVariant("tcp+tls", vo, vto, sizes, max_batch, &src_mem, &dst_mem);
    if (!v.ok()) {
      std::fprintf(stderr, "shelf-bench transport: tcp+tls: %s\n",
                   std::string(v.status().message()).c_str());
      return 1;
    }
    variants.push_back(*std::move(v));
  }
  // A variant's batch of `batch` ops of `size` bytes (size index si).
  auto variant_ops = [&](Variant* v, transport::OpKind kind, size_t si, uint64_t size, int batch) {
    std::vector<transport::Op> ops(batch);
    for (int j = 0; j < batch; ++j) {
      const Range& r = v->ranges[si].ranges[j];
      transport::Op& op = ops[j];
      op.kind = kind;
      op.local = kind == transport::OpKind::kRead ? v->dst : v->src;
      op.local_offset = j * size;
      op.peer = &v->store;
      op.segment_id = r.segment;
      op.remote_offset = r.offset;
      op.length = size;
      if (kind == transport::OpKind::kWrite) op.grant = transport::wire::EncodeGrant(r.grant);
    }
    return ops;
  };
  // One batch of `batch` ops of `size` bytes: block j between src/dst block
  // j and range j.
  // Of the working set, the set'th batch.
  auto make_ops = [&](int e, transport::OpKind kind, const StoreRanges& sr, uint64_t size,
                      int batch, int set = 0) {
    std::vector<transport::Op> ops(batch);
    for (int j = 0; j < batch; ++j) {
      const int block = set * batch + j;
      const Range& r = sr.ranges[block];
      transport::Op& op = ops[j];
      op.kind = kind;
      op.local = handles[e][kind == transport::OpKind::kRead ? 1 : 0];
      op.local_offset = block * size;
      op.peer = &store;
      op.segment_id = r.segment;
      op.remote_offset = r.offset;
      op.length = size;
      if (kind == transport::OpKind::kWrite) op.grant = transport::wire::EncodeGrant(r.grant);
    }
    return ops;
  };

  std::vector<Cell> cells;
  uint64_t mismatches = 0;
  double per_round = seconds / static_cast<double>(rounds);
  for (size_t si = 0; si < sizes.size() && !StopRequested(); ++si) {
    uint64_t size = sizes[si];
    const StoreRanges& sr = ranges[si];
    for (int batch : batches) {
      if (StopRequested()) break;
      Cell c;
      c.size = size;
      c.batch = batch;
      c.stripes = static_cast<int>(tcp.StripesFor(size));
      uint64_t batch_bytes = size * batch;
      std::vector<char*> src(batch), dst(batch);
      for (int j = 0; j < batch; ++j) {
        src[j] = src_mem.data() + j * size;
        dst[j] = dst_mem.data() + j * size;
      }
      const std::vector<transport::Op> ops[2][2] = {
          {make_ops(0, transport::OpKind::kRead, sr, size, batch),
           make_ops(0, transport::OpKind::kWrite, sr, size, batch)},
          {make_ops(1, transport::OpKind::kRead, sr, size, batch),
           make_ops(1, transport::OpKind::kWrite, sr, size, batch)}};
      auto run = [&](int e, int d) {
        return [&, e, d]() { return engines[e]->Execute(ops[e][d], MonoMs() + kOpTimeoutMs); };
      };
      auto tcp_read = run(0, 0);
      auto tcp_write = run(0, 1);
      auto shm_read = run(1, 0);
      auto shm_write = run(1, 1);
      std::vector<transport::Op> shared_ops = ops[1][1];
      for (transport::Op& op : shared_ops) op.local = *shared_handle;
      auto shm_shared_write = [&]() { return shm.Execute(shared_ops, MonoMs() + kOpTimeoutMs); };
      // The timed shm and memcpy rows cycle through the working set, a
      // batch at a time: [0] read, [1] write, [2] write from shared memory.
      const int sets = std::max(1, blocks_for(size) / batch);
      std::vector<std::vector<transport::Op>> cycle[3];
      for (int set = 0; set < sets; ++set) {
        cycle[0].push_back(make_ops(1, transport::OpKind::kRead, sr, size, batch, set));
        cycle[1].push_back(make_ops(1, transport::OpKind::kWrite, sr, size, batch, set));
        cycle[2].push_back(cycle[1].back());
        for (transport::Op& op : cycle[2].back()) op.local = *shared_handle;
      }
      int next[4] = {0, 0, 0, 0};  // [3]: memcpy
      auto cycled = [&](int k) {
        return [&, k]() {
          const std::vector<transport::Op>& o = cycle[k][next[k]++ % sets];
          return shm.Execute(o, MonoMs() + kOpTimeoutMs);
        };
      };
      auto mem_cycled = [&]() -> absl::Status {
        const uint64_t at = static_cast<uint64_t>(next[3]++ % sets) * batch * size;
        for (int j = 0; j < batch; ++j) std::memcpy(dst[j] + at, src[j] + at, size);
        return absl::OkStatus();
      };
      // One pass through the working set before the timings, so that no
      // row pays for the first touch of its pages (the store's segment, the
      // client's mappings of it, the buffers).
      for (int set = 0; set < sets && !StopRequested(); ++set) {
        for (int k = 0; k < 3; ++k) cycled(k)().IgnoreError();
        mem_cycled().IgnoreError();
      }
      // Correctness once per cell, outside the timings: what TCP wrote,
      // TCP and shared memory read back; what shared memory wrote, TCP
      // reads back.
      absl::Status check = tcp_write();
      for (auto* read : {&tcp_read, &shm_read}) {
        std::fill(dst_mem.begin(), dst_mem.begin() + batch_bytes, 0);
        if (check.ok()) check = (*read)();
        if (check.ok() && std::memcmp(dst_mem.data(), src_mem.data(), batch_bytes) != 0) {
          ++mismatches;
        }
      }
      // What shared memory wrote, TCP reads back; the source changes first,
      // so the check sees the shm write and not what TCP left there.
      // And so for a write from shared host memory.
      for (char* from : {src_mem.data(), *shared_src}) {
        if (!check.ok()) break;
        for (size_t k = 0; k < batch_bytes; ++k) from[k] ^= 0x5A;
        check = from == src_mem.data() ? shm_write() : shm_shared_write();
        std::fill(dst_mem.begin(), dst_mem.begin() + batch_bytes, 0);
        if (check.ok()) check = tcp_read();
        if (check.ok() && std::memcmp(dst_mem.data(), from, batch_bytes) != 0) ++mismatches;
        for (size_t k = 0; k < batch_bytes; ++k) from[k] ^= 0x5A;
      }
      if (!check.ok()) {
        std::fprintf(stderr, "shelf-bench transport: %s x%d: %s\n", ShortBytes(size).c_str(), batch,
                     std::string(check.message()).c_str());
        ++mismatches;
      }
      c.variants.resize(variants.size());
      std::vector<std::array<std::vector<transport::Op>, 2>> vops(variants.size());
      for (size_t v = 0; v < variants.size(); ++v) {
        vops[v][0] = variant_ops(variants[v].get(), transport::OpKind::kRead, si, size, batch);
        vops[v][1] = variant_ops(variants[v].get(), transport::OpKind::kWrite, si, size, batch);
        // Correctness once: what the variant wrote, it reads back.
        absl::Status vs = variants[v]->engine->Execute(vops[v][1], MonoMs() + kOpTimeoutMs);
        std::fill(dst_mem.begin(), dst_mem.begin() + batch_bytes, 0);
        if (vs.ok()) vs = variants[v]->engine->Execute(vops[v][0], MonoMs() + kOpTimeoutMs);
        if (!vs.ok() || std::memcmp(dst_mem.data(), src_mem.data(), batch_bytes) != 0) {
          std::fprintf(stderr, "shelf-bench transport: %s %s x%d: %s\n", variants[v]->name.c_str(),
                       ShortBytes(size).c_str(), batch,
                       vs.ok() ? "mismatch" : std::string(vs.message()).c_str());
          ++mismatches;
        }
      }
      for (int64_t round = 0; round < rounds && !StopRequested(); ++round) {
        Timed(per_round, batch_bytes, &c.sock[0], [&] { return (*peer)->Receive(dst, size); });
        Timed(per_round, batch_bytes, &c.tcp[0], tcp_read);
        Timed(per_round, batch_bytes, &c.sock[1], [&] { return (*peer)->Send(src, size); });
        Timed(per_round, batch_bytes, &c.tcp[1], tcp_write);
        if (c.stripes > 1) {
          Timed(per_round, batch_bytes, &c.sock_striped[0],
                [&] { return (*peer)->Receive(dst, size, c.stripes); });
          Timed(per_round, batch_bytes, &c.sock_striped[1],
                [&] { return (*peer)->Send(src, size, c.stripes); });
        }
        for (size_t v = 0; v < variants.size(); ++v) {
          for (int d = 0; d < 2; ++d) {
            Timed(per_round, batch_bytes, &c.variants[v][d], [&, v, d] {
              return variants[v]->engine->Execute(vops[v][d], MonoMs() + kOpTimeoutMs);
            });
          }
        }
        Timed(per_round, batch_bytes, &c.mem, mem_cycled);
        Timed(per_round, batch_bytes, &c.shm[0], cycled(0));
        Timed(per_round, batch_bytes, &c.shm[1], cycled(1));
        Timed(per_round, batch_bytes, &c.shm_shared, cycled(2));
      }
      cells.push_back(std::move(c));
      if (json_only) {
        std::fprintf(stderr, "transport %s x%d done\n", ShortBytes(size).c_str(), batch);
      }
    }
  }

  // The headline ratio for a size: the smallest over read/write and batches.
  auto ratio_min = [&](uint64_t size, bool shm_path, bool* found) {
    double best = 0;
    *found = false;
    for (Cell& c : cells) {
      if (c.size != size) continue;
      for (int d = 0; d < 2; ++d) {
        // A striped block is judged against as many plain connections.
        Measure& sock = c.stripes > 1 ? c.sock_striped[d] : c.sock[d];
        double r = shm_path ? RoundRatio(c.shm[d], c.mem) : RoundRatio(c.tcp[d], sock);
        if (r <= 0) continue;
        best = *found ? std::min(best, r) : r;
        *found = true;
      }
    }
    return best;
  };
  uint64_t errors = 0;
  std::string first_error;
  Json rows = Json::array();
  if (!json_only) {
    std::printf("\nShelf transport: one store process on loopback, one client thread\n\n");
    std::printf("  %-6s %5s %-7s %-5s %8s %9s %9s   %-8s %8s %9s %9s  %6s\n", "block", "batch",
                "path", "op", "GB/s", "p50 us", "p99 us", "baseline", "GB/s", "p50 us", "p99 us",
                "ratio");
  }
  // One row: Shelf's figures `m` on `path` next to the baseline's `b`,
  // printed (unless --json-only) and kept for the JSON.
  auto add_row = [&](const Cell& c, const std::string& path, const char* op, Measure& m,
                     const std::string& base, Measure& b, int base_connections) {
    const double ratio = RoundRatio(m, b);
    if (!json_only) {
      std::printf("  %-6s %5d %-7s %-5s %8.3f %9.0f %9.0f   %-8s %8.3f %9.0f %9.0f  %5.2fx\n",
                  ShortBytes(c.size).c_str(), c.batch, path.c_str(), op, m.gbps(),
                  m.lat_us.Percentile(50), m.lat_us.Percentile(99), base.c_str(), b.gbps(),
                  b.lat_us.Percentile(50), b.lat_us.Percentile(99), ratio);
    }
    Json o = Json::object();
    o["path"] = path;
    o["op"] = op;
    o["block_bytes"] = c.size;
    o["batch"] = c.batch;
    o["gbps"] = m.gbps();
    o["p50_us"] = m.lat_us.Percentile(50);
    o["p99_us"] = m.lat_us.Percentile(99);
    o["baseline"] = base;
    if (base_connections > 1) o["baseline_connections"] = base_connections;
    o["baseline_gbps"] = b.gbps();
    o["baseline_p50_us"] = b.lat_us.Percentile(50);
    o["baseline_p99_us"] = b.lat_us.Percentile(99);
    o["ratio"] = ratio;
    rows.push_back(o);
  };
  auto note_errors = [&](const Measure& m) {
    errors += m.errors;
    if (first_error.empty()) first_error = m.error;
  };
  for (Cell& c : cells) {
    for (int d = 0; d < 2; ++d) {
      note_errors(c.tcp[d]);
      note_errors(c.sock[d]);
      add_row(c, "tcp", d == 0 ? "read" : "write", c.tcp[d], "socket", c.sock[d], 1);
    }
    for (int d = 0; d < 2; ++d) {
      note_errors(c.shm[d]);
      add_row(c, "shm", d == 0 ? "read" : "write", c.shm[d], "memcpy", c.mem, 1);
    }
    note_errors(c.shm_shared);
    add_row(c, "shm-shr", "write", c.shm_shared, "memcpy", c.mem, 1);
    // A striped block: tcp next to the socket peer on as many connections.
    for (int d = 0; c.stripes > 1 && d < 2; ++d) {
      note_errors(c.sock_striped[d]);
      add_row(c, "tcp", d == 0 ? "read" : "write", c.tcp[d], absl::StrCat("socketx", c.stripes),
              c.sock_striped[d], c.stripes);
    }
    // Each variant against plain tcp, measured in the same rounds.
    for (size_t v = 0; v < variants.size() && v < c.variants.size(); ++v) {
      for (int d = 0; d < 2; ++d) {
        note_errors(c.variants[v][d]);
        add_row(c, variants[v]->name, d == 0 ? "read" : "write", c.variants[v][d], "tcp", c.tcp[d],
                1);
      }
    }
  }
  Json o = Json::object();
  o["bench"] = "transport";
  o["stopped"] = StopRequested();
  const std::pair<uint64_t, const char*> kHeadlines[] = {
      {64ull << 10, "64k"}, {1ull << 20, "1m"}, {16ull << 20, "16m"}};
  for (const auto& [size, label] : kHeadlines) {
    for (bool shm_path : {false, true}) {
      bool found = false;
      double r = ratio_min(size, shm_path, &found);
      std::string key = absl::StrCat(shm_path ? "shm" : "tcp", "_ratio_", label);
      if (found) {
        o[key] = r;
      } else {
        o[key] = nullptr;
      }
    }
    // Writes from shared host memory: the smallest over batches.
    double shared = 0;
    for (Cell& c : cells) {
      const double r = c.size == size ? RoundRatio(c.shm_shared, c.mem) : 0;
      if (r > 0) shared = shared > 0 ? std::min(shared, r) : r;
    }
    const std::string key = absl::StrCat("shm_shared_write_ratio_", label);
    if (shared > 0) {
      o[key] = shared;
    } else {
      o[key] = nullptr;
    }
  }
  if (!json_only) {
    std::printf(
        "\n  ratio = median over the rounds of Shelf GB/s / baseline GB/s; headline per size = the "
        "smallest over read/write and batches, a striped block's tcp against socketxN (the "
        "socket peer on as many connections as the engine's stripes)\n");
    std::printf("  errors %llu, mismatches %llu%s%s\n\n", static_cast<unsigned long long>(errors),
                static_cast<unsigned long long>(mismatches),
                first_error.empty() ? "" : "; first: ", first_error.c_str());
  }
  // The rdma rows: simulated device, correctness and per-op overhead only.
  Json rdma_rows = RdmaSimulatedRows(sizes, batches, per_round, !json_only, &errors, &mismatches);
  for (const Json& r : rdma_rows) rows.push_back(r);
  if (!json_only) {
    std::printf("  errors %llu, mismatches %llu (all rows)\n\n",
                static_cast<unsigned long long>(errors),
                static_cast<unsigned long long>(mismatches));
  }
  o["errors"] = errors;
  o["mismatches"] = mismatches;
  o["rows"] = rows;
  variants.clear();
  if (!cert_dir.empty() && std::system(absl::StrCat("rm -rf '", cert_dir, "'").c_str()) != 0) {
    std::fprintf(stderr, "shelf-bench transport: could not remove %s\n", cert_dir.c_str());
  }
  cluster->reset();
  peer->reset();
  std::printf("%s\n", JsonDump(o).c_str());
  return errors == 0 && mismatches == 0 ? 0 : 1;
}

}  // namespace shelf::bench
