// MemoryRegistry: registration cache and GPU registration paths (see
// memory_registry.h).
#include "transport/rdma/memory_registry.h"

#include <unistd.h>

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/log.h"

namespace shelf::transport::rdma {
namespace {

int AccessFlags(MemoryKind kind, MemoryAccess access) {
  int flags = IBV_ACCESS_LOCAL_WRITE;
  if (access == MemoryAccess::kRemoteRead) flags |= IBV_ACCESS_REMOTE_READ;
  if (access == MemoryAccess::kRemoteReadWrite) {
    flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  }
  // Relaxed ordering lets PCIe reorder writes into GPU memory, which GPUDirect
  // needs for full bandwidth on many platforms; devices without it ignore
  // the flag (it is an optional access flag).
  if (kind == MemoryKind::kGpu) flags |= IBV_ACCESS_RELAXED_ORDERING;
  return flags;
}

// Each level grants everything the levels before it do.
bool Grants(MemoryAccess have, MemoryAccess want) {
  return static_cast<int>(have) >= static_cast<int>(want);
}

}  // namespace

bool MemoryRegion::Contains(const void* p, uint64_t bytes) const {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  return a >= addr && bytes <= length && a - addr <= length - bytes;
}

MemoryRegistry::MemoryRegistry(VerbsApi* verbs, ibv_pd* pd, Options options)
    : verbs_(verbs), pd_(pd), options_(options) {}

MemoryRegistry::~MemoryRegistry() {
  MutexLock lock(&mu_);
  for (auto& [key, entry] : by_addr_) {
    absl::Status s = verbs_->DeregMr(entry.mr);
    if (!s.ok()) {
      SHELF_LOG(WARNING) << "RDMA deregistration failed: " << s.ToString();
    }
  }
  by_addr_.clear();
  addr_by_id_.clear();
}

absl::StatusOr<ibv_mr*> MemoryRegistry::RegisterGpu(void* addr, size_t length, int access,
                                                    RegistrationPath* path) {
  absl::Status dmabuf_status = absl::UnimplementedError("dmabuf path disabled");
  if (options_.gpu != GpuRegistration::kPeerMemoryOnly) {
    if (options_.exporter == nullptr) {
      dmabuf_status = absl::UnimplementedError("no dmabuf exporter (built without CUDA?)");
    } else {
      absl::StatusOr<DmabufRange> range = options_.exporter->Export(addr, length);
      if (range.ok()) {
        // The iova is the virtual address, so work requests name GPU memory by
        // the same pointers as host memory.
        absl::StatusOr<ibv_mr*> mr = verbs_->RegDmabufMr(
            pd_, range->offset, length, reinterpret_cast<uint64_t>(addr), range->fd, access);
        // The MR holds its own reference to the dmabuf.
        close(range->fd);
        if (mr.ok()) {
          *path = RegistrationPath::kGpuDmabuf;
          return mr;
        }
        dmabuf_status = mr.status();
      } else {
        dmabuf_status = range.status();
      }
    }
    if (options_.gpu == GpuRegistration::kDmabufOnly) return dmabuf_status;
    ++stats_.dmabuf_fallbacks;
    SHELF_LOG(DEBUG) << "GPU memory: dmabuf registration unavailable, trying peer memory: "
                     << dmabuf_status.ToString();
  }
  absl::StatusOr<ibv_mr*> mr = verbs_->RegMr(pd_, addr, length, access);
  if (!mr.ok()) {
    return absl::Status(mr.status().code(), absl::StrCat("GPU memory registration failed: dmabuf: ",
                                                         dmabuf_status.message(),
                                                         "; peer memory: ", mr.status().message()));
  }
  *path = RegistrationPath::kGpuPeerMemory;
  return mr;
}

absl::StatusOr<MemoryRegion> MemoryRegistry::Register(void* addr, size_t length, MemoryKind kind,
                                                      MemoryAccess access) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  if (addr == nullptr || length == 0 || a + length < a) {
    return absl::InvalidArgumentError("RDMA registration: empty or wrapping range");
  }
  MutexLock lock(&mu_);
  // A cache hit: a live region of the same kind that covers the range.
  auto it = by_addr_.upper_bound({a, std::numeric_limits<uint64_t>::max()});
  while (it != by_addr_.begin()) {
    --it;
    Entry& entry = it->second;
    if (entry.region.kind == kind && Grants(entry.region.access, access) &&
        entry.region.Contains(addr, length)) {
      ++entry.refs;
      ++stats_.hits;
      return entry.region;
    }
  }
  if (by_addr_.size() >= options_.regions_max) {
    return absl::ResourceExhaustedError(
        absl::StrCat("RDMA registration: ", options_.regions_max, " regions already live"));
  }
  const int flags = AccessFlags(kind, access);
  RegistrationPath path = RegistrationPath::kHost;
  absl::StatusOr<ibv_mr*> mr = kind == MemoryKind::kGpu ? RegisterGpu(addr, length, flags, &path)
                                                        : verbs_->RegMr(pd_, addr, length, flags);
  if (!mr.ok()) return mr.status();
  Entry entry;
  entry.mr = *mr;
  entry.refs = 1;
  entry.region.id = next_id_++;
  entry.region.addr = a;
  entry.region.length = length;
  entry.region.lkey = (*mr)->lkey;
  entry.region.rkey = (*mr)->rkey;
  entry.region.kind = kind;
  entry.region.access = access;
  entry.region.path = path;
  entry.region.domain = options_.domain;
  MemoryRegion region = entry.region;
  addr_by_id_[region.id] = a;
  by_addr_.emplace(std::make_pair(a, region.id), entry);
  ++stats_.misses;
  stats_.live_regions = by_addr_.size();
  return region;
}

absl::Status MemoryRegistry::Unregister(uint64_t id) {
  MutexLock lock(&mu_);
  auto id_it = addr_by_id_.find(id);
  if (id_it == addr_by_id_.end()) {
    return absl::NotFoundError(absl::StrCat("RDMA registration: no region ", id));
  }
  auto it = by_addr_.find({id_it->second, id});
  SHELF_CHECK(it != by_addr_.end() && it->second.refs > 0);
  if (--it->second.refs > 0) return absl::OkStatus();
  absl::Status s = verbs_->DeregMr(it->second.mr);
  // The region is gone from the cache either way: a failed deregistration
  // leaves nothing we could retry.
  by_addr_.erase(it);
  addr_by_id_.erase(id_it);
  stats_.live_regions = by_addr_.size();
  return s;
}

std::optional<MemoryRegion> MemoryRegistry::Find(const void* addr, uint64_t bytes) const {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  MutexLock lock(&mu_);
  auto it = by_addr_.upper_bound({a, std::numeric_limits<uint64_t>::max()});
  while (it != by_addr_.begin()) {
    --it;
    if (it->second.region.Contains(addr, bytes)) return it->second.region;
  }
  return std::nullopt;
}

bool MemoryRegistry::IsLive(const MemoryRegion& region) const {
  MutexLock lock(&mu_);
  auto it = by_addr_.find({region.addr, region.id});
  return it != by_addr_.end() && it->second.region.lkey == region.lkey &&
         it->second.region.length == region.length;
}

MemoryRegistry::Stats MemoryRegistry::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace shelf::transport::rdma
