#include "client/location_cache.h"

#include <optional>
#include <utility>

#include "absl/hash/hash.h"
#include "common/check.h"
#include "transport/wire.h"

namespace shelf {

LocationCache::LocationCache(size_t entries_max) : entries_max_(entries_max) {
  SHELF_CHECK(entries_max_ > 0);
}

uint64_t LocationCache::GrantExpiry(const v1::Replica& replica) {
  const std::string& g = replica.read_grant();
  return g.size() == transport::wire::kReadGrantBytes ? transport::wire::ReadGrantExpiry(g) : 0;
}

bool LocationCache::Get(absl::string_view key, v1::ObjectLocation* out, uint64_t now_unix_ms) {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  const v1::ObjectLocation& entry = *it->second;
  if (!entry.replicas(0).read_grant().empty() &&
      GrantExpiry(entry.replicas(0)) < now_unix_ms + kGrantMarginMs) {
    Lru::iterator old = it->second;
    index_.erase(it);
    lru_.erase(old);
    return false;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  *out = *it->second;
  return true;
}

size_t LocationCache::StripeOf(absl::string_view key) {
  return absl::Hash<absl::string_view>{}(key) % kStripes;
}

uint64_t LocationCache::Stamp() const {
  MutexLock lock(&mu_);
  return erases_;
}

bool LocationCache::Keepable(const v1::ObjectLocation& loc) {
  // Of unknown generation (a master that learned the block from a store's
  // SSD inventory, which names none), a store would take it for any commit
  // of the key, so a replacement could not be told apart: such a key is
  // read through the master.
  return loc.found() && loc.replicas_size() > 0 && loc.generation() != 0;
}

v1::ObjectLocation LocationCache::EntryOf(const v1::ObjectLocation& loc) {
  v1::ObjectLocation entry;
  entry.set_key(loc.key());
  entry.set_found(true);
  entry.set_size(loc.size());
  entry.set_checksum(loc.checksum());
  entry.set_generation(loc.generation());
  entry.set_store_key(loc.store_key());
  *entry.add_replicas() = loc.replicas(0);
  return entry;
}

void LocationCache::InsertLocked(v1::ObjectLocation entry) {
  DropLocked(entry.key());
  lru_.push_front(std::move(entry));
  index_.emplace(lru_.front().key(), lru_.begin());
  while (lru_.size() > entries_max_) {
    index_.erase(lru_.back().key());
    lru_.pop_back();
  }
}

void LocationCache::Put(const v1::ObjectLocation& loc, uint64_t stamp) {
  if (!loc.found() || loc.replicas_size() == 0) return;
  if (!Keepable(loc)) {
    MutexLock lock(&mu_);
    DropLocked(loc.key());  // and what was kept of an older answer
    return;
  }
  v1::ObjectLocation entry = EntryOf(loc);  // built outside the lock
  MutexLock lock(&mu_);
  if (erased_at_[StripeOf(loc.key())] > stamp) return;
  InsertLocked(std::move(entry));
}

void LocationCache::PutCommitted(const std::vector<const std::string*>& keys,
                                 const std::vector<const v1::ObjectLocation*>& locs,
                                 uint64_t stamp) {
  const size_t n = keys.size();
  std::vector<std::optional<v1::ObjectLocation>> entries(n);
  absl::flat_hash_map<absl::string_view, int> named;  // times the commit names each key
  for (size_t i = 0; i < n; ++i) {
    ++named[*keys[i]];
    const v1::ObjectLocation* loc = i < locs.size() ? locs[i] : nullptr;
    if (loc != nullptr && loc->key() == *keys[i] && Keepable(*loc)) entries[i] = EntryOf(*loc);
  }
  std::vector<size_t> stripes(n);
  std::vector<char> current(n);
  MutexLock lock(&mu_);
  // Another change of a key's stripe since `stamp` (a remove, another
  // put) may be of that key and later than this commit: keep nothing for
  // it. Judged for every key before this commit's own erases below, which
  // would otherwise refuse the keys of the same batch that share a stripe.
  for (size_t i = 0; i < n; ++i) {
    stripes[i] = StripeOf(*keys[i]);
    current[i] = erased_at_[stripes[i]] <= stamp && named[*keys[i]] == 1 ? 1 : 0;
  }
  for (size_t i = 0; i < n; ++i) {
    // As an erase: a lookup answered before this commit brings nothing back.
    erased_at_[stripes[i]] = ++erases_;
    DropLocked(*keys[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    if (current[i] != 0 && entries[i].has_value()) InsertLocked(*std::move(entries[i]));
  }
}

void LocationCache::Erase(absl::string_view key) {
  MutexLock lock(&mu_);
  erased_at_[StripeOf(key)] = ++erases_;
  DropLocked(key);
}

void LocationCache::DropLocked(absl::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  // The view in the index points into the entry: drop it before the entry.
  Lru::iterator entry = it->second;
  index_.erase(it);
  lru_.erase(entry);
}

void LocationCache::Clear() {
  MutexLock lock(&mu_);
  erased_at_.fill(++erases_);
  index_.clear();
  lru_.clear();
}

size_t LocationCache::size() const {
  MutexLock lock(&mu_);
  return index_.size();
}

}  // namespace shelf
