#include "transport/shm_sources.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_text.h"

namespace shelf::transport {

ShmSource::~ShmSource() { close(fd); }

ShmSources& ShmSources::Process() {
  static ShmSources* sources = new ShmSources();  // outlives every writer
  return *sources;
}

absl::StatusOr<uint64_t> ShmSources::Add(const char* base, uint64_t size, int fd) {
  if (base == nullptr || size == 0 || reinterpret_cast<uintptr_t>(base) + size < size) {
    return absl::InvalidArgumentError("a shared-memory source needs a non-empty range");
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::FailedPreconditionError(
        "a shared-memory source must be a memfd sealed against shrinking (F_SEAL_SHRINK)");
  }
  MutexLock lock(&mu_);
  auto next = by_base_.lower_bound(base);
  const bool overlaps_next = next != by_base_.end() && next->first < base + size;
  const bool overlaps_prev = next != by_base_.begin() &&
                             std::prev(next)->second->base + std::prev(next)->second->size > base;
  if (overlaps_next || overlaps_prev) {
    return absl::InvalidArgumentError("the range overlaps a registered shared-memory source");
  }
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return absl::InternalError(absl::StrCat("dup: ", ErrnoText(errno)));
  const uint64_t id = next_id_++;
  by_base_[base] = std::make_shared<const ShmSource>(id, base, size, own);
  return id;
}

bool ShmSources::Remove(uint64_t id) {
  std::shared_ptr<const ShmSource> gone;  // closed outside the lock
  MutexLock lock(&mu_);
  for (auto it = by_base_.begin(); it != by_base_.end(); ++it) {
    if (it->second->id != id) continue;
    gone = std::move(it->second);
    by_base_.erase(it);
    removals_.fetch_add(1, std::memory_order_release);
    return true;
  }
  return false;
}

std::shared_ptr<const ShmSource> ShmSources::Find(const char* p, uint64_t length) const {
  MutexLock lock(&mu_);
  auto it = by_base_.upper_bound(p);
  if (it == by_base_.begin()) return nullptr;
  const ShmSource& s = *std::prev(it)->second;
  const uint64_t offset = static_cast<uint64_t>(p - s.base);
  if (offset >= s.size || length > s.size - offset) return nullptr;
  return std::prev(it)->second;
}

bool ShmSources::Alive(uint64_t id) const {
  MutexLock lock(&mu_);
  for (const auto& [base, source] : by_base_) {
    if (source->id == id) return true;
  }
  return false;
}

namespace {

struct Allocations {
  Mutex mu;
  std::map<char*, std::pair<uint64_t, uint64_t>> by_base ABSL_GUARDED_BY(mu);  // id, size
};

Allocations& TheAllocations() {
  static Allocations* allocations = new Allocations();  // as long as the mappings
  return *allocations;
}

}  // namespace

absl::StatusOr<char*> AllocateShmSource(uint64_t size) {
  if (size == 0) return absl::InvalidArgumentError("shared host memory of 0 bytes");
  int fd = memfd_create("shelf-host", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("memfd_create: ", ErrnoText(errno)));
  }
  // Sized, then sealed for good: the pages under the caller and under a
  // store's mapping can never be taken away by a truncate.
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("sizing ", size, " bytes of shared host memory: ", ErrnoText(err)));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("mapping ", size, " bytes of shared host memory: ", ErrnoText(err)));
  }
  char* base = static_cast<char*>(p);
  absl::StatusOr<uint64_t> id = ShmSources::Process().Add(base, size, fd);
  close(fd);  // the table holds its own
  if (!id.ok()) {
    munmap(p, size);
    return absl::InternalError(
        absl::StrCat("registering shared host memory: ", id.status().message()));
  }
  Allocations& a = TheAllocations();
  MutexLock lock(&a.mu);
  a.by_base[base] = {*id, size};
  return base;
}

absl::Status FreeShmSource(char* base) {
  std::pair<uint64_t, uint64_t> allocation;
  {
    Allocations& a = TheAllocations();
    MutexLock lock(&a.mu);
    auto it = a.by_base.find(base);
    if (it == a.by_base.end()) {
      return absl::InvalidArgumentError("not an address AllocateShmSource returned");
    }
    allocation = it->second;
    a.by_base.erase(it);
  }
  ShmSources::Process().Remove(allocation.first);
  if (munmap(base, allocation.second) != 0) {
    return absl::InternalError(absl::StrCat("munmap: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shelf::transport
