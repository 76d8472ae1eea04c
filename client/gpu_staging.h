// GpuStaging: CUDA device memory for the client. Classifies pointers and
// moves blocks between device memory and pinned host bounce buffers (an
// asynchronous copy on a stream of the buffer), since the TCP and
// shared-memory transports only reach host memory. Every CUDA call goes
// through a CudaRuntime (cuda_runtime.h), so tests drive this logic with a
// simulated GPU. Internal to libshelf.
//
//   GpuStaging staging(8);
//   int device = 0;
//   if (staging.CheckDeviceMemory(p, n, &device).ok()) {
//     absl::StatusOr<GpuStaging::Bounce> b = staging.Acquire(n, deadline_ms);
//     staging.FromDevice(device, &*b, p, n, sync);   // then put b->data()
//   }
//
// Ordering with the caller's CUDA work (GpuSync, client.h):
//   FromDevice (puts)  the copy out of device memory waits for sync.event
//                      and for the work enqueued on sync.stream before the
//                      call; the call returns when the copy is done, so the
//                      bounce holds the bytes the caller's work wrote.
//   ToDevice (gets)    the copy into device memory waits for the work
//                      enqueued on sync.stream before the call; then
//                      sync.event is recorded after the copy and
//                      sync.stream waits for it. With either given the call
//                      returns once the copy is enqueued; the bounce buffer
//                      is lent again only after the copy is done.
//   no sync given      no ordering with the caller's streams at all: the
//                      caller must have synchronized its writes before a
//                      put, and a get's bytes are in place when it returns.
//
// With a CUDA runtime loaded but no driver or device, GPU operations answer
// FAILED_PRECONDITION and host memory still works; where no CUDA runtime can
// be loaded they answer UNIMPLEMENTED and all memory is host memory.
//
// Thread-safe. A Bounce is used by one thread at a time.
#ifndef SHELF_CLIENT_GPU_STAGING_H_
#define SHELF_CLIENT_GPU_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cuda_runtime.h"
#include "common/mutex.h"
#include "shelf/client.h"

namespace shelf {

class GpuStaging {
 public:
  // True when libshelf's own runtime (CudaRuntime::Default) loaded CUDA's.
  static bool Built();

  struct Buffer;  // a pinned host allocation and its streams (internal)

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

  // At most `buffers_max` bounce buffers exist at once (0 counts as 1).
  // `cuda` must outlive this object.
  explicit GpuStaging(size_t buffers_max, CudaRuntime* cuda = CudaRuntime::Default());
  // Waits for copies still in flight. REQUIRES: no Bounce of this object is
  // alive.
  ~GpuStaging();
  GpuStaging(const GpuStaging&) = delete;
  GpuStaging& operator=(const GpuStaging&) = delete;

  // OK, with the CUDA device ordinal, when [p, p + n) is device (or managed)
  // memory. UNIMPLEMENTED without a CUDA runtime; FAILED_PRECONDITION with no usable
  // driver or device; INVALID_ARGUMENT when p is host memory.
  absl::Status CheckDeviceMemory(const void* p, size_t n, int* device);
  // OK when p is not device memory (always, without CUDA or a driver);
  // INVALID_ARGUMENT when it is.
  absl::Status CheckHostMemory(const void* p);

  // Lends a pinned buffer of at least `bytes`, waiting (until the MonoMs
  // deadline) while all buffers are lent. DEADLINE_EXCEEDED when none comes
  // free in time; RESOURCE_EXHAUSTED when pinned memory cannot be allocated;
  // UNIMPLEMENTED without a CUDA runtime; the runtime's error when an earlier copy
  // from the buffer failed.
  absl::StatusOr<Bounce> Acquire(size_t bytes, uint64_t deadline_ms);
  // Copies n bytes from device memory of `device` into `bounce`, ordered
  // after `sync` (header comment), and waits for the copy. The runtime's
  // error (INTERNAL with CUDA's message) on failure.
  absl::Status FromDevice(int device, Bounce* bounce, const void* src, size_t n,
                          const GpuSync& sync = GpuSync());
  // Copies n bytes from `bounce` into device memory of `device`, ordered
  // with `sync` (header comment): without one, waits for the copy. The
  // runtime's error on failure; the bounce is then free to reuse.
  absl::Status ToDevice(int device, void* dst, const Bounce& bounce, size_t n,
                        const GpuSync& sync = GpuSync());

  // For a get the RDMA device writes into device memory itself (GPUDirect),
  // outside any stream: before it, waits on the host for the work enqueued
  // on `sync.stream` (none given: returns at once), so that the device
  // writes no memory that work still uses; after the bytes are in place,
  // RecordOnStream records `sync.event` on `sync.stream`. The runtime's
  // error on failure.
  absl::Status AwaitBeforeDirect(int device, const GpuSync& sync);
  // Records `sync.event` on `sync.stream` (nothing unless both are given):
  // it then marks every copy ToDevice ordered before that stream so far,
  // as a batch's one event must (the items' copies run on several staging
  // streams). The runtime's error on failure.
  absl::Status RecordOnStream(int device, const GpuSync& sync);

 private:
  void Return(std::unique_ptr<Buffer> buffer);

  // Constant after construction.
  CudaRuntime* const cuda_;
  const size_t buffers_max_;

  Mutex mu_;
  CondVar returned_;  // signalled when a buffer comes back
  std::vector<std::unique_ptr<Buffer>> free_ ABSL_GUARDED_BY(mu_);
  size_t lent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shelf

#endif  // SHELF_CLIENT_GPU_STAGING_H_
