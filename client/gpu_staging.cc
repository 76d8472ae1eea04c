#include "client/gpu_staging.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"

#ifdef SHELF_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace shelf {

#ifdef SHELF_WITH_CUDA

namespace {

absl::Status CudaError(const char* what, cudaError_t e) {
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

// Runs `fn` with `device` current on this thread, then restores the
// caller's device: engine threads keep their own CUDA state.
template <typename Fn>
absl::Status OnDevice(int device, Fn fn) {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != device) {
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return CudaError("cudaSetDevice", e);
    }
  }
  absl::Status s = fn();
  if (previous >= 0 && previous != device) cudaSetDevice(previous);
  return s;
}

}  // namespace

struct GpuStaging::Buffer {
  char* host = nullptr;
  size_t capacity = 0;
  std::map<int, cudaStream_t> streams;  // per device, created on first use

  ~Buffer() {
    for (auto& entry : streams) {
      cudaStream_t stream = entry.second;
      OnDevice(entry.first, [stream] {
        cudaStreamDestroy(stream);
        return absl::OkStatus();
      }).IgnoreError();
    }
    if (host != nullptr) cudaFreeHost(host);
  }

  absl::StatusOr<cudaStream_t> Stream(int device) {
    auto it = streams.find(device);
    if (it != streams.end()) return it->second;
    cudaStream_t stream = nullptr;
    absl::Status s = OnDevice(device, [&] {
      cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      return e == cudaSuccess ? absl::OkStatus() : CudaError("cudaStreamCreate", e);
    });
    if (!s.ok()) return s;
    streams.emplace(device, stream);
    return stream;
  }
};

bool GpuStaging::Built() { return true; }

absl::Status GpuStaging::CheckDeviceMemory(const void* p, size_t n, int* device) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU buffer, but CUDA has no usable device: ",
                     e == cudaSuccess ? "no device" : cudaGetErrorString(e)));
  }
  cudaPointerAttributes attr;
  if (cudaError_t e = cudaPointerGetAttributes(&attr, p); e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error for later calls
    return absl::InvalidArgumentError(
        absl::StrCat("GPU buffer is not CUDA memory: ", cudaGetErrorString(e)));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return absl::InvalidArgumentError(
        "buffer registered as GPU memory is host memory: register it with gpu=false");
  }
  // The whole range must belong to the same device allocation family; CUDA
  // reports per pointer, so check the last byte too.
  cudaPointerAttributes last;
  const char* end = static_cast<const char*>(p) + n - 1;
  if (cudaPointerGetAttributes(&last, end) != cudaSuccess || last.device != attr.device ||
      (last.type != cudaMemoryTypeDevice && last.type != cudaMemoryTypeManaged)) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat("GPU buffer of ", n, " bytes runs past its device allocation"));
  }
  *device = attr.device;
  return absl::OkStatus();
}

absl::Status GpuStaging::CheckHostMemory(const void* p) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::OkStatus();  // no device: no device memory either
  }
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return absl::OkStatus();
  }
  if (attr.type == cudaMemoryTypeDevice) {
    return absl::InvalidArgumentError(
        "buffer registered as host memory is CUDA device memory: register it with gpu=true");
  }
  return absl::OkStatus();
}

GpuStaging::Bounce::~Bounce() {
  if (owner_ != nullptr && buffer_ != nullptr) owner_->Return(std::move(buffer_));
}

char* GpuStaging::Bounce::data() const { return buffer_->host; }

GpuStaging::GpuStaging(size_t buffers_max) : buffers_max_(std::max<size_t>(1, buffers_max)) {}

GpuStaging::~GpuStaging() = default;

absl::StatusOr<GpuStaging::Bounce> GpuStaging::Acquire(size_t bytes, uint64_t deadline_ms) {
  std::unique_ptr<Buffer> buffer;
  {
    absl::MutexLock lock(&mu_);
    auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !free_.empty() || lent_ < buffers_max_;
    };
    uint64_t now = MonoMs();
    if (!mu_.AwaitWithTimeout(absl::Condition(&available),
                              absl::Milliseconds(deadline_ms > now ? deadline_ms - now : 0))) {
      return absl::DeadlineExceededError(
          absl::StrCat("deadline passed waiting for one of ", buffers_max_, " GPU bounce buffers"));
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
  if (buffer == nullptr) buffer = std::make_unique<Buffer>();
  if (buffer->capacity < bytes) {
    if (buffer->host != nullptr) cudaFreeHost(buffer->host);
    buffer->host = nullptr;
    buffer->capacity = 0;
    void* p = nullptr;
    if (cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable); e != cudaSuccess) {
      cudaGetLastError();
      Return(std::move(buffer));
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate a pinned bounce buffer of ",
                                                       bytes, " bytes: ", cudaGetErrorString(e)));
    }
    buffer->host = static_cast<char*>(p);
    buffer->capacity = bytes;
  }
  return Bounce(this, std::move(buffer));
}

void GpuStaging::Return(std::unique_ptr<Buffer> buffer) {
  absl::MutexLock lock(&mu_);
  --lent_;
  free_.push_back(std::move(buffer));
}

absl::Status GpuStaging::ToDevice(int device, void* dst, const Bounce& bounce, size_t n) {
  return OnDevice(device, [&]() -> absl::Status {
    absl::StatusOr<cudaStream_t> stream = bounce.buffer_->Stream(device);
    if (!stream.ok()) return stream.status();
    cudaError_t e = cudaMemcpyAsync(dst, bounce.data(), n, cudaMemcpyHostToDevice, *stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(*stream);
    return e == cudaSuccess ? absl::OkStatus() : CudaError("cudaMemcpyAsync to device", e);
  });
}

absl::Status GpuStaging::FromDevice(int device, Bounce* bounce, const void* src, size_t n) {
  return OnDevice(device, [&]() -> absl::Status {
    absl::StatusOr<cudaStream_t> stream = bounce->buffer_->Stream(device);
    if (!stream.ok()) return stream.status();
    cudaError_t e = cudaMemcpyAsync(bounce->data(), src, n, cudaMemcpyDeviceToHost, *stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(*stream);
    return e == cudaSuccess ? absl::OkStatus() : CudaError("cudaMemcpyAsync from device", e);
  });
}

#else  // !SHELF_WITH_CUDA

namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError(
      "GPU buffers need libshelf built with CUDA (a CUDA toolkit found at configure time)");
}

}  // namespace

struct GpuStaging::Buffer {};

bool GpuStaging::Built() { return false; }

absl::Status GpuStaging::CheckDeviceMemory(const void*, size_t, int*) { return NoCuda(); }
absl::Status GpuStaging::CheckHostMemory(const void*) { return absl::OkStatus(); }

GpuStaging::Bounce::~Bounce() = default;
char* GpuStaging::Bounce::data() const { return nullptr; }

GpuStaging::GpuStaging(size_t buffers_max) : buffers_max_(buffers_max) {}
GpuStaging::~GpuStaging() = default;

absl::StatusOr<GpuStaging::Bounce> GpuStaging::Acquire(size_t, uint64_t) { return NoCuda(); }
void GpuStaging::Return(std::unique_ptr<Buffer>) {}
absl::Status GpuStaging::ToDevice(int, void*, const Bounce&, size_t) { return NoCuda(); }
absl::Status GpuStaging::FromDevice(int, Bounce*, const void*, size_t) { return NoCuda(); }

#endif  // SHELF_WITH_CUDA

// Both builds define Buffer above.
GpuStaging::Bounce::Bounce(GpuStaging* owner, std::unique_ptr<Buffer> buffer)
    : owner_(owner), buffer_(std::move(buffer)) {}

GpuStaging::Bounce::Bounce(Bounce&& other) noexcept
    : owner_(other.owner_), buffer_(std::move(other.buffer_)) {
  other.owner_ = nullptr;
}

}  // namespace shelf
