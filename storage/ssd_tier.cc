#include "storage/ssd_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

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

std::string DbKey(const std::string& key) { return "b" + key; }

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
bool ParseHeader(const rocksdb::Slice& v, uint64_t* size, uint64_t* checksum) {
  if (v.size() < kRecordHeader) return false;
  if (absl::little_endian::Load32(v.data()) != kRecordMagic || v.data()[4] != 1) return false;
  *size = absl::little_endian::Load64(v.data() + 8);
  *checksum = absl::little_endian::Load64(v.data() + 16);
  return *size == v.size() - kRecordHeader;
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

}  // namespace

absl::StatusOr<std::unique_ptr<SsdTier>> SsdTier::Open(const Options& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create SSD directory '", options.dir, "': ", ec.message()));
  }
  rocksdb::Options o;
  o.create_if_missing = true;
  if (options.env != nullptr) o.env = options.env;
  // Large sequential values: blobs in their own files, no compression, big
  // write buffers, few levels of small keys.
  o.enable_blob_files = true;
  o.min_blob_size = 4096;
  o.blob_file_size = 256ull << 20;
  o.enable_blob_garbage_collection = true;
  o.blob_garbage_collection_age_cutoff = 0.25;
  o.compression = options.compression ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
  o.blob_compression_type =
      options.compression ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
  o.write_buffer_size = 64ull << 20;
  o.max_write_buffer_number = 3;
  o.max_background_jobs = 2;
  o.bytes_per_sync = 1ull << 20;
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
  std::unique_ptr<SsdTier> tier(new SsdTier(options, db));
  // Rebuild the index and the accounting from what is on disk.
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  uint64_t used = 0;
  for (it->Seek("b"); it->Valid() && it->key().starts_with("b"); it->Next()) {
    uint64_t size = 0, checksum = 0;
    if (!ParseHeader(it->value(), &size, &checksum)) continue;
    tier->index_[it->key().ToString().substr(1)] = {size, checksum};
    used += size;
  }
  if (!it->status().ok()) {
    SHELF_LOG(ERROR) << "SSD tier scan stopped early" << Kv("error", it->status().ToString());
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
    return absl::ResourceExhaustedError(absl::StrCat(
        "SSD tier full: ", used_.load(), " + ", size, " > ", options_.capacity_bytes, " bytes"));
  }
  std::string value(kRecordHeader + size, '\0');
  absl::little_endian::Store32(value.data(), kRecordMagic);
  value[4] = 1;
  absl::little_endian::Store64(value.data() + 8, size);
  absl::little_endian::Store64(value.data() + 16, checksum);
  std::memcpy(value.data() + kRecordHeader, data, size);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  rocksdb::Status s = db_->Put(wo, DbKey(key), value);
  if (!s.ok()) return FromRocks(s, "write");
  std::lock_guard<std::mutex> lock(mu_);
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
  rocksdb::PinnableSlice v;
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  rocksdb::Status s = db_->Get(ro, db_->DefaultColumnFamily(), DbKey(key), &v);
  if (s.IsNotFound()) return absl::NotFoundError("not on the SSD tier");
  uint64_t size = 0, checksum = 0;
  bool corrupt = s.IsCorruption() ||
                 (s.ok() && (!ParseHeader(v, &size, &checksum) ||
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
  rocksdb::Status s = db_->Delete(rocksdb::WriteOptions(), DbKey(key));
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
