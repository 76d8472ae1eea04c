#include "transport/tcp_engine.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "transport/wire.h"

namespace shelf::transport {
namespace {

// Tasks queued beyond the threads; a full queue runs the task in the
// submitting thread instead.
constexpr size_t kQueueMax = 4096;

// The result of one striped op: the first failure of its stripes.
struct StripedOp {
  explicit StripedOp(size_t stripes) : left(stripes) {}
  Mutex mu;
  absl::Status first ABSL_GUARDED_BY(mu);
  size_t left ABSL_GUARDED_BY(mu);
  // True for the stripe that finishes the op.
  bool Finish(const absl::Status& s, absl::Status* result) {
    MutexLock lock(&mu);
    if (!s.ok() && first.ok()) first = s;
    if (--left != 0) return false;
    *result = first;
    return true;
  }
};

}  // namespace

TcpEngine::TcpEngine(Options options)
    : options_(std::move(options)),
      client_(TcpDataClient::Options{options_.secret, options_.connect_timeout_ms,
                                     options_.max_idle_per_peer, options_.tls, options_.tls_files,
                                     options_.session_tag_payload}),
      pool_(std::make_unique<ThreadPool>(std::max<size_t>(1, options_.threads), kQueueMax)) {}

TcpEngine::~TcpEngine() { pool_->Shutdown(); }

size_t TcpEngine::StripesFor(uint64_t length) const {
  if (options_.streams_per_op <= 1 || options_.stripe_bytes_min == 0) return 1;
  uint64_t n = length / options_.stripe_bytes_min;
  return static_cast<size_t>(std::clamp<uint64_t>(n, 1, options_.streams_per_op));
}

absl::Status TcpEngine::Move(const Work& w, uint64_t begin, uint64_t length, uint64_t deadline_ms) {
  const Op& op = w.op;
  const std::string& address = op.peer->route(Kind::kTcp);
  if (op.kind == OpKind::kRead) {
    return client_.Read(address, op.segment_id, op.remote_offset + begin, length, w.local + begin,
                        deadline_ms, op.grant);
  }
  absl::StatusOr<wire::Grant> grant = wire::DecodeGrant(op.grant);
  if (!grant.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tcp write needs the put's grant: ", grant.status().message()));
  }
  return client_.Write(address, *grant, op.segment_id, op.remote_offset + begin, w.local + begin,
                       length, deadline_ms);
}

void TcpEngine::Start(std::shared_ptr<Batch> batch, std::vector<Work> work, uint64_t deadline_ms) {
  // Large ops are cut into stripes, one task each. Small ops to one store
  // are gathered, in order and per direction, into runs of at least
  // stripe_bytes_min moved pipelined on one connection: a thread hop, a
  // connection and a round trip per 64 KiB block would cost more than they
  // overlap.
  struct Piece {
    size_t item;
    uint64_t begin;
    uint64_t length;
  };
  struct Run {
    std::vector<Piece> pieces;
    uint64_t bytes = 0;
  };
  std::vector<Run> tasks;
  std::map<std::pair<std::string, OpKind>, size_t> open;  // gathering run's task
  // Shared by every task (copies of `run`), like the work itself.
  auto striped = std::make_shared<std::vector<std::shared_ptr<StripedOp>>>(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    const Op& op = work[i].op;
    const size_t n = StripesFor(op.length);
    if (n == 1) {
      auto key = std::make_pair(op.peer->route(Kind::kTcp), op.kind);
      auto it = open.find(key);
      if (it == open.end()) {
        it = open.emplace(key, tasks.size()).first;
        tasks.emplace_back();
      }
      Run& run = tasks[it->second];
      run.pieces.push_back({i, 0, op.length});
      run.bytes += op.length;
      if (run.bytes >= options_.stripe_bytes_min) open.erase(it);
      continue;
    }
    (*striped)[i] = std::make_shared<StripedOp>(n);
    const uint64_t base = op.length / n;
    uint64_t begin = 0;
    for (size_t k = 0; k < n; ++k) {
      uint64_t len = k + 1 == n ? op.length - begin : base;
      tasks.push_back(Run{{{i, begin, len}}, len});
      begin += len;
    }
  }
  auto shared_work = std::make_shared<std::vector<Work>>(std::move(work));
  auto run = [this, batch, shared_work, striped, deadline_ms](const Run& task) {
    const std::vector<Work>& w = *shared_work;
    if (task.pieces.size() > 1) {
      MoveRun(
          task.pieces.size(), [&](size_t k) { return &w[task.pieces[k].item]; }, deadline_ms,
          batch.get());
      return;
    }
    const Piece& p = task.pieces[0];
    absl::Status s = Move(w[p.item], p.begin, p.length, deadline_ms);
    StripedOp* stripes = (*striped)[p.item].get();
    if (stripes == nullptr) {
      batch->Complete(w[p.item].index, std::move(s));
      return;
    }
    absl::Status result;
    if (stripes->Finish(s, &result)) batch->Complete(w[p.item].index, std::move(result));
  };
  if (tasks.size() == 1) {
    run(tasks[0]);  // nothing to overlap: no thread hop
    return;
  }
  for (Run& t : tasks) {
    auto task = std::make_shared<Run>(std::move(t));
    if (!pool_->TrySubmit([run, task] { run(*task); })) run(*task);
  }
}

void TcpEngine::MoveRun(size_t n, const std::function<const Work*(size_t)>& item,
                        uint64_t deadline_ms, Batch* batch) {
  const Work& first = *item(0);
  const std::string& address = first.op.peer->route(Kind::kTcp);
  std::vector<absl::Status> statuses;
  if (first.op.kind == OpKind::kRead) {
    std::vector<TcpDataClient::ReadRequest> reads(n);
    for (size_t k = 0; k < n; ++k) {
      const Work& w = *item(k);
      reads[k] = {w.op.segment_id, w.op.remote_offset, w.op.length, w.local, w.op.grant};
    }
    client_.ReadMany(address, reads, deadline_ms, &statuses);
  } else {
    // Grants are decoded first: a write without a valid one fails alone.
    std::vector<wire::Grant> grants(n);
    std::vector<TcpDataClient::WriteRequest> writes;
    std::vector<size_t> sent;
    statuses.assign(n, absl::OkStatus());
    for (size_t k = 0; k < n; ++k) {
      const Work& w = *item(k);
      absl::StatusOr<wire::Grant> g = wire::DecodeGrant(w.op.grant);
      if (!g.ok()) {
        statuses[k] = absl::InvalidArgumentError(
            absl::StrCat("a tcp write needs the put's grant: ", g.status().message()));
        continue;
      }
      grants[k] = *std::move(g);
      writes.push_back({&grants[k], w.op.segment_id, w.op.remote_offset, w.local, w.op.length});
      sent.push_back(k);
    }
    std::vector<absl::Status> written;
    client_.WriteMany(address, writes, deadline_ms, &written);
    for (size_t j = 0; j < sent.size(); ++j) statuses[sent[j]] = written[j];
  }
  for (size_t k = 0; k < n; ++k) batch->Complete(item(k)->index, std::move(statuses[k]));
}

}  // namespace shelf::transport
