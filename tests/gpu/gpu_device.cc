#include "tests/gpu/gpu_device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shelf {
namespace {

bool HasNvidiaDeviceNodes() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    if (entry.path().filename().string().rfind("nvidia", 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::string CudaVersionText(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

std::string CudaErrorText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

int CheckDevice(int64_t device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  if (e == cudaSuccess && count > 0) {
    if (device < count) return 0;
    std::fprintf(stderr, "gpu_transfer_check: --device %lld, but CUDA sees %d device(s)\n",
                 static_cast<long long>(device), count);
    return 2;
  }
  std::string why = e == cudaSuccess ? "CUDA reports 0 devices"
                                     : absl::StrCat("cudaGetDeviceCount: ", CudaErrorText(e));
  cudaGetLastError();
  if (driver > 0 && driver < runtime) {
    // A GPU with a driver is there, too old for the runtime linked in: that
    // is a failure to report, not a machine without a GPU.
    std::printf(
        "gpu_transfer_check: FAILED: the CUDA driver supports CUDA %s, older than the runtime "
        "this was built with (CUDA %s); %s\n",
        CudaVersionText(driver).c_str(), CudaVersionText(runtime).c_str(), why.c_str());
    return 1;
  }
  if (!HasNvidiaDeviceNodes() || driver == 0 || e == cudaErrorNoDevice || e == cudaSuccess) {
    std::printf("gpu_transfer_check: no CUDA device: skipped (%s)\n", why.c_str());
    return kSkipExitCode;
  }
  std::printf("gpu_transfer_check: FAILED: /dev/nvidia* exists but CUDA cannot use it: %s\n",
              why.c_str());
  return 1;
}

std::string FindRdmaDevice() {
  if (const char* env = std::getenv("SHELF_RDMA_DEVICE"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/infiniband", ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names.empty() ? std::string() : names.front();
}

}  // namespace shelf
