#include "client/call_streams.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/rpc.h"

namespace shelf {
namespace {

// The master's answers that mean "no streams here", given before it reads
// a call: the call was not run, and is made unary instead.
bool Refusal(grpc::StatusCode code) {
  return code == grpc::StatusCode::RESOURCE_EXHAUSTED || code == grpc::StatusCode::UNIMPLEMENTED ||
         code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED;
}

}  // namespace

CallStreams::CallStreams(size_t streams_max, std::string token)
    : streams_max_(streams_max), token_(std::move(token)) {
  if (streams_max_ > 0) watchdog_ = std::thread([this] { Watch(); });
}

CallStreams::~CallStreams() {
  std::vector<std::unique_ptr<Stream>> idle;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
    for (auto& [unused, pool] : pools_) {
      for (std::unique_ptr<Stream>& s : pool.idle) idle.push_back(std::move(s));
      pool.idle.clear();
    }
  }
  if (watchdog_.joinable()) watchdog_.join();
  for (std::unique_ptr<Stream>& s : idle) {
    s->context.TryCancel();
    s->rw->Finish().IgnoreError();
  }
}

uint64_t CallStreams::calls() const { return calls_.load(std::memory_order_relaxed); }

size_t CallStreams::open_streams() {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [unused, pool] : pools_) n += pool.open;
  return n;
}

absl::Status CallStreams::Call(const std::string& address, v1::MasterService::Stub* stub,
                               v1::StreamedCallRequest* request, v1::StreamedCallResponse* response,
                               uint64_t deadline_ms, bool* sent) {
  *sent = false;
  if (streams_max_ == 0) return absl::OkStatus();
  std::unique_ptr<Stream> s;
  {
    MutexLock lock(&mu_);
    if (stopping_) return absl::OkStatus();
    Pool& pool = pools_[address];
    if (MonoMs() < pool.refused_until_ms) return absl::OkStatus();
    if (!pool.idle.empty()) {
      s = std::move(pool.idle.back());
      pool.idle.pop_back();
    } else if (pool.open < streams_max_) {
      ++pool.open;
    } else {
      return absl::OkStatus();  // every stream busy: unary
    }
    request->set_id(next_id_++);
  }
  const bool fresh = s == nullptr;
  if (fresh) {
    s = std::make_unique<Stream>();
    s->address = address;
    if (!token_.empty()) s->context.AddMetadata(kTokenHeader, token_);
  }
  {
    // Watched from before the stream opens: opening waits for a
    // connection, which the deadline bounds too.
    MutexLock lock(&mu_);
    s->deadline_ms = deadline_ms;
    busy_.push_back(s.get());
    changed_.Signal();  // the watchdog may need to wake sooner
  }
  if (fresh) s->rw = stub->Calls(&s->context);
  bool ok = s->rw->Write(*request) && s->rw->Read(response);
  ok = ok && response->id() == request->id();
  {
    MutexLock lock(&mu_);
    busy_.erase(std::find(busy_.begin(), busy_.end(), s.get()));
    if (ok) {
      s->answered_once = true;
      s->idle_since_ms = MonoMs();
      if (!stopping_) {
        *sent = true;
        calls_.fetch_add(1, std::memory_order_relaxed);
        const v1::RpcStatus& st = response->status();
        pools_[address].idle.push_back(std::move(s));
        return absl::Status(static_cast<absl::StatusCode>(st.code()), st.message());
      }
    }
  }
  if (ok) {
    // Answered while the client closes: the answer stands.
    *sent = true;
    calls_.fetch_add(1, std::memory_order_relaxed);
    const v1::RpcStatus& st = response->status();
    absl::Status status(static_cast<absl::StatusCode>(st.code()), st.message());
    Drop(std::move(s));
    return status;
  }
  // Broken, cancelled at the deadline, or refused.
  const bool answered_before = s->answered_once;
  s->context.TryCancel();
  const grpc::Status finished = s->rw->Finish();
  {
    MutexLock lock(&mu_);
    Pool& pool = pools_[address];
    --pool.open;
    if (!answered_before && Refusal(finished.error_code())) {
      pool.refused_until_ms = MonoMs() + kRefusedBackoffMs;
    }
  }
  // A stream that never answered ran nothing we know of: the caller makes
  // the call unary (the master's refusal, or its unreachability, then
  // speaks for itself).
  if (!answered_before) return absl::OkStatus();
  *sent = true;
  if (MonoMs() >= deadline_ms) {
    return absl::DeadlineExceededError("master call: the deadline passed on its call stream");
  }
  return absl::UnavailableError(
      absl::StrCat("master call stream to ", address, " broke: ", finished.error_message()));
}

void CallStreams::Drop(std::unique_ptr<Stream> stream) {
  stream->context.TryCancel();
  stream->rw->Finish().IgnoreError();
  MutexLock lock(&mu_);
  --pools_[stream->address].open;
}

void CallStreams::Watch() {
  for (;;) {
    std::vector<std::unique_ptr<Stream>> idle_long;
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      const uint64_t now = MonoMs();
      uint64_t wake = now + kIdleCloseMs;
      for (Stream* s : busy_) {
        if (s->deadline_ms <= now) {
          s->context.TryCancel();  // its call ends DEADLINE_EXCEEDED
          s->deadline_ms = UINT64_MAX;
        } else {
          wake = std::min(wake, s->deadline_ms);
        }
      }
      for (auto& [unused, pool] : pools_) {
        for (auto it = pool.idle.begin(); it != pool.idle.end();) {
          const uint64_t close_at = (*it)->idle_since_ms + kIdleCloseMs;
          if (close_at <= now) {
            idle_long.push_back(std::move(*it));
            it = pool.idle.erase(it);
          } else {
            wake = std::min(wake, close_at);
            ++it;
          }
        }
      }
      if (idle_long.empty()) {
        changed_.WaitFor(&mu_, std::chrono::milliseconds(std::max<uint64_t>(wake - now, 1)));
        continue;
      }
    }
    for (std::unique_ptr<Stream>& s : idle_long) Drop(std::move(s));
  }
}

}  // namespace shelf
