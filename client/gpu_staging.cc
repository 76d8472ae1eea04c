#include "client/gpu_staging.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace shelf {

namespace {

// Runs fn() with `device` current on this thread, then restores the
// caller's device: engine threads keep their own CUDA state.
template <typename Fn>
absl::Status OnDevice(CudaRuntime* cuda, int device, Fn fn) {
  int previous = -1;
  if (!cuda->GetDevice(&previous).ok()) previous = -1;
  if (previous != device) {
    if (absl::Status s = cuda->SetDevice(device); !s.ok()) return s;
  }
  absl::Status s = fn();
  if (previous >= 0 && previous != device) cuda->SetDevice(previous).IgnoreError();
  return s;
}

}  // namespace

struct GpuStaging::Buffer {
  // A stream for the copies of this buffer on one device, and an event
  // for ordering them with the caller's streams.
  struct Lane {
    CudaRuntime::Stream stream = nullptr;
    CudaRuntime::Event event = nullptr;
  };

  explicit Buffer(CudaRuntime* c) : cuda(c) {}
  ~Buffer() {
    WaitPending().IgnoreError();
    for (auto& entry : lanes) {
      const Lane& lane = entry.second;
      OnDevice(cuda, entry.first, [this, &lane] {
        if (lane.event != nullptr) cuda->EventDestroy(lane.event);
        cuda->StreamDestroy(lane.stream);
        return absl::OkStatus();
      }).IgnoreError();
    }
    if (host != nullptr) cuda->FreeHost(host);
  }

  // The lane of `device`, created on first use. REQUIRES: `device` current.
  absl::StatusOr<Lane*> LaneOf(int device) {
    auto it = lanes.find(device);
    if (it != lanes.end()) return &it->second;
    Lane lane;
    if (absl::Status s = cuda->StreamCreate(&lane.stream); !s.ok()) return s;
    if (absl::Status s = cuda->EventCreate(&lane.event); !s.ok()) {
      cuda->StreamDestroy(lane.stream);
      return s;
    }
    return &lanes.emplace(device, lane).first->second;
  }

  // Waits for the copy out of `host` still in flight, if any.
  absl::Status WaitPending() {
    if (pending == nullptr) return absl::OkStatus();
    CudaRuntime::Event e = pending;
    pending = nullptr;
    return OnDevice(cuda, pending_device, [&] { return cuda->EventSynchronize(e); });
  }

  CudaRuntime* const cuda;
  char* host = nullptr;
  size_t capacity = 0;
  std::map<int, Lane> lanes;  // per device
  // Set while an asynchronous copy to device memory may still read `host`
  // (ToDevice with a GpuSync): the event recorded after it, on the lane of
  // `pending_device`.
  CudaRuntime::Event pending = nullptr;
  int pending_device = 0;
};

bool GpuStaging::Built() { return CudaRuntime::Default()->Built(); }

absl::Status GpuStaging::CheckDeviceMemory(const void* p, size_t n, int* device) {
  int count = 0;
  absl::Status s = cuda_->DeviceCount(&count);
  if (s.code() == absl::StatusCode::kUnimplemented) return s;  // no CUDA built in
  if (!s.ok() || count == 0) {
    return absl::FailedPreconditionError(absl::StrCat("GPU buffer, but CUDA has no usable device: ",
                                                      s.ok() ? "no device" : s.message()));
  }
  CudaRuntime::PointerInfo first;
  if (s = cuda_->PointerAttributes(p, &first); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("GPU buffer is not CUDA memory: ", s.message()));
  }
  if (first.type == CudaRuntime::MemoryType::kHost) {
    return absl::InvalidArgumentError(
        "buffer registered as GPU memory is host memory: register it with gpu=false");
  }
  // The whole range must belong to the same device allocation family; CUDA
  // reports per pointer, so check the last byte too.
  CudaRuntime::PointerInfo last;
  const char* end = static_cast<const char*>(p) + n - 1;
  if (!cuda_->PointerAttributes(end, &last).ok() || last.device != first.device ||
      last.type == CudaRuntime::MemoryType::kHost) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU buffer of ", n, " bytes runs past its device allocation"));
  }
  *device = first.device;
  return absl::OkStatus();
}

absl::Status GpuStaging::CheckHostMemory(const void* p) {
  // Memory the runtime does not know (or, where it cannot answer, that no
  // loaded CUDA driver knows: cuda_runtime.cc) is host memory.
  CudaRuntime::PointerInfo info;
  if (!cuda_->PointerAttributes(p, &info).ok()) return absl::OkStatus();
  if (info.type == CudaRuntime::MemoryType::kDevice) {
    return absl::InvalidArgumentError(
        "buffer registered as host memory is CUDA device memory: register it with gpu=true");
  }
  return absl::OkStatus();
}

GpuStaging::Bounce::~Bounce() {
  if (owner_ != nullptr && buffer_ != nullptr) owner_->Return(std::move(buffer_));
}

char* GpuStaging::Bounce::data() const { return buffer_->host; }

GpuStaging::GpuStaging(size_t buffers_max, CudaRuntime* cuda)
    : cuda_(cuda), buffers_max_(std::max<size_t>(1, buffers_max)) {}

GpuStaging::~GpuStaging() = default;

absl::StatusOr<GpuStaging::Bounce> GpuStaging::Acquire(size_t bytes, uint64_t deadline_ms) {
  std::unique_ptr<Buffer> buffer;
  {
    MutexLock lock(&mu_);
    while (free_.empty() && lent_ >= buffers_max_) {
      uint64_t now = MonoMs();
      if (now >= deadline_ms) {
        return absl::DeadlineExceededError(absl::StrCat("deadline passed waiting for one of ",
                                                        buffers_max_, " GPU bounce buffers"));
      }
      returned_.WaitFor(&mu_, std::chrono::milliseconds(deadline_ms - now));
    }
    ++lent_;
    if (!free_.empty()) {
      // The largest first: a block that fits is never reallocated.
      auto it = std::max_element(free_.begin(), free_.end(), [](const auto& a, const auto& b) {
        return a->capacity < b->capacity;
      });
      buffer = std::move(*it);
      free_.erase(it);
    }
  }
  if (buffer == nullptr) buffer = std::make_unique<Buffer>(cuda_);
  // The host writes into the buffer next: a copy still reading it must end.
  if (absl::Status s = buffer->WaitPending(); !s.ok()) {
    Return(std::move(buffer));
    return s;
  }
  if (buffer->capacity < bytes) {
    if (buffer->host != nullptr) cuda_->FreeHost(buffer->host);
    buffer->host = nullptr;
    buffer->capacity = 0;
    void* p = nullptr;
    if (absl::Status s = cuda_->HostAlloc(bytes, &p); !s.ok()) {
      Return(std::move(buffer));
      if (s.code() == absl::StatusCode::kUnimplemented) return s;
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate a pinned bounce buffer of ",
                                                       bytes, " bytes: ", s.message()));
    }
    buffer->host = static_cast<char*>(p);
    buffer->capacity = bytes;
  }
  return Bounce(this, std::move(buffer));
}

void GpuStaging::Return(std::unique_ptr<Buffer> buffer) {
  MutexLock lock(&mu_);
  --lent_;
  free_.push_back(std::move(buffer));
  returned_.Signal();
}

absl::Status GpuStaging::FromDevice(int device, Bounce* bounce, const void* src, size_t n,
                                    const GpuSync& sync) {
  Buffer* buffer = bounce->buffer_.get();
  return OnDevice(cuda_, device, [&]() -> absl::Status {
    absl::StatusOr<Buffer::Lane*> lane = buffer->LaneOf(device);
    if (!lane.ok()) return lane.status();
    const CudaRuntime::Stream stream = (*lane)->stream;
    // The copy must not read device memory before the caller's writes to
    // it are done: they are on the caller's stream, or before its event.
    if (sync.event != nullptr) {
      if (absl::Status s = cuda_->StreamWaitEvent(stream, sync.event); !s.ok()) return s;
    }
    if (sync.stream != nullptr) {
      if (absl::Status s = cuda_->EventRecord((*lane)->event, sync.stream); !s.ok()) return s;
      if (absl::Status s = cuda_->StreamWaitEvent(stream, (*lane)->event); !s.ok()) return s;
    }
    absl::Status s =
        cuda_->MemcpyAsync(bounce->data(), src, n, CudaRuntime::CopyKind::kDeviceToHost, stream);
    // Waited for also after a failed enqueue: nothing of this call may
    // still run when the bounce is reused.
    absl::Status done = cuda_->StreamSynchronize(stream);
    return s.ok() ? done : s;
  });
}

absl::Status GpuStaging::ToDevice(int device, void* dst, const Bounce& bounce, size_t n,
                                  const GpuSync& sync) {
  Buffer* buffer = bounce.buffer_.get();
  return OnDevice(cuda_, device, [&]() -> absl::Status {
    absl::StatusOr<Buffer::Lane*> lane = buffer->LaneOf(device);
    if (!lane.ok()) return lane.status();
    const CudaRuntime::Stream stream = (*lane)->stream;
    const CudaRuntime::Event event = (*lane)->event;
    // The copy must not overwrite device memory that work already on the
    // caller's stream still reads or writes.
    if (sync.stream != nullptr) {
      if (absl::Status s = cuda_->EventRecord(event, sync.stream); !s.ok()) return s;
      if (absl::Status s = cuda_->StreamWaitEvent(stream, event); !s.ok()) return s;
    }
    absl::Status s =
        cuda_->MemcpyAsync(dst, bounce.data(), n, CudaRuntime::CopyKind::kHostToDevice, stream);
    if (s.ok() && (sync.stream != nullptr || sync.event != nullptr)) {
      // The caller's work after the call waits on the GPU, not the host.
      // A wait captures the event as recorded at the time of the call, so
      // recording `event` again here does not disturb the wait above.
      s = cuda_->EventRecord(event, stream);
      if (s.ok() && sync.event != nullptr) s = cuda_->EventRecord(sync.event, stream);
      if (s.ok() && sync.stream != nullptr) s = cuda_->StreamWaitEvent(sync.stream, event);
      if (s.ok()) {
        buffer->pending = event;
        buffer->pending_device = device;
        return absl::OkStatus();
      }
    }
    absl::Status done = cuda_->StreamSynchronize(stream);
    return s.ok() ? done : s;
  });
}

absl::Status GpuStaging::AwaitBeforeDirect(int device, const GpuSync& sync) {
  if (sync.stream == nullptr) return absl::OkStatus();
  return OnDevice(cuda_, device, [&] { return cuda_->StreamSynchronize(sync.stream); });
}

absl::Status GpuStaging::RecordOnStream(int device, const GpuSync& sync) {
  if (sync.stream == nullptr || sync.event == nullptr) return absl::OkStatus();
  return OnDevice(cuda_, device, [&] { return cuda_->EventRecord(sync.event, sync.stream); });
}

GpuStaging::Bounce::Bounce(GpuStaging* owner, std::unique_ptr<Buffer> buffer)
    : owner_(owner), buffer_(std::move(buffer)) {}

GpuStaging::Bounce::Bounce(Bounce&& other) noexcept
    : owner_(other.owner_), buffer_(std::move(other.buffer_)) {
  other.owner_ = nullptr;
}

}  // namespace shelf
