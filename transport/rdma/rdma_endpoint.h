// RdmaEndpoint: one reliable-connected (RC) queue pair to one peer, moving
// bytes with one-sided RDMA READ and WRITE between this process's registered
// memory and the segment the peer exposes.
//
// Connection setup has no connection manager: each side calls LocalInfo(),
// the two swap those bytes over their TCP control channel (the store's data
// server handshake), and each calls Connect() with the peer's bytes. The side
// that exposes memory (a store) names its segment in RdmaEndpoint::Options;
// its LocalInfo then carries the segment's address, length and rkey.
//
// Work is submitted in batches. A batch's ops are posted as chained work
// requests, signalled selectively (every signal_interval-th op, the last op of
// the batch, and the last WR of a post when the send queue is full), and
// completed in order. Each op gets its own status.
//
//   // client                                // store, per client connection
//   auto ep = *engine->CreateEndpoint(opts);  RdmaEndpoint::Options so;
//   send(*ep->LocalInfo());                   so.expose = segment_region;
//                                             auto sp = *store_engine->CreateEndpoint(so);
//                                             sp->Connect(received); send(*sp->LocalInfo());
//   ep->Connect(received);
//   RdmaBatchResult r = ep->Execute(
//       {{RdmaOpKind::kRead, dst, 4096, /*remote_offset=*/block_offset}}, MonoMs() + 100);
//
// Errors. An op that fails the local checks (unregistered local memory,
// remote range outside the peer's segment, bad length) fails alone and is
// never posted. A failed completion (bad rkey, range the peer's device
// rejects, peer gone) moves the QP to the error state: the endpoint tears the
// QP down, fails that op with a status mapped from the completion and every
// op still in flight or queued with UNAVAILABLE, and on the next Submit
// creates a fresh QP and re-exchanges connection info through the reconnect
// callback. A batch still incomplete at its deadline fails with
// DEADLINE_EXCEEDED; if any of its ops are on the wire, the QP is torn down
// first (only destroying the QP guarantees the device no longer touches the
// caller's buffers), which fails other batches' in-flight ops with
// UNAVAILABLE. After Wait returns, the device no longer accesses the memory of
// that batch's ops. A failed op leaves its destination bytes undefined.
//
// Thread-safe. Every method takes the endpoint's lock; Wait releases it while
// backing off, so several threads may submit and wait concurrently. The
// reconnect callback runs under the lock and must not call into the endpoint.
// REQUIRES: the endpoint is destroyed before its RdmaEngine, and no region an
// op names is unregistered before that op's batch is waited for.
#ifndef SHELF_TRANSPORT_RDMA_RDMA_ENDPOINT_H_
#define SHELF_TRANSPORT_RDMA_RDMA_ENDPOINT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "transport/rdma/connection_info.h"
#include "transport/rdma/memory_registry.h"
#include "transport/rdma/verbs_api.h"

namespace shelf::transport::rdma {

enum class RdmaOpKind { kRead, kWrite };

// One transfer: READ copies [remote_offset, remote_offset + length) of the
// peer's segment to `local`; WRITE copies `local` there.
//
// With `remote_rkey` set, `remote_offset` is instead an address in a region
// the peer registered under that rkey and named itself (a client's put
// source, which a store pulls): the initiator cannot check that range, the
// peer's device does (a range outside it fails with PERMISSION_DENIED and
// tears the connection down).
struct RdmaOp {
  RdmaOpKind kind = RdmaOpKind::kRead;
  void* local = nullptr;  // inside a region registered with this endpoint's engine
  uint64_t length = 0;
  uint64_t remote_offset = 0;  // from the start of the peer's segment
  std::optional<uint32_t> remote_rkey;
};

struct RdmaBatchResult {
  absl::Status status;            // OK iff every op succeeded; else the first failed op's status
  std::vector<absl::Status> ops;  // one per op, in submission order
};

// Given this end's fresh connection info, re-establishes the peer's side (for
// a client: asks the store over the control channel for a new endpoint) and
// returns the peer's connection info.
using ReconnectFn = std::function<absl::StatusOr<std::string>(const std::string& local_info)>;

// The device an endpoint runs on; filled in by RdmaEngine.
struct EndpointDevice {
  VerbsApi* verbs = nullptr;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  MemoryRegistry* registry = nullptr;
  uint8_t port_num = 1;
  int gid_index = 0;  // the chosen index, never "auto"
  ibv_gid gid{};      // never all zero
  uint16_t lid = 0;
  uint16_t pkey_index = 0;
  uint8_t traffic_class = 0;  // the GRH's traffic class (RoCE: DSCP << 2 | ECN)
  uint8_t service_level = 0;  // 0..15
  ibv_mtu active_mtu = IBV_MTU_1024;
  // Outstanding READs per QP this device allows, capped: as the responder
  // (max_qp_rd_atom) and as the initiator (max_qp_init_rd_atom). Both >= 1.
  // A connection uses the smaller of each end's initiator depth and the
  // other end's responder depth.
  uint8_t rd_atomic_responder = 1;
  uint8_t rd_atomic_initiator = 1;
  uint64_t msg_bytes_max = 0;  // the port's largest message
  uint32_t qp_wr_max = 0;      // the device's largest send queue
};

class RdmaEndpoint {
 public:
  struct Options {
    // The region the peer may READ (kRemoteRead) or READ and WRITE
    // (kRemoteReadWrite): a store's segment, registered on this endpoint's
    // engine, staying registered while the endpoint lives. Unset: the peer
    // gets no access at all (the QP refuses remote operations).
    std::optional<MemoryRegion> expose;
    // The engine's protection domain the QP is made in (RdmaEngine::
    // NewDomain): it reaches only memory registered in that domain, its
    // own ops' local buffers and, for the peer, `expose`, which must be in
    // it. A peer holding the rkey of a region in another domain reads
    // nothing through this QP: the device refuses the key.
    uint32_t domain = kDefaultDomain;
    // Lets the peer READ this end's kRemoteRead regions through the QP even
    // when nothing is exposed (a client whose puts the store pulls; the
    // peer learns each region's rkey only from the put that names it).
    bool peer_may_read = false;
    // Re-establishes the connection after a teardown; unset: a torn-down
    // endpoint fails every Submit with UNAVAILABLE until LocalInfo + Connect
    // are called by hand.
    ReconnectFn reconnect;
    uint32_t sq_depth = 256;          // WRs on the send queue at most
    uint32_t signal_interval = 16;    // one signalled WR per this many
    uint32_t batch_ops_max = 4096;    // ops in one batch at most
    uint32_t batches_max = 64;        // submitted, not yet waited batches at most
    uint64_t op_bytes_max = 1 << 30;  // one op at most (and at most the port's message size)
  };

  struct Stats {
    uint64_t batches = 0;
    uint64_t ops_posted = 0;
    uint64_t completions = 0;  // completions polled
    uint64_t teardowns = 0;
    uint64_t reconnects = 0;  // successful reconnects through the callback
  };

  enum class State {
    kUnconnected,  // QP in INIT: LocalInfo is valid, waiting for Connect
    kConnected,    // QP in RTS
    kBroken,       // no QP: torn down after an error or a deadline
  };

  ~RdmaEndpoint();
  RdmaEndpoint(const RdmaEndpoint&) = delete;
  RdmaEndpoint& operator=(const RdmaEndpoint&) = delete;

  // This end's connection info (kConnectionInfoBytes bytes) for the peer. On a
  // broken endpoint it first creates a fresh QP, so that a following Connect
  // re-establishes the connection by hand.
  absl::StatusOr<std::string> LocalInfo() ABSL_LOCKS_EXCLUDED(mu_);
  // Connects to the peer described by `remote_info` (its LocalInfo bytes).
  // INVALID_ARGUMENT for malformed bytes; FAILED_PRECONDITION unless
  // kUnconnected; the device's error if a QP transition fails (the endpoint is
  // then kBroken).
  absl::Status Connect(absl::string_view remote_info) ABSL_LOCKS_EXCLUDED(mu_);

  // Validates and posts a batch; returns its id for Wait. Reconnects first
  // when the endpoint is broken. INVALID_ARGUMENT for an empty or oversized
  // batch; RESOURCE_EXHAUSTED past batches_max; FAILED_PRECONDITION before
  // the first Connect; UNAVAILABLE when broken and reconnecting fails or is
  // impossible. Ops failing their own checks are recorded in the batch.
  absl::StatusOr<uint64_t> Submit(absl::Span<const RdmaOp> ops) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every op of `batch` has completed or `deadline_ms` (MonoMs
  // clock) passes, and forgets the batch. Never blocks past the deadline by
  // more than a teardown. An unknown batch gives status NOT_FOUND, no ops.
  RdmaBatchResult Wait(uint64_t batch, uint64_t deadline_ms) ABSL_LOCKS_EXCLUDED(mu_);
  // Submit then Wait; a failed Submit gives its status to every op.
  RdmaBatchResult Execute(absl::Span<const RdmaOp> ops, uint64_t deadline_ms)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Tears the QP down now, as a failed completion does: ops in flight or
  // queued fail with `why`, the peer's reads through it fail from here on,
  // and the next Submit reconnects through the callback (without one, it
  // fails UNAVAILABLE). A broken endpoint is left as it is.
  void TearDown(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  State state() const ABSL_LOCKS_EXCLUDED(mu_);
  // The current QP's number; 0 when there is none.
  uint32_t qp_num() const ABSL_LOCKS_EXCLUDED(mu_);
  // The peer's segment as of the last Connect; unset before it.
  std::optional<RemoteSegment> remote_segment() const ABSL_LOCKS_EXCLUDED(mu_);
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // The READ depths negotiated by the last Connect: READs this end may have
  // outstanding (min of its initiator depth and the peer's responder depth),
  // and READs it accepts from the peer (min of its responder depth and the
  // peer's initiator depth). {0, 0} before the first Connect.
  std::pair<uint8_t, uint8_t> rd_atomic() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class RdmaEngine;  // the only constructor of endpoints

  struct Batch {
    std::vector<absl::Status> ops;
    size_t remaining = 0;  // ops neither completed nor failed
  };
  // A validated op, queued or on the send queue.
  struct Work {
    uint64_t batch = 0;
    uint32_t op = 0;
    RdmaOpKind kind = RdmaOpKind::kRead;
    uint64_t local = 0;
    uint32_t lkey = 0;
    uint32_t length = 0;
    uint64_t remote = 0;
    uint32_t rkey = 0;
    uint64_t wr_id = 0;  // set when posted
  };

  RdmaEndpoint(const EndpointDevice& device, Options options, std::atomic<int>* live_endpoints);

  // Creates CQ and QP and moves the QP to INIT.
  absl::Status CreateQpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ConnectLocked(absl::string_view remote_info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string LocalInfoLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EnsureConnectedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Destroys QP and CQ. Every op in flight or queued fails: those of
  // `deadline_batch` with DEADLINE_EXCEEDED, the rest with `why`.
  void TearDownLocked(const absl::Status& why, uint64_t deadline_batch = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DestroyQpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Posts queued work while the send queue has room.
  void PostLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Polls the CQ once and retires what completed; then posts more.
  void ProgressLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishOp(uint64_t batch, uint32_t op, absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static RdmaBatchResult Result(Batch batch);

  // Constant after construction.
  const EndpointDevice device_;
  const Options options_;
  std::atomic<int>* const live_endpoints_;  // the engine's count of live endpoints

  mutable Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kBroken;
  ibv_cq* cq_ ABSL_GUARDED_BY(mu_) = nullptr;
  ibv_qp* qp_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint32_t psn_ ABSL_GUARDED_BY(mu_) = 0;
  // The connection info version LocalInfo encodes: the peer's, once a
  // Connect has seen it, so that an older peer can read the answer.
  uint16_t info_version_ ABSL_GUARDED_BY(mu_) = kConnectionInfoVersion;
  // READ depths of the current connection (ibv_qp_attr max_rd_atomic,
  // max_dest_rd_atomic); 0 before the first Connect.
  uint8_t max_rd_atomic_ ABSL_GUARDED_BY(mu_) = 0;
  uint8_t max_dest_rd_atomic_ ABSL_GUARDED_BY(mu_) = 0;
  bool ever_connected_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<RemoteSegment> remote_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Batch> batches_ ABSL_GUARDED_BY(mu_);
  std::deque<Work> queued_ ABSL_GUARDED_BY(mu_);     // validated, not yet posted
  std::deque<Work> in_flight_ ABSL_GUARDED_BY(mu_);  // posted, in wr_id order
  uint32_t unsignaled_run_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_batch_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_wr_id_ ABSL_GUARDED_BY(mu_) = 1;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_RDMA_ENDPOINT_H_
