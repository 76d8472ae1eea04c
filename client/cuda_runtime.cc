#include "client/cuda_runtime.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

// The path the process loaded a library named `prefix`* from (libcuda.so
// and libcuda.so.N for the driver), or empty. Reads the loaded objects in
// memory: no file is opened (a dlopen by bare name, even RTLD_NOLOAD,
// searches the library path on disk).
std::string LoadedLibraryPath(const char* prefix) {
  struct Search {
    const char* prefix;
    std::string path;
  } search{prefix, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        auto* s = static_cast<Search*>(out);
        const char* name = info->dlpi_name;
        if (name == nullptr) return 0;
        const char* slash = std::strrchr(name, '/');
        const char* base = slash == nullptr ? name : slash + 1;
        if (std::strncmp(base, s->prefix, std::strlen(s->prefix)) != 0) return 0;
        s->path = name;
        return 1;
      },
      &search);
  return search.path;
}

// A function of the CUDA driver, when the process has loaded it (a
// framework such as torch does before it makes device memory); null when
// it has not, or the driver lacks `name`. Looked up without loading
// anything, and again on each call until found (the driver may be loaded
// later); `found` keeps it once found.
void* LoadedDriverSymbol(const char* name, std::atomic<void*>* found) {
  if (void* f = found->load(std::memory_order_acquire); f != nullptr) return f;
  const std::string path = LoadedLibraryPath("libcuda.so");
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

// The CUDA runtime API, loaded at run time: the calls RealCudaRuntime makes,
// with the values it passes (cuda_runtime_api.h, driver_types.h; stable
// since CUDA 11). No CUDA header or library is needed to build libshelf,
// and none is linked into it: the process's own libcudart is used (one a
// framework such as torch loaded), else the newest this host has.
constexpr int kCudaSuccess = 0;
constexpr unsigned kCudaHostAllocPortable = 1;
constexpr unsigned kCudaStreamNonBlocking = 1;
constexpr unsigned kCudaEventDisableTiming = 2;
constexpr int kCudaMemcpyHostToDevice = 1;
constexpr int kCudaMemcpyDeviceToHost = 2;
constexpr int kCudaMemoryTypeDevice = 2;
constexpr int kCudaMemoryTypeManaged = 3;

// cudaPointerAttributes, CUDA 11 and later.
struct CudaPointerAttributes {
  int type;
  int device;
  void* device_pointer;
  void* host_pointer;
};

struct CudartApi {
  int (*GetDeviceCount)(int*);
  int (*GetDevice)(int*);
  int (*SetDevice)(int);
  int (*GetLastError)();
  const char* (*GetErrorName)(int);
  const char* (*GetErrorString)(int);
  int (*PointerGetAttributes)(CudaPointerAttributes*, const void*);
  int (*HostAlloc)(void**, size_t, unsigned);
  int (*FreeHost)(void*);
  int (*StreamCreateWithFlags)(void**, unsigned);
  int (*StreamDestroy)(void*);
  int (*EventCreateWithFlags)(void**, unsigned);
  int (*EventDestroy)(void*);
  int (*EventRecord)(void*, void*);
  int (*StreamWaitEvent)(void*, void*, unsigned);
  int (*MemcpyAsync)(void*, const void*, size_t, int, void*);
  int (*StreamSynchronize)(void*);
  int (*EventSynchronize)(void*);
};

// Where libcudart is looked for when the process has not loaded one: by
// soname on the library path, newest first, then the toolkit's default
// place.
constexpr const char* kCudartCandidates[] = {"libcudart.so.13", "libcudart.so.12",
                                             "libcudart.so.11.0", "libcudart.so",
                                             "/usr/local/cuda/lib64/libcudart.so"};

// Every function of `api` from `library`; false when one is missing.
bool ResolveCudart(void* library, CudartApi* api) {
  bool complete = true;
  auto resolve = [&](auto* fn, const char* name) {
    void* f = dlsym(library, name);
    if (f == nullptr) complete = false;
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(f);
  };
  resolve(&api->GetDeviceCount, "cudaGetDeviceCount");
  resolve(&api->GetDevice, "cudaGetDevice");
  resolve(&api->SetDevice, "cudaSetDevice");
  resolve(&api->GetLastError, "cudaGetLastError");
  resolve(&api->GetErrorName, "cudaGetErrorName");
  resolve(&api->GetErrorString, "cudaGetErrorString");
  resolve(&api->PointerGetAttributes, "cudaPointerGetAttributes");
  resolve(&api->HostAlloc, "cudaHostAlloc");
  resolve(&api->FreeHost, "cudaFreeHost");
  resolve(&api->StreamCreateWithFlags, "cudaStreamCreateWithFlags");
  resolve(&api->StreamDestroy, "cudaStreamDestroy");
  resolve(&api->EventCreateWithFlags, "cudaEventCreateWithFlags");
  resolve(&api->EventDestroy, "cudaEventDestroy");
  resolve(&api->EventRecord, "cudaEventRecord");
  resolve(&api->StreamWaitEvent, "cudaStreamWaitEvent");
  resolve(&api->MemcpyAsync, "cudaMemcpyAsync");
  resolve(&api->StreamSynchronize, "cudaStreamSynchronize");
  resolve(&api->EventSynchronize, "cudaEventSynchronize");
  return complete;
}

// The runtime API, loaded on first use and kept for the process's life;
// null when no libcudart can be loaded (`why` says what was tried).
const CudartApi* Cudart(std::string* why) {
  struct Loaded {
    CudartApi api{};
    bool ok = false;
    std::string why;
  };
  static const Loaded* loaded = [] {
    auto* l = new Loaded();
    std::vector<std::string> tried;
    const std::string in_process = LoadedLibraryPath("libcudart.so");
    if (!in_process.empty()) tried.push_back(in_process);
    for (const char* c : kCudartCandidates) tried.emplace_back(c);
    for (size_t i = 0; i < tried.size(); ++i) {
      const int flags = RTLD_NOW | RTLD_LOCAL | (i == 0 && !in_process.empty() ? RTLD_NOLOAD : 0);
      void* library = dlopen(tried[i].c_str(), flags);
      if (library == nullptr) continue;
      if (ResolveCudart(library, &l->api)) {
        l->ok = true;
        return l;  // the library stays loaded
      }
      dlclose(library);
    }
    l->why =
        absl::StrCat("no CUDA runtime could be loaded (tried ", absl::StrJoin(tried, ", "), ")");
    return l;
  }();
  if (!loaded->ok) {
    if (why != nullptr) *why = loaded->why;
    return nullptr;
  }
  return &loaded->api;
}

class RealCudaRuntime final : public CudaRuntime {
 public:
  explicit RealCudaRuntime(const CudartApi* api) : api_(*api) {}

  bool Built() const override { return true; }
  // Whether the runtime starts in this process: a driver and a device it
  // can use. Asked once; a runtime that failed to start stays so.
  bool Starts() const {
    absl::call_once(starts_once_, [this] {
      int count = 0;
      starts_ = api_.GetDeviceCount(&count) == kCudaSuccess && count > 0;
      api_.GetLastError();  // clears the error of a failed start
    });
    return starts_;
  }
  absl::Status DeviceCount(int* count) override {
    return Check("cudaGetDeviceCount", api_.GetDeviceCount(count));
  }
  absl::Status GetDevice(int* device) override {
    return Check("cudaGetDevice", api_.GetDevice(device));
  }
  absl::Status SetDevice(int device) override {
    return Check("cudaSetDevice", api_.SetDevice(device));
  }
  absl::Status PointerAttributes(const void* p, PointerInfo* info) override {
    // A runtime that cannot start (no driver, or no device it can use)
    // leaves the driver the process loaded, if any, to say what `p` is;
    // asking the runtime again would retry its start on every call.
    if (!Starts()) return DriverPointerAttributes(p, info);
    CudaPointerAttributes attr{};
    if (absl::Status s = Check("cudaPointerGetAttributes", api_.PointerGetAttributes(&attr, p));
        !s.ok()) {
      return s;
    }
    info->type = attr.type == kCudaMemoryTypeDevice    ? MemoryType::kDevice
                 : attr.type == kCudaMemoryTypeManaged ? MemoryType::kManaged
                                                       : MemoryType::kHost;
    info->device = attr.device;
    return absl::OkStatus();
  }
  absl::Status HostAlloc(size_t bytes, void** p) override {
    return Check("cudaHostAlloc", api_.HostAlloc(p, bytes, kCudaHostAllocPortable));
  }
  void FreeHost(void* p) override { api_.FreeHost(p); }
  absl::Status StreamCreate(Stream* stream) override {
    void* s = nullptr;
    absl::Status st =
        Check("cudaStreamCreate", api_.StreamCreateWithFlags(&s, kCudaStreamNonBlocking));
    *stream = s;
    return st;
  }
  void StreamDestroy(Stream stream) override { api_.StreamDestroy(stream); }
  absl::Status EventCreate(Event* event) override {
    void* e = nullptr;
    absl::Status st =
        Check("cudaEventCreate", api_.EventCreateWithFlags(&e, kCudaEventDisableTiming));
    *event = e;
    return st;
  }
  void EventDestroy(Event event) override { api_.EventDestroy(event); }
  absl::Status EventRecord(Event event, Stream stream) override {
    return Check("cudaEventRecord", api_.EventRecord(event, stream));
  }
  absl::Status StreamWaitEvent(Stream stream, Event event) override {
    return Check("cudaStreamWaitEvent", api_.StreamWaitEvent(stream, event, 0));
  }
  absl::Status MemcpyAsync(void* dst, const void* src, size_t n, CopyKind kind,
                           Stream stream) override {
    const bool to_device = kind == CopyKind::kHostToDevice;
    return Check(
        to_device ? "cudaMemcpyAsync to device" : "cudaMemcpyAsync from device",
        api_.MemcpyAsync(dst, src, n, to_device ? kCudaMemcpyHostToDevice : kCudaMemcpyDeviceToHost,
                         stream));
  }
  absl::Status StreamSynchronize(Stream stream) override {
    return Check("cudaStreamSynchronize", api_.StreamSynchronize(stream));
  }
  absl::Status EventSynchronize(Event event) override {
    return Check("cudaEventSynchronize", api_.EventSynchronize(event));
  }

 private:
  absl::Status Check(const char* what, int e) const {
    if (e == kCudaSuccess) return absl::OkStatus();
    // Clears a non-sticky error so that it does not show in a later call.
    api_.GetLastError();
    return absl::InternalError(
        absl::StrCat(what, ": ", api_.GetErrorName(e), ": ", api_.GetErrorString(e)));
  }

  const CudartApi api_;
  mutable absl::once_flag starts_once_;
  mutable bool starts_ = false;  // set once, under starts_once_
};

// The runtime where no libcudart can be loaded: UNIMPLEMENTED, with what
// was tried, for every call but PointerAttributes.
class NoCudaRuntime final : public CudaRuntime {
 public:
  explicit NoCudaRuntime(std::string why) : why_(std::move(why)) {}

  bool Built() const override { return false; }
  absl::Status DeviceCount(int*) override { return NoCuda(); }
  absl::Status GetDevice(int*) override { return NoCuda(); }
  absl::Status SetDevice(int) override { return NoCuda(); }
  // Device memory is still told from host memory, through the CUDA driver
  // the process loaded, so that it is refused rather than touched from the
  // host.
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

 private:
  absl::Status NoCuda() const {
    return absl::UnimplementedError(absl::StrCat("GPU buffers need the CUDA runtime: ", why_));
  }

  const std::string why_;
};

}  // namespace

CudaRuntime* CudaRuntime::Default() {
  static CudaRuntime* runtime = []() -> CudaRuntime* {
    std::string why;
    if (const CudartApi* api = Cudart(&why); api != nullptr) return new RealCudaRuntime(api);
    return new NoCudaRuntime(std::move(why));
  }();
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
