// SsdTier: the store's SSD tier, a RocksDB database in --ssd-dir with large
// values in blob files (BlobDB). Self-describing: every value carries its
// size and its writer's XXH3-64 checksum, so a restarted store rebuilds its
// inventory by scanning, and a corrupt entry is detected on read.
//
// Record layout (docs/storage.md), two records per block, written in one
// batch:
//   "b" || block key -> header | size bytes of block   (a blob)
//   "m" || block key -> header                          (index rebuild)
//   header = magic u32 "SSD1" | version u8 | 3 zero bytes |
//            size u64 | checksum u64   (little-endian; 24 bytes)
//
// Durability: writes skip RocksDB's log (the block would be written twice,
// and CRC'd in software); Sync() flushes what was written so far into blob
// and table files. What was not synced is absent after a crash, never half.
//
//   auto tier = SsdTier::Open({.dir = "/var/lib/shelf/ssd", .capacity_bytes = 1 << 40});
//   tier->Put(key, data, size, checksum);
//   tier->Sync();  // before telling anyone the block is on SSD
//
// Thread-safe.
#ifndef SHELF_STORAGE_SSD_TIER_H_
#define SHELF_STORAGE_SSD_TIER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rocksdb {
class DB;
class Env;
struct WriteOptions;
}  // namespace rocksdb

namespace shelf {

class SsdTier {
 public:
  struct Options {
    std::string dir;
    uint64_t capacity_bytes = 0;  // Put refuses beyond this (RESOURCE_EXHAUSTED)
    bool compression = false;     // KV tensors do not compress: off by default
    // Each write through RocksDB's log with fsync (durable at once, slow);
    // by default writes are durable at Sync().
    bool sync = false;
    // O_DIRECT for reads: a block read is one device read, and the page
    // cache is not filled with bytes the DRAM tier already holds. Off where
    // the file system has no O_DIRECT (tmpfs): Open probes and falls back.
    bool direct_io = true;
    // Garbage collection runs when blob files exceed twice the live bytes
    // by at least this much (CollectGarbageIfNeeded).
    uint64_t gc_min_garbage_bytes = 256ull << 20;
    rocksdb::Env* env = nullptr;  // fault-injection seam for tests; null = default
  };
  struct Entry {
    std::string key;
    uint64_t size = 0;
    uint64_t checksum = 0;
  };

  // Opens or creates the database. Scans it to rebuild the inventory.
  static absl::StatusOr<std::unique_ptr<SsdTier>> Open(const Options& options);
  ~SsdTier();

  // Stores a block atomically (fully present or absent after a crash;
  // present for sure once Sync() returns OK). Verifies `checksum` against
  // `data` first: DATA_LOSS if they differ.
  absl::Status Put(const std::string& key, const char* data, uint64_t size, uint64_t checksum);
  // Makes every Put and Delete that returned before it durable. On failure
  // the blocks put since the last Sync leave the index (not served, not in
  // the inventory).
  absl::Status Sync();
  // Reads and verifies a block. NOT_FOUND if absent; DATA_LOSS if corrupt
  // (the entry is then deleted and never served); UNAVAILABLE on I/O error.
  absl::Status Get(const std::string& key, std::string* out);
  absl::Status Delete(const std::string& key);
  bool Contains(const std::string& key);
  // Size and checksum of a held block; false if absent.
  bool Info(const std::string& key, uint64_t* size, uint64_t* checksum);
  std::vector<Entry> Inventory();

  uint64_t used_bytes() const { return used_.load(); }
  // Bytes in blob files on disk, garbage included.
  uint64_t blob_file_bytes();
  uint64_t capacity_bytes() const { return options_.capacity_bytes; }
  const std::string& dir() const { return options_.dir; }

 private:
  SsdTier(const Options& options, rocksdb::DB* db);
  rocksdb::WriteOptions WriteOpts() const;
  // Run after each Sync: see the definition.
  absl::Status CollectGarbageIfNeeded();

  const Options options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::atomic<uint64_t> used_{0};
  // What the tier holds: key -> (size, checksum). Rebuilt by a scan at
  // open, so sizes are known without reading values back.
  std::mutex mu_;
  std::unordered_map<std::string, std::pair<uint64_t, uint64_t>> index_;  // guarded by mu_
  std::vector<std::string> unsynced_;  // guarded by mu_: put since the last Sync
};

}  // namespace shelf

#endif  // SHELF_STORAGE_SSD_TIER_H_
