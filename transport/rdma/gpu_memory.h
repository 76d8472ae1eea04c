// GPU memory for GPUDirect RDMA: exporting a GPU address range as a dmabuf so
// that the RDMA device can register it (ibv_reg_dmabuf_mr) and move bytes
// straight between the wire and GPU memory.
//
// MemoryRegistry registers GPU memory on one of two paths:
//   1. dmabuf (preferred): a DmabufExporter turns the range into a dmabuf fd
//      (for CUDA, cuMemGetHandleForAddressRange with
//      CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD), then ibv_reg_dmabuf_mr. Needs
//      Linux >= 5.12 and a GPU driver that exports dmabufs.
//   2. peer memory (fallback): plain ibv_reg_mr on the device pointer, which
//      works when the nvidia-peermem kernel module is loaded.
//
//   std::unique_ptr<DmabufExporter> cuda = NewCudaDmabufExporter();  // null without CUDA
//   SHELF_ASSIGN_OR_RETURN(DmabufRange range, cuda->Export(dptr, bytes));
//   ... RegDmabufMr(pd, range.offset, bytes, iova, range.fd, access); close(range.fd);
//
// The CUDA exporter is compiled only when the build has CUDA
// (SHELF_RDMA_WITH_CUDA); it loads the driver (libcuda.so.1) at run time, so
// binaries built with CUDA still start on hosts without a GPU driver.
#ifndef SHELF_TRANSPORT_RDMA_GPU_MEMORY_H_
#define SHELF_TRANSPORT_RDMA_GPU_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace shelf::transport::rdma {

// A dmabuf covering a GPU range: `addr` of the exported range lies `offset`
// bytes into the dmabuf `fd`.
struct DmabufRange {
  int fd = -1;
  uint64_t offset = 0;
};

// Thread-safe.
class DmabufExporter {
 public:
  virtual ~DmabufExporter() = default;
  // Exports a dmabuf that covers [addr, addr + length). On success the caller
  // owns `fd` and closes it once the MR is registered. UNIMPLEMENTED when the
  // driver or device cannot export; FAILED_PRECONDITION when the range is not
  // GPU memory of a live context; UNAVAILABLE when no driver is loaded.
  virtual absl::StatusOr<DmabufRange> Export(void* addr, size_t length) = 0;
};

// The CUDA driver's exporter, or null when the build has no CUDA. Exports
// the host-page-aligned range around [addr, addr + length); when no CUDA
// context is current on the calling thread it uses the primary context of the
// device that owns `addr`.
std::unique_ptr<DmabufExporter> NewCudaDmabufExporter();

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_GPU_MEMORY_H_
