// SsdTier: the store's SSD tier. Block bytes go into one preallocated
// extent file (DIR/extents.dat) with O_DIRECT, several writes in flight
// (IoPool); a RocksDB database in DIR is the index: block key -> extent
// offset, size and XXH3-64 checksum. A restarted store rebuilds its
// inventory and its free-space map from the index alone; a corrupt block
// is detected on every read.
//
// Layout and crash-consistency argument: docs/storage.md.
//   "e" || block key -> magic u32 "SSD2" | version u8 = 2 | 3 zero bytes |
//                       size u64 | checksum u64 | offset u64  (32 bytes LE)
//   DIR/extents.dat     block bytes at 4 KiB aligned offsets
// Format version 1 (block bytes in RocksDB: "b" || key, "m" || key, magic
// "SSD1") is not read: Open refuses such a directory with a message that
// names the version.
//
// Durability: Put copies the block (PutInPlace does not) and starts its
// writes; Sync waits for them, fdatasyncs the extent file, and only then
// writes their index records (one synced RocksDB write). So an indexed block's bytes are
// durable before its index entry exists; what was not synced is absent
// after a crash, never half. Space freed by Delete or an overwrite is
// reused only after the index change that freed it is durable.
// SyncAsync does the same on the tier's sync thread, so a writer keeps
// putting (the disk keeps writing) while an earlier run's writes drain and
// the file is synced: what a Sync or SyncAsync covers is fixed when it is
// called, and they complete in the order they were called.
//
//   SsdTier::Options options;
//   options.dir = "/var/lib/shelf/ssd";
//   options.capacity_bytes = 1ull << 40;
//   auto tier = SsdTier::Open(options);
//   tier->Put(key, data, size, checksum);
//   tier->Sync();  // before telling anyone the block is on SSD
//
// Thread-safe.
#ifndef SHELF_STORAGE_SSD_TIER_H_
#define SHELF_STORAGE_SSD_TIER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "storage/allocator.h"
#include "storage/io_pool.h"

namespace rocksdb {
class DB;
class Env;
struct WriteOptions;
}  // namespace rocksdb

namespace shelf::storage {

class SsdTier {
 public:
  struct Options {
    std::string dir;
    uint64_t capacity_bytes = 0;  // Put refuses beyond this (RESOURCE_EXHAUSTED); 0 = no limit
    bool compression = false;     // the RocksDB index's records
    // Each Put durable before it returns (a Sync per Put; slow); by default
    // writes are durable at Sync().
    bool sync = false;
    // O_DIRECT for the extent file: no page-cache copy of bytes the DRAM
    // tier already holds. Off where the file system has no O_DIRECT
    // (tmpfs): Open probes and falls back to buffered I/O.
    bool direct_io = true;
    int io_threads = 8;  // writes in flight; as many threads again read chunks of large blocks
    // Copy each run of adjacent writes into one hugepage buffer before
    // writing it (ExtentWriter): for blocks in memory of 4 KiB pages, one
    // device request per run rather than one per ~1 MiB.
    bool stage_runs = false;
    uint64_t grow_bytes = 256ull << 20;          // the extent file grows by this much
    uint64_t max_inflight_bytes = 128ull << 20;  // Put waits beyond this
    rocksdb::Env* env = nullptr;  // fault-injection seam for the index; null = default
  };
  struct Entry {
    std::string key;
    uint64_t size = 0;
    uint64_t checksum = 0;
  };

  // Opens or creates the tier. Reads the index to rebuild the inventory.
  static absl::StatusOr<std::unique_ptr<SsdTier>> Open(const Options& options);
  ~SsdTier();  // syncs what was put

  // Stores a block atomically (fully present or absent after a crash;
  // present for sure once Sync() returns OK). Verifies `checksum` against
  // `data` first: DATA_LOSS if they differ. `data` may be reused at once.
  absl::Status Put(const std::string& key, const char* data, uint64_t size, uint64_t checksum)
      ABSL_LOCKS_EXCLUDED(mu_, io_mu_);
  // Put without the copy: the block is written straight from `data`, which
  // must stay mapped until its writes are done (the next Sync returns, or
  // the tier closes). For memory only its owner writes, such as a store's
  // DRAM segment. The checksum is verified on `data` before the writes
  // start; bytes changed after that reach the disk as a block that fails
  // its checksum when read (DATA_LOSS), never as a good one. A `data` not
  // aligned to 4 KiB is copied, as by Put; so is the last partial 4 KiB.
  absl::Status PutInPlace(const std::string& key, const char* data, uint64_t size,
                          uint64_t checksum) ABSL_LOCKS_EXCLUDED(mu_, io_mu_);
  // Makes every Put and Delete that returned before it durable. On failure
  // the blocks put since the last Sync leave the index (not served, not in
  // the inventory). A put that waits for room syncs too; when that sync
  // fails, the next Sync (or SyncAsync) fails with DATA_LOSS even if it
  // finds nothing left to do: puts that returned before it were lost.
  absl::Status Sync() ABSL_LOCKS_EXCLUDED(mu_, io_mu_, sync_mu_);
  // Sync without waiting: covers every Put and Delete that returned before
  // it, runs on the tier's sync thread after every Sync and SyncAsync
  // called before it, and calls done(its verdict, as Sync's) there. Puts
  // made meanwhile belong to the next Sync. `done` must not call Sync.
  void SyncAsync(std::function<void(absl::Status)> done) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads and verifies a block. NOT_FOUND if absent; DATA_LOSS if corrupt
  // (the entry is then deleted and never served); UNAVAILABLE on I/O error.
  absl::Status Get(const std::string& key, std::string* out)
      ABSL_LOCKS_EXCLUDED(mu_, io_mu_, sync_mu_);
  // Get into [dst, dst+capacity), the block's size in `size`: OUT_OF_RANGE
  // (nothing read) when it does not fit. With `dst` 4 KiB aligned and room
  // for the size rounded up to 4 KiB, the device reads straight into it
  // (no intermediate buffer or copy); bytes past the block's end may then
  // be overwritten. Verified like Get.
  absl::Status GetInto(const std::string& key, char* dst, uint64_t capacity, uint64_t* size)
      ABSL_LOCKS_EXCLUDED(mu_, io_mu_, sync_mu_);
  absl::Status Delete(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_, sync_mu_);
  // Delete of each key, with one index write for all (a store's run of SSD
  // drops); durable, as a Delete, at the next Sync.
  absl::Status DeleteMany(const std::vector<std::string>& keys) ABSL_LOCKS_EXCLUDED(mu_, sync_mu_);
  bool Contains(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Size and checksum of a held block; false if absent.
  bool Info(const std::string& key, uint64_t* size, uint64_t* checksum) ABSL_LOCKS_EXCLUDED(mu_);
  // The durable blocks: a put not yet synced is not listed (a crash would
  // lose it), or the durable version it replaces is, in its place.
  std::vector<Entry> Inventory() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t used_bytes() const { return used_.load(); }
  // Bytes of the extent file (allocated space, free extents included).
  uint64_t data_file_bytes() ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes of the extent file that no block holds and no pending free waits on.
  uint64_t free_extent_bytes() ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t capacity_bytes() const { return options_.capacity_bytes; }
  // The extent space: the capacity, and room for extents whose free waits
  // for a sync.
  uint64_t extent_space_bytes() ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& dir() const { return options_.dir; }

 private:
  struct Loc {
    uint64_t size = 0;
    uint64_t checksum = 0;
    uint64_t offset = 0;  // in the extent file, 4 KiB aligned
  };
  // A Put whose bytes are being written; indexed at the next Sync.
  struct Pending {
    std::string key;
    Loc loc;
    char* buf = nullptr;        // aligned copy of the block, or of its tail
    uint64_t buf_bytes = 0;     // the size of buf
    uint64_t alloc = 0;         // bytes taken in the extent file
    int chunks_left = 0;        // guarded by io_mu_
    absl::Status error;         // guarded by io_mu_
    bool has_replaced = false;  // a durable version of the key exists
    Loc replaced;               // that version's extent
    // The put of the key this one overwrote while that was still pending
    // (none after a Delete); guarded by mu_, as the two fields above once
    // the put is queued.
    std::shared_ptr<Pending> prev;
  };
  using PendingPtr = std::shared_ptr<Pending>;
  // What one Sync makes durable, taken when it is called.
  struct SyncRun {
    std::vector<PendingPtr> puts;
    std::vector<std::pair<uint64_t, uint64_t>> frees;
    bool deletes = false;
    // Taken by a put waiting for room (PutFrom): the puts it takes are
    // other callers', whose own later syncs must hear if they are lost.
    bool for_room = false;
    // A sync for room failed since the last run was taken: this run fails
    // too, since puts that returned before it were lost.
    bool lost_before = false;
  };

  SsdTier(const Options& options, rocksdb::DB* db, int fd, bool direct_io);
  // SyncAsync and Sync, by a put waiting for room (`for_room`) or not.
  void QueueSync(std::function<void(absl::Status)> done, bool for_room) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SyncAndWait(bool for_room) ABSL_LOCKS_EXCLUDED(mu_, io_mu_, sync_mu_);
  rocksdb::WriteOptions WriteOpts(bool sync) const;
  // Makes room in the extent file for [0, end).
  absl::Status GrowTo(uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WaitWritten(const PendingPtr& p) ABSL_LOCKS_EXCLUDED(io_mu_);
  // On the sync thread: makes every queued run durable, then tells each.
  void SyncQueued() ABSL_LOCKS_EXCLUDED(mu_, io_mu_, sync_mu_);
  // Makes a taken run durable: on the sync thread, runs in order.
  absl::Status SyncTaken(SyncRun run) ABSL_LOCKS_EXCLUDED(mu_, io_mu_, sync_mu_);
  // Reads and verifies `loc` into `direct` (aligned, room for the rounded
  // size) or, when it is null, through a buffer handed to `sink` in order.
  absl::Status ReadExtent(const Loc& loc, char* direct,
                          absl::FunctionRef<void(const char*, uint64_t)> sink);
  // Get's body: `sized` hears the block's size before any byte reaches
  // `sink`; `dst` (capacity bytes), if set, may take the bytes directly.
  absl::Status Read(const std::string& key, uint64_t capacity, char* dst,
                    absl::FunctionRef<void(uint64_t)> sized,
                    absl::FunctionRef<void(const char*, uint64_t)> sink)
      ABSL_LOCKS_EXCLUDED(mu_, io_mu_, sync_mu_);
  absl::Status PutFrom(const std::string& key, const char* data, uint64_t size, uint64_t checksum,
                       bool in_place) ABSL_LOCKS_EXCLUDED(mu_, io_mu_);
  // Counts `alloc` bytes of writes in flight (waiting while too many are)
  // and returns a buffer of `buf_bytes` (none for 0; null when out of
  // memory, the count undone).
  char* TakeBuffer(uint64_t alloc, uint64_t buf_bytes) ABSL_LOCKS_EXCLUDED(io_mu_);
  // Undoes TakeBuffer: the count, and the buffer kept for reuse or freed.
  void ReleaseBuffer(uint64_t alloc, char* buf, uint64_t buf_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Delete's body. `only` set (`keys` one key): deletes that version of
  // the key alone (one found corrupt); a put of the key since replaced it,
  // and stays.
  absl::Status DeleteKeys(const std::vector<std::string>& keys, const Loc* only)
      ABSL_LOCKS_EXCLUDED(mu_, sync_mu_);
  // Drops `loc`, a version of `key` found corrupt, and says so.
  absl::Status DropCorrupt(const std::string& key, const Loc& loc, absl::string_view detail)
      ABSL_LOCKS_EXCLUDED(mu_, sync_mu_);

  const Options options_;
  std::unique_ptr<rocksdb::DB> db_;
  const int fd_;  // the extent file
  const bool direct_io_;
  std::atomic<uint64_t> used_{0};
  std::unique_ptr<IoPool> pool_;          // extent writes
  std::unique_ptr<ExtentWriter> writer_;  // on pool_; outlived by it (~SsdTier)
  std::unique_ptr<IoPool> read_pool_;     // chunks of large extent reads
  std::unique_ptr<IoPool> sync_pool_;     // one thread: syncs, in the order called

  Mutex sync_mu_;  // one Sync at a time
  Mutex mu_;
  std::unordered_map<std::string, Loc> index_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, PendingPtr> pending_ ABSL_GUARDED_BY(mu_);  // by key
  std::vector<PendingPtr> unsynced_ ABSL_GUARDED_BY(mu_);  // put since the last Sync
  // Extents whose index entries are deleted, to be freed once that is durable.
  std::vector<std::pair<uint64_t, uint64_t>> to_free_ ABSL_GUARDED_BY(mu_);
  RangeAllocator space_ ABSL_GUARDED_BY(mu_);
  uint64_t file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool deletes_unsynced_ ABSL_GUARDED_BY(mu_) = false;
  // A sync for room failed with other callers' puts in it (SyncRun).
  bool puts_lost_ ABSL_GUARDED_BY(mu_) = false;
  int syncs_queued_ ABSL_GUARDED_BY(mu_) = 0;  // taken runs not yet synced
  std::deque<std::pair<SyncRun, std::function<void(absl::Status)>>> sync_queue_
      ABSL_GUARDED_BY(mu_);

  Mutex io_mu_;
  CondVar io_cv_;
  uint64_t inflight_bytes_ ABSL_GUARDED_BY(io_mu_) = 0;
  std::vector<std::pair<uint64_t, char*>> spare_ ABSL_GUARDED_BY(io_mu_);  // (alloc, buffer)
  uint64_t spare_bytes_ ABSL_GUARDED_BY(io_mu_) = 0;
};

}  // namespace shelf::storage

#endif  // SHELF_STORAGE_SSD_TIER_H_
