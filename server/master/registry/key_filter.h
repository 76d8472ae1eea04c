// KeyFilter: a Bloom filter of keys in a fixed number of bits. MayContain
// is true for every key added, and for a few never added (false
// positives, more of them the further past its design count it is
// filled); never false for a key added.
//
//   KeyFilter f(KeyFilter::kDefaultBits);
//   f.Add("user:1");
//   f.MayContain("user:1");  // true
//   f.MayContain("user:2");  // false, or true about 1% of the time
//                            // with 870,000 keys added
//
// Not thread-safe.
#ifndef SHELF_SERVER_MASTER_REGISTRY_KEY_FILTER_H_
#define SHELF_SERVER_MASTER_REGISTRY_KEY_FILTER_H_

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"

namespace shelf::master {

class KeyFilter {
 public:
  // 8 Mi bits (1 MiB): 1% false positives at 870,000 keys, 14% at 1.7 M.
  static constexpr size_t kDefaultBits = size_t{1} << 23;
  static constexpr int kProbes = 7;

  // A key's hash, taken once for several filters.
  struct Hash {
    uint64_t low = 0;
    uint64_t high = 0;
  };
  static Hash HashOf(absl::string_view key) {
    const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
    return Hash{h.low64, h.high64};
  }

  // REQUIRES: bits > 0; rounded up to a multiple of 64.
  explicit KeyFilter(size_t bits) : words_((bits + 63) / 64) {}

  void Add(const Hash& h) {
    ++added_;
    Probe(h, [this](size_t bit) {
      words_[bit / 64] |= uint64_t{1} << (bit % 64);
      return true;
    });
  }
  void Add(absl::string_view key) { Add(HashOf(key)); }
  bool MayContain(const Hash& h) const {
    return Probe(h, [this](size_t bit) { return (words_[bit / 64] >> (bit % 64) & 1) != 0; });
  }
  bool MayContain(absl::string_view key) const { return MayContain(HashOf(key)); }
  // Keys added (a key added twice counts twice).
  size_t added() const { return added_; }

 private:
  // Calls visit(bit) for each of the key's kProbes bits (double hashing of
  // its XXH3-128) while it returns true; true if it always did.
  template <typename Visit>
  bool Probe(const Hash& h, Visit visit) const {
    const size_t bits = words_.size() * 64;
    for (int i = 0; i < kProbes; ++i) {
      const uint64_t bit = h.low + static_cast<uint64_t>(i) * (h.high | 1);
      if (!visit(static_cast<size_t>(bit % bits))) return false;
    }
    return true;
  }

  std::vector<uint64_t> words_;
  size_t added_ = 0;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_REGISTRY_KEY_FILTER_H_
