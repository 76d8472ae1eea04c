// LocationCache: where a client last found each block, so a get of a known
// block goes straight to its store instead of asking the master first.
//
// Bounded (entries_max keys, least recently used out first). An entry is a
// hint, never trusted alone: a cached read is checked by the store against
// the block's generation and by the client against its checksum, and any
// doubt sends the read back to the master (docs/client.md, "Cached reads").
//
// Thread-safe.
#ifndef SHELF_CLIENT_LOCATION_CACHE_H_
#define SHELF_CLIENT_LOCATION_CACHE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "proto/shelf.pb.h"

namespace shelf {

class LocationCache {
 public:
  // REQUIRES: entries_max > 0.
  explicit LocationCache(size_t entries_max);
  LocationCache(const LocationCache&) = delete;
  LocationCache& operator=(const LocationCache&) = delete;

  // Copies the cached location of `key` into *out (one replica, no lease,
  // its read grant) and marks it recently used; false when there is none,
  // or when its read grant runs out before `now_unix_ms` + kGrantMarginMs
  // (the entry is dropped: the caller asks the master, which mints a new
  // one).
  bool Get(absl::string_view key, v1::ObjectLocation* out, uint64_t now_unix_ms)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A cached read must reach the store before its grant expires: entries
  // closer than this to expiry are not used.
  static constexpr uint64_t kGrantMarginMs = 2000;
  // When the read grant of `replica` expires (transport::wire::ReadGrant); 0 when it
  // carries none.
  static uint64_t GrantExpiry(const v1::Replica& replica);
  // A stamp to take before asking the master where keys are; Put with it
  // remembers nothing for a key erased since (by this client's own put or
  // remove, say), so a lookup that raced with that change cannot bring
  // the old location back.
  uint64_t Stamp() const ABSL_LOCKS_EXCLUDED(mu_);
  // Remembers `loc` (found, with at least one replica): its first replica,
  // the best one for this client as the master ordered them. Unless the
  // key was erased after `stamp` was taken, or `loc` is of unknown
  // generation (0), which no store check could tell from a replacement:
  // that forgets the key instead.
  void Put(const v1::ObjectLocation& loc, uint64_t stamp) ABSL_LOCKS_EXCLUDED(mu_);
  // After this client's commit of `keys` (one commit call): erases each
  // key as Erase does (a lookup answered before the commit brings nothing
  // back), then keeps `locs[i]`, the commit's location of keys[i] (null:
  // none answered), unless the key's stripe was erased after `stamp`,
  // taken before the commit was sent, by anything but this commit. A key
  // the commit names twice is kept by neither.
  void PutCommitted(const std::vector<const std::string*>& keys,
                    const std::vector<const v1::ObjectLocation*>& locs, uint64_t stamp)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Erase(absl::string_view key) ABSL_LOCKS_EXCLUDED(mu_);
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Lru = std::list<v1::ObjectLocation>;  // front: most recently used

  // Erases are remembered per stripe of keys (by hash), not per key: a
  // stripe erased after a stamp refuses every Put with that stamp, which
  // costs at most a later miss, never a stale entry.
  static constexpr size_t kStripes = 4096;
  static size_t StripeOf(absl::string_view key);
  // Drops the key's entry, if any.
  void DropLocked(absl::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `loc` may be kept: found, with a replica, of known generation.
  static bool Keepable(const v1::ObjectLocation& loc);
  // The entry kept for `loc` (Keepable): its first replica only.
  static v1::ObjectLocation EntryOf(const v1::ObjectLocation& loc);
  // Keeps `entry` (EntryOf) as its key's, the most recent.
  void InsertLocked(v1::ObjectLocation entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t entries_max_;
  mutable Mutex mu_;
  uint64_t erases_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<uint64_t, kStripes> erased_at_ ABSL_GUARDED_BY(mu_) = {};
  Lru lru_ ABSL_GUARDED_BY(mu_);
  // Keys are views of the entries' own keys.
  absl::flat_hash_map<absl::string_view, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf

#endif  // SHELF_CLIENT_LOCATION_CACHE_H_
