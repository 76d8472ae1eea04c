#include "storage/ssd_tier.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/log.h"

namespace shelf {
namespace {

constexpr uint32_t kRecordMagic = 0x31445353;  // "SSD1"
constexpr size_t kRecordHeader = 24;

// Two records per block: "b" + key holds the header and the bytes (a blob);
// "m" + key holds the header alone, so opening the tier rebuilds its index
// from small records without reading a single blob.
std::string DbKey(const std::string& key) { return "b" + key; }
std::string MetaKey(const std::string& key) { return "m" + key; }

void EncodeHeader(uint64_t size, uint64_t checksum, char* out) {
  std::memset(out, 0, kRecordHeader);
  absl::little_endian::Store32(out, kRecordMagic);
  out[4] = 1;
  absl::little_endian::Store64(out + 8, size);
  absl::little_endian::Store64(out + 16, checksum);
}

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("SSD tier ", what, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNoSpace() || s.subcode() == rocksdb::Status::kNoSpace) {
    return absl::ResourceExhaustedError(msg);
  }
  return absl::UnavailableError(msg);
}

// Parses a record header. Returns false if malformed.
// `value_bytes`: the record's whole size when the bytes follow the header
// (a "b" record); kRecordHeader for a "m" record.
bool ParseHeader(const rocksdb::Slice& v, uint64_t* size, uint64_t* checksum,
                 bool meta_only = false) {
  if (v.size() < kRecordHeader) return false;
  if (absl::little_endian::Load32(v.data()) != kRecordMagic || v.data()[4] != 1) return false;
  *size = absl::little_endian::Load64(v.data() + 8);
  *checksum = absl::little_endian::Load64(v.data() + 16);
  return meta_only ? v.size() == kRecordHeader : *size == v.size() - kRecordHeader;
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
                    << Kv("error", std::strerror(err));
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
  bool direct_io = options.direct_io && DirectIoWorks(options.dir);
  rocksdb::Options o;
  o.create_if_missing = true;
  if (options.env != nullptr) o.env = options.env;
  // Large sequential values: blobs in their own files, no compression, big
  // write buffers, few levels of small keys.
  o.enable_blob_files = true;
  o.min_blob_size = 4096;
  o.blob_file_size = 256ull << 20;
  // No garbage collection in every compaction: it rewrites the live blobs
  // of the oldest files each time (reads fell to 0.19 of raw with it on);
  // CollectGarbageIfNeeded runs one when garbage outweighs live bytes.
  o.enable_blob_garbage_collection = false;
  o.compression = options.compression ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
  o.blob_compression_type =
      options.compression ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
  // Writes are bounded by the flushes that copy memtables into blob files
  // (with a software CRC32C over every blob): two of them run at once, and
  // four memtables absorb bursts.
  o.write_buffer_size = 64ull << 20;
  o.max_write_buffer_number = 4;
  o.max_background_flushes = 2;
  o.max_background_compactions = 2;
  o.paranoid_checks = true;
  o.max_open_files = 512;
  // O_DIRECT reads: one device read per block, no page-cache copy of bytes
  // the DRAM tier already holds. Flushes stay buffered: O_DIRECT blob
  // writes (1 MiB synchronous writes) ran at 0.05 of raw.
  o.use_direct_reads = direct_io;
  o.use_direct_io_for_flush_and_compaction = false;
  o.info_log = std::make_shared<ForwardingLogger>();
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, options.dir, &db);
  if (!s.ok()) return FromRocks(s, absl::StrCat("open '", options.dir, "'"));
  std::unique_ptr<SsdTier> tier(new SsdTier(options, db));
  // Rebuild the index and the accounting from the metadata records. A
  // block record without one (written by a release that had none) is read
  // whole to recover its header.
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  uint64_t used = 0;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek("m"); it->Valid() && it->key().starts_with("m"); it->Next()) {
    uint64_t size = 0, checksum = 0;
    if (!ParseHeader(it->value(), &size, &checksum, true)) continue;
    tier->index_[it->key().ToString().substr(1)] = {size, checksum};
    used += size;
  }
  if (!it->status().ok()) {
    SHELF_LOG(ERROR) << "SSD tier scan stopped early" << Kv("error", it->status().ToString());
  }
  if (tier->index_.empty()) {
    for (it->Seek("b"); it->Valid() && it->key().starts_with("b"); it->Next()) {
      uint64_t size = 0, checksum = 0;
      if (!ParseHeader(it->value(), &size, &checksum)) continue;
      tier->index_[it->key().ToString().substr(1)] = {size, checksum};
      used += size;
    }
  }
  tier->used_.store(used);
  return tier;
}

SsdTier::SsdTier(const Options& options, rocksdb::DB* db) : options_(options), db_(db) {}

SsdTier::~SsdTier() {
  if (db_ == nullptr) return;
  // Flush on a clean stop so a restart replays no WAL.
  db_->Flush(rocksdb::FlushOptions()).PermitUncheckedError();
  db_->Close().PermitUncheckedError();
}

absl::Status SsdTier::Put(const std::string& key, const char* data, uint64_t size,
                          uint64_t checksum) {
  if (BlockChecksum(data, size) != checksum) {
    return absl::DataLossError("block does not match its checksum; not written to SSD");
  }
  if (options_.capacity_bytes != 0 && !Contains(key) &&
      used_.load() + size > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("SSD tier full: ", used_.load(), " + ", size,
                                                     " > ", options_.capacity_bytes, " bytes"));
  }
  char header[kRecordHeader];
  EncodeHeader(size, checksum, header);
  std::string db_key = DbKey(key), meta_key = MetaKey(key);
  // Header and bytes go in as two parts: no staging copy of the block.
  rocksdb::Slice key_part(db_key);
  rocksdb::Slice value_parts[2] = {rocksdb::Slice(header, kRecordHeader),
                                   rocksdb::Slice(data, size)};
  rocksdb::WriteBatch batch;
  rocksdb::Status s =
      batch.Put(rocksdb::SliceParts(&key_part, 1), rocksdb::SliceParts(value_parts, 2));
  if (s.ok()) s = batch.Put(meta_key, rocksdb::Slice(header, kRecordHeader));
  if (s.ok()) s = db_->Write(WriteOpts(), &batch);
  if (!s.ok()) return FromRocks(s, "write");
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.sync) unsynced_.push_back(key);
  auto [it, inserted] = index_.try_emplace(key, size, checksum);
  if (inserted) {
    used_.fetch_add(size);
  } else {
    used_.fetch_sub(std::min(used_.load(), it->second.first));
    used_.fetch_add(size);
    it->second = {size, checksum};
  }
  return absl::OkStatus();
}

absl::Status SsdTier::Get(const std::string& key, std::string* out) {
  if (!Contains(key)) return absl::NotFoundError("not on the SSD tier");
  rocksdb::PinnableSlice v;
  rocksdb::ReadOptions ro;
  // The XXH3 check below covers the bytes end to end; RocksDB's own CRC
  // of the blob (computed in software by Debian's portable build) would
  // only check them twice.
  ro.verify_checksums = false;
  rocksdb::Status s = db_->Get(ro, db_->DefaultColumnFamily(), DbKey(key), &v);
  if (s.IsNotFound()) return absl::NotFoundError("not on the SSD tier");
  uint64_t size = 0, checksum = 0;
  bool corrupt =
      s.IsCorruption() || (s.ok() && (!ParseHeader(v, &size, &checksum) ||
                                      BlockChecksum(v.data() + kRecordHeader, size) != checksum));
  if (corrupt) {
    SHELF_LOG(ERROR) << "corrupt SSD entry dropped" << Kv("dir", options_.dir)
                     << Kv("detail", s.ok() ? "checksum mismatch" : s.ToString());
    Delete(key).IgnoreError();
    return absl::DataLossError("SSD entry is corrupt; it was dropped and is not served");
  }
  if (!s.ok()) return FromRocks(s, "read");
  out->assign(v.data() + kRecordHeader, size);
  return absl::OkStatus();
}

rocksdb::WriteOptions SsdTier::WriteOpts() const {
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  // Without the log, a block is written once (into a blob file at flush),
  // not twice, and no software CRC runs over it; Sync() makes it durable.
  wo.disableWAL = !options_.sync;
  return wo;
}

absl::Status SsdTier::Sync() {
  if (options_.sync) return absl::OkStatus();
  std::vector<std::string> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keys.swap(unsynced_);
  }
  rocksdb::FlushOptions fo;
  fo.wait = true;
  absl::Status s = FromRocks(db_->Flush(fo), "sync");
  if (s.ok()) return CollectGarbageIfNeeded();
  // What could not be made durable is not offered: not in the inventory,
  // not served (it may still reach the disk with a later flush, whole).
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& key : keys) {
    auto it = index_.find(key);
    if (it == index_.end()) continue;
    used_.fetch_sub(std::min(used_.load(), it->second.first));
    index_.erase(it);
  }
  return s;
}

uint64_t SsdTier::blob_file_bytes() {
  uint64_t bytes = 0;
  db_->GetIntProperty(rocksdb::DB::Properties::kTotalBlobFileSize, &bytes);
  return bytes;
}

absl::Status SsdTier::CollectGarbageIfNeeded() {
  // Blob files are deleted whole once every blob in them is dropped, which
  // LRU order mostly does; the blocks that outlive their neighbours keep a
  // file alive. When the files hold more than twice the live bytes (and
  // the excess is worth a pass), one compaction rewrites the live blobs:
  // each live byte is copied at most once per doubling of the garbage.
  uint64_t files = blob_file_bytes();
  uint64_t live = used_.load();
  if (files <= 2 * live || files - live < options_.gc_min_garbage_bytes) return absl::OkStatus();
  rocksdb::CompactRangeOptions co;
  co.blob_garbage_collection_policy = rocksdb::BlobGarbageCollectionPolicy::kForce;
  co.blob_garbage_collection_age_cutoff = 1.0;
  co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  absl::Status s = FromRocks(db_->CompactRange(co, nullptr, nullptr), "garbage collection");
  SHELF_LOG(INFO) << "SSD tier garbage collected" << Kv("blob_bytes_before", files)
                  << Kv("blob_bytes_after", blob_file_bytes()) << Kv("live_bytes", live);
  // A failed pass leaves the files as they were: the data is intact.
  if (!s.ok()) {
    SHELF_LOG(WARNING) << "SSD tier garbage collection failed" << Kv("error", s.message());
  }
  return absl::OkStatus();
}

bool SsdTier::Contains(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(key) != 0;
}

bool SsdTier::Info(const std::string& key, uint64_t* size, uint64_t* checksum) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  *size = it->second.first;
  *checksum = it->second.second;
  return true;
}

absl::Status SsdTier::Delete(const std::string& key) {
  rocksdb::WriteBatch batch;
  rocksdb::Status s = batch.Delete(DbKey(key));
  if (s.ok()) s = batch.Delete(MetaKey(key));
  if (s.ok()) s = db_->Write(WriteOpts(), &batch);
  if (!s.ok()) return FromRocks(s, "delete");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    used_.fetch_sub(std::min(used_.load(), it->second.first));
    index_.erase(it);
  }
  return absl::OkStatus();
}

std::vector<SsdTier::Entry> SsdTier::Inventory() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  out.reserve(index_.size());
  for (const auto& [key, v] : index_) out.push_back(Entry{key, v.first, v.second});
  return out;
}

}  // namespace shelf
