#include "server/master/events/kv_events.h"

#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/check.h"
#include "common/checksum.h"
#include "common/log.h"
#include "common/protected_mode.h"

// msgpack-c without Boost: the packer only.
#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

namespace shelf::master {
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

// The hashes one encoded event carries: a run of removals coalesced, each
// with the blocks it removed at once.
std::vector<uint64_t> HashesOf(const KvEvent* first, size_t n) {
  std::vector<uint64_t> hashes;
  for (size_t i = 0; i < n; ++i) {
    hashes.push_back(first[i].block_hash);
    hashes.insert(hashes.end(), first[i].more_hashes.begin(), first[i].more_hashes.end());
  }
  return hashes;
}

// A block hash. The map form packs it as msgspec does (the shortest
// integer); the array form always as uint 64 (0xcf): llm-d's decoder takes
// a hash into a Go `any`, which vmihailenco/msgpack fills with int8, uint16
// and so on for shorter encodings, and llm-d accepts only uint64 and int64.
void PackHash(Packer& pk, uint64_t h, KvEventEncoding encoding) {
  if (encoding == KvEventEncoding::kArray) {
    pk.pack_fix_uint64(h);
  } else {
    pk.pack_uint64(h);
  }
}

// One event as msgspec encodes a tagged struct: a map whose first entry is
// the tag ("type": class name), then the fields in declaration order, the
// ones left at their default omitted (omit_defaults=True).
void PackEventAsMap(Packer& pk, const KvEvent* first, size_t n) {
  switch (first->type) {
    case KvEvent::kBlockStored: {
      pk.pack_map(8);
      PackStr(pk, "type");
      PackStr(pk, "BlockStored");
      PackStr(pk, "block_hashes");
      pk.pack_array(1);
      PackHash(pk, first->block_hash, KvEventEncoding::kMap);
      PackStr(pk, "parent_block_hash");
      if (first->has_parent) {
        PackHash(pk, first->parent_hash, KvEventEncoding::kMap);
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
      std::vector<uint64_t> hashes = HashesOf(first, n);
      pk.pack_array(static_cast<uint32_t>(hashes.size()));
      for (uint64_t h : hashes) PackHash(pk, h, KvEventEncoding::kMap);
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

// One event as llm-d's structs decode it (pkg/kvcache/kvevents/events.go):
// an array of the tag and exactly the struct's fields, since
// vmihailenco/msgpack refuses an array whose length differs from the field
// count. BlockStored: tag, block_hashes, parent_block_hash, token_ids,
// block_size, lora_id, medium. BlockRemoved: tag, block_hashes, medium.
void PackEventAsArray(Packer& pk, const KvEvent* first, size_t n) {
  switch (first->type) {
    case KvEvent::kBlockStored:
      pk.pack_array(7);
      PackStr(pk, "BlockStored");
      pk.pack_array(1);
      PackHash(pk, first->block_hash, KvEventEncoding::kArray);
      if (first->has_parent) {
        PackHash(pk, first->parent_hash, KvEventEncoding::kArray);
      } else {
        pk.pack_nil();
      }
      pk.pack_array(static_cast<uint32_t>(first->token_ids.size()));
      for (uint32_t t : first->token_ids) pk.pack_uint32(t);
      pk.pack_uint32(first->block_size);
      pk.pack_nil();  // lora_id
      PackStr(pk, first->medium);
      return;
    case KvEvent::kBlockRemoved: {
      pk.pack_array(3);
      PackStr(pk, "BlockRemoved");
      std::vector<uint64_t> hashes = HashesOf(first, n);
      pk.pack_array(static_cast<uint32_t>(hashes.size()));
      for (uint64_t h : hashes) PackHash(pk, h, KvEventEncoding::kArray);
      PackStr(pk, first->medium);
      return;
    }
    case KvEvent::kAllBlocksCleared:
      pk.pack_array(1);
      PackStr(pk, "AllBlocksCleared");
      return;
  }
}

// Consecutive removals of one medium share a BlockRemoved, as vLLM sends
// them, up to kKvEventRemovedHashesMax hashes.
bool Coalesces(const KvEvent& a, const KvEvent& b, size_t hashes_so_far) {
  return a.type == KvEvent::kBlockRemoved && b.type == KvEvent::kBlockRemoved &&
         std::strcmp(a.medium, b.medium) == 0 &&
         hashes_so_far + 1 + b.more_hashes.size() <= kKvEventRemovedHashesMax;
}

// One topic per batch: the same node, model and tenant.
bool SameTopic(const KvEvent& a, const KvEvent& b) {
  return a.node_id == b.node_id && a.model == b.model && a.tenant == b.tenant;
}

// An endpoint that only this host can reach: a subscriber there needs no
// CURVE (docs/events.md, "Security").
bool LoopbackEndpoint(absl::string_view ep) {
  absl::ConsumePrefix(&ep, ">");
  if (absl::StartsWith(ep, "ipc://") || absl::StartsWith(ep, "inproc://")) return true;
  // HOST:PORT after the scheme; a wildcard (*) is not loopback.
  return absl::ConsumePrefix(&ep, "tcp://") && !ep.empty() && IsLoopbackListen(ep);
}

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

std::string ZapDomain(const std::string& tenant) {
  return tenant.empty() ? "shelf-events" : absl::StrCat("shelf-events/", tenant);
}

}  // namespace

namespace {

bool IsHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

bool IsDecimal(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

uint64_t HexToU64(absl::string_view hex16) {
  uint64_t v = 0;
  for (char c : hex16) {
    int d = absl::ascii_isdigit(static_cast<unsigned char>(c))
                ? c - '0'
                : absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

// A key of vLLM's Mooncake store connector: its fields split on '@', the
// model and the block hash's hex digest (last); false when the key is not
// one. Two layouts (docs/events.md, "Keys engines format"):
//   [PREFIX@]MODEL@tp_rank:T@pcpP@dcpD@pp_rank:R[@group:G]@HEX
//   MODEL@WORLD_SIZE@WORKER_ID@HEX
struct VllmKey {
  absl::string_view model, hex;
};
bool ParseVllmKey(absl::string_view key, VllmKey* out) {
  std::vector<absl::string_view> f = absl::StrSplit(key, '@');
  if (f.size() < 4) return false;
  absl::string_view hex = f.back();
  if (hex.size() < 16 || hex.size() % 2 != 0 || !IsHex(hex)) return false;
  for (size_t i = 1; i + 1 < f.size(); ++i) {
    if (absl::StartsWith(f[i], "tp_rank:") && !f[i - 1].empty()) {
      *out = {f[i - 1], hex};
      return true;
    }
  }
  if (f.size() == 4 && !f[0].empty() && IsDecimal(f[1]) && IsDecimal(f[2])) {
    *out = {f[0], hex};
    return true;
  }
  return false;
}

// A key of SGLang HiCache's Mooncake backend, [PREFIX_]HEX64[_RANK...]_k|v
// with a 64-digit sha256 hex page hash: that digest, or nothing.
absl::string_view SglangKeyDigest(absl::string_view key) {
  if (!absl::EndsWith(key, "_k") && !absl::EndsWith(key, "_v")) return {};
  std::vector<absl::string_view> f = absl::StrSplit(key, '_');
  // From the end: "k"/"v", then ranks (decimal or empty), then the digest.
  for (size_t i = f.size() - 1; i-- > 0;) {
    if (f[i].size() == 64 && IsHex(f[i])) return f[i];
    if (!f[i].empty() && !IsDecimal(f[i])) return {};
  }
  return {};
}

}  // namespace

uint64_t KvEventBlockHash(absl::string_view key) {
  // docs/keys.md: a content key is the version byte 1 and a 16-byte digest.
  if (key.size() == 17 && static_cast<uint8_t>(key[0]) == 1) return GetBigEndian64(key.data() + 9);
  // vLLM's maybe_convert_block_hash: the digest's last 8 bytes, big-endian.
  if (VllmKey v; ParseVllmKey(key, &v)) return HexToU64(v.hex.substr(v.hex.size() - 16));
  // SGLang's hash_str_to_int64: the digest's first 8 bytes, big-endian (a
  // signed int64 there; the same 64 bits, read unsigned, here).
  if (absl::string_view d = SglangKeyDigest(key); !d.empty()) return HexToU64(d.substr(0, 16));
  return XXH3_64bits(key.data(), key.size());
}

absl::string_view KvEventKeyModel(absl::string_view key) {
  VllmKey v;
  if (!ParseVllmKey(key, &v) ||
      !ValidEventModel(std::string_view(v.model.data(), v.model.size()))) {
    return {};
  }
  return v.model;
}

absl::StatusOr<KvEventEncoding> ParseKvEventEncoding(absl::string_view name) {
  if (name == "map") return KvEventEncoding::kMap;
  if (name == "array") return KvEventEncoding::kArray;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown events encoding '", name, "': want map (vLLM's) or array (llm-d's)"));
}

const char* KvEventEncodingName(KvEventEncoding encoding) {
  return encoding == KvEventEncoding::kArray ? "array" : "map";
}

bool KvEventEndpointIsLoopback(absl::string_view endpoint) { return LoopbackEndpoint(endpoint); }

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
          exposition->registry(), "shelf_master_kv_event_batches_total", "KV event batches sent")),
      refused_(prom::AddUnlabelledCounter(
          exposition->registry(), "shelf_master_kv_event_subscribers_refused_total",
          "KV event subscribers refused by CURVE authentication (an unknown key, or a "
          "reader of other tenants)")) {}

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
  if (!ValidEventModel(options.ns)) {
    return absl::InvalidArgumentError(
        "events namespace must be 1..128 printable bytes without '@' or spaces");
  }
  if (options.streams.empty() || options.streams.size() > kKvEventStreamsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("events: 1..", kKvEventStreamsMax, " publish endpoints"));
  }
  const Curve& curve = options.curve;
  if (!curve.secret_key.empty() &&
      (curve.secret_key.size() != 40 || curve.public_key.size() != 40)) {
    return absl::InvalidArgumentError("events CURVE keys are 40 Z85 characters");
  }
  if (exposition == nullptr) exposition = &DefaultExposition();
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(options), exposition));
  if (absl::Status s = p->Open(); !s.ok()) return s;
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

void* KvEventPublisher::NewSocket(int type) {
  void* sock = zmq_socket(ctx_, type);
  SHELF_CHECK(sock != nullptr) << "zmq_socket: " << zmq_strerror(zmq_errno());
  int linger = 0;
  zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
  // A replay answer is at most the replay buffer and its end marker: a
  // ROUTER's HWM of that never cuts one short, and a peer that asks again
  // and again without reading holds one answer's worth, not one per ask
  // (the ROUTER drops past it).
  int hwm = type == ZMQ_PUB ? kSendHighWaterMark
                            : static_cast<int>(std::min<uint64_t>(
                                  uint64_t{options_.replay_batches_max} + 1, INT_MAX));
  zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  return sock;
}

absl::Status KvEventPublisher::Open() {
  ctx_ = zmq_ctx_new();
  SHELF_CHECK(ctx_ != nullptr) << "zmq_ctx_new failed";
  const Curve& curve = options_.curve;
  if (!curve.secret_key.empty()) {
    // The ZAP handler is bound before any CURVE socket: libzmq asks it
    // about every handshake, and refuses every peer while none is bound.
    zap_ = zmq_socket(ctx_, ZMQ_REP);
    SHELF_CHECK(zap_ != nullptr) << "zmq_socket: " << zmq_strerror(zmq_errno());
    int linger = 0;
    zmq_setsockopt(zap_, ZMQ_LINGER, &linger, sizeof(linger));
    if (zmq_bind(zap_, kZapEndpoint) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot bind the ZAP handler: ", zmq_strerror(zmq_errno())));
    }
  }
  // Attaches `sock` to `endpoint`: binds, or connects for a leading '>'.
  auto attach = [&curve](void* sock, const std::string& endpoint, const std::string& tenant,
                         std::string* bound) -> absl::Status {
    if (!curve.secret_key.empty()) {
      int server = 1;
      zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &server, sizeof(server));
      zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, curve.secret_key.data(), curve.secret_key.size());
      std::string domain = ZapDomain(tenant);
      zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain.data(), domain.size());
    }
    absl::string_view ep = endpoint;
    const bool connect = absl::ConsumePrefix(&ep, ">");
    std::string target(ep);
    if ((connect ? zmq_connect(sock, target.c_str()) : zmq_bind(sock, target.c_str())) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot ", connect ? "connect to " : "bind ",
                                                 target, ": ", zmq_strerror(zmq_errno())));
    }
    char last[256];
    size_t len = sizeof(last);
    if (!connect && zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, last, &len) == 0) {
      *bound = std::string(last, strnlen(last, len));
    } else {
      *bound = endpoint;
    }
    return absl::OkStatus();
  };
  for (const Stream& stream : options_.streams) {
    Sockets& s = streams_.emplace_back();
    s.encoding = stream.encoding;
    s.tenant = stream.tenant;
    s.pub = NewSocket(ZMQ_PUB);
    if (absl::Status st = attach(s.pub, stream.endpoint, stream.tenant, &s.bound); !st.ok()) {
      return st;
    }
    if (!stream.replay_endpoint.empty()) {
      s.replay = NewSocket(ZMQ_ROUTER);
      if (absl::Status st =
              attach(s.replay, stream.replay_endpoint, stream.tenant, &s.bound_replay);
          !st.ok()) {
        return st;
      }
    }
  }
  return absl::OkStatus();
}

KvEventPublisher::~KvEventPublisher() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  for (Sockets& s : streams_) {
    if (s.pub != nullptr) zmq_close(s.pub);
    if (s.replay != nullptr) zmq_close(s.replay);
  }
  if (zap_ != nullptr) zmq_close(zap_);
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
}

void KvEventPublisher::Emit(KvEvent e) {
  MutexLock lock(&mu_);
  if (queue_.size() >= options_.queue_events_max) {
    dropped_.Increment(static_cast<double>(1 + e.more_hashes.size()));
    lost_ = true;
    return;
  }
  queue_.push_back(std::move(e));
}

void KvEventPublisher::BeginTerm(uint64_t term) {
  MutexLock lock(&mu_);
  seq_floor_ = std::max(seq_floor_, term << 40);
}

void KvEventPublisher::Run() {
  std::vector<KvEvent> work;
  std::vector<zmq_pollitem_t> items;
  while (true) {
    bool stopping = stop_.load();
    bool lost = false;
    uint64_t floor = 0;
    {
      MutexLock lock(&mu_);
      work.swap(queue_);
      lost = std::exchange(lost_, false);
      floor = seq_floor_;
    }
    for (Sockets& s : streams_) s.next_seq = std::max(s.next_seq, floor);
    size_t begin = 0;
    while (begin < work.size()) {
      size_t end = begin + 1;
      while (end < work.size() && end - begin < kKvEventBatchEventsMax &&
             SameTopic(work[end], work[begin])) {
        ++end;
      }
      SendBatch(work, begin, end);
      begin = end;
    }
    // Events were dropped after these (the queue was full): a sequence
    // number no batch has, so subscribers see the gap and resync.
    if (lost) {
      for (Sockets& s : streams_) ++s.next_seq;
    }
    bool idle = work.empty();
    work.clear();
    if (stopping) return;
    items.clear();
    for (Sockets& s : streams_) {
      if (s.replay != nullptr) items.push_back({s.replay, 0, ZMQ_POLLIN, 0});
    }
    if (zap_ != nullptr) items.push_back({zap_, 0, ZMQ_POLLIN, 0});
    if (items.empty()) {
      if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(kIdlePollMs));
      continue;
    }
    int n = zmq_poll(items.data(), static_cast<int>(items.size()), idle ? kIdlePollMs : 0);
    if (n <= 0) continue;
    size_t i = 0;
    for (Sockets& s : streams_) {
      if (s.replay == nullptr) continue;
      if (items[i++].revents & ZMQ_POLLIN) ServiceReplay(s);
    }
    if (zap_ != nullptr && (items[i].revents & ZMQ_POLLIN)) ServiceZap();
  }
}

void KvEventPublisher::SendBatch(const std::vector<KvEvent>& events, size_t begin, size_t end) {
  // [first, count) per encoded event: runs of removals share one.
  std::vector<std::pair<size_t, size_t>> groups;
  size_t blocks = 0;
  for (size_t i = begin; i < end;) {
    size_t j = i + 1;
    size_t hashes = 1 + events[i].more_hashes.size();
    while (j < end && Coalesces(events[i], events[j], hashes)) {
      hashes += 1 + events[j].more_hashes.size();
      ++j;
    }
    groups.emplace_back(i, j - i);
    blocks += events[i].type == KvEvent::kAllBlocksCleared ? 1 : hashes;
    i = j;
  }
  const KvEvent& head = events[begin];
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string topic =
      absl::StrCat("kv@", head.node_id, "@", head.model.empty() ? options_.ns : head.model);
  // Each encoding once, whatever the number of streams that use it.
  std::string encoded[2];
  bool done[2] = {false, false};
  auto encode = [&](KvEventEncoding encoding) -> const std::string& {
    const int e = static_cast<int>(encoding);
    if (done[e]) return encoded[e];
    msgpack::sbuffer buf;
    Packer pk(&buf);
    if (encoding == KvEventEncoding::kArray) {
      // llm-d's EventBatch: exactly [ts, events, data_parallel_rank].
      pk.pack_array(3);
      pk.pack_double(ts);
      pk.pack_array(static_cast<uint32_t>(groups.size()));
      for (const auto& [first, n] : groups) PackEventAsArray(pk, &events[first], n);
      pk.pack_nil();
    } else {
      // EventBatch {ts, events, data_parallel_rank}: the rank is sent as nil
      // (the master is no data-parallel rank). `shelf_node` and
      // `shelf_model` name the topic for a batch fetched by replay, which
      // carries none; msgspec decoders ignore fields their struct lacks.
      pk.pack_map(5);
      PackStr(pk, "ts");
      pk.pack_double(ts);
      PackStr(pk, "events");
      pk.pack_array(static_cast<uint32_t>(groups.size()));
      for (const auto& [first, n] : groups) PackEventAsMap(pk, &events[first], n);
      PackStr(pk, "data_parallel_rank");
      pk.pack_nil();
      PackStr(pk, "shelf_node");
      PackStr(pk, head.node_id);
      PackStr(pk, "shelf_model");
      PackStr(pk, head.model.empty() ? options_.ns : head.model);
    }
    encoded[e].assign(buf.data(), buf.size());
    done[e] = true;
    return encoded[e];
  };
  bool sent = false;
  for (Sockets& s : streams_) {
    if (!s.tenant.empty() && s.tenant != head.tenant) continue;
    const std::string& payload = encode(s.encoding);
    char seq[8];
    uint64_t n = s.next_seq++;
    PutBigEndian64(n, seq);
    // Non-blocking: a PUB socket drops for a subscriber at its high-water
    // mark instead of blocking, so a send never waits.
    zmq_send(s.pub, topic.data(), topic.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s.pub, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s.pub, payload.data(), payload.size(), ZMQ_DONTWAIT);
    if (options_.replay_batches_max > 0 && s.replay != nullptr) {
      if (s.replay_buffer.size() == options_.replay_batches_max) s.replay_buffer.pop_front();
      s.replay_buffer.emplace_back(n, payload);
    }
    sent = true;
  }
  if (sent) {
    published_.Increment(static_cast<double>(blocks));
    batches_.Increment();
  }
}

namespace {

// Every frame of the next message on `sock`, or none when none waits.
std::vector<std::string> ReceiveFrames(void* sock) {
  std::vector<std::string> frames;
  while (true) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return frames;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more) return frames;
  }
}

}  // namespace

void KvEventPublisher::ServiceReplay(Sockets& s) {
  // A request is [identity, empty delimiter, 8-byte big-endian start] (a
  // REQ socket's framing); the answer, per retained batch from `start` on,
  // is [identity, "", sequence, payload], then [identity, "", -1, ""].
  std::vector<std::string> frames = ReceiveFrames(s.replay);
  if (frames.empty()) return;
  if (frames.size() != 3 || frames[2].size() != 8) {
    SHELF_LOG(WARNING) << "ignoring a malformed KV event replay request"
                       << Kv("frames", frames.size());
    return;
  }
  const std::string& id = frames[0];
  uint64_t start = GetBigEndian64(frames[2].data());
  auto send = [&](const char seq[8], const std::string& payload) {
    zmq_send(s.replay, id.data(), id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s.replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s.replay, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s.replay, payload.data(), payload.size(), ZMQ_DONTWAIT);
  };
  char seq[8];
  for (const auto& [n, payload] : s.replay_buffer) {
    if (n < start) continue;
    PutBigEndian64(n, seq);
    send(seq, payload);
  }
  PutBigEndian64(~uint64_t{0}, seq);  // -1 as a signed 64-bit big-endian integer
  send(seq, std::string());
}

void KvEventPublisher::ServiceZap() {
  // RFC 27 (ZAP): [version, request id, domain, address, identity,
  // mechanism, credentials...]; for CURVE one credential, the client's
  // 32-byte public key. The answer: [version, request id, status code,
  // status text, user id, metadata].
  std::vector<std::string> f = ReceiveFrames(zap_);
  if (f.empty()) return;
  if (f.size() < 6) {
    // A REP socket must answer what it took; libzmq sends well-formed
    // requests, so this is a defect of ours, not a peer's.
    SHELF_LOG(ERROR) << "malformed ZAP request" << Kv("frames", f.size());
    zmq_send(zap_, "", 0, 0);
    return;
  }
  std::string status = "400", text = "unknown key", user;
  if (f[5] == "CURVE" && f.size() >= 7 && f[6].size() == 32) {
    char z85[41];
    zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(f[6].data()), 32);
    for (const auto& [key, reader] : options_.curve.readers) {
      if (key != z85) continue;
      const std::string want = reader.tenant.empty() ? "" : ZapDomain(reader.tenant);
      if (!want.empty() && want != f[2]) {
        text = "this key reads another tenant's stream";
        break;
      }
      status = "200";
      text = "OK";
      user = reader.name;
      break;
    }
  } else {
    text = "CURVE required";
  }
  if (status != "200") {
    refused_.Increment();
    SHELF_LOG(WARNING) << "KV event subscriber refused" << Kv("address", f[3]) << Kv("stream", f[2])
                       << Kv("why", text);
  }
  const std::string reply[] = {f[0], f[1], status, text, user, ""};
  for (size_t i = 0; i < 6; ++i) {
    zmq_send(zap_, reply[i].data(), reply[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
  }
}

}  // namespace shelf::master
