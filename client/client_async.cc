// BatchFuture and the asynchronous batch calls: each runs its synchronous
// form on one of the client's async threads (a bounded pool with a bounded
// queue), with its deadline fixed when it is submitted.
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "common/clock.h"
#include "common/sync_point.h"

namespace shelf {
namespace {

const Status& InvalidFutureStatus() {
  static const Status* s = new Status(StatusCode::kFailedPrecondition,
                                      "invalid BatchFuture (default-constructed or moved from)");
  return *s;
}

const std::vector<Status>& NoStatuses() {
  static const std::vector<Status>* v = new std::vector<Status>();
  return *v;
}

const std::vector<size_t>& NoSizes() {
  static const std::vector<size_t>* v = new std::vector<size_t>();
  return *v;
}

void WaitDone(internal::BatchState* state) {
  MutexLock lock(&state->mu);
  while (!state->done) state->finished.Wait(&state->mu);
}

}  // namespace

BatchFuture::BatchFuture(std::shared_ptr<internal::BatchState> state) : state_(std::move(state)) {}

BatchFuture& BatchFuture::operator=(BatchFuture&& other) noexcept {
  if (this != &other) {
    if (state_ != nullptr) WaitDone(state_.get());
    state_ = std::move(other.state_);
  }
  return *this;
}

BatchFuture::~BatchFuture() {
  if (state_ != nullptr) WaitDone(state_.get());
}

bool BatchFuture::Poll() const { return state_ == nullptr || state_->IsDone(); }

bool BatchFuture::Wait(uint64_t timeout_ms) const {
  if (state_ == nullptr) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  MutexLock lock(&state_->mu);
  while (!state_->done) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    state_->finished.WaitFor(&state_->mu, deadline - now);
  }
  return true;
}

void BatchFuture::Wait() const {
  if (state_ != nullptr) WaitDone(state_.get());
}

const Status& BatchFuture::status() const {
  if (state_ == nullptr) return InvalidFutureStatus();
  WaitDone(state_.get());
  return state_->status;
}

const std::vector<Status>& BatchFuture::statuses() const {
  if (state_ == nullptr) return NoStatuses();
  WaitDone(state_.get());
  return state_->statuses;
}

std::vector<std::string>* BatchFuture::values() {
  if (state_ == nullptr) {
    thread_local std::vector<std::string> none;
    none.clear();
    return &none;
  }
  WaitDone(state_.get());
  return &state_->values;
}

const std::vector<size_t>& BatchFuture::sizes() const {
  if (state_ == nullptr) return NoSizes();
  WaitDone(state_.get());
  return state_->sizes;
}

BatchFuture ClientImpl::Submit(const Deadline& deadline,
                               std::function<void(internal::BatchState*)> work) {
  auto state = std::make_shared<internal::BatchState>();
  // A closed client or a deadline already passed: done at once, queueing
  // nothing.
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) {
    state->status = FromAbsl(s);
    state->Finish();
    return BatchFuture(state);
  }
  bool queued = async_pool_->TrySubmit([state, work = std::move(work)] {
    SHELF_SYNC_POINT("ClientImpl::AsyncTask:Start");
    work(state.get());
    state->Finish();
  });
  if (!queued) {
    state->status = Status(StatusCode::kResourceExhausted,
                           absl::StrCat("already ", options_.async_queue_max,
                                        " asynchronous calls waiting (ClientOptions."
                                        "async_queue_max); wait for some first"));
    state->Finish();
  }
  return BatchFuture(state);
}

BatchFuture ClientImpl::BatchGetAsync(std::vector<std::string> keys, Deadline deadline) {
  Deadline at = Absolute(deadline);
  return Submit(at, [this, keys = std::move(keys), at](internal::BatchState* st) {
    st->status = BatchGet(keys, &st->values, &st->statuses, at);
  });
}

BatchFuture ClientImpl::BatchPutAsync(std::vector<PutItem> items, const PutOptions& options) {
  PutOptions o = options;
  o.deadline = Absolute(PutDeadline(options));
  return Submit(o.deadline, [this, items = std::move(items), o](internal::BatchState* st) {
    st->status = BatchPut(items, &st->statuses, o);
  });
}

BatchFuture ClientImpl::BatchGetIntoAsync(std::vector<GetIntoItem> items, Deadline deadline,
                                          const GpuSync& gpu) {
  Deadline at = Absolute(deadline);
  // Pinned now, so the buffers cannot be unregistered before the future is
  // done; the pins go with the task, after it finished the future. So
  // UnregisterBuffer returning means the future is done.
  auto pins = std::make_shared<std::vector<PinOr>>(PinForGet(items));
  return Submit(at, [this, items = std::move(items), at, gpu, pins](internal::BatchState* st) {
    uint64_t deadline_ms = 0;
    absl::Status s = Begin(at, &deadline_ms);
    if (s.ok()) {
      s = BatchGetIntoPinned(items, pins.get(), deadline_ms, gpu, &st->statuses, &st->sizes);
    }
    st->status = FromAbsl(s);
  });
}

BatchFuture ClientImpl::BatchPutFromAsync(std::vector<PutFromItem> items,
                                          const PutOptions& options) {
  PutOptions o = options;
  o.deadline = Absolute(PutDeadline(options));
  auto pins = std::make_shared<std::vector<PinOr>>(PinForPut(items));
  return Submit(o.deadline, [this, items = std::move(items), o, pins](internal::BatchState* st) {
    uint64_t deadline_ms = 0;
    absl::Status s = Begin(o.deadline, &deadline_ms);
    if (s.ok()) s = BatchPutFromPinned(items, pins.get(), o, deadline_ms, &st->statuses);
    st->status = FromAbsl(s);
  });
}

}  // namespace shelf
