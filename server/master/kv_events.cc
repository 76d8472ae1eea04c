#include "server/master/kv_events.h"

#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/checksum.h"
#include "common/log.h"

// msgpack-c without Boost: the packer only.
#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

namespace shelf {
namespace {

constexpr int kIdlePollMs = 5;              // publisher wake-up when nothing is queued
constexpr int kSendHighWaterMark = 100000;  // batches ZMQ queues per subscriber

void PutBigEndian64(uint64_t v, char out[8]) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

uint64_t GetBigEndian64(const char in[8]) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, absl::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// One event as msgspec encodes a tagged struct: a map whose first entry is
// the tag ("type": class name), then the fields in declaration order, the
// ones left at their default omitted (omit_defaults=True).
void PackEvent(Packer& pk, const KvEvent* first, size_t n) {
  switch (first->type) {
    case KvEvent::kBlockStored: {
      pk.pack_map(8);
      PackStr(pk, "type");
      PackStr(pk, "BlockStored");
      PackStr(pk, "block_hashes");
      pk.pack_array(1);
      pk.pack_uint64(first->block_hash);
      PackStr(pk, "parent_block_hash");
      if (first->has_parent) {
        pk.pack_uint64(first->parent_hash);
      } else {
        pk.pack_nil();
      }
      PackStr(pk, "token_ids");
      pk.pack_array(static_cast<uint32_t>(first->token_ids.size()));
      for (uint32_t t : first->token_ids) pk.pack_uint32(t);
      PackStr(pk, "block_size");
      pk.pack_uint32(first->block_size);
      PackStr(pk, "lora_id");
      pk.pack_nil();
      PackStr(pk, "medium");
      PackStr(pk, first->medium);
      PackStr(pk, "lora_name");
      pk.pack_nil();
      return;
    }
    case KvEvent::kBlockRemoved: {
      pk.pack_map(3);
      PackStr(pk, "type");
      PackStr(pk, "BlockRemoved");
      PackStr(pk, "block_hashes");
      pk.pack_array(static_cast<uint32_t>(n));
      for (size_t i = 0; i < n; ++i) pk.pack_uint64(first[i].block_hash);
      PackStr(pk, "medium");
      PackStr(pk, first->medium);
      return;
    }
    case KvEvent::kAllBlocksCleared:
      pk.pack_map(1);
      PackStr(pk, "type");
      PackStr(pk, "AllBlocksCleared");
      return;
  }
}

// Consecutive removals of one medium share a BlockRemoved, as vLLM sends them.
bool Coalesces(const KvEvent& a, const KvEvent& b) {
  return a.type == KvEvent::kBlockRemoved && b.type == KvEvent::kBlockRemoved &&
         std::strcmp(a.medium, b.medium) == 0;
}

}  // namespace

uint64_t KvEventBlockHash(absl::string_view key) {
  // docs/keys.md: a content key is the version byte 1 and a 16-byte digest.
  if (key.size() == 17 && static_cast<uint8_t>(key[0]) == 1) return GetBigEndian64(key.data() + 9);
  return XXH3_64bits(key.data(), key.size());
}

absl::StatusOr<std::string> KvEventPublisher::NormalizeEndpoint(absl::string_view flag) {
  if (flag.empty()) return absl::InvalidArgumentError("empty endpoint");
  if (flag.find("://") != absl::string_view::npos) return std::string(flag);
  absl::string_view host = "127.0.0.1", port = flag;
  size_t colon = flag.rfind(':');
  if (colon != absl::string_view::npos) {
    port = flag.substr(colon + 1);
    if (colon > 0) host = flag.substr(0, colon);
  }
  uint32_t p = 0;
  if (!absl::SimpleAtoi(port, &p) || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", flag, "': want PORT, HOST:PORT or a ZMQ endpoint such as tcp://*:5557"));
  }
  // Port 0: ZMQ's wildcard port (the bound one is in bound_endpoint()).
  if (p == 0) return absl::StrCat("tcp://", host, ":*");
  return absl::StrCat("tcp://", host, ":", p);
}

KvEventPublisher::KvEventPublisher(Options options, prom::Exposition* exposition)
    : options_(std::move(options)),
      published_(prom::AddUnlabelledCounter(exposition->registry(),
                                            "shelf_master_kv_events_published_total",
                                            "KV events sent on the --events-listen stream")),
      dropped_(prom::AddUnlabelledCounter(
          exposition->registry(), "shelf_master_kv_events_dropped_total",
          "KV events dropped because the publisher's queue was full (ZMQ's own "
          "high-water-mark drops for a slow subscriber are not counted)")),
      batches_(prom::AddUnlabelledCounter(
          exposition->registry(), "shelf_master_kv_event_batches_total", "KV event batches sent")) {
}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(
    Options options, prom::Exposition* exposition) {
  if (options.queue_events_max == 0 || options.queue_events_max > kKvEventQueueMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("events queue must hold 1..", kKvEventQueueMax, " events"));
  }
  if (options.replay_batches_max > kKvEventReplayBatchesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("events replay buffer holds at most ", kKvEventReplayBatchesMax, " batches"));
  }
  if (options.ns.empty() || options.ns.find('@') != std::string::npos) {
    return absl::InvalidArgumentError("events namespace must be non-empty and without '@'");
  }
  if (exposition == nullptr) exposition = &DefaultExposition();
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(options), exposition));
  if (absl::Status s = p->Bind(); !s.ok()) return s;
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

absl::Status KvEventPublisher::Bind() {
  ctx_ = zmq_ctx_new();
  SHELF_CHECK(ctx_ != nullptr) << "zmq_ctx_new failed";
  auto bind = [this](int type, const std::string& ep, void** sock,
                     std::string* bound) -> absl::Status {
    *sock = zmq_socket(ctx_, type);
    SHELF_CHECK(*sock != nullptr) << "zmq_socket: " << zmq_strerror(zmq_errno());
    int linger = 0;
    zmq_setsockopt(*sock, ZMQ_LINGER, &linger, sizeof(linger));
    // A replay answer is at most the replay buffer and its end marker: a
    // ROUTER's HWM of that never cuts one short, and a peer that asks again
    // and again without reading holds one answer's worth, not one per ask
    // (the ROUTER drops past it).
    int hwm = type == ZMQ_PUB ? kSendHighWaterMark
                              : static_cast<int>(std::min<uint64_t>(
                                    uint64_t{options_.replay_batches_max} + 1, INT_MAX));
    zmq_setsockopt(*sock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    if (zmq_bind(*sock, ep.c_str()) != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot bind ", ep, ": ", zmq_strerror(zmq_errno())));
    }
    char last[256];
    size_t len = sizeof(last);
    if (zmq_getsockopt(*sock, ZMQ_LAST_ENDPOINT, last, &len) == 0) {
      *bound = std::string(last, strnlen(last, len));
    } else {
      *bound = ep;
    }
    return absl::OkStatus();
  };
  if (absl::Status s = bind(ZMQ_PUB, options_.endpoint, &pub_, &bound_); !s.ok()) return s;
  if (!options_.replay_endpoint.empty()) {
    if (absl::Status s = bind(ZMQ_ROUTER, options_.replay_endpoint, &replay_, &bound_replay_);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

KvEventPublisher::~KvEventPublisher() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (pub_ != nullptr) zmq_close(pub_);
  if (replay_ != nullptr) zmq_close(replay_);
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
}

void KvEventPublisher::Emit(KvEvent e) {
  MutexLock lock(&mu_);
  if (queue_.size() >= options_.queue_events_max) {
    dropped_.Increment();
    lost_ = true;
    return;
  }
  queue_.push_back(std::move(e));
}

void KvEventPublisher::Run() {
  std::vector<KvEvent> work;
  while (true) {
    bool stopping = stop_.load();
    bool lost = false;
    {
      MutexLock lock(&mu_);
      work.swap(queue_);
      lost = std::exchange(lost_, false);
    }
    size_t begin = 0;
    while (begin < work.size()) {
      size_t end = begin + 1;
      while (end < work.size() && end - begin < kKvEventBatchEventsMax &&
             work[end].node_id == work[begin].node_id) {
        ++end;
      }
      SendBatch(work, begin, end);
      begin = end;
    }
    // Events were dropped after these (the queue was full): a sequence
    // number no batch has, so subscribers see the gap and resync.
    if (lost) ++next_seq_;
    bool idle = work.empty();
    work.clear();
    if (stopping) return;
    zmq_pollitem_t item{replay_, 0, ZMQ_POLLIN, 0};
    int n = replay_ == nullptr ? 0 : zmq_poll(&item, 1, idle ? kIdlePollMs : 0);
    if (n > 0 && (item.revents & ZMQ_POLLIN)) {
      ServiceReplay();
    } else if (replay_ == nullptr && idle) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kIdlePollMs));
    }
  }
}

void KvEventPublisher::SendBatch(const std::vector<KvEvent>& events, size_t begin, size_t end) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  // EventBatch {ts, events, data_parallel_rank}: the rank is sent as nil
  // (the master is no data-parallel rank). `shelf_node` names the node for a
  // batch fetched by replay, which carries no topic; msgspec decoders ignore
  // fields their struct lacks.
  pk.pack_map(4);
  PackStr(pk, "ts");
  pk.pack_double(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  PackStr(pk, "events");
  std::vector<std::pair<size_t, size_t>> groups;  // [first, count) per encoded event
  for (size_t i = begin; i < end;) {
    size_t j = i + 1;
    while (j < end && Coalesces(events[i], events[j])) ++j;
    groups.emplace_back(i, j - i);
    i = j;
  }
  pk.pack_array(static_cast<uint32_t>(groups.size()));
  for (const auto& [first, n] : groups) PackEvent(pk, &events[first], n);
  PackStr(pk, "data_parallel_rank");
  pk.pack_nil();
  PackStr(pk, "shelf_node");
  PackStr(pk, events[begin].node_id);

  std::string topic = absl::StrCat("kv@", events[begin].node_id, "@", options_.ns);
  char seq[8];
  uint64_t s = next_seq_++;
  PutBigEndian64(s, seq);
  // Non-blocking: a PUB socket drops for a subscriber at its high-water
  // mark instead of blocking, so a send never waits.
  zmq_send(pub_, topic.data(), topic.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(pub_, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(pub_, buf.data(), buf.size(), ZMQ_DONTWAIT);
  published_.Increment(static_cast<double>(end - begin));
  batches_.Increment();
  if (options_.replay_batches_max > 0 && replay_ != nullptr) {
    if (replay_buffer_.size() == options_.replay_batches_max) replay_buffer_.pop_front();
    replay_buffer_.emplace_back(s, std::string(buf.data(), buf.size()));
  }
}

void KvEventPublisher::ServiceReplay() {
  // A request is [identity, empty delimiter, 8-byte big-endian start] (a
  // REQ socket's framing); the answer, per retained batch from `start` on,
  // is [identity, "", sequence, payload], then [identity, "", -1, ""].
  std::vector<std::string> frames;
  while (true) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, replay_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more) break;
  }
  if (frames.size() != 3 || frames[2].size() != 8) {
    SHELF_LOG(WARNING) << "ignoring a malformed KV event replay request"
                       << Kv("frames", frames.size());
    return;
  }
  const std::string& id = frames[0];
  uint64_t start = GetBigEndian64(frames[2].data());
  auto send = [&](const char seq[8], const std::string& payload) {
    zmq_send(replay_, id.data(), id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(replay_, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(replay_, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(replay_, payload.data(), payload.size(), ZMQ_DONTWAIT);
  };
  char seq[8];
  for (const auto& [s, payload] : replay_buffer_) {
    if (s < start) continue;
    PutBigEndian64(s, seq);
    send(seq, payload);
  }
  PutBigEndian64(~uint64_t{0}, seq);  // -1 as a signed 64-bit big-endian integer
  send(seq, std::string());
}

}  // namespace shelf
