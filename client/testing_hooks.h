// Devices a test substitutes for hardware this machine lacks. Internal to
// libshelf and its tests; engines never call this.
//
//   transport::rdma::SimulatedVerbs sim;
//   FakeCudaRuntime cuda;
//   internal::SetDevicesForTesting(&sim, &cuda);  // clients opened from here on
//   ... Client::Open(options, &client) ...
//   internal::SetDevicesForTesting(nullptr, nullptr);
#ifndef SHELF_CLIENT_TESTING_HOOKS_H_
#define SHELF_CLIENT_TESTING_HOOKS_H_

#include "client/cuda_runtime.h"

namespace shelf::internal {

// Clients opened after this call open ClientOptions::rdma_device on
// `rdma_verbs` (a transport::rdma::VerbsApi, e.g. a simulated device) instead of
// libibverbs, and use `cuda` instead of the CUDA runtime; null: the real
// one. Neither is owned; both must outlive those clients.
void SetDevicesForTesting(void* rdma_verbs, CudaRuntime* cuda);
void* RdmaVerbsForTesting();
CudaRuntime* CudaForTesting();

}  // namespace shelf::internal

#endif  // SHELF_CLIENT_TESTING_HOOKS_H_
