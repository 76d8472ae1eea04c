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
// A store registers its DRAM segment with MemoryAccess::kRemoteRead and
// exposes it on one endpoint per client; a client registers its buffers with
// MemoryAccess::kLocal and initiates every transfer.
//
// Protection domains. Open allocates one (kDefaultDomain), which serves
// everything that names none. NewDomain allocates another: memory
// registered in it and endpoints made in it see only each other (the device
// checks that an lkey's or rkey's region is in the QP's PD). A store of
// tenant arenas puts each arena in a domain of its own, so a queue pair
// exposing one arena cannot read another under any rkey:
//
//   SHELF_ASSIGN_OR_RETURN(uint32_t domain, engine->NewDomain());
//   SHELF_ASSIGN_OR_RETURN(MemoryRegion arena, engine->RegisterMemory(
//       base, bytes, MemoryKind::kHost, MemoryAccess::kRemoteRead, domain));
//   RdmaEndpoint::Options o;
//   o.domain = domain;
//   o.expose = arena;
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
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "transport/rdma/gpu_memory.h"
#include "transport/rdma/memory_registry.h"
#include "transport/rdma/rdma_endpoint.h"
#include "transport/rdma/verbs_api.h"

namespace shelf::transport::rdma {

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
    // Live regions at most, per protection domain.
    size_t regions_max = 4096;
    // Protection domains at most, the default one included (a store makes
    // one per arena; it has 64 at most).
    size_t domains_max = 128;
  };

  // Opens the device and port, picks the GID and allocates the default
  // protection domain. NOT_FOUND when there is no such device (or none at all);
  // UNAVAILABLE when the port is not ACTIVE; INVALID_ARGUMENT for an option
  // out of range; FAILED_PRECONDITION when the GID at the index is all zero
  // (an unused entry: on RoCE, no address behind it) or, on auto, when a
  // RoCE port has no RoCE v2 GID; otherwise the device's error. Errors about
  // the GID name the device, port and index.
  static absl::StatusOr<std::unique_ptr<RdmaEngine>> Open(VerbsApi* verbs, const Options& options);
  // Deregisters all memory, deallocates every protection domain and
  // closes the device.
  ~RdmaEngine();
  RdmaEngine(const RdmaEngine&) = delete;
  RdmaEngine& operator=(const RdmaEngine&) = delete;

  // A new protection domain, with a registration cache of its own; it
  // lives as long as the engine. RESOURCE_EXHAUSTED past domains_max;
  // otherwise the device's error.
  absl::StatusOr<uint32_t> NewDomain();

  // Memory registration through `domain`'s cache; see
  // MemoryRegistry::Register and ::Unregister for the contract (a region
  // unregisters from its own domain). NOT_FOUND for an unknown domain.
  absl::StatusOr<MemoryRegion> RegisterMemory(void* addr, size_t length, MemoryKind kind,
                                              MemoryAccess access,
                                              uint32_t domain = kDefaultDomain);
  absl::Status UnregisterMemory(const MemoryRegion& region);
  // The live region of `domain` containing [addr, addr + bytes), if any.
  std::optional<MemoryRegion> FindMemory(const void* addr, uint64_t bytes,
                                         uint32_t domain = kDefaultDomain) const;
  // `domain`'s cache; an unknown domain's are all zero.
  MemoryRegistry::Stats registration_stats(uint32_t domain = kDefaultDomain) const;

  // A new endpoint with its QP, in options.domain, ready for
  // LocalInfo/Connect. INVALID_ARGUMENT for options out of range
  // (sq_depth 1..device max, signal_interval 1..sq_depth, op_bytes_max up
  // to 2 GiB), an unknown domain, or an `expose` region that is not a live
  // kRemoteRead or kRemoteReadWrite region of that domain; otherwise the
  // device's error.
  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> CreateEndpoint(RdmaEndpoint::Options options);

  const std::string& device_name() const { return device_name_; }
  // The GID index in use (the chosen one when the options said auto).
  int gid_index() const { return device_.gid_index; }
  // The port's active MTU in bytes.
  uint32_t mtu_bytes() const { return 128u << device_.active_mtu; }

 private:
  // A protection domain and the registration cache of its memory.
  struct Domain {
    ibv_pd* pd = nullptr;
    std::unique_ptr<MemoryRegistry> registry;
  };

  RdmaEngine() = default;
  // Null for an unknown id. A domain stays put until the engine goes.
  Domain* FindDomain(uint32_t id) const ABSL_LOCKS_EXCLUDED(domains_mu_);
  // Allocates a PD and its registry; `domains_mu_` is held so that ids
  // follow the vector.
  absl::Status AddDomainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(domains_mu_);

  // Constant after Open. device_'s pd and registry are the default
  // domain's.
  std::string device_name_;
  EndpointDevice device_;
  std::shared_ptr<DmabufExporter> exporter_;
  GpuRegistration gpu_registration_ = GpuRegistration::kAuto;
  size_t regions_max_ = 0;
  size_t domains_max_ = 0;

  mutable Mutex domains_mu_;
  // Indexed by domain id; kDefaultDomain first. Only ever appended to.
  std::vector<std::unique_ptr<Domain>> domains_ ABSL_GUARDED_BY(domains_mu_);

  std::atomic<int> live_endpoints_{0};
};

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_RDMA_ENGINE_H_
