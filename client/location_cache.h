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

#include <cstddef>
#include <list>
#include <string>

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

  // Copies the cached location of `key` into *out (one replica, no lease)
  // and marks it recently used; false when there is none.
  bool Get(absl::string_view key, v1::ObjectLocation* out) ABSL_LOCKS_EXCLUDED(mu_);
  // Remembers `loc` (found, with at least one replica): its first replica,
  // the best one for this client as the master ordered them.
  void Put(const v1::ObjectLocation& loc) ABSL_LOCKS_EXCLUDED(mu_);
  void Erase(absl::string_view key) ABSL_LOCKS_EXCLUDED(mu_);
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Lru = std::list<v1::ObjectLocation>;  // front: most recently used

  const size_t entries_max_;
  mutable Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  // Keys are views of the entries' own keys.
  absl::flat_hash_map<absl::string_view, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf

#endif  // SHELF_CLIENT_LOCATION_CACHE_H_
