#include "transport/tcp_engine.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/wire.h"

namespace shelf::transport {
namespace {

// Tasks queued beyond the threads; a full queue runs the task in the
// submitting thread instead.
constexpr size_t kQueueMax = 4096;

// The result of one striped op: the first failure of its stripes.
struct StripedOp {
  explicit StripedOp(size_t stripes) : left(stripes) {}
  absl::Mutex mu;
  absl::Status first ABSL_GUARDED_BY(mu);
  size_t left ABSL_GUARDED_BY(mu);
  // True for the stripe that finishes the op.
  bool Finish(const absl::Status& s, absl::Status* result) {
    absl::MutexLock lock(&mu);
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
                                     options_.max_idle_per_peer}),
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
                        deadline_ms);
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
  // Cut large ops into stripes, and gather small ops into runs of at least
  // stripe_bytes_min moved one after another on one connection: a thread
  // hop and a connection per 64 KiB block would cost more than they overlap.
  struct Piece {
    size_t item;
    uint64_t begin;
    uint64_t length;
  };
  std::vector<std::vector<Piece>> tasks;
  std::vector<std::shared_ptr<StripedOp>> striped(work.size());
  uint64_t open_bytes = 0;  // in tasks.back(), when it gathers small ops
  bool open = false;
  for (size_t i = 0; i < work.size(); ++i) {
    const uint64_t length = work[i].op.length;
    const size_t n = StripesFor(length);
    if (n == 1) {
      if (!open) tasks.emplace_back();
      tasks.back().push_back({i, 0, length});
      open_bytes = (open ? open_bytes : 0) + length;
      open = open_bytes < options_.stripe_bytes_min;
      continue;
    }
    open = false;
    striped[i] = std::make_shared<StripedOp>(n);
    const uint64_t base = length / n;
    uint64_t begin = 0;
    for (size_t k = 0; k < n; ++k) {
      uint64_t len = k + 1 == n ? length - begin : base;
      tasks.push_back({{i, begin, len}});
      begin += len;
    }
  }
  auto shared_work = std::make_shared<std::vector<Work>>(std::move(work));
  auto run = [this, batch, shared_work, striped, deadline_ms](const std::vector<Piece>& task) {
    for (const Piece& p : task) {
      const Work& w = (*shared_work)[p.item];
      absl::Status s = Move(w, p.begin, p.length, deadline_ms);
      if (striped[p.item] == nullptr) {
        batch->Complete(w.index, std::move(s));
        continue;
      }
      absl::Status result;
      if (striped[p.item]->Finish(s, &result)) batch->Complete(w.index, std::move(result));
    }
  };
  if (tasks.size() == 1) {
    run(tasks[0]);  // nothing to overlap: no thread hop
    return;
  }
  for (std::vector<Piece>& t : tasks) {
    auto task = std::make_shared<std::vector<Piece>>(std::move(t));
    if (!pool_->TrySubmit([run, task] { run(*task); })) run(*task);
  }
}

}  // namespace shelf::transport
