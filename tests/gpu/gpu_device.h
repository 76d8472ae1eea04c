// The CUDA device probe of gpu_transfer_check: whether a device is there to
// measure, and if not, whether that is a skip (no GPU) or a failure (a GPU
// CUDA cannot use).
#ifndef SHELF_TESTS_GPU_GPU_DEVICE_H_
#define SHELF_TESTS_GPU_GPU_DEVICE_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace shelf {

inline constexpr int kSkipExitCode = 77;  // CTest's SKIP_RETURN_CODE (tests/gpu/CMakeLists.txt)

// A CUDA version number (12040) as text ("12.4").
std::string CudaVersionText(int v);

// "cudaErrorX: description".
std::string CudaErrorText(cudaError_t e);

// 0 when `device` can be used; otherwise the exit status (kSkipExitCode
// without a GPU, 1 for a GPU CUDA cannot use, 2 for a bad --device), with
// the reason printed.
int CheckDevice(int64_t device);

// The RDMA NIC to check GPUDirect through: $SHELF_RDMA_DEVICE, else the
// first device /sys/class/infiniband lists; empty when there is none.
std::string FindRdmaDevice();

}  // namespace shelf

#endif  // SHELF_TESTS_GPU_GPU_DEVICE_H_
