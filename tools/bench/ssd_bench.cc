// shelf-bench ssd: the SSD tier (SsdTier) next to the disk's best raw I/O
// of the same bytes on the same directory.
//
// For each block size (default 32 KiB, 256 KiB, 4 MiB, 16 MiB):
//   raw write   O_DIRECT pwrite of every block into one preallocated file
//               from --queue-depth threads (8 I/Os in flight), aligned
//               buffers, then fdatasync
//   tier write  every block from one caller, as a store demotes from its
//               DRAM segment (--demote-copy auto): SsdTier::PutInPlace
//               from a DRAM segment, or SsdTier::Put (a copy to a hugepage
//               buffer) for blocks of 2 MiB and more where the segment is
//               on 4 KiB pages, and runs of smaller ones gathered into one
//               such buffer (SsdTier::Options::stage_runs) there
//               (--tier-write in-place and put: always the
//               one, always the other), with a SyncAsync every 64 MiB
//               (the next ones are put while it runs; up to 4 under way)
//               and a Sync at the end, as the store's mover makes its
//               demotions durable: both sides count the time until the
//               bytes are on the device (the tier's index entries too);
//               closing the tier is timed apart
//   raw read    O_DIRECT pread of every block from --queue-depth threads
//   tier read   SsdTier::GetInto of every block from --queue-depth threads
//               (concurrent client reads) into each one's aligned buffer,
//               as the store reads for its clients (--tier-read get:
//               SsdTier::Get into a string, a copy out), after dropping
//               the tier's files from the page cache (posix_fadvise
//               DONTNEED)
// Both reads compare every block with what was written inside the timed
// loop. Put-call throughput (what a demoting store thread waits for) and
// the tier's open time are shown too. Then compression on and off, on
// KV-like bytes: fp16 values drawn from a normal distribution, as
// attention K/V activations roughly are, which LZ4 cannot shrink.
//
// Each size runs --rounds times (default 3), which side goes first
// alternating. A shared disk's speed drifts by a third and more over tens
// of seconds, more than the gap measured, so the ratio reported is the
// median of the rounds' own ratios, each of a tier run and a raw run made
// back to back; each side's best round is shown too (GB/s columns, and
// the ratio of the two bests).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/mutex.h"
#include "common/units.h"
#include "storage/dram_segment.h"
#include "storage/ssd_tier.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/raw_io.h"

namespace shelf::bench {

bool StopRequested();  // main.cc: SIGINT/SIGTERM arrived

namespace {

// Files under `dir`, recursively.
std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) out.push_back(it->path().string());
  }
  return out;
}

uint64_t BytesUnder(const std::string& dir) {
  uint64_t total = 0;
  for (const std::string& f : FilesUnder(dir)) {
    struct stat st;
    if (stat(f.c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

// fsync (sync = true) and/or drop from the page cache every file under dir.
void SyncAndDrop(const std::string& dir, bool sync, bool drop) {
  for (const std::string& f : FilesUnder(dir)) {
    int fd = open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (sync) fsync(fd);
    if (drop) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  if (sync) {
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      fsync(fd);
      close(fd);
    }
  }
}

// Syncs a tier writer keeps under way before it waits for the oldest, as
// the store's mover (Store::kSyncsAhead).
constexpr int kSyncsAhead = 4;

struct TierFigures {
  Measure write, read;
  double put_call_gbps = 0;  // bytes over the time spent inside Put
  double open_s = 0;         // reopening: the scan that rebuilds the index
  double close_s = 0;        // closing after the writes (RocksDB's memtable flush)
  double sync_s = 0;         // time the writer waited for syncs
  uint64_t syncs = 0;
  uint64_t disk_bytes = 0;  // bytes the tier's files occupy after the writes
  bool copied = false;      // written with Put (a copy in), not PutInPlace
};

// How TierRun writes (--tier-write).
enum class TierWrite {
  kStore,    // as a store demotes: in place, or copied where its segment's pages are small
  kInPlace,  // SsdTier::PutInPlace from a DRAM segment
  kPut,      // SsdTier::Put: a copy in
};

// Writes `count` blocks (base restamped per id) through a fresh SsdTier in
// dir, closes and syncs it, reopens it cold and reads every block back.
absl::Status TierRun(const std::string& dir, bool compression, const char* base, uint64_t size,
                     uint64_t count, int readers, bool read_into, TierWrite how,
                     uint64_t sync_bytes, TierFigures* f, uint64_t* mismatches) {
  std::vector<char> block(base, base + size);
  std::vector<uint64_t> sums(count);
  for (uint64_t i = 0; i < count; ++i) {
    Stamp(i, block.data());
    sums[i] = BlockChecksum(block.data(), size);
  }
  // In place (SsdTier::PutInPlace, as a store demotes from its DRAM
  // segment), a block's bytes must stay as they are until a sync after
  // its Put has returned: the blocks are put from a ring of aligned slots
  // as large as the puts that can be awaiting a sync (the syncs under
  // way, kSyncsAhead, and the unsynced ones: each at most sync_bytes and
  // one block) and two more blocks. The ring is a DRAM segment, the
  // store's own kind of memory (its pages are what the writes map).
  uint64_t slots = 1;
  std::unique_ptr<storage::DramSegment> ring;
  if (how != TierWrite::kPut) {  // sync_bytes != 0: SsdBench puts otherwise
    slots = std::min(count, ((kSyncsAhead + 1) * sync_bytes + size - 1) / size + kSyncsAhead + 3);
    storage::DramSegment::Options so;
    so.size_bytes = (slots * size + kIoBufferHugePage - 1) / kIoBufferHugePage * kIoBufferHugePage;
    auto seg = storage::DramSegment::Create(so);
    if (!seg.ok()) return seg.status();
    ring = std::move(*seg);
    for (uint64_t k = 0; k < slots; ++k) std::memcpy(ring->data() + k * size, base, size);
  }
  // As Store::Execute decides with --demote-copy auto.
  const bool gathering =
      how == TierWrite::kStore && !ring->large_pages() && ThpAdvisable("enabled");
  f->copied = how == TierWrite::kPut || (gathering && size >= kIoBufferHugePage);
  storage::SsdTier::Options opts;
  opts.dir = dir;
  opts.compression = compression;
  opts.stage_runs = gathering;
  {
    auto tier = storage::SsdTier::Open(opts);
    if (!tier.ok()) return tier.status();
    double in_put = 0;
    uint64_t start = MonoUs(), unsynced = 0;
    // The syncs under way (SyncAsync), as the store's mover keeps them: it
    // goes on writing while runs sync, up to kSyncsAhead of them.
    struct Syncs {
      Mutex mu;
      CondVar cv;
      int running ABSL_GUARDED_BY(mu) = 0;
      absl::Status error ABSL_GUARDED_BY(mu);
    };
    auto syncs = std::make_shared<Syncs>();
    auto wait_syncs = [&](int at_most) {
      MutexLock lock(&syncs->mu);
      while (syncs->running > at_most) syncs->cv.Wait(&syncs->mu);
      return syncs->error;
    };
    for (uint64_t i = 0; i < count && !StopRequested(); ++i) {
      char* src = ring != nullptr ? ring->data() + (i % slots) * size : block.data();
      Stamp(i, src);
      uint64_t t0 = MonoUs();
      absl::Status s = f->copied ? (*tier)->Put(absl::StrCat("blk", i), src, size, sums[i])
                                 : (*tier)->PutInPlace(absl::StrCat("blk", i), src, size, sums[i]);
      uint64_t dt = MonoUs() - t0;
      f->write.lat_us.Add(static_cast<double>(dt));
      in_put += dt / 1e6;
      if (!s.ok()) return s;
      f->write.bytes += size;
      // A Sync per sync_bytes, as the store's mover makes its demotions
      // durable (Store::kSyncBytes, 64 MiB).
      unsynced += size;
      if (sync_bytes != 0 && unsynced >= sync_bytes) {
        uint64_t ts = MonoUs();
        if (absl::Status st = wait_syncs(kSyncsAhead - 1); !st.ok()) return st;
        f->sync_s += (MonoUs() - ts) / 1e6;
        {
          MutexLock lock(&syncs->mu);
          ++syncs->running;
        }
        (*tier)->SyncAsync([syncs](const absl::Status& st) {
          {
            MutexLock lock(&syncs->mu);
            --syncs->running;
            if (syncs->error.ok()) syncs->error = st;
          }
          syncs->cv.SignalAll();
        });
        ++f->syncs;
        unsynced = 0;
      }
    }
    // Durable: the bytes fdatasync'd and their index entries in RocksDB's
    // synced WAL, as for a store's demotions. Closing the tier (a memtable
    // flush, background work in a running store) is timed apart.
    uint64_t ts = MonoUs();
    if (absl::Status st = (*tier)->Sync(); !st.ok()) return st;
    if (absl::Status st = wait_syncs(0); !st.ok()) return st;
    f->sync_s += (MonoUs() - ts) / 1e6;
    ++f->syncs;
    f->write.seconds = (MonoUs() - start) / 1e6;
    f->put_call_gbps = in_put > 0 ? f->write.bytes / in_put / 1e9 : 0;
    uint64_t t_close = MonoUs();
    tier->reset();
    f->close_s = (MonoUs() - t_close) / 1e6;
  }
  f->disk_bytes = BytesUnder(dir);
  uint64_t t_open = MonoUs();
  auto tier = storage::SsdTier::Open(opts);
  if (!tier.ok()) return tier.status();
  f->open_s = (MonoUs() - t_open) / 1e6;
  SyncAndDrop(dir, /*sync=*/false, /*drop=*/true);
  uint64_t written = f->write.bytes / size;
  // Each reader's destination, made (and its pages touched) before the
  // clock starts, as a store's connection threads keep theirs: an aligned
  // buffer (GetInto: the device reads straight into it, as the store's
  // reads for TCP and shared memory do), or a string (Get: a copy out).
  std::vector<std::string> outs(static_cast<size_t>(readers));
  std::vector<std::unique_ptr<AlignedBuffer>> bufs;
  for (int t = 0; t < readers; ++t) {
    if (read_into) {
      bufs.push_back(std::make_unique<AlignedBuffer>((size + kAlign - 1) / kAlign * kAlign));
      std::memset(bufs.back()->data, 0, bufs.back()->size);
    } else {
      outs[static_cast<size_t>(t)].assign(size, '\0');
    }
  }
  std::atomic<uint64_t> bad{0};
  uint64_t start = MonoUs();
  absl::Status s = OnThreads(readers, written, &f->read, [&](int t, uint64_t i) {
    const char* data = nullptr;
    uint64_t got = 0;
    if (read_into) {
      AlignedBuffer& b = *bufs[static_cast<size_t>(t)];
      absl::Status st = (*tier)->GetInto(absl::StrCat("blk", i), b.data, b.size, &got);
      if (!st.ok()) return st;
      data = b.data;
    } else {
      std::string& out = outs[static_cast<size_t>(t)];
      absl::Status st = (*tier)->Get(absl::StrCat("blk", i), &out);
      if (!st.ok()) return st;
      data = out.data();
      got = out.size();
    }
    if (got != size || !SameBlock(i, data, base, size)) bad.fetch_add(1);
    return absl::OkStatus();
  });
  f->read.seconds = (MonoUs() - start) / 1e6;
  f->read.bytes = f->read.lat_us.count() * size;
  *mismatches += bad.load();
  if (!s.ok()) return s;
  return absl::OkStatus();
}

// IEEE half from float (round to nearest even; no NaN inputs here).
uint16_t ToHalf(float v) {
  uint32_t x;
  std::memcpy(&x, &v, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    if ((mant >> (shift - 1)) & 1) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  if ((mant & 0x1fff) > 0x1000 || ((mant & 0x1fff) == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

std::string ShortBytes(uint64_t b) {
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return absl::StrCat(b >> 20, "MiB");
  if (b >= 1024 && b % 1024 == 0) return absl::StrCat(b >> 10, "KiB");
  return absl::StrCat(b, "B");
}

struct SizeRow {
  uint64_t size = 0;
  uint64_t count = 0;
  Measure raw_write, raw_read;
  TierFigures tier;
  // Tier / raw of each round.
  std::vector<double> write_ratios, read_ratios;
};

// The median of `v` (not empty); of an even count, the mean of the middle two.
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int SsdBench(int argc, char** argv) {
  std::string dir, sizes_text = "32KiB,256KiB,4MiB,16MiB";
  uint64_t bytes = 1ull << 30, compress_bytes = 256ull << 20;
  bool quick = false, json_only = false, keep = false;
  int64_t depth = 8;
  Flags flags("shelf-bench ssd", "the SSD tier (RocksDB) next to raw O_DIRECT I/O");
  flags.AddString("dir", &dir,
                  "directory on the disk to measure (created when missing; default: a fresh "
                  "temporary directory); the bench removes what it wrote");
  flags.AddString("sizes", &sizes_text, "block sizes, comma-separated (multiples of 4KiB)");
  flags.AddSize("bytes", &bytes, "bytes written and read per block size, by each side");
  flags.AddSize("compress-bytes", &compress_bytes, "bytes written for the compression on/off rows");
  flags.AddInt("queue-depth", &depth,
               "I/Os in flight: raw O_DIRECT threads, and concurrent tier reads (Get callers)");
  uint64_t sync_bytes = 64ull << 20;
  flags.AddSize("sync-bytes", &sync_bytes,
                "tier writes: a SyncAsync after this many bytes (writes go on meanwhile), as "
                "the store's mover (0: one Sync at the end)");
  std::string tier_read = "into";
  flags.AddString(
      "tier-read", &tier_read,
      "how the tier reads are made: into (storage::SsdTier::GetInto an aligned buffer, as the "
      "store reads for its clients) or get (storage::SsdTier::Get into a string: a copy out)");
  std::string tier_write = "store";
  flags.AddString(
      "tier-write", &tier_write,
      "how the tier writes are made: store (as a store demotes with --demote-copy "
      "auto: in place, but where the DRAM segment is on 4KiB pages blocks of 2MiB "
      "and more copied, runs of smaller ones gathered, into hugepage buffers), "
      "in-place (storage::SsdTier::PutInPlace from a DRAM segment left "
      "unchanged until synced) or put (storage::SsdTier::Put: a copy in, the caller's buffer "
      "free at once); with --sync-bytes 0, put");
  int64_t rounds = 3;
  flags.AddInt("rounds", &rounds,
               "rounds per block size, each writing and reading --bytes on both sides, which "
               "side goes first alternating; the ratios are the medians of the rounds' own, "
               "and each side's best round is shown too (1..16)");
  flags.AddBool("keep", &keep, "leave the written files in place");
  flags.AddBool("quick", &quick, "tiny run for smoke tests (32MiB per size, 16MiB compressed)");
  flags.AddBool("json-only", &json_only, "print only the JSON line");
  flags.ParseOrExit(argc, argv);
  if (quick) {
    if (!flags.WasSet("bytes")) bytes = 32ull << 20;
    if (!flags.WasSet("compress-bytes")) compress_bytes = 16ull << 20;
    if (!flags.WasSet("rounds")) rounds = 1;
  }
  if (rounds < 1 || rounds > 16) {
    std::fprintf(stderr, "shelf-bench ssd: --rounds must be 1..16\n");
    return 2;
  }
  std::vector<uint64_t> sizes;
  bool ok = true;
  for (absl::string_view p : absl::StrSplit(sizes_text, ',', absl::SkipEmpty())) {
    absl::StatusOr<uint64_t> v = ParseSize(p);
    ok = ok && v.ok() && *v >= kAlign && *v % kAlign == 0 && *v <= (1ull << 30);
    if (v.ok()) sizes.push_back(*v);
  }
  if (tier_read != "into" && tier_read != "get") {
    std::fprintf(stderr, "shelf-bench ssd: --tier-read takes into or get\n");
    return 2;
  }
  const bool read_into = tier_read == "into";
  if (tier_write != "store" && tier_write != "in-place" && tier_write != "put") {
    std::fprintf(stderr, "shelf-bench ssd: --tier-write takes store, in-place or put\n");
    return 2;
  }
  if (tier_write != "put" && sync_bytes == 0) {
    // In place, every block would have to stay unchanged until the one Sync
    // at the end: the whole run in memory. The output says what ran.
    std::fprintf(stderr, "shelf-bench ssd: --sync-bytes 0: tier writes with put, not in place\n");
    tier_write = "put";
  }
  const TierWrite how = tier_write == "store"      ? TierWrite::kStore
                        : tier_write == "in-place" ? TierWrite::kInPlace
                                                   : TierWrite::kPut;
  if (depth < 1 || depth > 256) {
    std::fprintf(stderr, "shelf-bench ssd: --queue-depth must be 1..256\n");
    return 2;
  }
  if (!ok || sizes.empty() || bytes == 0) {
    std::fprintf(stderr, "shelf-bench ssd: --sizes must be multiples of 4KiB up to 1GiB\n");
    return 2;
  }

  // Work in a fresh subdirectory; remove it (and `dir`, if we made it).
  std::error_code ec;
  bool made_dir = false;
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "shelf-ssd-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "shelf-bench ssd: mkdtemp failed\n");
      return 1;
    }
    dir = tmpl;
    made_dir = true;
  } else if (!std::filesystem::exists(dir)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::fprintf(stderr, "shelf-bench ssd: cannot create %s: %s\n", dir.c_str(),
                   ec.message().c_str());
      return 1;
    }
    made_dir = true;
  }
  std::string work = made_dir ? dir : absl::StrCat(dir, "/shelf-ssd-bench-", getpid());
  std::filesystem::create_directories(work, ec);
  auto cleanup = [&] {
    if (keep) return;
    std::filesystem::remove_all(made_dir ? dir : work, ec);
  };

  uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  AlignedBuffer buf(max_size);
  BlockPattern pattern(max_size);
  pattern.Fill(0, buf.data);  // random bytes: incompressible, like KV tensors
  std::string error;
  uint64_t mismatches = 0;
  std::vector<SizeRow> rows;
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  for (uint64_t size : sizes) {
    if (StopRequested()) break;
    SizeRow r;
    r.size = size;
    r.count = std::max<uint64_t>(1, bytes / size);
    std::string raw = work + "/raw.dat";
    std::string tier_dir = absl::StrCat(work, "/tier-", size);
    absl::Status s;
    Measure best_tier_read;  // r.tier holds the best tier write's figures
    for (int64_t round = 0; round < rounds && s.ok() && !StopRequested(); ++round) {
      Measure raw_write, raw_read;
      TierFigures tier;
      auto run_raw_write = [&] {
        return RawWrite(raw, buf.data, size, r.count, static_cast<int>(depth), &raw_write);
      };
      auto run_tier = [&] {
        return TierRun(tier_dir, false, buf.data, size, r.count, static_cast<int>(depth), read_into,
                       how, sync_bytes, &tier, &mismatches);
      };
      // Which side writes first alternates, so a disk that speeds up or
      // slows down over the run favours neither.
      s = round % 2 == 0 ? run_raw_write() : run_tier();
      if (s.ok()) s = round % 2 == 0 ? run_tier() : run_raw_write();
      if (s.ok())
        s = RawRead(raw, buf.data, size, r.count, static_cast<int>(depth), &raw_read, &mismatches);
      pattern.Fill(0, buf.data);  // RawWrite stamped it; restore the base
      std::filesystem::remove(raw, ec);
      std::filesystem::remove_all(tier_dir, ec);
      if (!s.ok()) break;
      r.write_ratios.push_back(ratio(tier.write.gbps(), raw_write.gbps()));
      r.read_ratios.push_back(ratio(tier.read.gbps(), raw_read.gbps()));
      if (round == 0 || raw_write.gbps() > r.raw_write.gbps()) r.raw_write = std::move(raw_write);
      if (round == 0 || raw_read.gbps() > r.raw_read.gbps()) r.raw_read = std::move(raw_read);
      if (round == 0 || tier.read.gbps() > best_tier_read.gbps())
        best_tier_read = std::move(tier.read);
      if (round == 0 || tier.write.gbps() > r.tier.write.gbps()) r.tier = std::move(tier);
    }
    r.tier.read = std::move(best_tier_read);
    if (!s.ok()) {
      error = std::string(s.message());
      std::fprintf(stderr, "shelf-bench ssd: %s\n", error.c_str());
      break;
    }
    rows.push_back(std::move(r));
    if (json_only) std::fprintf(stderr, "ssd %s done\n", ShortBytes(size).c_str());
  }
  // Compression on/off on KV-like fp16 bytes, 4 MiB blocks.
  constexpr uint64_t kCompressBlock = 4ull << 20;
  TierFigures comp[2];  // [0] off, [1] on
  double kv_raw_ratio = 0;
  if (error.empty() && !StopRequested()) {
    std::vector<char> kv(kCompressBlock);
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i + 2 <= kv.size(); i += 2) {
      uint16_t h = ToHalf(normal(rng));
      std::memcpy(&kv[i], &h, 2);
    }
    uint64_t count = std::max<uint64_t>(1, compress_bytes / kCompressBlock);
    for (int on = 0; on < 2 && error.empty(); ++on) {
      std::string d = absl::StrCat(work, "/compress-", on);
      absl::Status s =
          TierRun(d, on == 1, kv.data(), kCompressBlock, count, static_cast<int>(depth), read_into,
                  how, sync_bytes, &comp[on], &mismatches);
      std::filesystem::remove_all(d, ec);
      if (!s.ok()) error = std::string(s.message());
    }
    if (comp[0].disk_bytes > 0) {
      kv_raw_ratio = static_cast<double>(comp[1].disk_bytes) / comp[0].disk_bytes;
    }
  }
  cleanup();

  if (!json_only) {
    std::printf(
        "\nShelf SSD tier vs raw O_DIRECT at queue depth %d on %s, %s per size, %d rounds: "
        "GB/s and latencies of each side's best round; ratio: the median of the rounds' "
        "tier/raw ratios (best: of the two best rounds)\n\n",
        static_cast<int>(depth), made_dir ? "a temporary directory" : dir.c_str(),
        FormatBytes(bytes).c_str(), static_cast<int>(rounds));
    std::printf("  %-6s %-5s %9s %9s %9s   %9s %9s %9s  %6s %6s\n", "block", "op", "tier GB/s",
                "p50 us", "p99 us", "raw GB/s", "p50 us", "p99 us", "ratio", "best");
    for (SizeRow& r : rows) {
      for (const bool write : {true, false}) {
        Measure& tier = write ? r.tier.write : r.tier.read;
        Measure& raw = write ? r.raw_write : r.raw_read;
        std::printf("  %-6s %-5s %9.3f %9.0f %9.0f   %9.3f %9.0f %9.0f  %5.2fx %5.2fx\n",
                    ShortBytes(r.size).c_str(), write ? "write" : "read", tier.gbps(),
                    tier.lat_us.Percentile(50), tier.lat_us.Percentile(99), raw.gbps(),
                    raw.lat_us.Percentile(50), raw.lat_us.Percentile(99),
                    Median(write ? r.write_ratios : r.read_ratios), ratio(tier.gbps(), raw.gbps()));
      }
    }
    std::printf("\n  %-6s %-8s %14s %12s %13s %14s %12s\n", "block", "written", "Put calls GB/s",
                "tier open s", "tier close s", "disk/logical", "Syncs: n, s");
    for (SizeRow& r : rows) {
      std::printf("  %-6s %-8s %14.3f %12.3f %13.3f %14.3f %5llu %6.3f\n",
                  ShortBytes(r.size).c_str(), r.tier.copied ? "copied" : "in place",
                  r.tier.put_call_gbps, r.tier.open_s, r.tier.close_s,
                  ratio(static_cast<double>(r.tier.disk_bytes), r.tier.write.bytes),
                  static_cast<unsigned long long>(r.tier.syncs), r.tier.sync_s);
    }
    if (comp[0].write.bytes > 0) {
      std::printf(
          "\n  KV-like fp16 (normal) 4MiB blocks, %s: compression %-3s write %.3f GB/s, "
          "read %.3f GB/s, on disk %s\n",
          FormatBytes(comp[0].write.bytes).c_str(), "off", comp[0].write.gbps(),
          comp[0].read.gbps(), FormatBytes(comp[0].disk_bytes).c_str());
      std::printf(
          "  %*s compression %-3s write %.3f GB/s, read %.3f GB/s, on disk %s (%.3f of off)\n",
          static_cast<int>(std::strlen("KV-like fp16 (normal) 4MiB blocks, ") +
                           FormatBytes(comp[0].write.bytes).size() + 1),
          "", "on", comp[1].write.gbps(), comp[1].read.gbps(),
          FormatBytes(comp[1].disk_bytes).c_str(), kv_raw_ratio);
    }
    std::printf(
        "\n  write: until fsync'd (tier: Put + Sync: extents fdatasync'd, index in the synced WAL; "
        "closing the tier is timed apart, tier close s); read: page cache dropped "
        "first, tier reads %s\n  mismatches %llu%s%s\n\n",
        read_into ? "into aligned buffers (GetInto)" : "into strings (Get, a copy out)",
        static_cast<unsigned long long>(mismatches),
        error.empty() ? "" : "; error: ", error.c_str());
  }
  Json o = Json::object();
  o["bench"] = "ssd";
  o["bytes_per_size"] = bytes;
  o["queue_depth"] = depth;
  o["tier_read"] = tier_read;
  o["tier_write"] = tier_write;
  o["sync_bytes"] = sync_bytes;
  o["rounds"] = rounds;
  o["stopped"] = StopRequested();
  Json row_json = Json::array();
  for (SizeRow& r : rows) {
    std::string label = ShortBytes(r.size);
    for (char& c : label) c = static_cast<char>(std::tolower(c));
    if (label.size() > 3) label = label.substr(0, label.size() - 2);  // "4mib" -> "4m"
    o["write_ratio_" + label] = Median(r.write_ratios);
    o["read_ratio_" + label] = Median(r.read_ratios);
    o["write_ratio_best_" + label] = ratio(r.tier.write.gbps(), r.raw_write.gbps());
    o["read_ratio_best_" + label] = ratio(r.tier.read.gbps(), r.raw_read.gbps());
    Json j = Json::object();
    j["block_bytes"] = r.size;
    j["blocks"] = r.count;
    j["write_ratios"] = r.write_ratios;
    j["read_ratios"] = r.read_ratios;
    j["tier_write_gbps"] = r.tier.write.gbps();
    j["raw_write_gbps"] = r.raw_write.gbps();
    j["tier_read_gbps"] = r.tier.read.gbps();
    j["raw_read_gbps"] = r.raw_read.gbps();
    j["tier_write_p50_us"] = r.tier.write.lat_us.Percentile(50);
    j["tier_write_p99_us"] = r.tier.write.lat_us.Percentile(99);
    j["tier_read_p50_us"] = r.tier.read.lat_us.Percentile(50);
    j["tier_read_p99_us"] = r.tier.read.lat_us.Percentile(99);
    j["raw_write_p50_us"] = r.raw_write.lat_us.Percentile(50);
    j["raw_write_p99_us"] = r.raw_write.lat_us.Percentile(99);
    j["raw_read_p50_us"] = r.raw_read.lat_us.Percentile(50);
    j["raw_read_p99_us"] = r.raw_read.lat_us.Percentile(99);
    j["put_call_gbps"] = r.tier.put_call_gbps;
    j["tier_open_s"] = r.tier.open_s;
    j["tier_close_s"] = r.tier.close_s;
    j["tier_sync_s"] = r.tier.sync_s;
    j["tier_syncs"] = r.tier.syncs;
    j["disk_bytes"] = r.tier.disk_bytes;
    j["tier_write_copied"] = r.tier.copied;
    row_json.push_back(j);
  }
  if (rows.empty()) {
    o["write_ratio_4m"] = nullptr;
    o["read_ratio_4m"] = nullptr;
  }
  o["kv_compression_disk_ratio"] = kv_raw_ratio;
  o["compression_off_write_gbps"] = comp[0].write.gbps();
  o["compression_on_write_gbps"] = comp[1].write.gbps();
  o["compression_off_read_gbps"] = comp[0].read.gbps();
  o["compression_on_read_gbps"] = comp[1].read.gbps();
  o["mismatches"] = mismatches;
  o["error"] = error;
  o["sizes"] = row_json;
  std::printf("%s\n", JsonDump(o).c_str());
  return error.empty() && mismatches == 0 ? 0 : 1;
}

}  // namespace shelf::bench
