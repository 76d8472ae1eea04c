// GpuStaging: CUDA device memory for the client. Classifies pointers
// (cudaPointerGetAttributes) and moves blocks between device memory and
// pinned host bounce buffers (cudaMemcpyAsync on a stream of the buffer),
// since the TCP and shared-memory transports only reach host memory.
// Internal to libshelf.
//
//   int device = 0;
//   if (GpuStaging::CheckDeviceMemory(p, n, &device).ok()) {
//     absl::StatusOr<GpuStaging::Bounce> b = staging.Acquire(n, deadline_ms);
//     staging.FromDevice(device, b->data(), p, n);   // then put b->data()
//   }
//
// Built with CUDA when the library is compiled with SHELF_WITH_CUDA (CMake
// finds a toolkit); otherwise the same interface answers UNIMPLEMENTED for
// every GPU operation and treats all memory as host memory. With CUDA built
// but no driver or device at run time, GPU operations answer
// FAILED_PRECONDITION and host memory still works.
//
// Thread-safe.
#ifndef SHELF_CLIENT_GPU_STAGING_H_
#define SHELF_CLIENT_GPU_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace shelf {

class GpuStaging {
 public:
  // True when compiled with CUDA.
  static bool Built();
  // OK, with the CUDA device ordinal, when [p, p + n) is device (or managed)
  // memory. UNIMPLEMENTED without CUDA; FAILED_PRECONDITION with no usable
  // driver or device; INVALID_ARGUMENT when p is host memory.
  static absl::Status CheckDeviceMemory(const void* p, size_t n, int* device);
  // OK when p is not device memory (always, without CUDA or a driver);
  // INVALID_ARGUMENT when it is.
  static absl::Status CheckHostMemory(const void* p);

  struct Buffer;  // a pinned host allocation (internal)

  // A pinned host buffer lent for one transfer; returned to the pool when
  // destroyed. Movable.
  class Bounce {
   public:
    Bounce(Bounce&& other) noexcept;
    Bounce(const Bounce&) = delete;
    Bounce& operator=(const Bounce&) = delete;
    Bounce& operator=(Bounce&&) = delete;
    ~Bounce();
    char* data() const;

   private:
    friend class GpuStaging;
    Bounce(GpuStaging* owner, std::unique_ptr<Buffer> buffer);
    GpuStaging* owner_;
    std::unique_ptr<Buffer> buffer_;
  };

  // At most `buffers_max` bounce buffers exist at once. REQUIRES >= 1.
  explicit GpuStaging(size_t buffers_max);
  // REQUIRES: no Bounce of this object is alive.
  ~GpuStaging();
  GpuStaging(const GpuStaging&) = delete;
  GpuStaging& operator=(const GpuStaging&) = delete;

  // Lends a pinned buffer of at least `bytes`, waiting (until the MonoMs
  // deadline) while all buffers are lent. DEADLINE_EXCEEDED when none comes
  // free in time; RESOURCE_EXHAUSTED when pinned memory cannot be allocated;
  // UNIMPLEMENTED without CUDA.
  absl::StatusOr<Bounce> Acquire(size_t bytes, uint64_t deadline_ms);
  // Copies n bytes between `bounce` and device memory of `device`, and waits
  // for the copy. INTERNAL with CUDA's message on failure.
  absl::Status ToDevice(int device, void* dst, const Bounce& bounce, size_t n);
  absl::Status FromDevice(int device, Bounce* bounce, const void* src, size_t n);

 private:
  void Return(std::unique_ptr<Buffer> buffer);

  const size_t buffers_max_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Buffer>> free_ ABSL_GUARDED_BY(mu_);
  size_t lent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shelf

#endif  // SHELF_CLIENT_GPU_STAGING_H_
