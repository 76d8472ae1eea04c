// MemoryRegistry: memory registration for the RDMA backend, with a cache.
//
// Registering memory with an RDMA device pins it and costs a system call per
// call (milliseconds for gigabytes), so a range is registered once and reused:
// Register on a range already covered by a live region of the same kind and
// sufficient access returns that region (a cache hit) and counts a reference;
// Unregister drops one and deregisters with the last. Find looks up the
// region that contains an address range, which is how a work request gets its
// lkey.
//
// GPU memory (MemoryKind::kGpu) is registered through dmabuf when an exporter
// is given, falling back to the peer-memory path (plain ibv_reg_mr on the
// device pointer) as gpu_memory.h describes.
//
//   MemoryRegistry registry(&verbs, pd, MemoryRegistry::Options{});
//   SHELF_ASSIGN_OR_RETURN(MemoryRegion r,
//                          registry.Register(buf, len, MemoryKind::kHost, MemoryAccess::kLocal));
//   std::optional<MemoryRegion> hit = registry.Find(buf + 4096, 512);  // r
//   registry.Unregister(r.id);
//
// Thread-safe. Lock order: callers may hold their own locks when calling in;
// the registry calls only VerbsApi and the exporter while holding its lock.
#ifndef SHELF_TRANSPORT_RDMA_MEMORY_REGISTRY_H_
#define SHELF_TRANSPORT_RDMA_MEMORY_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "transport/rdma/connection_info.h"
#include "transport/rdma/gpu_memory.h"
#include "transport/rdma/verbs_api.h"

namespace shelf::transport::rdma {

enum class MemoryKind { kHost, kGpu };

// kLocal: only this process's device may touch the memory (the source or
// destination of our own READs and WRITEs). kRemoteRead: a connected peer
// holding the rkey may also READ anywhere in the region (a store's segment:
// writes stay two-sided, under the put's grant). kRemoteReadWrite: a peer
// may also WRITE there.
enum class MemoryAccess { kLocal, kRemoteRead, kRemoteReadWrite };

// How a region got registered.
enum class RegistrationPath { kHost, kGpuDmabuf, kGpuPeerMemory };

// An engine's protection domains are numbered (RdmaEngine::NewDomain); this
// one is allocated when the engine opens, and serves whoever names none.
inline constexpr uint32_t kDefaultDomain = 0;

// Which GPU paths Register may use. kAuto: dmabuf, then peer memory.
enum class GpuRegistration { kAuto, kDmabufOnly, kPeerMemoryOnly };

// A registered region: a value, valid until its last Unregister.
struct MemoryRegion {
  uint64_t id = 0;  // never 0 for a registered region
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  MemoryKind kind = MemoryKind::kHost;
  MemoryAccess access = MemoryAccess::kLocal;
  RegistrationPath path = RegistrationPath::kHost;
  // The protection domain of its engine it is registered in: only queue
  // pairs of that domain reach it, locally or remotely.
  uint32_t domain = kDefaultDomain;

  bool Contains(const void* p, uint64_t bytes) const;
  // What a peer needs to address this region (only meaningful for
  // kRemoteReadWrite regions).
  RemoteSegment AsRemoteSegment() const { return RemoteSegment{addr, length, rkey}; }
};

class MemoryRegistry {
 public:
  struct Options {
    GpuRegistration gpu = GpuRegistration::kAuto;
    // Turns GPU ranges into dmabufs; null disables the dmabuf path. Not
    // owned; must outlive the registry.
    DmabufExporter* exporter = nullptr;
    // Live regions at most; registration past it is RESOURCE_EXHAUSTED.
    size_t regions_max = 4096;
    // Which of its engine's protection domains `pd` is: stamped on every
    // region (MemoryRegion::domain).
    uint32_t domain = kDefaultDomain;
  };

  struct Stats {
    uint64_t hits = 0;    // Register calls answered by a live region
    uint64_t misses = 0;  // Register calls that registered a new MR
    uint64_t live_regions = 0;
    uint64_t dmabuf_fallbacks = 0;  // GPU registrations that fell back to peer memory
  };

  // `verbs` and `pd` must outlive the registry.
  MemoryRegistry(VerbsApi* verbs, ibv_pd* pd, Options options);
  // Deregisters every live region.
  ~MemoryRegistry();
  MemoryRegistry(const MemoryRegistry&) = delete;
  MemoryRegistry& operator=(const MemoryRegistry&) = delete;

  // Registers [addr, addr + length), or returns the live region of the same
  // kind that already covers it with at least `access`. Each successful call
  // must be paired with one Unregister(region.id). INVALID_ARGUMENT for an
  // empty or wrapping range; RESOURCE_EXHAUSTED past regions_max; otherwise
  // the device's error (for GPU memory, the last path's error).
  absl::StatusOr<MemoryRegion> Register(void* addr, size_t length, MemoryKind kind,
                                        MemoryAccess access);
  // Drops one reference; the last deregisters the MR. NOT_FOUND for an
  // unknown id. REQUIRES: no work request in flight uses the region.
  absl::Status Unregister(uint64_t id);
  // A live region containing [addr, addr + bytes), if any (the one starting
  // closest below addr when several do).
  std::optional<MemoryRegion> Find(const void* addr, uint64_t bytes) const;
  // True if `region` (by id, address and keys) is still live.
  bool IsLive(const MemoryRegion& region) const;

  Stats stats() const;

 private:
  struct Entry {
    MemoryRegion region;
    ibv_mr* mr = nullptr;
    uint64_t refs = 0;
  };

  absl::StatusOr<ibv_mr*> RegisterGpu(void* addr, size_t length, int access, RegistrationPath* path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  VerbsApi* const verbs_;
  ibv_pd* const pd_;
  const Options options_;

  mutable Mutex mu_;
  // Keyed by (start address, id): several regions may start at one address.
  std::map<std::pair<uint64_t, uint64_t>, Entry> by_addr_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> addr_by_id_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_MEMORY_REGISTRY_H_
