// KvEventPublisher: the master's block events in vLLM's KV-event format
// (docs/events.md), over ZMQ PUB sockets with ROUTER replay sockets.
//
//   KvEventPublisher::Options o;
//   o.streams.push_back({"tcp://127.0.0.1:5557", "", KvEventEncoding::kMap});
//   o.streams.push_back({">tcp://indexer:5557", "", KvEventEncoding::kArray});
//   auto pub = KvEventPublisher::Start(o, &exposition);
//   KvEvent e;
//   e.type = KvEvent::kBlockStored;
//   ...
//   (*pub)->Emit(std::move(e));   // never blocks, never waits on a subscriber
//
// Thread safety: Emit may be called from any thread at once (it takes a
// short internal lock and copies nothing but the event). One publisher
// thread owns every socket: it drains the queue every few milliseconds into
// batches (one per run of events with the same topic), encodes each batch
// once per stream in that stream's encoding (vLLM's maps, or the arrays
// llm-d's and Dynamo's decoders read), sends it under one sequence number
// on every stream and keeps the last `replay_batches_max` for replay.
//
// Bounded: at most `queue_events_max` events wait; Emit drops (and counts
// in shelf_master_kv_events_dropped_total) any event beyond that, so a slow
// publisher or subscriber costs events, never master time. What ZMQ itself
// drops at its high-water mark for a slow subscriber is not seen here.
#ifndef SHELF_SERVER_MASTER_EVENTS_KV_EVENTS_H_
#define SHELF_SERVER_MASTER_EVENTS_KV_EVENTS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "common/prom.h"
#include "shelf/limits.h"

namespace shelf::master {

// Limits (docs/events.md).
inline constexpr size_t kKvEventQueueMax = 1 << 20;          // largest --events-queue
inline constexpr size_t kKvEventBatchEventsMax = 1024;       // events one batch carries
inline constexpr size_t kKvEventReplayBatchesMax = 1 << 20;  // largest --events-replay-batches
inline constexpr size_t kKvEventStreamsMax = 64;
// Block hashes one BlockRemoved lists at most (a node's loss is cut into
// events of this many; consecutive removals coalesce up to it).
inline constexpr size_t kKvEventRemovedHashesMax = 4096;  // PUB endpoints one master serves

// The `medium` of a block in each tier.
inline constexpr const char* kMediumDram = "CPU";
inline constexpr const char* kMediumSsd = "DISK";

// How a stream encodes its batches (docs/events.md, "Wire format"): msgpack
// maps keyed by field name, as vLLM's publisher sends them, or msgpack
// arrays with exactly the fields llm-d's decoder expects.
enum class KvEventEncoding : uint8_t { kMap, kArray };
absl::StatusOr<KvEventEncoding> ParseKvEventEncoding(absl::string_view name);
const char* KvEventEncodingName(KvEventEncoding encoding);

// Whether only this host can reach `endpoint` (tcp on 127.0.0.0/8, ::1 or
// localhost; ipc; inproc), with or without the leading '>' of a connect.
bool KvEventEndpointIsLoopback(absl::string_view endpoint);

struct KvEvent {
  enum Type : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Type type = kBlockStored;
  std::string node_id;  // the topic names it
  std::string model;    // the topic's last part; empty: the namespace option
  std::string tenant;   // whose block; only streams serving that tenant carry it
  const char* medium = kMediumDram;
  uint64_t block_hash = 0;
  // kBlockRemoved: further blocks gone at once (a node lost, a flush), so
  // that a million removals take a thousand queue slots, not a million.
  std::vector<uint64_t> more_hashes;
  bool has_parent = false;
  uint64_t parent_hash = 0;
  uint32_t block_size = 0;  // tokens a block; 0 when the put did not say
  std::vector<uint32_t> token_ids;
};

// The hash a block is published under (docs/events.md, "Block hashes"): a
// content key's (docs/keys.md: version byte 1, 16 digest bytes) last 8
// digest bytes read big-endian; a key in the format of vLLM's Mooncake
// store connector, its block hash as vLLM's maybe_convert_block_hash gives
// it (the digest's last 8 bytes); an SGLang HiCache key, its page hash as
// SGLang's hash_str_to_int64 gives it (the digest's first 8 bytes); any
// other key's XXH3-64 (seed 0). An engine block hash given with the put
// replaces it (Master).
uint64_t KvEventBlockHash(absl::string_view key);

// The model a key in vLLM's Mooncake store connector's format names (the
// topic's model for a put that named none); empty for other keys.
absl::string_view KvEventKeyModel(absl::string_view key);

class KvEventPublisher {
 public:
  // ZMQ CURVE on a stream's sockets (docs/events.md, "Security"): the
  // master's key pair, and per subscriber public key the tenants whose
  // blocks it may see (empty: every tenant).
  struct Curve {
    std::string secret_key;  // Z85, 40 characters; empty: no CURVE
    std::string public_key;  // Z85, derived from the secret
    struct Reader {
      std::string name;    // the principal, for logs
      std::string tenant;  // empty: every tenant
    };
    std::vector<std::pair<std::string, Reader>> readers;  // Z85 public key -> who
  };
  struct Stream {
    // ZMQ endpoint the PUB socket binds; with a leading '>' it connects
    // there instead (a subscriber that binds, as llm-d's indexer does).
    std::string endpoint;
    std::string replay_endpoint;  // the ROUTER's (always binds); empty: no replay
    KvEventEncoding encoding = KvEventEncoding::kMap;
    // Empty: every tenant's blocks (no CURVE or a reader of every tenant
    // decides). Set: this stream carries only that tenant's blocks.
    std::string tenant;
  };
  struct Options {
    std::vector<Stream> streams;  // 1..kKvEventStreamsMax
    std::string ns = "default";   // topic kv@<node_id>@<ns> of a block without a model
    size_t queue_events_max = 100000;
    size_t replay_batches_max = 10000;
    Curve curve;
  };

  // Binds (or connects) every socket. INVALID_ARGUMENT for an out-of-range
  // option; UNAVAILABLE when ZMQ cannot bind an endpoint.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Start(Options options,
                                                                 prom::Exposition* exposition);
  // Sends what is queued, then closes the sockets.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues `e`, or drops and counts it when the queue is full.
  void Emit(KvEvent e) ABSL_LOCKS_EXCLUDED(mu_);

  // A new leader term: every batch sent from now on has a sequence number
  // of at least term << 40, so a router that follows every master of an HA
  // group sees sequence numbers rise across a failover (docs/events.md).
  void BeginTerm(uint64_t term) ABSL_LOCKS_EXCLUDED(mu_);

  // Stream i's endpoints as bound (a port 0 resolved), for tests and logs.
  size_t stream_count() const { return streams_.size(); }
  const std::string& bound_endpoint(size_t i = 0) const { return streams_[i].bound; }
  const std::string& bound_replay_endpoint(size_t i = 0) const { return streams_[i].bound_replay; }

  // Turns "PORT", ":PORT" and "HOST:PORT" into tcp://HOST:PORT with
  // 127.0.0.1 as the default host (the stream names every key: loopback
  // unless asked). A value with "://" is taken as a ZMQ endpoint as is.
  static absl::StatusOr<std::string> NormalizeEndpoint(absl::string_view flag);

 private:
  // One stream's sockets and replay buffer; owned by the publisher thread
  // once it runs.
  struct Sockets {
    KvEventEncoding encoding = KvEventEncoding::kMap;
    std::string tenant;
    void* pub = nullptr;
    void* replay = nullptr;
    std::string bound, bound_replay;
    std::deque<std::pair<uint64_t, std::string>> replay_buffer;
    uint64_t next_seq = 0;
  };

  KvEventPublisher(Options options, prom::Exposition* exposition);
  absl::Status Open();
  void* NewSocket(int type);
  void Run();
  // Encodes and sends events[begin, end) (one topic) as one batch on each
  // stream that carries them, all under one sequence number.
  void SendBatch(const std::vector<KvEvent>& events, size_t begin, size_t end);
  void ServiceReplay(Sockets& s);
  // Answers one ZAP request: admits a CURVE key the options name as a
  // reader of the asking stream's tenants.
  void ServiceZap();

  const Options options_;
  prom::Counter& published_;
  prom::Counter& dropped_;
  prom::Counter& batches_;
  prom::Counter& refused_;

  void* ctx_ = nullptr;
  void* zap_ = nullptr;  // CURVE's authenticator (ZAP handler), when on
  std::vector<Sockets> streams_;

  Mutex mu_;
  std::vector<KvEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool lost_ ABSL_GUARDED_BY(mu_) = false;       // events dropped since the last send
  uint64_t seq_floor_ ABSL_GUARDED_BY(mu_) = 0;  // BeginTerm's
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_EVENTS_KV_EVENTS_H_
