// Hot blocks in place: BatchGetViews keeps the lease of a block read in
// place twice in a short while, and views it again under that lease, with
// no lookup, while the lease's first half lasts and the store's key board
// still marks the commit (docs/client.md, "Hot blocks in place").

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/client_impl.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "transport/shm_board.h"

namespace shelf {
namespace {

// A key viewed in place again within this long is hot: its lease is kept.
constexpr uint64_t kKeepRecentMs = 1000;
// Leases kept at once, and keys remembered as viewed: past them, nothing
// more is kept, and the memory of views starts over.
constexpr size_t kKeptMax = 256;
constexpr size_t kViewedMax = 4096;

}  // namespace

bool ClientImpl::KeepLease(const std::string& key, const v1::ObjectLocation& loc,
                           std::shared_ptr<const void> mapping, const char* data,
                           uint64_t drops_before) {
  const uint64_t now = UnixMs();
  const uint64_t until = loc.lease_expires_unix_ms();
  if (until <= now) return false;
  MutexLock lock(&kept_mu_);
  ForgetViewedIfFull();
  auto [seen, first] = viewed_.try_emplace(key, Viewed{now, 0});
  const bool hot = !first && now - seen->second.at_unix_ms < kKeepRecentMs;
  seen->second.at_unix_ms = now;
  // Not when this client put or removed the key since the call began: what
  // the call read may be what that changed. Kept next time.
  if (!hot || seen->second.dropped > drops_before || all_dropped_ > drops_before) return false;
  auto it = kept_.find(key);
  if (it == kept_.end()) {
    if (kept_.size() >= kKeptMax) {
      // Full: what no call reused within its first half goes.
      absl::erase_if(kept_, [&](const auto& k) { return now >= k.second.reuse_until_unix_ms; });
      if (kept_.size() >= kKeptMax) return false;
    }
    it = kept_.try_emplace(key).first;
  } else {
    GiveBack(it->second);  // the lease it replaces
  }
  it->second = KeptLease{loc, std::move(mapping), data, until, now + (until - now) / 2};
  return true;
}

bool ClientImpl::ViewsOnKeptLeases(const std::vector<std::string>& keys, const ViewsFn& use,
                                   uint64_t bytes_max) {
  const size_t n = keys.size();
  std::vector<KeptLease> held(n);
  const uint64_t now = UnixMs();
  {
    MutexLock lock(&kept_mu_);
    if (kept_.empty()) return false;
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      auto it = kept_.find(keys[i]);
      if (it == kept_.end()) return false;
      if (now >= it->second.reuse_until_unix_ms) {
        kept_.erase(it);  // its first half is over: it runs out on its own
        return false;
      }
      held[i] = it->second;
      total += held[i].loc.size();
      if (bytes_max != 0 && total > bytes_max) return false;
    }
  }
  // The lease keeps each range the block's; the board says whether the
  // commit is still the key's (a remove or replace by anyone unmarks it),
  // as it does for cached locations; the checksum is checked as for any
  // view in place.
  for (size_t i = 0; i < n; ++i) {
    const v1::ObjectLocation& loc = held[i].loc;
    const v1::Replica& r = loc.replicas(0);
    if (!shm_.Marks(PeerOf(r.store()), r.offset(),
                    transport::KeyBoardTag(StoreKey(loc), loc.generation())) ||
        BlockChecksum(held[i].data, loc.size()) != loc.checksum()) {
      DropKeptLease(keys[i]);
      return false;
    }
  }
  std::vector<BlockView> views(n);
  uint64_t until_unix_ms = UINT64_MAX;
  for (size_t i = 0; i < n; ++i) {
    views[i] = BlockView{Status::Ok(), held[i].data, held[i].loc.size(), true};
    until_unix_ms = std::min(until_unix_ms, held[i].lease_until_unix_ms);
    CountLoaded(held[i].loc.size(), v1::TIER_DRAM, "shm");
  }
  stats_.views_on_kept_leases.fetch_add(n);
  use(views, MonoMs() + (until_unix_ms - now) / 2);
  return true;
}

void ClientImpl::ForgetViewedIfFull() {
  if (viewed_.size() < kViewedMax) return;
  viewed_.clear();
  all_dropped_ = kept_drops_;  // what was dropped is forgotten too
}

uint64_t ClientImpl::KeptLeaseDrops() {
  MutexLock lock(&kept_mu_);
  return kept_drops_;
}

void ClientImpl::DropKeptLease(const std::string& key) {
  MutexLock lock(&kept_mu_);
  ++kept_drops_;
  // Noted even for a key not viewed lately (as viewed at time 0: not hot),
  // for a view that began before the put or remove and ends after it.
  ForgetViewedIfFull();
  viewed_[key].dropped = kept_drops_;
  auto it = kept_.find(key);
  if (it == kept_.end()) return;
  GiveBack(it->second);
  kept_.erase(it);
}

void ClientImpl::DropKeptLeases() {
  MutexLock lock(&kept_mu_);
  all_dropped_ = ++kept_drops_;
  for (const auto& entry : kept_) GiveBack(entry.second);
  kept_.clear();
}

void ClientImpl::GiveBack(const KeptLease& k) {
  // As ReleaseLeases: only in the lease's first half, far from its end.
  if (UnixMs() >= k.reuse_until_unix_ms) return;
  QueueReleases({{k.loc.key(), k.loc.generation(), k.reuse_until_unix_ms}});
}

}  // namespace shelf
