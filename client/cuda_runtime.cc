#include "client/cuda_runtime.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

#ifdef SHELF_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace shelf {
namespace {

// The CUDA driver API's cuPointerGetAttribute and the values this file
// asks it for (cuda.h: CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
// CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_MEMORYTYPE_DEVICE, CUDA_SUCCESS).
using CuPointerGetAttribute = int (*)(void* data, int attribute, unsigned long long pointer);
constexpr int kCuPointerAttributeMemoryType = 2;
constexpr int kCuPointerAttributeIsManaged = 8;
constexpr unsigned kCuMemoryTypeDevice = 2;
constexpr int kCuSuccess = 0;

// The path the process loaded the CUDA driver from (a file named
// libcuda.so or libcuda.so.N), or empty. Reads the loaded objects in
// memory: no file is opened (a dlopen by bare name, even RTLD_NOLOAD,
// searches the library path on disk).
std::string LoadedDriverPath() {
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        const char* name = info->dlpi_name;
        if (name == nullptr) return 0;
        const char* slash = std::strrchr(name, '/');
        const char* base = slash == nullptr ? name : slash + 1;
        if (std::strncmp(base, "libcuda.so", std::strlen("libcuda.so")) != 0) return 0;
        *static_cast<std::string*>(out) = name;
        return 1;
      },
      &path);
  return path;
}

// A function of the CUDA driver, when the process has loaded it (a
// framework such as torch does before it makes device memory); null when
// it has not, or the driver lacks `name`. Looked up without loading
// anything, and again on each call until found (the driver may be loaded
// later); `found` keeps it once found.
void* LoadedDriverSymbol(const char* name, std::atomic<void*>* found) {
  if (void* f = found->load(std::memory_order_acquire); f != nullptr) return f;
  const std::string path = LoadedDriverPath();
  if (path.empty()) return nullptr;
  void* driver = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return nullptr;
  void* f = dlsym(driver, name);
  if (f != nullptr) found->store(f, std::memory_order_release);
  return f;  // the reference dlopen took stays: the driver is never unloaded
}

// cuPointerGetAttribute; null without a loaded driver, and then no memory
// of the process is device memory.
CuPointerGetAttribute LoadedDriverPointerGetAttribute() {
  static std::atomic<void*> found{nullptr};
  return reinterpret_cast<CuPointerGetAttribute>(
      LoadedDriverSymbol("cuPointerGetAttribute", &found));
}

// The driver's synchronous copies (cuda.h: cuMemcpyDtoH_v2, cuMemcpyHtoD_v2).
using CuMemcpyDtoH = int (*)(void* dst_host, unsigned long long src_device, size_t n);
using CuMemcpyHtoD = int (*)(unsigned long long dst_device, const void* src_host, size_t n);

CuMemcpyDtoH LoadedDriverMemcpyDtoH() {
  static std::atomic<void*> found{nullptr};
  return reinterpret_cast<CuMemcpyDtoH>(LoadedDriverSymbol("cuMemcpyDtoH_v2", &found));
}

CuMemcpyHtoD LoadedDriverMemcpyHtoD() {
  static std::atomic<void*> found{nullptr};
  return reinterpret_cast<CuMemcpyHtoD>(LoadedDriverSymbol("cuMemcpyHtoD_v2", &found));
}

bool RuntimeReachesDevice(CudaRuntime* runtime) {
  int devices = 0;
  return runtime->DeviceCount(&devices).ok() && devices > 0;
}

// What the loaded driver says `p` is; an error when no driver is loaded
// or it does not know `p` (then `p` is host memory).
absl::Status DriverPointerAttributes(const void* p, CudaRuntime::PointerInfo* info) {
  CuPointerGetAttribute get = LoadedDriverPointerGetAttribute();
  if (get == nullptr) return absl::NotFoundError("no CUDA driver loaded");
  const auto address = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p));
  unsigned memory_type = 0;
  if (int e = get(&memory_type, kCuPointerAttributeMemoryType, address); e != kCuSuccess) {
    return absl::NotFoundError(absl::StrCat("cuPointerGetAttribute: CUresult ", e));
  }
  unsigned managed = 0;
  if (get(&managed, kCuPointerAttributeIsManaged, address) != kCuSuccess) managed = 0;
  info->type = managed != 0                         ? CudaRuntime::MemoryType::kManaged
               : memory_type == kCuMemoryTypeDevice ? CudaRuntime::MemoryType::kDevice
                                                    : CudaRuntime::MemoryType::kHost;
  info->device = 0;
  return absl::OkStatus();
}

#ifdef SHELF_WITH_CUDA

absl::Status Check(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  // Clears a non-sticky error so that it does not show in a later call.
  cudaGetLastError();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

cudaStream_t AsStream(CudaRuntime::Stream s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t AsEvent(CudaRuntime::Event e) { return static_cast<cudaEvent_t>(e); }

class RealCudaRuntime final : public CudaRuntime {
 public:
  bool Built() const override { return true; }
  // Whether the runtime starts in this process: a driver and a device it
  // can use. Asked once; a runtime that failed to start stays so.
  static bool Starts() {
    static const bool starts = [] {
      int count = 0;
      bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
      cudaGetLastError();  // clears the error of a failed start
      return ok;
    }();
    return starts;
  }
  absl::Status DeviceCount(int* count) override {
    return Check("cudaGetDeviceCount", cudaGetDeviceCount(count));
  }
  absl::Status GetDevice(int* device) override {
    return Check("cudaGetDevice", cudaGetDevice(device));
  }
  absl::Status SetDevice(int device) override {
    return Check("cudaSetDevice", cudaSetDevice(device));
  }
  absl::Status PointerAttributes(const void* p, PointerInfo* info) override {
    // A runtime that cannot start (no driver, or no device it can use)
    // leaves the driver the process loaded, if any, to say what `p` is;
    // asking the runtime again would retry its start on every call.
    if (!Starts()) return DriverPointerAttributes(p, info);
    cudaPointerAttributes attr;
    if (absl::Status s = Check("cudaPointerGetAttributes", cudaPointerGetAttributes(&attr, p));
        !s.ok()) {
      return s;
    }
    info->type = attr.type == cudaMemoryTypeDevice    ? MemoryType::kDevice
                 : attr.type == cudaMemoryTypeManaged ? MemoryType::kManaged
                                                      : MemoryType::kHost;
    info->device = attr.device;
    return absl::OkStatus();
  }
  absl::Status HostAlloc(size_t bytes, void** p) override {
    return Check("cudaHostAlloc", cudaHostAlloc(p, bytes, cudaHostAllocPortable));
  }
  void FreeHost(void* p) override { cudaFreeHost(p); }
  absl::Status StreamCreate(Stream* stream) override {
    cudaStream_t s = nullptr;
    absl::Status st =
        Check("cudaStreamCreate", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return st;
  }
  void StreamDestroy(Stream stream) override { cudaStreamDestroy(AsStream(stream)); }
  absl::Status EventCreate(Event* event) override {
    cudaEvent_t e = nullptr;
    absl::Status st =
        Check("cudaEventCreate", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *event = e;
    return st;
  }
  void EventDestroy(Event event) override { cudaEventDestroy(AsEvent(event)); }
  absl::Status EventRecord(Event event, Stream stream) override {
    return Check("cudaEventRecord", cudaEventRecord(AsEvent(event), AsStream(stream)));
  }
  absl::Status StreamWaitEvent(Stream stream, Event event) override {
    return Check("cudaStreamWaitEvent", cudaStreamWaitEvent(AsStream(stream), AsEvent(event), 0));
  }
  absl::Status MemcpyAsync(void* dst, const void* src, size_t n, CopyKind kind,
                           Stream stream) override {
    return Check(kind == CopyKind::kHostToDevice ? "cudaMemcpyAsync to device"
                                                 : "cudaMemcpyAsync from device",
                 cudaMemcpyAsync(dst, src, n,
                                 kind == CopyKind::kHostToDevice ? cudaMemcpyHostToDevice
                                                                 : cudaMemcpyDeviceToHost,
                                 AsStream(stream)));
  }
  absl::Status StreamSynchronize(Stream stream) override {
    return Check("cudaStreamSynchronize", cudaStreamSynchronize(AsStream(stream)));
  }
  absl::Status EventSynchronize(Event event) override {
    return Check("cudaEventSynchronize", cudaEventSynchronize(AsEvent(event)));
  }
};

#else  // !SHELF_WITH_CUDA

absl::Status NoCuda() {
  return absl::UnimplementedError(
      "GPU buffers need libshelf built with CUDA (a CUDA toolkit found at configure time)");
}

class NoCudaRuntime final : public CudaRuntime {
 public:
  bool Built() const override { return false; }
  absl::Status DeviceCount(int*) override { return NoCuda(); }
  absl::Status GetDevice(int*) override { return NoCuda(); }
  absl::Status SetDevice(int) override { return NoCuda(); }
  // A build without the toolkit still tells device memory from host
  // memory, through the CUDA driver the process loaded, so that device
  // memory is refused rather than touched from the host.
  absl::Status PointerAttributes(const void* p, PointerInfo* info) override {
    return DriverPointerAttributes(p, info);
  }
  absl::Status HostAlloc(size_t, void**) override { return NoCuda(); }
  void FreeHost(void*) override {}
  absl::Status StreamCreate(Stream*) override { return NoCuda(); }
  void StreamDestroy(Stream) override {}
  absl::Status EventCreate(Event*) override { return NoCuda(); }
  void EventDestroy(Event) override {}
  absl::Status EventRecord(Event, Stream) override { return NoCuda(); }
  absl::Status StreamWaitEvent(Stream, Event) override { return NoCuda(); }
  absl::Status MemcpyAsync(void*, const void*, size_t, CopyKind, Stream) override {
    return NoCuda();
  }
  absl::Status StreamSynchronize(Stream) override { return NoCuda(); }
  absl::Status EventSynchronize(Event) override { return NoCuda(); }
};

#endif  // SHELF_WITH_CUDA

}  // namespace

CudaRuntime* CudaRuntime::Default() {
#ifdef SHELF_WITH_CUDA
  static RealCudaRuntime* runtime = new RealCudaRuntime();
#else
  static NoCudaRuntime* runtime = new NoCudaRuntime();
#endif
  return runtime;
}

bool CanCopyDeviceMemory(CudaRuntime* runtime) {
  return RuntimeReachesDevice(runtime) ||
         (LoadedDriverMemcpyDtoH() != nullptr && LoadedDriverMemcpyHtoD() != nullptr);
}

absl::Status CopyDeviceMemory(CudaRuntime* runtime, void* dst, const void* src, size_t n,
                              CudaRuntime::CopyKind kind) {
  if (n == 0) return absl::OkStatus();
  if (RuntimeReachesDevice(runtime)) {
    // The legacy default stream, then a wait for it: the copy is done, and
    // ordered after the work the caller enqueued there.
    if (absl::Status s = runtime->MemcpyAsync(dst, src, n, kind, nullptr); !s.ok()) return s;
    return runtime->StreamSynchronize(nullptr);
  }
  int e = 0;
  if (kind == CudaRuntime::CopyKind::kDeviceToHost) {
    CuMemcpyDtoH copy = LoadedDriverMemcpyDtoH();
    if (copy == nullptr) return absl::FailedPreconditionError("no CUDA driver to copy with");
    e = copy(dst, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(src)), n);
  } else {
    CuMemcpyHtoD copy = LoadedDriverMemcpyHtoD();
    if (copy == nullptr) return absl::FailedPreconditionError("no CUDA driver to copy with");
    e = copy(static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(dst)), src, n);
  }
  if (e != kCuSuccess) return absl::InternalError(absl::StrCat("cuMemcpy: CUresult ", e));
  return absl::OkStatus();
}

}  // namespace shelf
