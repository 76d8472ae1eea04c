// The CUDA dmabuf exporter (see gpu_memory.h). Compiled in only when the build
// has CUDA (SHELF_RDMA_WITH_CUDA); otherwise NewCudaDmabufExporter is null.
#include "transport/rdma/gpu_memory.h"

#ifdef SHELF_RDMA_WITH_CUDA

#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shelf::transport::rdma {
namespace {

// The driver entry points we use. The driver is opened with dlopen rather than
// linked, so that a binary built with CUDA starts on hosts without a GPU
// driver (CPU-only nodes, build machines); there the exporter reports
// UNAVAILABLE and registration falls back or fails cleanly. Names with _v2
// are the symbols cuda.h maps the unversioned names to.
struct CudaDriver {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuPointerGetAttribute) pointer_get_attribute = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;
  decltype(&::cuCtxPushCurrent) ctx_push_current = nullptr;
  decltype(&::cuCtxPopCurrent) ctx_pop_current = nullptr;
  decltype(&::cuMemGetHandleForAddressRange) get_handle_for_address_range = nullptr;
  absl::Status load_status;
};

template <typename Fn>
bool LoadSymbol(void* lib, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return *fn != nullptr;
}

const CudaDriver& Driver() {
  static const CudaDriver* driver = [] {
    auto* d = new CudaDriver;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      d->load_status = absl::UnavailableError(absl::StrCat("no CUDA driver: ", dlerror()));
      return d;
    }
    bool ok = LoadSymbol(lib, "cuGetErrorName", &d->get_error_name) &&
              LoadSymbol(lib, "cuCtxGetCurrent", &d->ctx_get_current) &&
              LoadSymbol(lib, "cuPointerGetAttribute", &d->pointer_get_attribute) &&
              LoadSymbol(lib, "cuDeviceGet", &d->device_get) &&
              LoadSymbol(lib, "cuDevicePrimaryCtxRetain", &d->primary_ctx_retain) &&
              LoadSymbol(lib, "cuDevicePrimaryCtxRelease_v2", &d->primary_ctx_release) &&
              LoadSymbol(lib, "cuCtxPushCurrent_v2", &d->ctx_push_current) &&
              LoadSymbol(lib, "cuCtxPopCurrent_v2", &d->ctx_pop_current);
    if (!ok) {
      d->load_status = absl::UnavailableError("the CUDA driver lacks a required entry point");
    } else if (!LoadSymbol(lib, "cuMemGetHandleForAddressRange",
                           &d->get_handle_for_address_range)) {
      d->load_status =
          absl::UnimplementedError("the CUDA driver is too old to export dmabufs (needs 11.7+)");
    }
    // The library stays loaded for the life of the process.
    return d;
  }();
  return *driver;
}

absl::Status CudaError(const CudaDriver& driver, CUresult rc, const char* call) {
  const char* name = nullptr;
  if (driver.get_error_name(rc, &name) != CUDA_SUCCESS || name == nullptr) name = "?";
  std::string message = absl::StrCat(call, " failed: ", name);
  switch (rc) {
    case CUDA_ERROR_NOT_SUPPORTED:
      return absl::UnimplementedError(message);
    case CUDA_ERROR_INVALID_VALUE:
      return absl::InvalidArgumentError(message);
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_INVALID_CONTEXT:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

class CudaDmabufExporter final : public DmabufExporter {
 public:
  absl::StatusOr<DmabufRange> Export(void* addr, size_t length) override {
    const CudaDriver& cu = Driver();
    if (!cu.load_status.ok()) return cu.load_status;
    if (addr == nullptr || length == 0) {
      return absl::InvalidArgumentError("dmabuf export: empty range");
    }
    // The driver wants the range aligned to host pages.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t begin = reinterpret_cast<uint64_t>(addr);
    const uint64_t start = begin & ~(page - 1);
    const uint64_t end = (begin + length + page - 1) & ~(page - 1);

    // cuMemGetHandleForAddressRange needs a context; borrow the primary
    // context of the pointer's device when the caller's thread has none.
    CUcontext current = nullptr;
    CUresult rc = cu.ctx_get_current(&current);
    if (rc != CUDA_SUCCESS) return CudaError(cu, rc, "cuCtxGetCurrent");
    CUdevice device = 0;
    bool pushed = false;
    if (current == nullptr) {
      int ordinal = -1;
      rc = cu.pointer_get_attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    static_cast<CUdeviceptr>(begin));
      if (rc != CUDA_SUCCESS) return CudaError(cu, rc, "cuPointerGetAttribute");
      if ((rc = cu.device_get(&device, ordinal)) != CUDA_SUCCESS) {
        return CudaError(cu, rc, "cuDeviceGet");
      }
      CUcontext primary = nullptr;
      if ((rc = cu.primary_ctx_retain(&primary, device)) != CUDA_SUCCESS) {
        return CudaError(cu, rc, "cuDevicePrimaryCtxRetain");
      }
      if ((rc = cu.ctx_push_current(primary)) != CUDA_SUCCESS) {
        cu.primary_ctx_release(device);
        return CudaError(cu, rc, "cuCtxPushCurrent");
      }
      pushed = true;
    }
    int fd = -1;
    rc = cu.get_handle_for_address_range(&fd, static_cast<CUdeviceptr>(start), end - start,
                                         CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (pushed) {
      CUcontext popped = nullptr;
      cu.ctx_pop_current(&popped);
      cu.primary_ctx_release(device);
    }
    if (rc != CUDA_SUCCESS) return CudaError(cu, rc, "cuMemGetHandleForAddressRange");
    return DmabufRange{fd, begin - start};
  }
};

}  // namespace

std::unique_ptr<DmabufExporter> NewCudaDmabufExporter() {
  return std::make_unique<CudaDmabufExporter>();
}

}  // namespace shelf::transport::rdma

#else  // !SHELF_RDMA_WITH_CUDA

namespace shelf::transport::rdma {

std::unique_ptr<DmabufExporter> NewCudaDmabufExporter() { return nullptr; }

}  // namespace shelf::transport::rdma

#endif  // SHELF_RDMA_WITH_CUDA
