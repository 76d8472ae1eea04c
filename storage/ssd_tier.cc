#include "storage/ssd_tier.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/errno_text.h"
#include "common/io_buffer.h"
#include "common/log.h"
#include "common/sync_point.h"
#include "storage/ssd_records.h"

namespace shelf::storage {
namespace {

using ssd_records::AlignUp;
using ssd_records::Errno;
using ssd_records::FromRocks;
using ssd_records::kAlign;
using ssd_records::kExtentMagic;
using ssd_records::kExtentRecord;

// A write of up to this many bytes is one pwrite (the kernel queues all of
// its device requests at once); a larger block's chunks, and successive
// blocks, go to the I/O pool's threads in parallel.
constexpr uint64_t kChunk = 4ull << 20;
// The largest step the extent file grows by (GrowTo).
constexpr uint64_t kGrowStepMax = 4ull << 30;
// A read of a block of two chunks or more is split into chunks of this
// size, read in parallel.
constexpr uint64_t kReadChunk = 2ull << 20;
// Put copies and hashes a block in pieces of this size (within the cache).
constexpr uint64_t kVerifyPiece = 128ull << 10;
constexpr char kDataFile[] = "extents.dat";

bool ParseExtent(const rocksdb::Slice& v, uint64_t* size, uint64_t* checksum, uint64_t* offset) {
  if (v.size() != kExtentRecord) return false;
  if (absl::little_endian::Load32(v.data()) != kExtentMagic || v.data()[4] != 2) return false;
  *size = absl::little_endian::Load64(v.data() + 8);
  *checksum = absl::little_endian::Load64(v.data() + 16);
  *offset = absl::little_endian::Load64(v.data() + 24);
  return *offset % kAlign == 0 && *size > 0;
}

// pwrite/pread all of [buf, buf + n) at `off`; 0 or an errno.
int FullIo(bool write, int fd, char* buf, uint64_t n, uint64_t off) {
  while (n > 0) {
    ssize_t r = write ? pwrite(fd, buf, n, static_cast<off_t>(off))
                      : pread(fd, buf, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return EIO;  // short read: past the end of the file
    buf += r;
    n -= static_cast<uint64_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return 0;
}

// Format version 1 kept block bytes in RocksDB ("b" || key: header and
// bytes, "m" || key: header alone). This release reads format 2 only; a
// directory with any version-1 record is refused at Open. Returns that
// refusal, OK when the directory holds no such record, or the scan's error.
absl::Status RefuseFormatOne(rocksdb::DB* db, const std::string& dir) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (const char* prefix : {"b", "m"}) {
    it->Seek(prefix);
    if (it->Valid() && it->key().starts_with(prefix)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "SSD directory '", dir,
          "' holds blocks in SSD format version 1 (block bytes inside RocksDB); this release "
          "reads format version 2 only"));
    }
    if (!it->status().ok()) return FromRocks(it->status(), absl::StrCat("scan '", dir, "'"));
  }
  return absl::OkStatus();
}

// RocksDB's info log, sent to the process log instead of a LOG file in the
// tier's directory: when that disk fills, a failed write to LOG is followed
// by another (the error message itself), which RocksDB's assertion build
// (Debian's) turns into an abort. Warnings and errors only.
class ForwardingLogger : public rocksdb::Logger {
 public:
  ForwardingLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) {
      SHELF_LOG(ERROR) << "rocksdb: " << line;
    } else {
      SHELF_LOG(WARNING) << "rocksdb: " << line;
    }
  }
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
};

// Whether files in `dir` can be opened with O_DIRECT (tmpfs: no).
bool DirectIoWorks(const std::string& dir) {
  std::string probe = dir + "/.direct-io-probe";
  int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  int err = errno;
  if (fd >= 0) close(fd);
  unlink(probe.c_str());
  if (fd < 0) {
    SHELF_LOG(INFO) << "SSD tier without O_DIRECT: the file system refuses it" << Kv("dir", dir)
                    << Kv("error", ErrnoText(err));
  }
  return fd >= 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SsdTier>> SsdTier::Open(const Options& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create SSD directory '", options.dir, "': ", ec.message()));
  }
  // The index names every tenant's keys and the extent file holds their
  // blocks: the directory is the store's alone, whatever the umask made of
  // it (RocksDB creates its files 0644 under umask 022).
  if (chmod(options.dir.c_str(), 0700) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot make SSD directory '", options.dir,
                                                      "' private (mode 0700): ", ErrnoText(errno)));
  }
  bool direct_io = options.direct_io && DirectIoWorks(options.dir);
  rocksdb::Options o;
  o.create_if_missing = true;
  if (options.env != nullptr) o.env = options.env;
  // The database holds the index alone: 32-byte records.
  o.compression = options.compression ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
  o.write_buffer_size = 8ull << 20;
  o.max_write_buffer_number = 2;
  o.paranoid_checks = true;
  o.max_open_files = 512;
  o.info_log = std::make_shared<ForwardingLogger>();
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, options.dir, &db);
  if (!s.ok()) return FromRocks(s, absl::StrCat("open '", options.dir, "'"));
  std::unique_ptr<rocksdb::DB> db_owner(db);
  if (absl::Status refused = RefuseFormatOne(db, options.dir); !refused.ok()) return refused;
  std::string path = absl::StrCat(options.dir, "/", kDataFile);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (direct_io ? O_DIRECT : 0), 0600);
  if (fd < 0) return Errno(absl::StrCat("open '", path, "'"), errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Errno(absl::StrCat("stat '", path, "'"), err);
  }
  std::unique_ptr<SsdTier> tier(new SsdTier(options, db_owner.release(), fd, direct_io));
  MutexLock lock(&tier->mu_);
  tier->file_bytes_ = static_cast<uint64_t>(st.st_size);
  // Rebuild the index, the accounting and the free-space map from the
  // index records: every extent no record points at is free.
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  uint64_t used = 0, bad = 0;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek("e"); it->Valid() && it->key().starts_with("e"); it->Next()) {
    Loc loc;
    if (!ParseExtent(it->value(), &loc.size, &loc.checksum, &loc.offset) ||
        loc.offset + AlignUp(loc.size) > tier->file_bytes_ ||
        !tier->space_.Reserve(loc.offset, AlignUp(loc.size)).ok()) {
      ++bad;  // cannot be served; the record stays for a post-mortem
      continue;
    }
    tier->index_[it->key().ToString().substr(1)] = loc;
    used += loc.size;
  }
  rocksdb::Status scan = it->status();
  if (!scan.ok()) {
    SHELF_LOG(ERROR) << "SSD tier scan stopped early" << Kv("error", scan.ToString());
  }
  if (bad > 0) {
    SHELF_LOG(ERROR) << "SSD tier index entries that point outside the extent file ignored"
                     << Kv("dir", options.dir) << Kv("entries", bad);
  }
  tier->used_.store(used);
  return tier;
}

SsdTier::SsdTier(const Options& options, rocksdb::DB* db, int fd, bool direct_io)
    : options_(options),
      db_(db),
      fd_(fd),
      direct_io_(direct_io),
      pool_(std::make_unique<IoPool>(std::max(1, options.io_threads))),
      writer_(std::make_unique<ExtentWriter>(fd, pool_.get(), std::max(1, options.io_threads),
                                             options.stage_runs)),
      read_pool_(std::make_unique<IoPool>(std::max(1, options.io_threads))),
      sync_pool_(std::make_unique<IoPool>(1)),
      space_(options.capacity_bytes == 0
                 ? (1ull << 50)
                 : AlignUp(options.capacity_bytes) + options.capacity_bytes / 8 + (64ull << 20),
             kAlign) {}

SsdTier::~SsdTier() {
  absl::Status s = Sync();
  if (!s.ok()) {
    SHELF_LOG(WARNING) << "SSD tier sync at close failed" << Kv("error", s.message());
  }
  sync_pool_.reset();  // idle: the Sync above came after every queued one
  pool_.reset();       // every write has completed
  read_pool_.reset();
  {
    MutexLock lock(&io_mu_);
    for (auto& [alloc, buf] : spare_) std::free(buf);
    spare_.clear();
  }
  close(fd_);
  // Flush on a clean stop so a restart replays no WAL.
  db_->Flush(rocksdb::FlushOptions()).PermitUncheckedError();
  db_->Close().PermitUncheckedError();
}

rocksdb::WriteOptions SsdTier::WriteOpts(bool sync) const {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return wo;
}

absl::Status SsdTier::GrowTo(uint64_t end) {
  if (end <= file_bytes_) return absl::OkStatus();
  // Room by large steps (few, large extents of the file system); on a full
  // disk, just what this block needs. The file doubles, from grow_bytes up
  // to steps of kGrowStepMax: each step costs the writes in flight, since
  // the file system lets every direct write finish before it allocates
  // (ext4's fallocate waits for them), so a tier filling at disk speed by
  // steps of 256 MiB spent a tenth of its time with an empty queue.
  uint64_t step = std::max<uint64_t>(options_.grow_bytes, kAlign);
  step = std::max(step, std::min(file_bytes_, kGrowStepMax));
  // A small tier grows by an eighth of its capacity at most.
  if (options_.capacity_bytes != 0) {
    step = std::min(step, std::max<uint64_t>(AlignUp(options_.capacity_bytes / 8), 1ull << 20));
  }
  uint64_t target = std::min((end + step - 1) / step * step, space_.capacity());
  target = std::max(target, end);
  int rc = posix_fallocate(fd_, static_cast<off_t>(file_bytes_),
                           static_cast<off_t>(target - file_bytes_));
  if (rc != 0 && target > end) {
    target = end;
    rc = posix_fallocate(fd_, static_cast<off_t>(file_bytes_),
                         static_cast<off_t>(target - file_bytes_));
  }
  if (rc != 0) return Errno("growing the extent file", rc);
  file_bytes_ = target;
  return absl::OkStatus();
}

char* SsdTier::TakeBuffer(uint64_t alloc, uint64_t buf_bytes) {
  MutexLock lock(&io_mu_);
  // Bounded bytes in flight: wait for earlier writes to complete.
  while (inflight_bytes_ > 0 && inflight_bytes_ + alloc > options_.max_inflight_bytes) {
    io_cv_.Wait(&io_mu_);
  }
  inflight_bytes_ += alloc;
  if (buf_bytes == 0) return nullptr;
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].first == buf_bytes) {
      char* buf = spare_[i].second;
      spare_[i] = spare_.back();
      spare_.pop_back();
      spare_bytes_ -= buf_bytes;
      return buf;
    }
  }
  char* buf = AllocIoBuffer(buf_bytes);
  if (buf == nullptr) inflight_bytes_ -= alloc;
  return buf;
}

void SsdTier::ReleaseBuffer(uint64_t alloc, char* buf, uint64_t buf_bytes) {
  inflight_bytes_ -= alloc;
  // Kept for the next Put of the same size (no page faults on a fresh
  // buffer), up to what may be in flight (at most 128 MiB): a steady
  // stream of demotions allocates nothing.
  if (buf != nullptr &&
      spare_bytes_ + buf_bytes <= std::min<uint64_t>(options_.max_inflight_bytes, 128ull << 20)) {
    spare_.emplace_back(buf_bytes, buf);
    spare_bytes_ += buf_bytes;
  } else {
    std::free(buf);
  }
  io_cv_.SignalAll();
}

absl::Status SsdTier::Put(const std::string& key, const char* data, uint64_t size,
                          uint64_t checksum) {
  return PutFrom(key, data, size, checksum, /*in_place=*/false);
}

absl::Status SsdTier::PutInPlace(const std::string& key, const char* data, uint64_t size,
                                 uint64_t checksum) {
  return PutFrom(key, data, size, checksum,
                 /*in_place=*/reinterpret_cast<uintptr_t>(data) % kAlign == 0);
}

absl::Status SsdTier::PutFrom(const std::string& key, const char* data, uint64_t size,
                              uint64_t checksum, bool in_place) {
  if (size == 0) return absl::InvalidArgumentError("SSD tier: empty block");
  if (options_.capacity_bytes != 0 && !Contains(key) &&
      used_.load() + size > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("SSD tier full: ", used_.load(), " + ", size,
                                                     " > ", options_.capacity_bytes, " bytes"));
  }
  auto p = std::make_shared<Pending>();
  p->key = key;
  p->loc.size = size;
  p->loc.checksum = checksum;
  p->alloc = AlignUp(size);
  for (int attempt = 0;; ++attempt) {
    {
      MutexLock lock(&mu_);
      absl::StatusOr<uint64_t> off = space_.Allocate(p->alloc);
      if (off.ok()) {
        absl::Status grown = GrowTo(*off + p->alloc);
        if (!grown.ok()) {
          space_.Free(*off, p->alloc).IgnoreError();
          return grown;
        }
        p->loc.offset = *off;
        break;
      }
      if (attempt > 0 || (to_free_.empty() && syncs_queued_ == 0)) {
        return absl::ResourceExhaustedError(absl::StrCat("SSD tier full: no free extent of ",
                                                         p->alloc, " bytes (",
                                                         off.status().message(), ")"));
      }
    }
    // Space waits for a durable delete: a Sync frees it (after the syncs
    // already queued, which may free some too).
    absl::Status synced = SyncAndWait(/*for_room=*/true);
    if (!synced.ok()) return synced;
  }
  // In place, the whole 4 KiB pages of the block are written from `data`;
  // the rest (all of it for a copying put) from an aligned copy.
  const uint64_t body = in_place ? size / kAlign * kAlign : 0;
  p->buf_bytes = p->alloc - body;
  p->buf = TakeBuffer(p->alloc, p->buf_bytes);
  if (p->buf == nullptr && p->buf_bytes > 0) {
    MutexLock lock(&mu_);
    space_.Free(p->loc.offset, p->alloc).IgnoreError();
    return absl::ResourceExhaustedError("SSD tier: out of memory for a write buffer");
  }
  // What gets written is what the checksum verifies: the copy, piece by
  // piece, each hashed while it is still in the cache (one pass over the
  // caller's bytes, not two); in place, the caller's bytes themselves.
  ChecksumStream state;
  for (uint64_t at = 0; at < size;) {
    uint64_t end = std::min(at + kVerifyPiece, size);
    if (at < body) end = std::min(end, body);
    const char* piece = data + at;
    if (at >= body) {
      std::memcpy(p->buf + (at - body), piece, end - at);
      piece = p->buf + (at - body);
    }
    state.Update(piece, end - at);
    at = end;
  }
  if (state.Digest() != checksum) {
    {
      MutexLock lock(&io_mu_);
      ReleaseBuffer(p->alloc, p->buf, p->buf_bytes);
    }
    MutexLock lock(&mu_);
    space_.Free(p->loc.offset, p->alloc).IgnoreError();
    return absl::DataLossError("block does not match its checksum; not written to SSD");
  }
  if (p->buf_bytes > 0) std::memset(p->buf + (size - body), 0, p->alloc - size);
  // The writes: [0, body) from `data`, [body, alloc) from the copy, each in
  // chunks of at most kChunk.
  struct Piece {
    uint64_t at;
    char* src;
    uint64_t n;
  };
  std::vector<Piece> pieces;
  for (uint64_t at = 0; at < p->alloc;) {
    const uint64_t limit = at < body ? body : p->alloc;
    const uint64_t n = std::min(kChunk, limit - at);
    char* src = at < body ? const_cast<char*>(data) + at : p->buf + (at - body);
    pieces.push_back(Piece{at, src, n});
    at += n;
  }
  {
    MutexLock lock(&io_mu_);
    p->chunks_left = static_cast<int>(pieces.size());
  }
  {
    MutexLock lock(&mu_);
    auto [it, inserted] = index_.try_emplace(key, p->loc);
    bool index_had_key = !inserted;
    Loc old = it->second;
    if (inserted) {
      used_.fetch_add(size);
    } else {
      old = it->second;
      used_.fetch_sub(std::min(used_.load(), it->second.size));
      used_.fetch_add(size);
      it->second = p->loc;
    }
    // The durable version this one replaces: its extent is freed once this
    // one's index entry is durable.
    auto pit = pending_.find(key);
    if (pit != pending_.end()) {
      p->has_replaced = pit->second->has_replaced;
      p->replaced = pit->second->replaced;
      p->prev = pit->second;
    } else if (!inserted || index_had_key) {
      p->has_replaced = true;
      p->replaced = old;
    }
    pending_[key] = p;
    unsynced_.push_back(p);
  }
  for (const Piece& piece : pieces) {
    // A copy of 2 MiB or more is on hugepages already (AllocIoBuffer).
    const bool gather = piece.at < body || p->buf_bytes < kIoBufferHugePage;
    writer_->Write(
        p->loc.offset + piece.at, piece.src, piece.n,
        [this, p](int err) {
          MutexLock lock(&io_mu_);
          if (err != 0 && p->error.ok()) p->error = Errno("extent write", err);
          if (--p->chunks_left == 0) {
            ReleaseBuffer(p->alloc, p->buf, p->buf_bytes);
            p->buf = nullptr;
          }
          io_cv_.SignalAll();
        },
        gather);
  }
  if (options_.sync) return Sync();
  return absl::OkStatus();
}

void SsdTier::WaitWritten(const PendingPtr& p) {
  MutexLock lock(&io_mu_);
  while (p->chunks_left > 0) io_cv_.Wait(&io_mu_);
}

absl::Status SsdTier::ReadExtent(const Loc& loc, char* direct,
                                 absl::FunctionRef<void(const char*, uint64_t)> sink) {
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  // Each reading thread keeps an aligned buffer for blocks up to 16 MiB (no
  // page faults per read); a larger block gets one of its own. A caller
  // that gives an aligned destination with room (`direct`) needs neither:
  // the device writes the block there, and no copy follows.
  constexpr uint64_t kKeptReadBuffer = 16ull << 20;
  thread_local std::unique_ptr<char, Free> kept;
  thread_local uint64_t kept_bytes = 0;
  std::unique_ptr<char, Free> own;
  uint64_t alloc = AlignUp(loc.size);
  char* b = direct;
  if (b == nullptr && alloc <= kKeptReadBuffer) {
    if (kept_bytes < alloc) {
      // Not on hugepages: most reads use a small part of it.
      kept.reset(AllocAlignedBuffer(kKeptReadBuffer));
      kept_bytes = kept ? kKeptReadBuffer : 0;
    }
    b = kept.get();
  } else if (b == nullptr) {
    own.reset(AllocIoBuffer(alloc));
    b = own.get();
  }
  if (b == nullptr)
    return absl::ResourceExhaustedError("SSD tier: out of memory for a read buffer");
  if (alloc < 2 * kReadChunk) {
    // One O_DIRECT read; the checksum and the copy follow.
    int err = FullIo(false, fd_, b, alloc, loc.offset);
    if (err != 0) return Errno("extent read", err);
    if (BlockChecksum(b, loc.size) != loc.checksum) {
      return absl::DataLossError("checksum mismatch");
    }
    if (direct == nullptr) sink(b, loc.size);
    return absl::OkStatus();
  }
  // A large block: its chunks are read in parallel (the read pool, and
  // this thread for the first), and checksummed and copied out in order as
  // they arrive, so the CPU work overlaps the reads still under way.
  const size_t chunks = static_cast<size_t>((alloc + kReadChunk - 1) / kReadChunk);
  struct Shared {
    Mutex mu;
    CondVar cv;
    std::vector<int> err ABSL_GUARDED_BY(mu);  // -1 = not done yet, else 0 or an errno
  };
  auto shared = std::make_shared<Shared>();
  {
    MutexLock lock(&shared->mu);
    shared->err.assign(chunks, -1);
  }
  for (size_t c = 1; c < chunks; ++c) {
    uint64_t at = c * kReadChunk;
    uint64_t n = std::min(kReadChunk, alloc - at);
    read_pool_->Submit([this, shared, b, at, n, c, off = loc.offset] {
      int e = FullIo(false, fd_, b + at, n, off + at);
      {
        MutexLock lock(&shared->mu);
        shared->err[c] = e;
      }
      shared->cv.SignalAll();
    });
  }
  int first = FullIo(false, fd_, b, std::min(kReadChunk, alloc), loc.offset);
  ChecksumStream state;
  int err = first;
  for (size_t c = 0; c < chunks; ++c) {
    if (c > 0) {
      MutexLock lock(&shared->mu);
      while (shared->err[c] < 0) shared->cv.Wait(&shared->mu);
      if (err == 0) err = shared->err[c];
    }
    if (err != 0) continue;  // wait for the rest: they write into `b`
    uint64_t at = c * kReadChunk;
    uint64_t n = std::min(kReadChunk, loc.size - std::min(loc.size, at));
    state.Update(b + at, n);
    if (direct == nullptr) sink(b + at, n);
  }
  if (err != 0) return Errno("extent read", err);
  if (state.Digest() != loc.checksum) return absl::DataLossError("checksum mismatch");
  return absl::OkStatus();
}

absl::Status SsdTier::Get(const std::string& key, std::string* out) {
  out->clear();
  absl::Status s = Read(
      key, 0, nullptr, [&](uint64_t size) { out->reserve(size); },
      [&](const char* p, uint64_t n) { out->append(p, n); });
  if (!s.ok()) out->clear();
  return s;
}

absl::Status SsdTier::GetInto(const std::string& key, char* dst, uint64_t capacity,
                              uint64_t* size) {
  uint64_t at = 0;
  absl::Status s = Read(
      key, capacity, dst, [&](uint64_t n) { *size = n; },
      [&](const char* p, uint64_t n) {
        std::memcpy(dst + at, p, n);
        at += n;
      });
  return s;
}

absl::Status SsdTier::Read(const std::string& key, uint64_t capacity, char* dst,
                           absl::FunctionRef<void(uint64_t)> sized,
                           absl::FunctionRef<void(const char*, uint64_t)> sink) {
  Loc loc;
  PendingPtr p;
  {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return absl::NotFoundError("not on the SSD tier");
    loc = it->second;
    auto pit = pending_.find(key);
    if (pit != pending_.end()) p = pit->second;
  }
  if (dst != nullptr && loc.size > capacity) {
    return absl::OutOfRangeError(
        absl::StrCat("block of ", loc.size, " bytes does not fit ", capacity));
  }
  sized(loc.size);
  if (p != nullptr) {
    // Put but not yet synced: read once its bytes are written.
    WaitWritten(p);
    MutexLock lock(&io_mu_);
    if (!p->error.ok()) return p->error;
  }
  // Straight into the destination when O_DIRECT can write there.
  char* direct = nullptr;
  if (dst != nullptr && reinterpret_cast<uintptr_t>(dst) % kAlign == 0 &&
      capacity >= AlignUp(loc.size)) {
    direct = dst;
  }
  absl::Status s = ReadExtent(loc, direct, sink);
  if (s.code() != absl::StatusCode::kDataLoss) return s;
  {
    // Deleted or overwritten while it was read (its extent reused): a miss.
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second.offset != loc.offset ||
        it->second.checksum != loc.checksum) {
      return absl::NotFoundError("not on the SSD tier");
    }
  }
  return DropCorrupt(key, loc, "checksum mismatch");
}

absl::Status SsdTier::DropCorrupt(const std::string& key, const Loc& loc,
                                  absl::string_view detail) {
  SHELF_SYNC_POINT("SsdTier::DropCorrupt");
  SHELF_LOG(ERROR) << "corrupt SSD entry dropped" << Kv("dir", options_.dir) << Kv("detail", detail)
                   << Kv("offset", loc.offset);
  DeleteKeys({key}, &loc).IgnoreError();
  return absl::DataLossError("SSD entry is corrupt; it was dropped and is not served");
}

bool SsdTier::Contains(const std::string& key) {
  MutexLock lock(&mu_);
  return index_.count(key) != 0;
}

bool SsdTier::Info(const std::string& key, uint64_t* size, uint64_t* checksum) {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  *size = it->second.size;
  *checksum = it->second.checksum;
  return true;
}

std::vector<SsdTier::Entry> SsdTier::Inventory() {
  MutexLock lock(&mu_);
  std::vector<Entry> out;
  out.reserve(index_.size());
  for (const auto& [key, loc] : index_) {
    // What a crash would keep: a put not yet synced is not listed, or its
    // durable predecessor is in its place.
    auto p = pending_.find(key);
    if (p == pending_.end()) {
      out.push_back(Entry{key, loc.size, loc.checksum});
    } else if (p->second->has_replaced) {
      out.push_back(Entry{key, p->second->replaced.size, p->second->replaced.checksum});
    }
  }
  return out;
}

uint64_t SsdTier::extent_space_bytes() {
  MutexLock lock(&mu_);
  return space_.capacity();
}

uint64_t SsdTier::data_file_bytes() {
  MutexLock lock(&mu_);
  return file_bytes_;
}

uint64_t SsdTier::free_extent_bytes() {
  MutexLock lock(&mu_);
  return file_bytes_ > space_.used() ? file_bytes_ - space_.used() : 0;
}

}  // namespace shelf::storage
