// The object index's types: what the master keeps per block (Object and
// its Replicas), the key it is found by, and the shards that hold them.
//
// The index is a hash set of Objects per shard, keyed by the key inside the
// Object (no second copy of it, no pointer back). Sizes are part of the
// design: an Object fills a 112-byte malloc chunk with its set node header,
// a Replica is 24 bytes and almost every Object holds one inline
// (docs/master.md, "Memory"). The Master's lock protocol over them is in
// master.h.
#ifndef SHELF_SERVER_MASTER_INDEX_OBJECT_H_
#define SHELF_SERVER_MASTER_INDEX_OBJECT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "proto/shelf.pb.h"
#include "server/master/index/lru_pool.h"

namespace shelf::master {

struct Object;
// A tier's objects, least recently used first; nodes from LruNodePool.
using LruList = std::list<Object*, LruAllocator<Object*>>;
// A replica's tier in one byte (v1::Tier is an int).
class TierByte {
 public:
  TierByte(v1::Tier t = v1::TIER_DRAM) : v_(static_cast<uint8_t>(t)) {}  // NOLINT: implicit
  operator v1::Tier() const { return static_cast<v1::Tier>(v_); }        // NOLINT: implicit

 private:
  uint8_t v_;
};
// 24 bytes: one inline in almost every object (docs/master.md, "Memory").
struct Replica {
  uint32_t node = 0;    // index into nodes_
  uint8_t segment = 0;  // index into its node's segments (at most 64)
  TierByte tier = v1::TIER_DRAM;
  bool demoting = false;  // a DEMOTE order is out for this replica
  // DRAM: its store's SSD holds the block too, so dropping this copy loses
  // nothing (Segment::clean_bytes counts it).
  bool clean = false;
  uint64_t offset = 0;
  LruList::iterator lru;  // position in its node's tier list
};
// A key stored in the index, in 29 bytes: up to 28 inline (content keys
// are 17, docs/keys.md; under a tenant, TENANT "/" KEY: a 17-byte
// content key fits under a tenant name of up to 10 characters), longer
// ones on the heap. Never moved: objects stay where the index built them.
class ObjectKey {
 public:
  explicit ObjectKey(absl::string_view s);
  ~ObjectKey();
  ObjectKey(const ObjectKey&) = delete;
  ObjectKey& operator=(const ObjectKey&) = delete;
  absl::string_view view() const;
  std::string str() const { return std::string(view()); }

 private:
  static constexpr uint8_t kInline = 28;
  static constexpr uint8_t kHeap = 0xff;
  // Inline: the bytes, then their count in b_[28]. On the heap: the
  // pointer in b_[0..7], the size in b_[8..15], kHeap in b_[28].
  char b_[kInline + 1];
};
static_assert(sizeof(ObjectKey) == 29);
// What few objects carry: the put's parent key, what it told the event
// stream (docs/events.md; the token ids are not kept), a soft pin.
struct ObjectExtra {
  std::string parent_key;
  bool has_engine_hash = false;
  bool has_engine_parent_hash = false;
  uint32_t block_tokens = 0;
  uint32_t model = 0;  // in models_; 0: none (the key's, else the namespace)
  uint64_t engine_hash = 0;
  uint64_t engine_parent_hash = 0;
  uint64_t pin_until_ms = 0;  // soft pin: NowMs, UINT64_MAX = until unpinned
};
// 104 bytes, so that with its index node header it fills a 112-byte
// malloc chunk (docs/master.md, "Memory"): what only some objects need
// is in `extra`. Lookups, under mu_ shared and the object's shard lock,
// write the lease and the access time; what they read unlocked (key,
// size, checksum, generation, replicas) must not share a memory
// location (a bit-field's word) with those.
struct Object {
  explicit Object(absl::string_view k)
      : key(k), lease_until_ms(0), lease_holders(0), last_access_hi(0) {}
  const ObjectKey key;
  bool hard_pin = false;  // set and read under mu_ exclusive
  // The principal whose put stored the block, as QuotaBook::WriterOf
  // numbers it (its stored-bytes quotas count the replicas); 0: none
  // known (a cluster without principals, a block from an inventory).
  uint16_t writer = 0;
  uint64_t checksum = 0;
  // Which commit of the key this is (a replace, remove then put, gets a
  // new one): told to stores in RECORD notices and to readers in
  // lookups, which cache it; READ_KEY checks it. 0: unknown (learned
  // from an inventory that did not say).
  uint64_t generation = 0;
  // Written by lookups, under the shard's lock: the read lease's end,
  // the holders, the last access. Times are NowMs, which counts from
  // boot: 40 bits last 34 years (SetLeaseUntil clamps), 41 bits 69.
  // Leases granted since the lease last ran out and not yet given back;
  // the lease ends at lease_until_ms or when this drops to 0. Sticky at
  // kLeaseHoldersMax: the lease then ends at lease_until_ms only.
  uint64_t lease_until_ms : 40;
  uint64_t lease_holders : 15;
  uint64_t last_access_hi : 9;  // last_access_ms(): these, then ...
  uint32_t last_access_lo = 0;  // ... the low 32 bits
  uint32_t size = 0;            // <= --block-bytes-max, below 4 GiB
  // Out of line: most blocks carry none, and an empty std::string costs
  // 32 bytes in every object.
  std::unique_ptr<ObjectExtra> extra;
  // Inline: almost every block has one replica, and a heap array costs a
  // malloc'd block and a header besides.
  absl::InlinedVector<Replica, 1> replicas;
  // The soft pin (in `extra`).
  uint64_t pin_until_ms() const { return extra == nullptr ? 0 : extra->pin_until_ms; }
  static constexpr uint64_t kLeaseUntilMax = (uint64_t{1} << 40) - 1;
  void SetLeaseUntil(uint64_t ms) { lease_until_ms = std::min(ms, kLeaseUntilMax); }
  // The last access (NowMs).
  void Touch(uint64_t now_ms) {
    last_access_hi = (now_ms >> 32) & 0x1ff;
    last_access_lo = static_cast<uint32_t>(now_ms);
  }
  uint64_t last_access_ms() const { return (uint64_t{last_access_hi} << 32) | last_access_lo; }
};
// The index holds objects as a set: the key is in the object (no second
// copy, no pointer back). Elements are const to the set only through
// their key, which is const in Object itself; Mut gives the rest.
static_assert(sizeof(Object) == 104, "an index node must stay in a 112-byte malloc chunk");
inline Object& Mut(const Object& obj) { return const_cast<Object&>(obj); }
inline constexpr uint32_t kLeaseHoldersMax = (1u << 15) - 1;
// A key and its hash, computed once for the shard, the prefetch and the
// find of a batch lookup instead of once for each.
// Trivial, so that a batch's array of them costs no initialization.
struct HashedKey {
  const char* data;
  size_t size;
  size_t hash;
  absl::string_view key() const { return absl::string_view(data, size); }
};
// A find for PrefetchProbe{hash} matches nothing: it starts loading
// each object whose slot it would compare with and goes on. It is a
// batch lookup's second prefetch stage: a table slot holds only a
// pointer, so the object's own miss can start only once the slot is in
// cache (reads/lookup.cc, FindBatchLocked).
struct PrefetchProbe {
  size_t hash;
};
struct KeyHash {
  using is_transparent = void;
  size_t operator()(absl::string_view k) const { return absl::Hash<absl::string_view>{}(k); }
  size_t operator()(const Object& o) const { return (*this)(o.key.view()); }
  size_t operator()(const HashedKey& k) const { return k.hash; }
  size_t operator()(const PrefetchProbe& p) const { return p.hash; }
};
inline HashedKey Hashed(absl::string_view k) { return HashedKey{k.data(), k.size(), KeyHash{}(k)}; }
struct KeyEq {
  using is_transparent = void;
  static absl::string_view V(absl::string_view k) { return k; }
  static absl::string_view V(const HashedKey& k) { return k.key(); }
  static absl::string_view V(const Object& o) { return o.key.view(); }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return V(a) == V(b);
  }
  bool operator()(const Object& o, const PrefetchProbe&) const { return Prefetch(o); }
  bool operator()(const PrefetchProbe&, const Object& o) const { return Prefetch(o); }
  static bool Prefetch(const Object& o) {
    // The object's lines: a 104-byte object spans up to three.
    const char* p = reinterpret_cast<const char*>(&o);
    __builtin_prefetch(p, 1);
    __builtin_prefetch(p + 64, 1);
    __builtin_prefetch(p + sizeof(Object) - 1, 1);
    return false;
  }
};
// The object index: one shard per slice of the key hash space.
struct Shard {
  Mutex mu;
  absl::node_hash_set<Object, KeyHash, KeyEq> objects ABSL_GUARDED_BY(mu);
};
inline constexpr size_t kShards = 16;
// The high bits: each shard's hash set uses the low ones.
inline size_t ShardOfHash(size_t hash) { return (hash >> 32) % kShards; }
inline size_t ShardIndex(absl::string_view key) { return ShardOfHash(KeyHash{}(key)); }

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_INDEX_OBJECT_H_
