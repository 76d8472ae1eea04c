// KvEventPublisher: the master's block events in vLLM's KV-event format
// (docs/events.md), over a ZMQ PUB socket with a ROUTER replay socket.
//
//   KvEventPublisher::Options o;
//   o.endpoint = "tcp://127.0.0.1:5557";
//   auto pub = KvEventPublisher::Start(o, &exposition);
//   KvEvent e;
//   e.type = KvEvent::kBlockStored;
//   ...
//   (*pub)->Emit(std::move(e));   // never blocks, never waits on a subscriber
//
// Thread safety: Emit may be called from any thread at once (it takes a
// short internal lock and copies nothing but the event). One publisher
// thread owns both sockets: it drains the queue every few milliseconds into
// batches (one per run of events with the same node), encodes them with
// msgpack, sends them and keeps the last `replay_batches_max` for replay.
//
// Bounded: at most `queue_events_max` events wait; Emit drops (and counts
// in shelf_master_kv_events_dropped_total) any event beyond that, so a slow
// publisher or subscriber costs events, never master time. What ZMQ itself
// drops at its high-water mark for a slow subscriber is not seen here.
#ifndef SHELF_SERVER_MASTER_KV_EVENTS_H_
#define SHELF_SERVER_MASTER_KV_EVENTS_H_

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

namespace shelf {

// Limits (docs/events.md).
inline constexpr size_t kKvEventQueueMax = 1 << 20;          // largest --events-queue
inline constexpr size_t kKvEventBatchEventsMax = 1024;       // events one batch carries
inline constexpr size_t kKvEventReplayBatchesMax = 1 << 20;  // largest --events-replay-batches

// The `medium` of a block in each tier.
inline constexpr const char* kMediumDram = "CPU";
inline constexpr const char* kMediumSsd = "DISK";

struct KvEvent {
  enum Type : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Type type = kBlockStored;
  std::string node_id;  // the topic names it
  const char* medium = kMediumDram;
  uint64_t block_hash = 0;
  bool has_parent = false;
  uint64_t parent_hash = 0;
  uint32_t block_size = 0;  // tokens a block; 0 when the put did not say
  std::vector<uint32_t> token_ids;
};

// The hash a block is published under: a content key's (docs/keys.md:
// version byte 1, 16 digest bytes) last 8 digest bytes read big-endian; any
// other key's XXH3-64 (seed 0). An engine block hash given with the put
// replaces it (Master).
uint64_t KvEventBlockHash(absl::string_view key);

class KvEventPublisher {
 public:
  struct Options {
    std::string endpoint;         // ZMQ endpoint the PUB socket binds
    std::string replay_endpoint;  // the ROUTER's; empty: no replay
    std::string ns = "default";   // topic kv@<node_id>@<ns>
    size_t queue_events_max = 100000;
    size_t replay_batches_max = 10000;
  };

  // Binds both sockets. INVALID_ARGUMENT for an out-of-range option;
  // UNAVAILABLE when ZMQ cannot bind an endpoint.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Start(Options options,
                                                                 prom::Exposition* exposition);
  // Sends what is queued, then closes the sockets.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues `e`, or drops and counts it when the queue is full.
  void Emit(KvEvent e) ABSL_LOCKS_EXCLUDED(mu_);

  // The endpoints as bound (a port 0 resolved), for tests and logs.
  const std::string& bound_endpoint() const { return bound_; }
  const std::string& bound_replay_endpoint() const { return bound_replay_; }

  // Turns "PORT", ":PORT" and "HOST:PORT" into tcp://HOST:PORT with
  // 127.0.0.1 as the default host (the stream names every key: loopback
  // unless asked). A value with "://" is taken as a ZMQ endpoint as is.
  static absl::StatusOr<std::string> NormalizeEndpoint(absl::string_view flag);

 private:
  KvEventPublisher(Options options, prom::Exposition* exposition);
  absl::Status Bind();
  void Run();
  // Encodes and sends events[begin, end) (one node) as one batch.
  void SendBatch(const std::vector<KvEvent>& events, size_t begin, size_t end);
  void ServiceReplay();

  const Options options_;
  prom::Counter& published_;
  prom::Counter& dropped_;
  prom::Counter& batches_;
  std::string bound_, bound_replay_;

  // Owned by the publisher thread once it runs.
  void* ctx_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  uint64_t next_seq_ = 0;
  std::deque<std::pair<uint64_t, std::string>> replay_buffer_;

  Mutex mu_;
  std::vector<KvEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool lost_ ABSL_GUARDED_BY(mu_) = false;  // events dropped since the last send
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shelf

#endif  // SHELF_SERVER_MASTER_KV_EVENTS_H_
