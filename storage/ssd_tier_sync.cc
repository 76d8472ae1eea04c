// SsdTier's syncs: the sync thread, what one sync does (the bytes made
// durable, then their index entries), and deletes, serialized with it.
// Layout and crash-consistency argument: docs/storage.md.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/log.h"
#include "common/sync_point.h"
#include "storage/ssd_records.h"
#include "storage/ssd_tier.h"

namespace shelf::storage {

using ssd_records::AlignUp;
using ssd_records::EncodeExtent;
using ssd_records::Errno;
using ssd_records::ExtentKey;
using ssd_records::FromRocks;
using ssd_records::kExtentRecord;

void SsdTier::SyncAsync(std::function<void(absl::Status)> done) {
  QueueSync(std::move(done), false);
}

void SsdTier::QueueSync(std::function<void(absl::Status)> done, bool for_room) {
  // Taken and queued under mu_: runs reach the sync thread in the order
  // they were taken, so a sync completes only after every earlier one.
  MutexLock lock(&mu_);
  SyncRun run;
  run.puts.swap(unsynced_);
  run.frees.swap(to_free_);
  run.deletes = deletes_unsynced_;
  deletes_unsynced_ = false;
  run.for_room = for_room;
  if (!for_room) run.lost_before = std::exchange(puts_lost_, false);
  ++syncs_queued_;
  sync_queue_.emplace_back(std::move(run), std::move(done));
  sync_pool_->Submit([this] { SyncQueued(); });
}

void SsdTier::SyncQueued() {
  // Every run queued so far, made durable together (one fdatasync, one
  // index write): when syncs come faster than the disk completes them,
  // they share the cost instead of queueing behind each other.
  std::deque<std::pair<SyncRun, std::function<void(absl::Status)>>> queued;
  {
    MutexLock lock(&mu_);
    queued.swap(sync_queue_);
  }
  if (queued.empty()) return;  // an earlier call took them
  bool took_others = false;    // a sync for room with others' puts in it
  for (const auto& [run, done] : queued) took_others |= run.for_room && !run.puts.empty();
  SyncRun all = std::move(queued.front().first);
  for (size_t i = 1; i < queued.size(); ++i) {
    SyncRun& r = queued[i].first;
    all.puts.insert(all.puts.end(), r.puts.begin(), r.puts.end());
    all.frees.insert(all.frees.end(), r.frees.begin(), r.frees.end());
    all.deletes = all.deletes || r.deletes;
  }
  absl::Status s = SyncTaken(std::move(all));
  {
    MutexLock lock(&mu_);
    syncs_queued_ -= static_cast<int>(queued.size());
    // The puts that failed left the index, and their callers' next sync
    // would otherwise find nothing to do and succeed.
    if (!s.ok() && took_others) puts_lost_ = true;
  }
  for (auto& [run, done] : queued) {
    if (s.ok() && run.lost_before) {
      done(absl::DataLossError(
          "SSD tier: an earlier sync failed; writes made before this sync were lost"));
    } else {
      done(s);
    }
  }
}

absl::Status SsdTier::Sync() { return SyncAndWait(false); }

absl::Status SsdTier::SyncAndWait(bool for_room) {
  struct Waiter {
    Mutex mu;
    CondVar cv;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
  };
  auto w = std::make_shared<Waiter>();
  QueueSync(
      [w](absl::Status s) {
        {
          MutexLock lock(&w->mu);
          w->done = true;
          w->status = std::move(s);
        }
        w->cv.SignalAll();
      },
      for_room);
  MutexLock lock(&w->mu);
  while (!w->done) w->cv.Wait(&w->mu);
  return w->status;
}

absl::Status SsdTier::SyncTaken(SyncRun taken) {
  MutexLock sync_lock(&sync_mu_);
  std::vector<PendingPtr>& run = taken.puts;
  std::vector<std::pair<uint64_t, uint64_t>>& frees = taken.frees;
  const bool deletes = taken.deletes;
  if (run.empty() && frees.empty() && !deletes) return absl::OkStatus();
  // 1. The bytes: every write done, then the extent file synced.
  absl::Status s;
  for (const PendingPtr& p : run) {
    WaitWritten(p);
    MutexLock lock(&io_mu_);
    if (s.ok() && !p->error.ok()) s = p->error;
  }
  if (s.ok() && !run.empty() && fdatasync(fd_) != 0) s = Errno("extent file sync", errno);
  // Fault injection for tests: a failing disk (the status to return).
  SHELF_SYNC_POINT_ARG("SsdTier::SyncTaken:DataSynced", &s);
  // 2. Only then the index entries of the puts still current (not
  // overwritten or deleted since), in one synced write; it also makes the
  // deletes written before it durable.
  //
  // A put overwritten since by one not in this run (put after this sync
  // was called: SyncAsync lets writers go on) is indexed too: it was
  // acknowledged by this sync. The put that overwrote it then replaces it.
  // Of several puts of one key in the run, the last alone is indexed.
  std::vector<bool> current(run.size()), superseded(run.size());
  rocksdb::WriteBatch batch;
  {
    MutexLock lock(&mu_);
    std::unordered_set<std::string> decided;
    for (size_t i = run.size(); i-- > 0;) {
      if (!decided.insert(run[i]->key).second) continue;  // a later put of the key is here
      auto it = pending_.find(run[i]->key);
      if (it == pending_.end()) continue;  // deleted since
      current[i] = it->second == run[i];
      // Overwritten, not deleted in between: the newest put's chain of
      // predecessors reaches it.
      for (const Pending* q = it->second->prev.get(); q != nullptr && !current[i];
           q = q->prev.get()) {
        if (q == run[i].get()) superseded[i] = true;
      }
    }
  }
  for (size_t i = 0; i < run.size() && s.ok(); ++i) {
    if (!current[i] && !superseded[i]) continue;
    const Pending& p = *run[i];
    char rec[kExtentRecord];
    EncodeExtent(p.loc.size, p.loc.checksum, p.loc.offset, rec);
    rocksdb::Status rs = batch.Put(ExtentKey(p.key), rocksdb::Slice(rec, kExtentRecord));
    s = FromRocks(rs, "index batch");
  }
  if (s.ok()) {
    s = batch.Count() > 0 ? FromRocks(db_->Write(WriteOpts(true), &batch), "index write")
                          : FromRocks(db_->SyncWAL(), "index sync");
  }
  // 3. Extents no durable entry points at any more become free.
  MutexLock lock(&mu_);
  if (s.ok()) {
    for (size_t i = 0; i < run.size(); ++i) {
      Pending& p = *run[i];
      if (current[i] || superseded[i]) {
        if (p.has_replaced) {
          frees.emplace_back(p.replaced.offset, AlignUp(p.replaced.size));
        }
        p.prev.reset();
        // Puts of the key since (superseded, or put while this ran) now
        // replace this durable one. A Delete waits for sync_mu_.
        auto newest = pending_.find(p.key);
        if (newest != pending_.end() && newest->second == run[i]) {
          pending_.erase(newest);
          continue;
        }
        Pending* q = newest == pending_.end() ? nullptr : newest->second.get();
        for (; q != nullptr && q != &p; q = q->prev.get()) {
          q->has_replaced = true;
          q->replaced = p.loc;
          if (q->prev.get() == &p) q->prev.reset();
        }
      } else {
        frees.emplace_back(p.loc.offset, p.alloc);  // never indexed
      }
    }
    for (const auto& [off, len] : frees) {
      absl::Status f = space_.Free(off, len);
      if (!f.ok()) {
        SHELF_LOG(ERROR) << "SSD tier free-space map" << Kv("error", f.message());
      }
    }
    return absl::OkStatus();
  }
  // Not durable: the run leaves the index (its extents stay taken until
  // the next open rebuilds the map: an index entry may have reached the
  // disk after all). The frees wait for the next Sync.
  for (size_t i = 0; i < run.size(); ++i) {
    if (!current[i]) continue;
    auto pit = pending_.find(run[i]->key);
    if (pit != pending_.end() && pit->second == run[i]) pending_.erase(pit);
    auto it = index_.find(run[i]->key);
    if (it != index_.end() && it->second.offset == run[i]->loc.offset) {
      used_.fetch_sub(std::min(used_.load(), it->second.size));
      index_.erase(it);
    }
  }
  to_free_.insert(to_free_.end(), frees.begin(), frees.end());
  deletes_unsynced_ = deletes_unsynced_ || deletes;
  return s;
}

absl::Status SsdTier::Delete(const std::string& key) { return DeleteKeys({key}, nullptr); }

absl::Status SsdTier::DeleteMany(const std::vector<std::string>& keys) {
  return keys.empty() ? absl::OkStatus() : DeleteKeys(keys, nullptr);
}

absl::Status SsdTier::DeleteKeys(const std::vector<std::string>& keys, const Loc* only) {
  SHELF_CHECK(only == nullptr || keys.size() == 1);
  // Serialized with Sync, so a pending put of a key is either indexed
  // before this delete's tombstone or never.
  MutexLock sync_lock(&sync_mu_);
  // With `only`, a put since the corrupt read may have made another
  // version the key's. If the durable records are not `only`'s (that put
  // is synced), there is nothing to drop. If they are, and the put is
  // pending, the tombstone below removes only them: the sync that indexes
  // the put (after this, under sync_mu_) writes its own records and frees
  // the corrupt extent.
  auto same = [](const Loc& a, const Loc& b) {
    return a.offset == b.offset && a.checksum == b.checksum;
  };
  auto replaced = [&](const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = index_.find(key);
    return only != nullptr && it != index_.end() && !same(it->second, *only);
  };
  if (only != nullptr) {
    MutexLock lock(&mu_);
    auto pit = pending_.find(keys[0]);
    if (replaced(keys[0]) && (pit == pending_.end() || !pit->second->has_replaced ||
                              !same(pit->second->replaced, *only))) {
      return absl::OkStatus();
    }
  }
  // Every key's tombstones in one write: one WAL append for a run of drops.
  rocksdb::WriteBatch batch;
  rocksdb::Status s;
  for (const std::string& key : keys) {
    if (s.ok()) s = batch.Delete(ExtentKey(key));
  }
  if (s.ok()) s = db_->Write(WriteOpts(options_.sync), &batch);
  if (!s.ok()) return FromRocks(s, "delete");
  MutexLock lock(&mu_);
  deletes_unsynced_ = true;
  for (const std::string& key : keys) {
    if (replaced(key)) continue;
    auto it = index_.find(key);
    if (it == index_.end()) continue;
    used_.fetch_sub(std::min(used_.load(), it->second.size));
    auto pit = pending_.find(key);
    if (pit != pending_.end()) {
      // The pending write is never indexed (Sync frees its extent); the
      // durable version it would have replaced goes with this delete.
      const Pending& p = *pit->second;
      if (p.has_replaced) {
        to_free_.emplace_back(p.replaced.offset, AlignUp(p.replaced.size));
      }
      pending_.erase(pit);
    } else {
      to_free_.emplace_back(it->second.offset, AlignUp(it->second.size));
    }
    index_.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace shelf::storage
