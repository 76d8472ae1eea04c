// shelf-bench ssd-hits: SSD-tier hits read by a client on the store's host,
// through the store's shared segment (the store reads the block into a
// pinned range of it, the client copies it out) against the TCP data plane
// (ClientOptions::allow_shm = false), in the same run.
//
// A one-store cluster with a small DRAM segment and an SSD tier is started;
// for each block size, blocks of three times the segment are put, so most
// are demoted, and the blocks that now live on SSD alone are found (a read
// that the client counts as an SSD load). Then, alternating shm and tcp in
// rounds so that both see the same machine: every such block read once with
// Get (one at a time: latency), and in BatchGets of --batch blocks. Both
// paths read the block from the disk (O_DIRECT) each time; what differs is
// how the bytes reach the client. Every block read is checked.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/units.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "tools/bench/bench_util.h"

namespace shelf::bench {

bool StopRequested();  // main.cc: SIGINT/SIGTERM arrived

namespace {

struct PathFigures {
  Samples get_us;        // one Get
  double get_bytes = 0;  // read by Get
  double get_s = 0;
  double batch_bytes = 0;
  double batch_s = 0;
  uint64_t tcp_bytes = 0, shm_bytes = 0;  // the client's counters over the timed reads
  double get_gbps() const { return get_s > 0 ? get_bytes / get_s / 1e9 : 0; }
  double batch_gbps() const { return batch_s > 0 ? batch_bytes / batch_s / 1e9 : 0; }
};

struct SizeRow {
  uint64_t size = 0;
  size_t ssd_blocks = 0;
  PathFigures shm, tcp;
};

std::unique_ptr<Client> Open(const std::string& master, bool allow_shm) {
  ClientOptions o;
  o.masters = {master};
  o.timeout_ms = 60000;
  o.allow_shm = allow_shm;
  std::unique_ptr<Client> c;
  if (Status s = Client::Open(o, &c); !s.ok()) {
    std::fprintf(stderr, "shelf-bench ssd-hits: %s\n", s.ToString().c_str());
    return nullptr;
  }
  return c;
}

// One round of `client` over `keys` (ids `ids`): each Get alone, then the
// BatchGets. Counts errors and mismatches.
void Round(Client* client, const std::vector<std::string>& keys, const std::vector<uint64_t>& ids,
           const BlockPattern& pattern, size_t batch, PathFigures* f, uint64_t* errors,
           uint64_t* mismatches) {
  const ClientStats before = client->stats();
  std::string value;
  uint64_t t_all = MonoUs();
  for (size_t i = 0; i < keys.size() && !StopRequested(); ++i) {
    uint64_t t0 = MonoUs();
    Status s = client->Get(keys[i], &value);
    f->get_us.Add(static_cast<double>(MonoUs() - t0));
    if (!s.ok()) {
      ++*errors;
      continue;
    }
    if (!pattern.Check(ids[i], value.data(), value.size())) ++*mismatches;
    f->get_bytes += static_cast<double>(value.size());
  }
  f->get_s += (MonoUs() - t_all) / 1e6;
  std::vector<std::string> values;
  std::vector<Status> statuses;
  for (size_t b = 0; b < keys.size() && !StopRequested(); b += batch) {
    std::vector<std::string> part(keys.begin() + b,
                                  keys.begin() + std::min(keys.size(), b + batch));
    uint64_t t0 = MonoUs();
    Status s = client->BatchGet(part, &values, &statuses);
    f->batch_s += (MonoUs() - t0) / 1e6;
    for (size_t j = 0; j < part.size(); ++j) {
      if (!s.ok() || !statuses[j].ok()) {
        ++*errors;
        continue;
      }
      if (!pattern.Check(ids[b + j], values[j].data(), values[j].size())) ++*mismatches;
      f->batch_bytes += static_cast<double>(values[j].size());
    }
  }
  const ClientStats after = client->stats();
  f->tcp_bytes += after.bytes_loaded_tcp - before.bytes_loaded_tcp;
  f->shm_bytes += after.bytes_loaded_shm - before.bytes_loaded_shm;
}

}  // namespace

int SsdHitsBench(int argc, char** argv) {
  std::string sizes_text = "256KiB,4MiB,16MiB", work_dir;
  uint64_t dram_size = 64ull << 20, ssd_size = 1ull << 30, window = 128ull << 20;
  int64_t rounds = 3, batch = 8;
  bool quick = false, json_only = false;
  Flags flags("shelf-bench ssd-hits",
              "same-host SSD-tier hits through shared memory against the TCP data plane");
  flags.AddString("sizes", &sizes_text, "block sizes, comma-separated");
  flags.AddSize("dram-size", &dram_size, "the store's DRAM segment");
  flags.AddSize("ssd-size", &ssd_size, "the store's SSD tier");
  flags.AddSize("shm-ssd-window", &window,
                "the store's --shm-ssd-window (default: room for a BatchGet of 8 blocks of 16 MiB; "
                "the store's own default is 64MiB)");
  flags.AddInt("rounds", &rounds, "rounds per path and size (alternating shm and tcp)");
  flags.AddInt("batch", &batch, "blocks per BatchGet");
  flags.AddString("work-dir", &work_dir,
                  "the cluster's directory, SSD tier included (default: a fresh temporary one); "
                  "kept when given");
  flags.AddBool("quick", &quick, "a short run (256KiB and 1MiB, 16 MiB of DRAM, 1 round)");
  flags.AddBool("json-only", &json_only, "print only the JSON line");
  flags.ParseOrExit(argc, argv);
  if (quick) {
    if (!flags.WasSet("sizes")) sizes_text = "256KiB,1MiB";
    if (!flags.WasSet("dram-size")) dram_size = 16ull << 20;
    if (!flags.WasSet("ssd-size")) ssd_size = 256ull << 20;
    if (!flags.WasSet("rounds")) rounds = 1;
  }
  std::vector<uint64_t> sizes;
  for (absl::string_view t : absl::StrSplit(sizes_text, ',', absl::SkipEmpty())) {
    absl::StatusOr<uint64_t> v = ParseSize(t);
    if (!v.ok() || *v == 0 || *v > dram_size / 2) {
      std::fprintf(stderr, "shelf-bench ssd-hits: bad size '%s' (at most half of --dram-size)\n",
                   std::string(t).c_str());
      return 2;
    }
    sizes.push_back(*v);
  }
  if (rounds < 1 || rounds > 1000 || batch < 1 || batch > static_cast<int64_t>(kBatchItemsMax)) {
    std::fprintf(stderr, "shelf-bench ssd-hits: --rounds or --batch out of range\n");
    return 2;
  }
  LocalCluster::Options co;
  co.stores = 1;
  co.dram_bytes = dram_size;
  co.ssd_bytes = ssd_size;
  co.work_dir = work_dir;
  co.wait_populated = true;  // reads start once the populator is done
  co.keep_work_dir = !work_dir.empty();
  co.store_args = {absl::StrCat("--shm-ssd-window=", window)};
  auto cluster = LocalCluster::Start(co);
  if (!cluster.ok()) {
    std::fprintf(stderr, "shelf-bench ssd-hits: cannot start a cluster: %s\n",
                 std::string(cluster.status().message()).c_str());
    return 1;
  }
  const std::string master = (*cluster)->master_address();
  std::unique_ptr<Client> shm = Open(master, true);
  std::unique_ptr<Client> tcp = Open(master, false);
  if (shm == nullptr || tcp == nullptr) return 1;

  uint64_t errors = 0, mismatches = 0;
  std::vector<SizeRow> rows;
  const std::string run = absl::StrCat(UnixMs());
  for (uint64_t size : sizes) {
    if (StopRequested()) break;
    SizeRow row;
    row.size = size;
    BlockPattern pattern(size);
    const uint64_t count = std::max<uint64_t>(3 * dram_size / size, 8);
    std::vector<std::string> all;
    std::vector<char> block(size);
    for (uint64_t i = 0; i < count && !StopRequested(); ++i) {
      all.push_back(absl::StrCat("ssd-hits/", run, "/", size, "/", i));
      pattern.Fill(i, block.data());
      if (!shm->Put(all.back(), block.data(), size).ok()) ++errors;
    }
    // The blocks on SSD alone: a read the client counts as an SSD load.
    std::vector<std::string> keys;
    std::vector<uint64_t> ids;
    std::string value;
    for (uint64_t i = 0; i < all.size() && !StopRequested(); ++i) {
      const uint64_t before = tcp->stats().blocks_loaded_ssd;
      if (tcp->Get(all[i], &value).ok() && tcp->stats().blocks_loaded_ssd > before) {
        keys.push_back(all[i]);
        ids.push_back(i);
      }
    }
    row.ssd_blocks = keys.size();
    for (int64_t r = 0; r < rounds && !StopRequested() && !keys.empty(); ++r) {
      Round(shm.get(), keys, ids, pattern, static_cast<size_t>(batch), &row.shm, &errors,
            &mismatches);
      Round(tcp.get(), keys, ids, pattern, static_cast<size_t>(batch), &row.tcp, &errors,
            &mismatches);
    }
    rows.push_back(std::move(row));
  }

  if (!json_only) {
    std::printf(
        "SSD-tier hits on the store's host: shared memory (shm) against TCP (tcp), %lld "
        "round(s), BatchGet of %lld\n",
        static_cast<long long>(rounds), static_cast<long long>(batch));
    std::printf("%-8s %6s | %9s %9s %9s %9s | %9s %9s %9s %9s | %9s %9s\n", "block", "blocks",
                "shm get", "shm p50", "shm batch", "shm tcpB", "tcp get", "tcp p50", "tcp batch",
                "tcp shmB", "get x", "batch x");
    std::printf("%-8s %6s | %9s %9s %9s %9s | %9s %9s %9s %9s | %9s %9s\n", "", "", "GB/s", "us",
                "GB/s", "bytes", "GB/s", "us", "GB/s", "bytes", "shm/tcp", "shm/tcp");
    for (SizeRow& r : rows) {
      std::printf("%-8s %6zu | %9.3f %9.0f %9.3f %9llu | %9.3f %9.0f %9.3f %9llu | %9.2f %9.2f\n",
                  FormatBytes(r.size).c_str(), r.ssd_blocks, r.shm.get_gbps(),
                  r.shm.get_us.Percentile(50), r.shm.batch_gbps(),
                  static_cast<unsigned long long>(r.shm.tcp_bytes), r.tcp.get_gbps(),
                  r.tcp.get_us.Percentile(50), r.tcp.batch_gbps(),
                  static_cast<unsigned long long>(r.tcp.shm_bytes),
                  r.tcp.get_gbps() > 0 ? r.shm.get_gbps() / r.tcp.get_gbps() : 0,
                  r.tcp.batch_gbps() > 0 ? r.shm.batch_gbps() / r.tcp.batch_gbps() : 0);
    }
    std::printf("\n");
  }
  Json o = Json::object();
  o["bench"] = "ssd-hits";
  for (SizeRow& r : rows) {
    const std::string p = absl::StrCat(r.size >> 10, "k_");
    o[p + "ssd_blocks"] = static_cast<uint64_t>(r.ssd_blocks);
    o[p + "shm_get_gbps"] = r.shm.get_gbps();
    o[p + "shm_get_p50_us"] = r.shm.get_us.Percentile(50);
    o[p + "shm_batch_gbps"] = r.shm.batch_gbps();
    o[p + "shm_tcp_bytes"] = r.shm.tcp_bytes;
    o[p + "tcp_get_gbps"] = r.tcp.get_gbps();
    o[p + "tcp_get_p50_us"] = r.tcp.get_us.Percentile(50);
    o[p + "tcp_batch_gbps"] = r.tcp.batch_gbps();
  }
  o["rounds"] = rounds;
  o["errors"] = errors;
  o["mismatches"] = mismatches;
  o["stopped"] = StopRequested();
  std::printf("%s\n", JsonDump(o).c_str());
  bool found = !rows.empty();
  for (const SizeRow& r : rows) found = found && r.ssd_blocks > 0;
  return errors == 0 && mismatches == 0 && found && !StopRequested() ? 0 : 1;
}

}  // namespace shelf::bench
