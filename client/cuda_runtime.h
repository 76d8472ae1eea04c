// CudaRuntime: the handful of CUDA runtime calls libshelf's GPU staging
// (gpu_staging.h) makes, behind one interface, so the staging logic (which
// stream waits on what, which copy follows which) is tested with a
// simulated GPU (tests/client/fake_cuda_runtime.h) where there is none.
// Internal to libshelf.
//
//   CudaRuntime* cuda = CudaRuntime::Default();
//   CudaRuntime::Stream s = nullptr;
//   if (cuda->StreamCreate(&s).ok()) {
//     cuda->MemcpyAsync(host, device_ptr, n, CudaRuntime::CopyKind::kDeviceToHost, s);
//     cuda->StreamSynchronize(s);
//   }
//
// Handles are CUDA's own (a Stream is a cudaStream_t, an Event a
// cudaEvent_t), carried as void* so that this header needs no CUDA header.
// Every call that can fail returns a Status: INTERNAL with CUDA's error name
// and message; UNIMPLEMENTED where no CUDA runtime library can be loaded.
// Calls act on the calling thread's current device (SetDevice), as CUDA's.
//
// Thread-safe, as the CUDA runtime is.
#ifndef SHELF_CLIENT_CUDA_RUNTIME_H_
#define SHELF_CLIENT_CUDA_RUNTIME_H_

#include <cstddef>

#include "absl/status/status.h"

namespace shelf {

class CudaRuntime {
 public:
  using Stream = void*;  // cudaStream_t
  using Event = void*;   // cudaEvent_t
  enum class CopyKind { kHostToDevice, kDeviceToHost };
  enum class MemoryType { kHost, kDevice, kManaged };
  struct PointerInfo {
    MemoryType type = MemoryType::kHost;  // kHost also for pinned host memory
    int device = 0;                       // kDevice and kManaged only
  };

  // The process's CUDA runtime (static; lives forever): libcudart loaded at
  // run time on first use (the one the process already loaded, else
  // libcudart.so.13, .12, .11.0, libcudart.so on the library path, else
  // /usr/local/cuda/lib64), nothing linked in; where none loads, one that
  // answers UNIMPLEMENTED, naming what was tried, to every call.
  static CudaRuntime* Default();

  virtual ~CudaRuntime() = default;

  // True when this runtime can reach a GPU at all (a libcudart loaded).
  virtual bool Built() const = 0;
  // The number of usable devices; an error with no driver.
  virtual absl::Status DeviceCount(int* count) = 0;
  virtual absl::Status GetDevice(int* device) = 0;
  virtual absl::Status SetDevice(int device) = 0;
  // What kind of memory `p` is. An error for memory CUDA does not know in
  // a way it reports as one (the error is cleared, not left sticky).
  virtual absl::Status PointerAttributes(const void* p, PointerInfo* info) = 0;

  // Pinned, portable host memory; freed with FreeHost.
  virtual absl::Status HostAlloc(size_t bytes, void** p) = 0;
  virtual void FreeHost(void* p) = 0;
  // A stream that does not synchronize with the legacy default stream.
  virtual absl::Status StreamCreate(Stream* stream) = 0;
  virtual void StreamDestroy(Stream stream) = 0;
  // An event without timing (the cheapest kind to record and wait on).
  virtual absl::Status EventCreate(Event* event) = 0;
  virtual void EventDestroy(Event event) = 0;

  // Captures the work enqueued on `stream` so far in `event`.
  virtual absl::Status EventRecord(Event event, Stream stream) = 0;
  // Work enqueued on `stream` after this call waits for the work `event`
  // last captured. An event never recorded is complete.
  virtual absl::Status StreamWaitEvent(Stream stream, Event event) = 0;
  virtual absl::Status MemcpyAsync(void* dst, const void* src, size_t n, CopyKind kind,
                                   Stream stream) = 0;
  // Blocks the host until the work enqueued on `stream` (or captured by
  // `event`) is done; the error of a failed asynchronous operation shows
  // here.
  virtual absl::Status StreamSynchronize(Stream stream) = 0;
  virtual absl::Status EventSynchronize(Event event) = 0;
};

// Copies `n` bytes between host and device memory (`kind`), synchronously,
// with the calling thread's current CUDA context: through `runtime` when it
// reaches a device, else through the loaded driver's cuMemcpyDtoH_v2 /
// cuMemcpyHtoD_v2 (a process whose framework loaded the driver, where the
// runtime of this build cannot start). FAILED_PRECONDITION when neither can;
// INTERNAL with CUDA's error when the copy fails.
absl::Status CopyDeviceMemory(CudaRuntime* runtime, void* dst, const void* src, size_t n,
                              CudaRuntime::CopyKind kind);
// Whether CopyDeviceMemory has a way to copy in this process.
bool CanCopyDeviceMemory(CudaRuntime* runtime);

}  // namespace shelf

#endif  // SHELF_CLIENT_CUDA_RUNTIME_H_
