// BufferRegistry: the memory an engine registered with Client::RegisterBuffer,
// and pins that keep a registration alive while a call uses it. Internal to
// libshelf.
//
//   absl::StatusOr<BufferHandle> h = registry.Add(base, size, false, 0);
//   absl::StatusOr<BufferRegistry::Pin> pin = registry.Acquire(*h, off, len);
//   memcpy(pin->data(), ...);      // [off, off + len) of the registration
//   registry.Remove(*h);           // waits until no Pin of it is alive
//
// Invariants: a handle id is never reused in the process (so a stale handle,
// or one of another client, never finds someone else's memory); a Pin's range
// lies inside its registration; Remove returns only when no Pin of the
// registration exists, and no new Pin can be taken once Remove has started.
//
// Thread-safe.
#ifndef SHELF_CLIENT_BUFFER_REGISTRY_H_
#define SHELF_CLIENT_BUFFER_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "shelf/client.h"

namespace shelf {

class BufferRegistry {
 public:
  // At most this many registrations at once per client.
  static constexpr size_t kRegistrationsMax = 4096;

  struct Registration {
    uint64_t id = 0;
    char* base = nullptr;
    size_t size = 0;
    bool gpu = false;
    int device = 0;  // CUDA device ordinal (gpu only)
    // Its registration with the RDMA engine (transport::MemoryHandle); 0:
    // none (no RDMA device, or the device refused it).
    uint64_t rdma = 0;
  };

 private:
  struct Entry {
    Registration reg;
    size_t pins = 0;  // guarded by the registry's mu_
  };

 public:
  // A pinned range [offset, offset + length) of one registration. Movable;
  // the registration stays until the last Pin of it is destroyed.
  class Pin {
   public:
    Pin(Pin&& other) noexcept
        : registry_(other.registry_),
          entry_(std::move(other.entry_)),
          offset_(other.offset_),
          length_(other.length_) {
      other.registry_ = nullptr;
    }
    Pin& operator=(Pin&& other) = delete;
    Pin(const Pin&) = delete;
    ~Pin();

    char* data() const { return entry_->reg.base + offset_; }
    size_t length() const { return length_; }
    bool gpu() const { return entry_->reg.gpu; }
    int device() const { return entry_->reg.device; }
    // Whether the RDMA device holds the whole buffer (GPUDirect for GPU
    // memory).
    bool rdma_registered() const { return entry_->reg.rdma != 0; }

   private:
    friend class BufferRegistry;
    Pin(BufferRegistry* registry, std::shared_ptr<Entry> entry, size_t offset, size_t length)
        : registry_(registry), entry_(std::move(entry)), offset_(offset), length_(length) {}
    BufferRegistry* registry_;
    std::shared_ptr<Entry> entry_;
    size_t offset_;
    size_t length_;
  };

  BufferRegistry() = default;
  // REQUIRES: no Pin of this registry is alive.
  ~BufferRegistry() = default;
  BufferRegistry(const BufferRegistry&) = delete;
  BufferRegistry& operator=(const BufferRegistry&) = delete;

  // Registers [base, base + size). The caller has checked base and size.
  // RESOURCE_EXHAUSTED beyond kRegistrationsMax.
  absl::StatusOr<BufferHandle> Add(void* base, size_t size, bool gpu, int device,
                                   uint64_t rdma = 0);
  // Unregisters `handle`, waiting for its pins to go, and fills `removed`
  // (when not null) with what it was. INVALID_ARGUMENT when it is not
  // registered here.
  absl::Status Remove(BufferHandle handle, Registration* removed = nullptr);
  // Pins [offset, offset + length) of `handle`. INVALID_ARGUMENT: not
  // registered here; OUT_OF_RANGE: the range is not inside the buffer.
  absl::StatusOr<Pin> Acquire(BufferHandle handle, size_t offset, size_t length);

  size_t size() const;

 private:
  void Unpin(Entry* entry);

  mutable Mutex mu_;
  CondVar unpinned_;  // signalled when an entry's pins drop to 0
  std::map<uint64_t, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf

#endif  // SHELF_CLIENT_BUFFER_REGISTRY_H_
