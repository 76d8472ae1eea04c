#include "client/testing_hooks.h"

#include <atomic>

namespace shelf::internal {
namespace {

std::atomic<void*> g_rdma_verbs{nullptr};
std::atomic<CudaRuntime*> g_cuda{nullptr};

}  // namespace

void SetDevicesForTesting(void* rdma_verbs, CudaRuntime* cuda) {
  g_rdma_verbs.store(rdma_verbs);
  g_cuda.store(cuda);
}

void* RdmaVerbsForTesting() { return g_rdma_verbs.load(); }

CudaRuntime* CudaForTesting() { return g_cuda.load(); }

}  // namespace shelf::internal
