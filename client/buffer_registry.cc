#include "client/buffer_registry.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace shelf {
namespace {

// Process-wide, so a handle of one client is never valid in another.
std::atomic<uint64_t> g_next_handle_id{1};

absl::Status NotRegistered(BufferHandle handle) {
  if (!handle.valid()) {
    return absl::InvalidArgumentError(
        "buffer handle 0 is not a registered buffer (default-constructed handle, or "
        "RegisterBuffer failed)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("buffer handle ", handle.id,
                   " is not registered with this client (never registered here, or "
                   "already unregistered)"));
}

}  // namespace

BufferRegistry::Pin::~Pin() {
  if (registry_ != nullptr && entry_ != nullptr) registry_->Unpin(entry_.get());
}

absl::StatusOr<BufferHandle> BufferRegistry::Add(void* base, size_t size, bool gpu, int device,
                                                 uint64_t rdma) {
  auto entry = std::make_shared<Entry>();
  entry->reg.base = static_cast<char*>(base);
  entry->reg.size = size;
  entry->reg.gpu = gpu;
  entry->reg.device = device;
  entry->reg.rdma = rdma;
  MutexLock lock(&mu_);
  if (entries_.size() >= kRegistrationsMax) {
    return absl::ResourceExhaustedError(
        absl::StrCat("already ", kRegistrationsMax,
                     " registered buffers: unregister some, or register one larger region"));
  }
  entry->reg.id = g_next_handle_id.fetch_add(1);
  BufferHandle handle{entry->reg.id};
  entries_.emplace(handle.id, std::move(entry));
  return handle;
}

absl::Status BufferRegistry::Remove(BufferHandle handle, Registration* removed) {
  MutexLock lock(&mu_);
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return NotRegistered(handle);
  std::shared_ptr<Entry> entry = std::move(it->second);
  entries_.erase(it);  // no new pins from here on
  while (entry->pins != 0) unpinned_.Wait(&mu_);
  if (removed != nullptr) *removed = entry->reg;
  return absl::OkStatus();
}

absl::StatusOr<BufferRegistry::Pin> BufferRegistry::Acquire(BufferHandle handle, size_t offset,
                                                            size_t length) {
  MutexLock lock(&mu_);
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return NotRegistered(handle);
  const Registration& reg = it->second->reg;
  if (offset > reg.size || length > reg.size - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", ", offset, " + ", length,
                                              ") is outside registered buffer ", handle.id, " of ",
                                              reg.size, " bytes"));
  }
  ++it->second->pins;
  return Pin(this, it->second, offset, length);
}

void BufferRegistry::Unpin(Entry* entry) {
  MutexLock lock(&mu_);
  if (--entry->pins == 0) unpinned_.SignalAll();
}

size_t BufferRegistry::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace shelf
