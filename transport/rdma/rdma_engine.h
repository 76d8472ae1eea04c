// RdmaEngine: the RDMA backend's per-process device state: one opened device
// port, a protection domain, the memory registration cache, and the factory
// of RdmaEndpoints (one RC connection each).
//
//   IbVerbs verbs;  // or SimulatedVerbs in tests
//   RdmaEngine::Options options;
//   options.device_name = "mlx5_0";
//   SHELF_ASSIGN_OR_RETURN(std::unique_ptr<RdmaEngine> engine, RdmaEngine::Open(&verbs, options));
//   SHELF_ASSIGN_OR_RETURN(MemoryRegion buf, engine->RegisterMemory(
//       ptr, bytes, MemoryKind::kHost, MemoryAccess::kLocal));
//   SHELF_ASSIGN_OR_RETURN(std::unique_ptr<RdmaEndpoint> ep, engine->CreateEndpoint({}));
//   // exchange ep->LocalInfo() with the peer, then ep->Connect(peer_info)
//
// A store registers its DRAM segment with MemoryAccess::kRemoteReadWrite and
// exposes it on one endpoint per client; a client registers its buffers with
// MemoryAccess::kLocal and initiates every transfer.
//
// Thread-safe. REQUIRES: every endpoint is destroyed before its engine, and
// `verbs` outlives the engine.
#ifndef SHELF_TRANSPORT_RDMA_RDMA_ENGINE_H_
#define SHELF_TRANSPORT_RDMA_RDMA_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/rdma/gpu_memory.h"
#include "transport/rdma/memory_registry.h"
#include "transport/rdma/rdma_endpoint.h"
#include "transport/rdma/verbs_api.h"

namespace shelf::rdma {

class RdmaEngine {
 public:
  static constexpr int kGidIndexAuto = -1;

  struct Options {
    std::string device_name;  // empty: the first device listed
    uint8_t port_num = 1;
    // GID table index used for routing, 0..255, or kGidIndexAuto: index 0
    // on an InfiniBand port; on RoCE the first RoCE v2 entry, one with an
    // IPv4 or global IPv6 address before a link-local one (index 0 is
    // usually RoCE v1, link-local, and unroutable). An explicit index is
    // used as given, whatever its type.
    int gid_index = kGidIndexAuto;
    // Traffic class of the global route header (RoCE: DSCP << 2 | ECN), 0..255,
    // and service level, 0..15: lossless fabrics (PFC, ECN) map them to the
    // lossless priority. Both ends set their own; they apply to what each sends.
    int traffic_class = 0;
    int service_level = 0;
    // Index into the port's P_Key table (0..pkey_tbl_len - 1): the partition
    // the QPs join on InfiniBand.
    int pkey_index = 0;
    GpuRegistration gpu_registration = GpuRegistration::kAuto;
    // Exports GPU memory for the dmabuf path. Null: the CUDA exporter when
    // the build has CUDA, else no dmabuf path (GPU memory then registers
    // through peer memory only).
    std::shared_ptr<DmabufExporter> dmabuf_exporter;
    size_t regions_max = 4096;
  };

  // Opens the device and port, picks the GID and allocates a protection
  // domain. NOT_FOUND when there is no such device (or none at all);
  // UNAVAILABLE when the port is not ACTIVE; INVALID_ARGUMENT for an option
  // out of range; FAILED_PRECONDITION when the GID at the index is all zero
  // (an unused entry: on RoCE, no address behind it) or, on auto, when a
  // RoCE port has no RoCE v2 GID; otherwise the device's error. Errors about
  // the GID name the device, port and index.
  static absl::StatusOr<std::unique_ptr<RdmaEngine>> Open(VerbsApi* verbs, Options options);
  // Deregisters all memory and closes the device.
  ~RdmaEngine();
  RdmaEngine(const RdmaEngine&) = delete;
  RdmaEngine& operator=(const RdmaEngine&) = delete;

  // Memory registration through the cache; see MemoryRegistry::Register and
  // ::Unregister for the contract.
  absl::StatusOr<MemoryRegion> RegisterMemory(void* addr, size_t length, MemoryKind kind,
                                              MemoryAccess access);
  absl::Status UnregisterMemory(const MemoryRegion& region);
  // The live region containing [addr, addr + bytes), if any.
  std::optional<MemoryRegion> FindMemory(const void* addr, uint64_t bytes) const;
  MemoryRegistry::Stats registration_stats() const;

  // A new endpoint with its QP ready for LocalInfo/Connect. INVALID_ARGUMENT
  // for options out of range (sq_depth 1..device max, signal_interval
  // 1..sq_depth, op_bytes_max up to 2 GiB) or an `expose` region that is not
  // a live kRemoteReadWrite region of this engine; otherwise the device's error.
  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> CreateEndpoint(RdmaEndpoint::Options options);

  const std::string& device_name() const { return device_name_; }
  // The GID index in use (the chosen one when the options said auto).
  int gid_index() const { return device_.gid_index; }
  // The port's active MTU in bytes.
  uint32_t mtu_bytes() const { return 128u << device_.active_mtu; }

 private:
  RdmaEngine() = default;

  // Constant after Open.
  std::string device_name_;
  EndpointDevice device_;
  std::shared_ptr<DmabufExporter> exporter_;
  std::unique_ptr<MemoryRegistry> registry_;

  std::atomic<int> live_endpoints_{0};
};

}  // namespace shelf::rdma

#endif  // SHELF_TRANSPORT_RDMA_RDMA_ENGINE_H_
