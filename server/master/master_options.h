// MasterOptions: what a Master is configured with (from shelf-master's
// flags, master_config.cc, or a test), and the limits it validates
// requests against.
#ifndef SHELF_SERVER_MASTER_MASTER_OPTIONS_H_
#define SHELF_SERVER_MASTER_MASTER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/credentials.h"

namespace shelf::master {

class KvEventPublisher;  // events/kv_events.h

// Limits on requests, validated with INVALID_ARGUMENT (docs/master.md); the
// protocol's own (key, batch, replicas, version) are in shelf/limits.h.
inline constexpr size_t kRemoveMatchingMax = 65536;  // keys one RemoveMatching removes
// The largest block a master can take (an object's size is 32 bits).
inline constexpr uint64_t kBlockBytesLimit = UINT32_MAX;
// After a failed demotion, a node gets no demotion orders for this long.
inline constexpr uint64_t kSsdFailureBackoffMs = 10000;
// A store declared dead keeps its orphans (Node::orphans) this many TTLs.
inline constexpr uint64_t kOrphansKeepTtls = 10;

struct MasterOptions {
  std::string listen_address;   // advertised as the leader address
  uint64_t node_ttl_ms = 3000;  // silence after which a store is dead
  // What a dead store did not hear of (removals) is kept this long; one
  // dead longer comes back empty (docs/master.md, "Removed keys stay
  // removed").
  uint64_t dead_store_memory_ms = uint64_t{3600} * 1000;
  // Keys committed while a store is dead that it remembers (a Bloom
  // filter's, 26% false positives at the default); past this it comes
  // back empty too. Not a flag: tests lower it.
  uint64_t dead_store_commits_max = 2 << 20;
  uint64_t heartbeat_interval_ms = 500;  // told to stores at registration
  // A notice (RECORD, FORGET) ends its store's long poll this long after
  // it was queued, carrying those queued meanwhile with it: a store learns
  // of a commit or a removal within this plus a round trip, which bounds
  // what a leader's death can lose of fresh commits (docs/ha.md), while a
  // store under a stream of commits answers at most this often. Not a
  // flag: tests change it.
  uint64_t notice_delay_ms = 20;
  uint64_t put_timeout_ms = 30000;  // an open put is reclaimed after this
  // A store checks a write grant's expiry by its own clock: the ranges of
  // a put that ended uncommitted go to other puts only this long after
  // its grants expire (clock skew between master and stores).
  uint64_t grant_skew_ms = 1000;
  uint64_t lease_ms = 5000;  // read lease granted by lookups
  double evict_high = 0.95;  // segment fill that starts eviction
  double evict_low = 0.85;   // eviction stops below this fill
  // The SSD tier's own watermarks: close to full, as every free byte is a
  // block the tiers could hold (a run of drops is one RocksDB write).
  double ssd_evict_high = 0.999;
  double ssd_evict_low = 0.997;
  uint64_t block_bytes_max = 1ull << 30;  // <= kBlockBytesLimit
  uint64_t alignment = 4096;              // every DRAM range starts aligned
  uint64_t hard_pin_bytes_max = 0;        // per node; 0 = 10% of its DRAM
  uint64_t demote_wait_ms = 2000;         // PutStart waits this long for demotions to free room
  // Demotion ahead of need: a segment keeps room (free, clean or being
  // demoted) for the bytes its puts fill in this long, at least twice the
  // measured order-to-report time of a demotion, at most
  // demote_headroom_max of it. 0: the evict_high / evict_low watermarks
  // alone.
  uint64_t demote_lead_ms = 1000;
  // With clean copies kept, the room is DRAM blocks also on SSD: each of
  // its bytes is one the SSD tier holds twice, so it is kept small.
  double demote_headroom_max = 0.1;
  // Demotion ahead of need copies (docs/storage.md, "Room without
  // emptiness"): the store writes the block to SSD, keeps its DRAM copy,
  // and the master indexes both; the DRAM copy, now clean, stays readable
  // and a writer takes its room at once. Off: a demotion moves the block
  // (its DRAM range is freed on the report).
  bool demote_keep_dram = true;
  // Keys are kept as TENANT/KEY (--credentials; tenant_keys.h): a block's
  // event hash, when its engine gave none, is of KEY, the form its engine
  // names it by.
  bool tenant_namespaces = false;
  // Principals' and tenants' quotas and guaranteed shares (quotas.h);
  // none when null.
  std::shared_ptr<const Authenticator> credentials;
  // How long the read grants of a Lookup or MatchPrefix hit stay valid
  // (docs/security.md, "Read grants"): long enough for a client to cache
  // a location and read it again without asking, short enough that a
  // grant leaked or kept past a remove is soon worthless.
  uint64_t read_grant_ms = 60000;
  // Mint read grants at all. A master without a secret leaves them out:
  // its stores (open too) serve reads without them.
  bool read_grants = true;
  // Every time the master reads (TTLs, leases, put and pin expiry, wall
  // times it reports) and every timed wait (PutStart waiting for room, a
  // heartbeat long poll). Must outlive the master.
  Clock* clock = Clock::Real();
  // Where block events go (docs/events.md); none when null. Must outlive
  // the master.
  KvEventPublisher* events = nullptr;
  // What the stream says when a store's blocks all go at once (its death,
  // a flush) and at a change of leader: a BlockRemoved per block (every
  // router understands it; llm-d's ignores AllBlocksCleared), or vLLM's
  // AllBlocksCleared per node (docs/events.md, "Failover").
  enum class NodeLossEvents : uint8_t { kRemoved, kCleared };
  NodeLossEvents events_node_loss = NodeLossEvents::kRemoved;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_MASTER_OPTIONS_H_
