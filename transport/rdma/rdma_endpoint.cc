// RdmaEndpoint: QP lifecycle, batching, selective signalling, completion
// handling and recovery (see rdma_endpoint.h for the contract).
#include "transport/rdma/rdma_endpoint.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"

namespace shelf::transport::rdma {
namespace {

// Completions taken per poll.
constexpr int kPollBatch = 32;
// Wait spins (yielding) this many empty polls before it sleeps between polls:
// completions of small transfers arrive within microseconds.
constexpr int kSpinPolls = 256;
constexpr auto kIdleSleep = std::chrono::microseconds(50);
// RC retry parameters: a local ACK timeout of 4.096 us * 2^14 (~67 ms) and 7
// retries bound how long a dead peer takes to surface as RETRY_EXC_ERR.
constexpr uint8_t kAckTimeout = 14;
constexpr uint8_t kRetryCount = 7;
constexpr uint8_t kRnrRetry = 7;
constexpr uint8_t kMinRnrTimer = 12;
constexpr uint8_t kHopLimit = 64;

uint32_t RandomPsn() {
  thread_local std::mt19937 gen{std::random_device{}()};
  return gen() & kPsnMax;
}

bool IsZeroGid(const std::array<uint8_t, 16>& gid) {
  return std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; });
}

// The status of an op whose completion reported `status`.
absl::Status CompletionStatus(ibv_wc_status status, uint32_t op) {
  const std::string what = absl::StrCat("RDMA op ", op, ": ", ibv_wc_status_str(status));
  switch (status) {
    case IBV_WC_REM_ACCESS_ERR:
      return absl::PermissionDeniedError(
          absl::StrCat(what,
                       " (the peer refused the rkey or the range: key unknown or revoked, or range "
                       "outside its registered segment)"));
    case IBV_WC_REM_INV_REQ_ERR:
      return absl::InvalidArgumentError(absl::StrCat(what, " (the peer rejected the request)"));
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
      return absl::FailedPreconditionError(
          absl::StrCat(what, " (local buffer not covered by its registration)"));
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return absl::UnavailableError(absl::StrCat(what, " (the peer does not answer)"));
    case IBV_WC_WR_FLUSH_ERR:
      return absl::UnavailableError(absl::StrCat(what, " (connection in error; not executed)"));
    case IBV_WC_REM_OP_ERR:
      return absl::UnavailableError(absl::StrCat(what, " (the peer failed the operation)"));
    default:
      return absl::InternalError(what);
  }
}

}  // namespace

RdmaEndpoint::RdmaEndpoint(const EndpointDevice& device, Options options,
                           std::atomic<int>* live_endpoints)
    : device_(device), options_(std::move(options)), live_endpoints_(live_endpoints) {
  live_endpoints_->fetch_add(1);
}

RdmaEndpoint::~RdmaEndpoint() {
  {
    MutexLock lock(&mu_);
    DestroyQpLocked();
  }
  live_endpoints_->fetch_sub(1);
}

absl::Status RdmaEndpoint::CreateQpLocked() {
  SHELF_CHECK(qp_ == nullptr && cq_ == nullptr);
  // Every WR on the send queue can end in one completion (a flush after an
  // error), so a CQ as deep as the send queue never overflows.
  absl::StatusOr<ibv_cq*> cq =
      device_.verbs->CreateCq(device_.context, static_cast<int>(options_.sq_depth));
  if (!cq.ok()) return cq.status();
  ibv_qp_init_attr init{};
  init.send_cq = *cq;
  init.recv_cq = *cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = options_.sq_depth;
  init.cap.max_recv_wr = 1;  // nothing is ever received; some providers reject 0
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  absl::StatusOr<ibv_qp*> qp = device_.verbs->CreateQp(device_.pd, &init);
  if (!qp.ok()) {
    device_.verbs->DestroyCq(*cq).IgnoreError();
    return qp.status();
  }
  cq_ = *cq;
  qp_ = *qp;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = device_.pkey_index;
  attr.port_num = device_.port_num;
  // An end that exposes nothing refuses every remote operation on its QP,
  // whatever its MRs allow.
  attr.qp_access_flags = options_.peer_may_read ? IBV_ACCESS_REMOTE_READ : 0;
  if (options_.expose.has_value()) {
    attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
    if (options_.expose->access == MemoryAccess::kRemoteReadWrite) {
      attr.qp_access_flags |= IBV_ACCESS_REMOTE_WRITE;
    }
  }
  absl::Status s = device_.verbs->ModifyQp(
      qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (!s.ok()) {
    DestroyQpLocked();
    return s;
  }
  psn_ = RandomPsn();
  state_ = State::kUnconnected;
  return absl::OkStatus();
}

void RdmaEndpoint::DestroyQpLocked() {
  if (qp_ != nullptr) {
    // Into ERR first so the device stops work on the QP, then destroy: once
    // DestroyQp returns, no WR of this QP touches memory any more.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    device_.verbs->ModifyQp(qp_, &attr, IBV_QP_STATE).IgnoreError();
    absl::Status s = device_.verbs->DestroyQp(qp_);
    if (!s.ok()) {
      SHELF_LOG(ERROR) << "RDMA: destroying QP failed: " << s.ToString();
    }
    qp_ = nullptr;
  }
  if (cq_ != nullptr) {
    absl::Status s = device_.verbs->DestroyCq(cq_);
    if (!s.ok()) {
      SHELF_LOG(ERROR) << "RDMA: destroying CQ failed: " << s.ToString();
    }
    cq_ = nullptr;
  }
  state_ = State::kBroken;
}

std::string RdmaEndpoint::LocalInfoLocked() const {
  ConnectionInfo info;
  std::copy(std::begin(device_.gid.raw), std::end(device_.gid.raw), info.gid.begin());
  info.version = info_version_;
  info.rd_atomic_responder = device_.rd_atomic_responder;
  info.rd_atomic_initiator = device_.rd_atomic_initiator;
  info.lid = device_.lid;
  info.mtu = static_cast<uint8_t>(device_.active_mtu);
  info.qp_num = qp_ == nullptr ? 0 : qp_->qp_num;
  info.psn = psn_;
  if (options_.expose.has_value()) info.segment = options_.expose->AsRemoteSegment();
  return EncodeConnectionInfo(info);
}

absl::StatusOr<std::string> RdmaEndpoint::LocalInfo() {
  MutexLock lock(&mu_);
  if (state_ == State::kBroken) {
    absl::Status s = CreateQpLocked();
    if (!s.ok()) return s;
  }
  return LocalInfoLocked();
}

absl::Status RdmaEndpoint::ConnectLocked(absl::string_view remote_info) {
  absl::StatusOr<ConnectionInfo> remote = DecodeConnectionInfo(remote_info);
  if (!remote.ok()) return remote.status();
  if (state_ != State::kUnconnected) {
    return absl::FailedPreconditionError(
        state_ == State::kConnected ? "RDMA endpoint already connected"
                                    : "RDMA endpoint broken: call LocalInfo for a fresh QP first");
  }
  // Each direction's READ depth is what its initiator can issue and its
  // responder can hold: an initiator deeper than the responder has READs
  // refused (REM_INV_REQ) once that many are outstanding. A version 1 peer
  // advertises no depths; it uses its own device's depth both ways, as this
  // end does with it (the behaviour before depths were exchanged).
  const uint8_t legacy = std::min(device_.rd_atomic_initiator, device_.rd_atomic_responder);
  const uint8_t remote_responder = remote->version >= 2 ? remote->rd_atomic_responder : legacy;
  const uint8_t remote_initiator = remote->version >= 2 ? remote->rd_atomic_initiator : legacy;
  const uint8_t max_rd_atomic = std::min(device_.rd_atomic_initiator, remote_responder);
  const uint8_t max_dest_rd_atomic = std::min(device_.rd_atomic_responder, remote_initiator);
  SHELF_CHECK(max_rd_atomic >= 1 && max_dest_rd_atomic >= 1);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min<int>(device_.active_mtu, remote->mtu));
  attr.dest_qp_num = remote->qp_num;
  attr.rq_psn = remote->psn;
  attr.max_dest_rd_atomic = max_dest_rd_atomic;
  attr.min_rnr_timer = kMinRnrTimer;
  attr.ah_attr.port_num = device_.port_num;
  attr.ah_attr.dlid = remote->lid;
  attr.ah_attr.sl = device_.service_level;
  // Route by GID (a global route header) whenever the peer gave one: RoCE
  // requires it, and it also works inside an InfiniBand subnet.
  if (!IsZeroGid(remote->gid)) {
    attr.ah_attr.is_global = 1;
    std::copy(remote->gid.begin(), remote->gid.end(), attr.ah_attr.grh.dgid.raw);
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(device_.gid_index);
    attr.ah_attr.grh.hop_limit = kHopLimit;
    attr.ah_attr.grh.traffic_class = device_.traffic_class;
  }
  absl::Status s =
      device_.verbs->ModifyQp(qp_, &attr,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (s.ok()) {
    attr = ibv_qp_attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = kAckTimeout;
    attr.retry_cnt = kRetryCount;
    attr.rnr_retry = kRnrRetry;
    attr.sq_psn = psn_;
    attr.max_rd_atomic = max_rd_atomic;
    s = device_.verbs->ModifyQp(qp_, &attr,
                                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  }
  if (!s.ok()) {
    DestroyQpLocked();
    return s;
  }
  remote_ = remote->segment;
  info_version_ = remote->version;
  max_rd_atomic_ = max_rd_atomic;
  max_dest_rd_atomic_ = max_dest_rd_atomic;
  state_ = State::kConnected;
  ever_connected_ = true;
  unsignaled_run_ = 0;
  return absl::OkStatus();
}

absl::Status RdmaEndpoint::Connect(absl::string_view remote_info) {
  MutexLock lock(&mu_);
  return ConnectLocked(remote_info);
}

absl::Status RdmaEndpoint::EnsureConnectedLocked() {
  if (state_ == State::kConnected) return absl::OkStatus();
  if (!ever_connected_) {
    return absl::FailedPreconditionError("RDMA endpoint not connected: call Connect first");
  }
  if (!options_.reconnect) {
    return absl::UnavailableError("RDMA connection lost and no reconnect callback is set");
  }
  if (state_ == State::kBroken) {
    absl::Status s = CreateQpLocked();
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("RDMA reconnect: ", s.message()));
  }
  absl::StatusOr<std::string> remote = options_.reconnect(LocalInfoLocked());
  absl::Status s = remote.ok() ? ConnectLocked(*remote) : remote.status();
  if (!s.ok()) {
    DestroyQpLocked();
    return absl::UnavailableError(absl::StrCat("RDMA reconnect failed: ", s.ToString()));
  }
  ++stats_.reconnects;
  return absl::OkStatus();
}

void RdmaEndpoint::FinishOp(uint64_t batch, uint32_t op, absl::Status status) {
  auto it = batches_.find(batch);
  SHELF_CHECK(it != batches_.end() && it->second.remaining > 0);
  it->second.ops[op] = std::move(status);
  --it->second.remaining;
}

void RdmaEndpoint::TearDownLocked(const absl::Status& why, uint64_t deadline_batch) {
  DestroyQpLocked();
  ++stats_.teardowns;
  const absl::Status deadline =
      absl::DeadlineExceededError("RDMA batch deadline passed before the op completed");
  for (std::deque<Work>* list : {&in_flight_, &queued_}) {
    for (const Work& w : *list) FinishOp(w.batch, w.op, w.batch == deadline_batch ? deadline : why);
    list->clear();
  }
}

void RdmaEndpoint::PostLocked() {
  while (qp_ != nullptr && state_ == State::kConnected && !queued_.empty() &&
         in_flight_.size() < options_.sq_depth) {
    const size_t n = std::min<size_t>(queued_.size(), options_.sq_depth - in_flight_.size());
    std::vector<ibv_send_wr> wrs(n);
    std::vector<ibv_sge> sges(n);
    for (size_t i = 0; i < n; ++i) {
      Work& w = queued_[i];
      w.wr_id = next_wr_id_++;
      sges[i].addr = w.local;
      sges[i].length = w.length;
      sges[i].lkey = w.lkey;
      ibv_send_wr& wr = wrs[i];
      wr.wr_id = w.wr_id;
      wr.next = i + 1 < n ? &wrs[i + 1] : nullptr;
      wr.sg_list = &sges[i];
      wr.num_sge = 1;
      wr.opcode = w.kind == RdmaOpKind::kRead ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = w.remote;
      wr.wr.rdma.rkey = w.rkey;
      // Selective signalling: one completion per signal_interval WRs frees
      // their send-queue slots; the last op of a batch is signalled so the
      // batch learns it is done, and the last WR of a post so that a full
      // send queue always drains.
      const bool last_of_batch = i + 1 == queued_.size() || queued_[i + 1].batch != w.batch;
      if (++unsignaled_run_ >= options_.signal_interval || last_of_batch || i + 1 == n) {
        wr.send_flags = IBV_SEND_SIGNALED;
        unsignaled_run_ = 0;
      }
    }
    ibv_send_wr* bad = nullptr;
    absl::Status s = device_.verbs->PostSend(qp_, wrs.data(), &bad);
    // The WRs before `bad` are on the send queue.
    const size_t posted = s.ok() ? n : static_cast<size_t>(bad - wrs.data());
    for (size_t i = 0; i < posted; ++i) {
      in_flight_.push_back(queued_.front());
      queued_.pop_front();
    }
    stats_.ops_posted += posted;
    if (!s.ok()) {
      TearDownLocked(absl::UnavailableError(absl::StrCat("RDMA post failed: ", s.ToString())));
      return;
    }
  }
}

void RdmaEndpoint::ProgressLocked() {
  if (cq_ == nullptr) return;
  ibv_wc wc[kPollBatch];
  absl::StatusOr<int> n = device_.verbs->PollCq(cq_, kPollBatch, wc);
  if (!n.ok()) {
    TearDownLocked(
        absl::UnavailableError(absl::StrCat("RDMA poll failed: ", n.status().ToString())));
    return;
  }
  stats_.completions += *n;
  for (int i = 0; i < *n; ++i) {
    // Completions arrive in posting order, and one covers every WR posted
    // before it: those completed successfully, signalled or not.
    while (!in_flight_.empty() && in_flight_.front().wr_id < wc[i].wr_id) {
      FinishOp(in_flight_.front().batch, in_flight_.front().op, absl::OkStatus());
      in_flight_.pop_front();
    }
    if (in_flight_.empty() || in_flight_.front().wr_id != wc[i].wr_id) continue;  // stale
    const Work w = in_flight_.front();
    in_flight_.pop_front();
    if (wc[i].status == IBV_WC_SUCCESS) {
      FinishOp(w.batch, w.op, absl::OkStatus());
      continue;
    }
    absl::Status failed = CompletionStatus(wc[i].status, w.op);
    SHELF_LOG(WARNING) << "RDMA op failed; tearing the connection down: " << failed.ToString();
    FinishOp(w.batch, w.op, failed);
    // The QP is in the error state: everything after this WR is flushed.
    TearDownLocked(absl::UnavailableError(absl::StrCat(
        "RDMA op not completed: the connection failed at an earlier op (", failed.message(), ")")));
    return;
  }
  PostLocked();
}

absl::StatusOr<uint64_t> RdmaEndpoint::Submit(absl::Span<const RdmaOp> ops) {
  if (ops.empty() || ops.size() > options_.batch_ops_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA batch of ", ops.size(), " ops; want 1..", options_.batch_ops_max));
  }
  MutexLock lock(&mu_);
  if (batches_.size() >= options_.batches_max) {
    return absl::ResourceExhaustedError(
        absl::StrCat("RDMA endpoint has ", batches_.size(), " batches not yet waited for"));
  }
  absl::Status connected = EnsureConnectedLocked();
  if (!connected.ok()) return connected;
  SHELF_CHECK(remote_.has_value());
  const uint64_t id = next_batch_++;
  Batch& batch = batches_[id];
  batch.ops.assign(ops.size(), absl::OkStatus());
  batch.remaining = ops.size();
  ++stats_.batches;
  const uint64_t op_bytes_max = std::min(options_.op_bytes_max, device_.msg_bytes_max);
  for (size_t i = 0; i < ops.size(); ++i) {
    const RdmaOp& op = ops[i];
    const uint32_t index = static_cast<uint32_t>(i);
    if (op.length == 0 || op.length > op_bytes_max) {
      FinishOp(id, index,
               absl::InvalidArgumentError(absl::StrCat("RDMA op ", i, ": length ", op.length,
                                                       "; want 1..", op_bytes_max)));
      continue;
    }
    // The initiator checks the remote range itself so that a bad offset
    // fails this op alone, instead of a remote access error that would break
    // the connection for every op in flight.
    if (!op.remote_rkey.has_value() &&
        (op.remote_offset > remote_->length || op.length > remote_->length - op.remote_offset)) {
      FinishOp(id, index,
               absl::OutOfRangeError(absl::StrCat(
                   "RDMA op ", i, ": remote range [", op.remote_offset, ", +", op.length,
                   ") outside the peer's ", remote_->length, "-byte segment")));
      continue;
    }
    std::optional<MemoryRegion> region = device_.registry->Find(op.local, op.length);
    if (!region.has_value()) {
      FinishOp(id, index,
               absl::FailedPreconditionError(
                   absl::StrCat("RDMA op ", i, ": local range is not registered memory")));
      continue;
    }
    Work w;
    w.batch = id;
    w.op = index;
    w.kind = op.kind;
    w.local = reinterpret_cast<uint64_t>(op.local);
    w.lkey = region->lkey;
    w.length = static_cast<uint32_t>(op.length);
    w.remote = op.remote_rkey.has_value() ? op.remote_offset : remote_->addr + op.remote_offset;
    w.rkey = op.remote_rkey.value_or(remote_->rkey);
    queued_.push_back(w);
  }
  PostLocked();
  return id;
}

RdmaBatchResult RdmaEndpoint::Result(Batch batch) {
  RdmaBatchResult result;
  for (const absl::Status& s : batch.ops) {
    if (!s.ok()) {
      result.status = s;
      break;
    }
  }
  result.ops = std::move(batch.ops);
  return result;
}

RdmaBatchResult RdmaEndpoint::Wait(uint64_t id, uint64_t deadline_ms) {
  for (int idle = 0;; ++idle) {
    {
      MutexLock lock(&mu_);
      auto it = batches_.find(id);
      if (it == batches_.end()) {
        return RdmaBatchResult{absl::NotFoundError(absl::StrCat("no RDMA batch ", id)), {}};
      }
      if (it->second.remaining > 0) ProgressLocked();
      if (it->second.remaining > 0 && MonoMs() >= deadline_ms) {
        const bool on_wire = std::any_of(in_flight_.begin(), in_flight_.end(),
                                         [id](const Work& w) { return w.batch == id; });
        if (on_wire) {
          SHELF_LOG(WARNING) << "RDMA batch past its deadline with ops in flight; tearing the "
                                "connection down";
          TearDownLocked(
              absl::UnavailableError("RDMA op not completed: connection torn down after another "
                                     "batch's deadline passed"),
              id);
        } else {
          // Nothing of this batch is on the wire: drop its queued ops only.
          const absl::Status deadline =
              absl::DeadlineExceededError("RDMA batch deadline passed before the op was posted");
          for (const Work& w : queued_) {
            if (w.batch == id) FinishOp(w.batch, w.op, deadline);
          }
          queued_.erase(std::remove_if(queued_.begin(), queued_.end(),
                                       [id](const Work& w) { return w.batch == id; }),
                        queued_.end());
        }
      }
      if (it->second.remaining == 0) {
        Batch batch = std::move(it->second);
        batches_.erase(it);
        return Result(std::move(batch));
      }
    }
    if (idle < kSpinPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kIdleSleep);
    }
  }
}

RdmaBatchResult RdmaEndpoint::Execute(absl::Span<const RdmaOp> ops, uint64_t deadline_ms) {
  absl::StatusOr<uint64_t> id = Submit(ops);
  if (!id.ok()) {
    return RdmaBatchResult{id.status(), std::vector<absl::Status>(ops.size(), id.status())};
  }
  return Wait(*id, deadline_ms);
}

void RdmaEndpoint::TearDown(const absl::Status& why) {
  MutexLock lock(&mu_);
  if (state_ != State::kBroken) TearDownLocked(why);
}

RdmaEndpoint::State RdmaEndpoint::state() const {
  MutexLock lock(&mu_);
  return state_;
}

uint32_t RdmaEndpoint::qp_num() const {
  MutexLock lock(&mu_);
  return qp_ == nullptr ? 0 : qp_->qp_num;
}

std::optional<RemoteSegment> RdmaEndpoint::remote_segment() const {
  MutexLock lock(&mu_);
  return remote_;
}

RdmaEndpoint::Stats RdmaEndpoint::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

std::pair<uint8_t, uint8_t> RdmaEndpoint::rd_atomic() const {
  MutexLock lock(&mu_);
  return {max_rd_atomic_, max_dest_rd_atomic_};
}

}  // namespace shelf::transport::rdma
