// EtcdClient::Watch: one thread per watch, one Watch stream at a time.
//
// The thread remembers the revision after the last event it delivered and
// re-creates a broken stream from there, on the next endpoint, so a restart
// of etcd or the loss of one member costs latency, never events.
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "coord/etcd_client.h"
#include "coord/etcd_internal.h"

namespace shelf::coord {

namespace {

using internal::EtcdChannels;
using internal::EtcdEndpoint;

class EtcdWatchImpl final : public EtcdWatch {
 public:
  EtcdWatchImpl(std::shared_ptr<EtcdChannels> channels, std::string key, std::string range_end,
                WatchOptions options)
      : channels_(std::move(channels)),
        key_(std::move(key)),
        range_end_(std::move(range_end)),
        options_(std::move(options)),
        next_revision_(options_.start_revision) {}

  ~EtcdWatchImpl() override { Cancel(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  void Cancel() override {
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
      if (active_call_ != nullptr) active_call_->TryCancel();
      cv_.SignalAll();
    }
    MutexLock lock(&join_mu_);
    if (!thread_.joinable()) return;
    if (thread_.get_id() == std::this_thread::get_id()) {
      SHELF_LOG(ERROR) << "EtcdWatch::Cancel called from its own callback";
      std::abort();
    }
    thread_.join();
  }

  // Waits until etcd confirmed the watch. The last error when it could not
  // within attempts_max tries or `timeout_ms`.
  absl::Status WaitCreated(uint64_t timeout_ms);

 private:
  void Run();
  // One stream on endpoint `index`, read until it breaks. OK when the watch
  // is over (cancelled, or ended for good and reported); else why the
  // stream broke. `progressed` is set when the stream delivered anything.
  absl::Status RunStream(size_t index, bool* progressed);
  bool cancelled() {
    MutexLock lock(&mu_);
    return cancelled_;
  }
  bool SleepMs(uint64_t ms);  // false when cancelled

  // Constant after construction.
  const std::shared_ptr<EtcdChannels> channels_;
  const std::string key_;
  const std::string range_end_;
  const WatchOptions options_;

  Mutex mu_;
  CondVar cv_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool created_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int failures_before_created_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* active_call_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Only the watch thread: where a new stream starts (0 = now).
  int64_t next_revision_;
  Mutex join_mu_;  // serializes joins of thread_
  std::thread thread_;
};

absl::Status EtcdWatchImpl::WaitCreated(uint64_t timeout_ms) {
  uint64_t deadline = MonoMs() + timeout_ms;
  MutexLock lock(&mu_);
  while (!created_ && !finished_ && failures_before_created_ < channels_->options().attempts_max) {
    uint64_t now = MonoMs();
    if (now >= deadline) break;
    cv_.WaitFor(&mu_, std::chrono::milliseconds(deadline - now));
  }
  if (created_) return absl::OkStatus();
  if (!last_error_.ok()) return last_error_;
  return absl::DeadlineExceededError(
      absl::StrCat("etcd watch on '", key_, "' not confirmed within ", timeout_ms, " ms"));
}

void EtcdWatchImpl::Run() {
  int failures = 0;
  while (!cancelled()) {
    size_t index = channels_->current();
    bool progressed = false;
    absl::Status s = RunStream(index, &progressed);
    if (s.ok()) break;
    SHELF_LOG(DEBUG) << "etcd watch stream broke, resuming" << Kv("key", key_)
                     << Kv("from_revision", next_revision_) << Kv("error", s.ToString());
    {
      MutexLock lock(&mu_);
      last_error_ = s;
      if (!created_) ++failures_before_created_;
      cv_.SignalAll();
    }
    channels_->Failed(index);
    if (progressed) failures = 0;
    if (!SleepMs(channels_->BackoffMs(failures++))) break;
  }
  MutexLock lock(&mu_);
  finished_ = true;
  cv_.SignalAll();
}

absl::Status EtcdWatchImpl::RunStream(size_t index, bool* progressed) {
  const EtcdEndpoint& ep = channels_->endpoint(index);
  grpc::ClientContext ctx;  // no deadline: a watch lives until cancelled
  std::string token;
  if (absl::Status auth = channels_->Authorize(index, &ctx, &token); !auth.ok()) return auth;
  {
    MutexLock lock(&mu_);
    if (cancelled_) return absl::OkStatus();
    active_call_ = &ctx;
  }
  auto stream = ep.watch->Watch(&ctx);
  etcdserverpb::WatchRequest request;
  etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(key_);
  create->set_range_end(range_end_);
  create->set_start_revision(next_revision_);

  absl::Status ended;  // non-OK: the watch is over for good
  if (stream->Write(request)) {
    etcdserverpb::WatchResponse response;
    std::vector<WatchEvent> events;
    while (stream->Read(&response)) {
      if (response.created()) {
        if (next_revision_ == 0) next_revision_ = response.header().revision() + 1;
        *progressed = true;
        MutexLock lock(&mu_);
        created_ = true;
        cv_.SignalAll();
      }
      if (response.canceled()) {
        const std::string& reason = response.cancel_reason();
        if (!token.empty() &&
            (absl::StrContains(reason, "auth token") || absl::StrContains(reason, "auth store") ||
             absl::StrContains(reason, "permission denied"))) {
          // The token expired ("invalid auth token"; some versions say
          // "permission denied" for it): log in again and create the watch
          // anew (Run's backoff). A user without the right to read the key
          // keeps failing, and Watch() reports it.
          channels_->InvalidateToken(token);
          ctx.TryCancel();
          grpc::Status finished = stream->Finish();
          (void)finished;
          {
            MutexLock lock(&mu_);
            active_call_ = nullptr;
          }
          return absl::PermissionDeniedError(absl::StrCat("etcd ", ep.address, ": watch on '", key_,
                                                          "' refused: ", response.cancel_reason()));
        }
        if (response.compact_revision() > 0) {
          ended = absl::OutOfRangeError(
              absl::StrCat("etcd watch on '", key_, "': revision ", next_revision_,
                           " compacted (oldest kept: ", response.compact_revision(), ")"));
        } else {
          ended = absl::FailedPreconditionError(
              absl::StrCat("etcd cancelled the watch on '", key_, "': ", response.cancel_reason()));
        }
        break;
      }
      if (response.events_size() == 0) continue;
      events.clear();
      events.reserve(response.events_size());
      for (const mvccpb::Event& e : response.events()) {
        WatchEvent event;
        event.type =
            e.type() == mvccpb::Event::DELETE ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
        event.kv = internal::FromProto(e.kv());
        events.push_back(std::move(event));
      }
      next_revision_ = events.back().kv.mod_revision + 1;
      *progressed = true;
      options_.on_events(events, response.header().revision());
    }
  }
  ctx.TryCancel();
  grpc::Status finish = stream->Finish();
  {
    MutexLock lock(&mu_);
    active_call_ = nullptr;
    if (cancelled_) return absl::OkStatus();
  }
  if (!ended.ok()) {
    SHELF_LOG(WARNING) << "etcd watch ended" << Kv("key", key_) << Kv("why", ended.ToString());
    {
      MutexLock lock(&mu_);
      last_error_ = ended;
    }
    if (options_.on_error) options_.on_error(ended);
    return absl::OkStatus();
  }
  if (finish.ok() || finish.error_code() == grpc::StatusCode::CANCELLED) {
    return absl::UnavailableError(absl::StrCat("etcd ", ep.address, ": watch stream closed"));
  }
  return internal::FromGrpc(finish, ep);
}

bool EtcdWatchImpl::SleepMs(uint64_t ms) {
  uint64_t until = MonoMs() + ms;
  MutexLock lock(&mu_);
  while (!cancelled_) {
    uint64_t now = MonoMs();
    if (now >= until) return true;
    cv_.WaitFor(&mu_, std::chrono::milliseconds(until - now));
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdWatch>> EtcdClient::Watch(absl::string_view key,
                                                             WatchOptions options) {
  if (!options.on_events) return absl::InvalidArgumentError("Watch needs on_events");
  if (key.empty()) return absl::InvalidArgumentError("Watch needs a key");
  if (options.start_revision < 0) {
    return absl::InvalidArgumentError("Watch start_revision must be >= 0");
  }
  std::string range_end = options.prefix ? PrefixRangeEnd(key) : std::string();
  bool wait = options.start_revision == 0;
  auto watch = std::make_unique<EtcdWatchImpl>(channels_, std::string(key), std::move(range_end),
                                               std::move(options));
  watch->Start();
  if (wait) {
    const EtcdOptions& o = channels_->options();
    absl::Status s = watch->WaitCreated(o.attempts_max * (o.call_timeout_ms + o.backoff_max_ms));
    if (!s.ok()) {
      watch->Cancel();
      return s;
    }
  }
  return std::unique_ptr<EtcdWatch>(std::move(watch));
}

}  // namespace shelf::coord
