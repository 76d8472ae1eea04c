// EtcdClient::KeepAlive: one thread per lease that refreshes it and keeps the
// conservative local deadline described in etcd_client.h.
//
// Each refresh is one short LeaseKeepAlive stream (one request, one answer)
// with a deadline no later than the local deadline, so a hung or partitioned
// etcd can never hold the thread past the moment it must report the lease
// lost.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
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

class LeaseKeepAliveImpl final : public LeaseKeepAlive {
 public:
  LeaseKeepAliveImpl(std::shared_ptr<EtcdChannels> channels, const Lease& lease,
                     KeepAliveCallbacks callbacks)
      : channels_(std::move(channels)),
        lease_(lease),
        callbacks_(std::move(callbacks)),
        expiry_mono_ms_(lease.granted_mono_ms + static_cast<uint64_t>(lease.ttl_s) * 1000) {}

  ~LeaseKeepAliveImpl() override { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  void Stop() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      if (active_call_ != nullptr) active_call_->TryCancel();
      cv_.SignalAll();
    }
    MutexLock lock(&join_mu_);
    if (!thread_.joinable()) return;
    if (thread_.get_id() == std::this_thread::get_id()) {
      SHELF_LOG(ERROR) << "LeaseKeepAlive::Stop called from its own callback";
      std::abort();
    }
    thread_.join();
  }

  int64_t lease_id() const override { return lease_.id; }
  uint64_t expiry_mono_ms() const override { return expiry_mono_ms_.load(); }
  bool alive() const override { return MonoMs() < expiry_mono_ms_.load(); }

 private:
  void Run();
  // One refresh against endpoint `index`, bounded by `deadline_mono_ms`:
  // the TTL etcd answered, NOT_FOUND when the lease is gone, CANCELLED when
  // stopped, or the call's error.
  absl::StatusOr<int64_t> RefreshOnce(size_t index, uint64_t deadline_mono_ms);
  // Sleeps until `until_mono_ms`; false when stopped.
  bool SleepUntil(uint64_t until_mono_ms);
  bool stopping() {
    MutexLock lock(&mu_);
    return stopping_;
  }
  void Lost(const absl::Status& why);

  // Constant after construction.
  const std::shared_ptr<EtcdChannels> channels_;
  const Lease lease_;
  const KeepAliveCallbacks callbacks_;

  std::atomic<uint64_t> expiry_mono_ms_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_call_ ABSL_GUARDED_BY(mu_) = nullptr;
  Mutex join_mu_;  // serializes joins of thread_
  std::thread thread_;
};

void LeaseKeepAliveImpl::Run() {
  const uint64_t ttl_ms = static_cast<uint64_t>(lease_.ttl_s) * 1000;
  bool healthy = true;
  int failures = 0;
  uint64_t next_mono_ms = MonoMs();  // the first refresh goes out at once
  while (true) {
    uint64_t expiry = expiry_mono_ms_.load();
    if (!SleepUntil(std::min(next_mono_ms, expiry))) return;
    uint64_t now = MonoMs();
    if (now >= expiry) {
      Lost(absl::DeadlineExceededError(absl::StrCat(
          "etcd lease ", lease_.id, " presumed expired: no refresh acknowledged within its ",
          lease_.ttl_s, " s TTL")));
      return;
    }
    if (now < next_mono_ms) continue;

    size_t index = channels_->current();
    uint64_t deadline = std::min(now + channels_->options().call_timeout_ms, expiry);
    absl::StatusOr<int64_t> ttl_s = RefreshOnce(index, deadline);
    if (stopping()) return;
    if (ttl_s.ok()) {
      // etcd restarted the lease's clock no earlier than `now`.
      uint64_t answered_ttl_ms = static_cast<uint64_t>(*ttl_s) * 1000;
      expiry_mono_ms_.store(now + answered_ttl_ms);
      next_mono_ms = now + std::min(answered_ttl_ms, ttl_ms) / 3;
      failures = 0;
      if (!healthy) {
        healthy = true;
        SHELF_LOG(INFO) << "etcd lease refresh works again" << Kv("lease", lease_.id);
        if (callbacks_.on_health) callbacks_.on_health(absl::OkStatus());
      }
      continue;
    }
    if (absl::IsNotFound(ttl_s.status())) {
      Lost(ttl_s.status());
      return;
    }
    channels_->Failed(index);
    if (healthy) {
      healthy = false;
      SHELF_LOG(WARNING) << "etcd lease refresh failed" << Kv("lease", lease_.id)
                         << Kv("error", ttl_s.status().ToString());
      if (callbacks_.on_health) callbacks_.on_health(ttl_s.status());
    }
    next_mono_ms = MonoMs() + channels_->BackoffMs(failures++);
  }
}

absl::StatusOr<int64_t> LeaseKeepAliveImpl::RefreshOnce(size_t index, uint64_t deadline_mono_ms) {
  const EtcdEndpoint& ep = channels_->endpoint(index);
  grpc::ClientContext ctx;
  uint64_t now = MonoMs();
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(deadline_mono_ms > now ? deadline_mono_ms - now : 1));
  std::string token;
  if (absl::Status auth = channels_->Authorize(index, &ctx, &token); !auth.ok()) return auth;
  {
    MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("keepalive stopped");
    active_call_ = &ctx;
  }
  auto stream = ep.lease->LeaseKeepAlive(&ctx);
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease_.id);
  etcdserverpb::LeaseKeepAliveResponse response;
  bool answered = stream->Write(request) && stream->Read(&response);
  if (answered) {
    // A half-close lets etcd end the stream with OK.
    stream->WritesDone();
  }
  grpc::Status finish = stream->Finish();
  {
    MutexLock lock(&mu_);
    active_call_ = nullptr;
  }
  if (!answered) {
    if (finish.ok())
      return absl::UnavailableError(absl::StrCat("etcd ", ep.address, ": keepalive stream closed"));
    absl::Status s = internal::FromGrpc(finish, ep);
    if (internal::TokenRejected(s)) channels_->InvalidateToken(token);  // the next try logs in
    return s;
  }
  if (response.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease_.id, " expired or revoked"));
  }
  return response.ttl();
}

bool LeaseKeepAliveImpl::SleepUntil(uint64_t until_mono_ms) {
  MutexLock lock(&mu_);
  while (!stopping_) {
    uint64_t now = MonoMs();
    if (now >= until_mono_ms) return true;
    cv_.WaitFor(&mu_, std::chrono::milliseconds(until_mono_ms - now));
  }
  return false;
}

void LeaseKeepAliveImpl::Lost(const absl::Status& why) {
  expiry_mono_ms_.store(0);
  SHELF_LOG(WARNING) << "etcd lease lost" << Kv("lease", lease_.id) << Kv("why", why.ToString());
  callbacks_.on_lost(why);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LeaseKeepAlive>> EtcdClient::KeepAlive(
    const Lease& lease, KeepAliveCallbacks callbacks) {
  if (!callbacks.on_lost) return absl::InvalidArgumentError("KeepAlive needs on_lost");
  if (lease.id == 0 || lease.ttl_s < 1) {
    return absl::InvalidArgumentError("KeepAlive needs a granted lease");
  }
  auto keepalive = std::make_unique<LeaseKeepAliveImpl>(channels_, lease, std::move(callbacks));
  keepalive->Start();
  return std::unique_ptr<LeaseKeepAlive>(std::move(keepalive));
}

}  // namespace shelf::coord
