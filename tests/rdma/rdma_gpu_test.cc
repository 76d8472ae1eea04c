// GPUDirect on real hardware: exporting CUDA memory as a dmabuf (needs a GPU
// whose driver exports dmabufs) and a loopback transfer between GPU memory
// and a host segment (needs a GPU and an RDMA device). Each test skips, with
// the reason, when its hardware is missing. Like the backend, the test loads
// the CUDA driver at run time, so the binary runs on hosts without one.
//
// Moving data between the CPU, the GPU and the NIC follows the GPUDirect RDMA
// rules: the GPU buffer has CU_POINTER_ATTRIBUTE_SYNC_MEMOPS set and is
// filled from pinned host memory with the context synchronized before the NIC
// reads it (a copy from pageable memory may return before the data reaches
// the GPU); after the NIC writes into it, the writes are flushed (an RDMA READ
// of the written range's last bytes, which PCIe orders after those writes,
// and cuFlushGPUDirectRDMAWrites where the device supports it) before the GPU
// side reads the data.
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "transport/rdma/gpu_memory.h"
#include "transport/rdma/ib_verbs.h"
#include "transport/rdma/rdma_engine.h"
#include "transport/rdma/simulated_verbs.h"

namespace shelf::transport::rdma {
namespace {

// The few driver calls the test needs to own some GPU memory.
struct Cuda {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGetCount) device_get_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuMemAlloc) mem_alloc = nullptr;
  decltype(&::cuMemFree) mem_free = nullptr;
  decltype(&::cuMemcpyHtoD) memcpy_htod = nullptr;
  decltype(&::cuMemcpyDtoH) memcpy_dtoh = nullptr;
  decltype(&::cuMemAllocHost) mem_alloc_host = nullptr;
  decltype(&::cuMemFreeHost) mem_free_host = nullptr;
  decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&::cuPointerSetAttribute) pointer_set_attribute = nullptr;
  // Optional (CUDA 11.3+); null when the driver lacks it.
  decltype(&::cuFlushGPUDirectRDMAWrites) flush_gpu_direct_rdma_writes = nullptr;

  // Why the GPU is unusable, or empty when it is usable.
  std::string Load() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return std::string("no CUDA driver: ") + dlerror();
    bool ok = Sym(lib, "cuInit", &init) && Sym(lib, "cuDeviceGetCount", &device_get_count) &&
              Sym(lib, "cuDeviceGet", &device_get) &&
              Sym(lib, "cuDeviceGetAttribute", &device_get_attribute) &&
              Sym(lib, "cuDevicePrimaryCtxRetain", &primary_ctx_retain) &&
              Sym(lib, "cuDevicePrimaryCtxRelease_v2", &primary_ctx_release) &&
              Sym(lib, "cuCtxSetCurrent", &ctx_set_current) &&
              Sym(lib, "cuMemAlloc_v2", &mem_alloc) && Sym(lib, "cuMemFree_v2", &mem_free) &&
              Sym(lib, "cuMemcpyHtoD_v2", &memcpy_htod) &&
              Sym(lib, "cuMemcpyDtoH_v2", &memcpy_dtoh) &&
              Sym(lib, "cuMemAllocHost_v2", &mem_alloc_host) &&
              Sym(lib, "cuMemFreeHost", &mem_free_host) &&
              Sym(lib, "cuCtxSynchronize", &ctx_synchronize) &&
              Sym(lib, "cuPointerSetAttribute", &pointer_set_attribute);
    if (!ok) return "CUDA driver lacks an entry point";
    Sym(lib, "cuFlushGPUDirectRDMAWrites", &flush_gpu_direct_rdma_writes);
    int count = 0;
    if (init(0) != CUDA_SUCCESS || device_get_count(&count) != CUDA_SUCCESS || count == 0) {
      return "no CUDA device";
    }
    return "";
  }
  template <typename Fn>
  static bool Sym(void* lib, const char* name, Fn* fn) {
    *fn = reinterpret_cast<Fn>(dlsym(lib, name));
    return *fn != nullptr;
  }
};

bool HasRdmaDevice() {
  DIR* dir = opendir("/sys/class/infiniband");
  if (dir == nullptr) return false;
  bool any = false;
  while (dirent* e = readdir(dir)) any = any || e->d_name[0] != '.';
  closedir(dir);
  return any;
}

class RdmaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = cuda_.Load();
    if (!why.empty()) GTEST_SKIP() << why;
    ASSERT_EQ(cuda_.device_get(&device_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuda_.primary_ctx_retain(&ctx_, device_), CUDA_SUCCESS);
    ASSERT_EQ(cuda_.ctx_set_current(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuda_.mem_alloc(&dptr_, kBytes), CUDA_SUCCESS);
    // Synchronous copies to and from this buffer complete before they return,
    // as GPUDirect RDMA requires of memory a NIC accesses.
    unsigned int sync_memops = 1;
    ASSERT_EQ(cuda_.pointer_set_attribute(&sync_memops, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, dptr_),
              CUDA_SUCCESS);
  }
  void TearDown() override {
    if (dptr_ != 0) cuda_.mem_free(dptr_);
    if (ctx_ != nullptr) cuda_.primary_ctx_release(device_);
  }

  static constexpr size_t kBytes = 4 << 20;
  Cuda cuda_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUdeviceptr dptr_ = 0;
};

TEST_F(RdmaGpuTest, CudaExportsDmabuf) {
  int supported = 0;
  ASSERT_EQ(cuda_.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device_),
            CUDA_SUCCESS);
  if (!supported) GTEST_SKIP() << "this GPU or driver does not export dmabufs";
  std::unique_ptr<DmabufExporter> exporter = NewCudaDmabufExporter();
  ASSERT_NE(exporter, nullptr);
  void* p = reinterpret_cast<void*>(dptr_);
  absl::StatusOr<DmabufRange> whole = exporter->Export(p, kBytes);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_GE(whole->fd, 0);
  EXPECT_EQ(whole->offset, 0u);
  close(whole->fd);
  // An unaligned range is exported page-aligned, with the offset to it.
  absl::StatusOr<DmabufRange> inner = exporter->Export(static_cast<char*>(p) + 100, 5000);
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(inner->offset, 100u);
  close(inner->fd);
  // A thread with no current context borrows the device's primary context.
  absl::Status from_thread;
  std::thread([&] {
    absl::StatusOr<DmabufRange> r = exporter->Export(p, kBytes);
    from_thread = r.status();
    if (r.ok()) close(r->fd);
  }).join();
  EXPECT_TRUE(from_thread.ok()) << from_thread;
  // Host memory is not exportable.
  std::vector<char> host(8192);
  EXPECT_FALSE(exporter->Export(host.data(), host.size()).ok());

  // Through the registry (the simulated device never dereferences the range).
  SimulatedVerbs sim;
  RdmaEngine::Options options;
  options.gpu_registration = GpuRegistration::kDmabufOnly;
  std::unique_ptr<RdmaEngine> engine = *RdmaEngine::Open(&sim, options);
  absl::StatusOr<MemoryRegion> region =
      engine->RegisterMemory(p, kBytes, MemoryKind::kGpu, MemoryAccess::kLocal);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->path, RegistrationPath::kGpuDmabuf);
  ASSERT_TRUE(engine->UnregisterMemory(*region).ok());
}

TEST_F(RdmaGpuTest, GpuDirectLoopback) {
  if (!HasRdmaDevice()) GTEST_SKIP() << "no RDMA device in /sys/class/infiniband";
  IbVerbs verbs;
  absl::StatusOr<std::unique_ptr<RdmaEngine>> engine =
      RdmaEngine::Open(&verbs, RdmaEngine::Options{});
  if (!engine.ok()) GTEST_SKIP() << "RDMA device unusable: " << engine.status();
  void* gpu = reinterpret_cast<void*>(dptr_);
  // Remote-readable as well: the flush below READs from it.
  absl::StatusOr<MemoryRegion> gpu_region =
      (*engine)->RegisterMemory(gpu, kBytes, MemoryKind::kGpu, MemoryAccess::kRemoteRead);
  if (!gpu_region.ok()) GTEST_SKIP() << "no GPUDirect path on this host: " << gpu_region.status();
  constexpr size_t kHalf = kBytes / 2;
  constexpr size_t kFlushBytes = 8;
  // Pinned: a copy from pinned memory has reached the GPU when it returns.
  void* staging = nullptr;
  ASSERT_EQ(cuda_.mem_alloc_host(&staging, kHalf), CUDA_SUCCESS);
  std::unique_ptr<void, decltype(cuda_.mem_free_host)> staging_owner(staging, cuda_.mem_free_host);
  char* pinned = static_cast<char*>(staging);
  std::vector<char> segment(kBytes), expected(kHalf), flush_sink(kFlushBytes);
  for (size_t i = 0; i < kHalf; ++i) expected[i] = static_cast<char>(i * 13 + 1);
  std::memcpy(pinned, expected.data(), kHalf);
  ASSERT_EQ(cuda_.memcpy_htod(dptr_, pinned, kHalf), CUDA_SUCCESS);
  ASSERT_EQ(cuda_.ctx_synchronize(), CUDA_SUCCESS);  // the NIC reads it next
  MemoryRegion seg = *(*engine)->RegisterMemory(segment.data(), kBytes, MemoryKind::kHost,
                                                MemoryAccess::kRemoteReadWrite);
  MemoryRegion sink = *(*engine)->RegisterMemory(flush_sink.data(), kFlushBytes, MemoryKind::kHost,
                                                 MemoryAccess::kLocal);
  {
    RdmaEndpoint::Options exposing;
    exposing.expose = seg;
    std::unique_ptr<RdmaEndpoint> server = *(*engine)->CreateEndpoint(exposing);
    std::unique_ptr<RdmaEndpoint> client = *(*engine)->CreateEndpoint(RdmaEndpoint::Options{});
    ASSERT_TRUE(server->Connect(*client->LocalInfo()).ok());
    ASSERT_TRUE(client->Connect(*server->LocalInfo()).ok());
    // A loopback pair exposing the GPU buffer, for the flush.
    RdmaEndpoint::Options exposing_gpu;
    exposing_gpu.expose = *gpu_region;
    std::unique_ptr<RdmaEndpoint> gpu_side = *(*engine)->CreateEndpoint(exposing_gpu);
    std::unique_ptr<RdmaEndpoint> flusher = *(*engine)->CreateEndpoint(RdmaEndpoint::Options{});
    ASSERT_TRUE(gpu_side->Connect(*flusher->LocalInfo()).ok());
    ASSERT_TRUE(flusher->Connect(*gpu_side->LocalInfo()).ok());

    // GPU -> host segment, then host segment -> the GPU's second half.
    RdmaBatchResult w =
        client->Execute({RdmaOp{RdmaOpKind::kWrite, gpu, kHalf, 0}}, MonoMs() + 10000);
    ASSERT_TRUE(w.status.ok()) << w.status;
    EXPECT_EQ(std::memcmp(segment.data(), expected.data(), kHalf), 0);
    RdmaBatchResult r = client->Execute(
        {RdmaOp{RdmaOpKind::kRead, static_cast<char*>(gpu) + kHalf, kHalf, 0}}, MonoMs() + 10000);
    ASSERT_TRUE(r.status.ok()) << r.status;

    // The READ's completion says the NIC sent its writes, not that the GPU
    // sees them. READing the last bytes back through the NIC flushes them:
    // the read completes only after the earlier writes reached GPU memory.
    RdmaBatchResult f = flusher->Execute(
        {RdmaOp{RdmaOpKind::kRead, flush_sink.data(), kFlushBytes, kBytes - kFlushBytes}},
        MonoMs() + 10000);
    ASSERT_TRUE(f.status.ok()) << f.status;
    EXPECT_EQ(std::memcmp(flush_sink.data(), expected.data() + kHalf - kFlushBytes, kFlushBytes),
              0);
  }
  int flush_options = 0;
  if (cuda_.flush_gpu_direct_rdma_writes != nullptr &&
      cuda_.device_get_attribute(&flush_options,
                                 CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
                                 device_) == CUDA_SUCCESS &&
      (flush_options & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST) != 0) {
    ASSERT_EQ(cuda_.flush_gpu_direct_rdma_writes(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                                 CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER),
              CUDA_SUCCESS);
  }
  ASSERT_EQ(cuda_.ctx_synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuda_.memcpy_dtoh(pinned, dptr_ + kHalf, kHalf), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(pinned, expected.data(), kHalf), 0);
  ASSERT_TRUE((*engine)->UnregisterMemory(sink).ok());
  ASSERT_TRUE((*engine)->UnregisterMemory(seg).ok());
  ASSERT_TRUE((*engine)->UnregisterMemory(*gpu_region).ok());
}

}  // namespace
}  // namespace shelf::transport::rdma
