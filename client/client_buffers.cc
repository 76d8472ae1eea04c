// ClientImpl: registered buffers and the zero-copy calls. Host memory moves
// straight between the buffer and the transport (one memcpy out of a mapped
// segment or into shm staging memory, or the socket writing from / reading
// into it); device memory goes through a pinned bounce buffer
// (gpu_staging.h). Shared host memory: memory a same-host store copies
// puts from directly (transport/shm_sources.h).
#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "common/clock.h"
#include "common/log.h"
#include "transport/shm_sources.h"

namespace shelf {

Status AllocateSharedHostMemory(size_t size, void** out) {
  if (out == nullptr) {
    return Status(StatusCode::kInvalidArgument, "AllocateSharedHostMemory: null out");
  }
  *out = nullptr;
  if (size == 0) {
    return Status(StatusCode::kInvalidArgument, "AllocateSharedHostMemory: size must be 1 or more");
  }
  absl::StatusOr<char*> memory = transport::AllocateShmSource(size);
  if (!memory.ok()) return FromAbsl(memory.status());
  *out = *memory;
  return Status();
}

Status FreeSharedHostMemory(void* memory) {
  return FromAbsl(transport::FreeShmSource(static_cast<char*>(memory)));
}

Status ClientImpl::RegisterBuffer(void* base, size_t size, BufferHandle* handle, bool gpu) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (handle == nullptr) return Status(StatusCode::kInvalidArgument, "RegisterBuffer: null handle");
  if (base == nullptr || size == 0) {
    return Status(StatusCode::kInvalidArgument,
                  "RegisterBuffer needs memory: a non-null base and a size > 0");
  }
  if (reinterpret_cast<uintptr_t>(base) + size < reinterpret_cast<uintptr_t>(base)) {
    return Status(StatusCode::kInvalidArgument, "RegisterBuffer: the range wraps around");
  }
  int device = 0;
  absl::Status s = gpu ? gpu_.CheckDeviceMemory(base, size, &device) : gpu_.CheckHostMemory(base);
  if (!s.ok()) return FromAbsl(s);
  const uint64_t rdma = RegisterWithRdma(base, size, gpu);
  absl::StatusOr<BufferHandle> h = buffers_.Add(base, size, gpu, device, rdma);
  if (!h.ok()) {
    if (rdma != 0) rdma_->UnregisterMemory(rdma).IgnoreError();
    return FromAbsl(h.status());
  }
  *handle = *h;
  return Status::Ok();
}

uint64_t ClientImpl::RegisterWithRdma(void* base, size_t size, bool gpu) {
  if (rdma_ == nullptr) return 0;
  // Once per buffer: each read or put into it is then a hit in the
  // device's registration cache, and GPU memory is read into directly.
  absl::StatusOr<transport::MemoryHandle> h = rdma_->RegisterMemory(
      base, size, gpu ? transport::MemoryKind::kGpu : transport::MemoryKind::kHost);
  if (h.ok()) return *h;
  if (gpu) {
    // Staged instead, as over tcp and shm; said once, counted always.
    stats_.gpu_rdma_registration_failures.fetch_add(1);
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      SHELF_LOG(WARNING) << "GPU buffer not registered with the RDMA device; staging it through "
                            "pinned host memory (further failures are only counted)"
                         << Kv("error", h.status().ToString());
    }
  }
  return 0;
}

Status ClientImpl::UnregisterBuffer(BufferHandle handle) {
  // Allowed on a closed client: the engine frees its memory after Close.
  BufferRegistry::Registration removed;
  absl::Status s = buffers_.Remove(handle, &removed);
  if (s.ok() && removed.rdma != 0) rdma_->UnregisterMemory(removed.rdma).IgnoreError();
  return FromAbsl(s);
}

absl::Status ClientImpl::PutFromPin(const std::string& key, const BufferRegistry::Pin& pin,
                                    const PutOptions& options, uint64_t deadline_ms) {
  if (pin.length() == 0) return absl::InvalidArgumentError("a block needs a size > 0");
  if (!pin.gpu())
    return CoalescedPut(HostPut{&key, pin.data(), pin.length()}, options, deadline_ms);
  absl::StatusOr<GpuStaging::Bounce> bounce = gpu_.Acquire(pin.length(), deadline_ms);
  if (!bounce.ok()) return bounce.status();
  if (absl::Status s =
          gpu_.FromDevice(pin.device(), &*bounce, pin.data(), pin.length(), options.gpu);
      !s.ok()) {
    return s;
  }
  stats_.bytes_staged_gpu.fetch_add(pin.length());
  return CoalescedPut(HostPut{&key, bounce->data(), pin.length()}, options, deadline_ms);
}

Status ClientImpl::PutFrom(const std::string& key, BufferHandle buffer, size_t offset, size_t size,
                           const PutOptions& options) {
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(PutDeadline(options), &deadline_ms); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateKey(key); !s.ok()) return FromAbsl(s);
  if (absl::Status s = CheckBlockInfo(options.block); !s.ok()) return FromAbsl(s);
  PinOr pin = buffers_.Acquire(buffer, offset, size);
  if (!pin.ok()) return FromAbsl(pin.status());
  return FromAbsl(PutFromPin(key, *pin, options, deadline_ms));
}

Status ClientImpl::GetInto(const std::string& key, BufferHandle buffer, size_t offset,
                           size_t capacity, size_t* size, Deadline deadline, const GpuSync& gpu) {
  std::vector<Status> statuses;
  std::vector<size_t> sizes;
  Status s =
      BatchGetInto({GetIntoItem{key, buffer, offset, capacity}}, &statuses, &sizes, deadline, gpu);
  if (!s.ok()) return s;
  if (size != nullptr) *size = sizes[0];
  return statuses[0];
}

std::vector<ClientImpl::PinOr> ClientImpl::PinForGet(const std::vector<GetIntoItem>& items) {
  std::vector<PinOr> pins;
  pins.reserve(items.size());
  for (const GetIntoItem& item : items) {
    pins.push_back(buffers_.Acquire(item.buffer, item.offset, item.capacity));
  }
  return pins;
}

std::vector<ClientImpl::PinOr> ClientImpl::PinForPut(const std::vector<PutFromItem>& items) {
  std::vector<PinOr> pins;
  pins.reserve(items.size());
  for (const PutFromItem& item : items) {
    pins.push_back(buffers_.Acquire(item.buffer, item.offset, item.size));
  }
  return pins;
}

absl::Status ClientImpl::BatchGetIntoPinned(const std::vector<GetIntoItem>& items,
                                            std::vector<PinOr>* pins, uint64_t deadline_ms,
                                            const GpuSync& gpu, std::vector<Status>* statuses,
                                            std::vector<size_t>* sizes) {
  if (absl::Status s = ValidateBatchSize(items.size(), "blocks"); !s.ok()) return s;
  std::vector<absl::Status> results(items.size());
  std::vector<size_t> sent;  // items whose key and buffer are fine
  std::vector<const std::string*> keys;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::Status v = ValidateKey(items[i].key);
    if (v.ok()) v = (*pins)[i].status();
    if (!v.ok()) {
      results[i] = v;
      continue;
    }
    sent.push_back(i);
    keys.push_back(&items[i].key);
  }
  // One event for the whole batch: the items' copies run on several
  // staging streams at once, so an event each of them recorded would mark
  // only the last copy. The items record none; the caller's stream (which
  // each copy is ordered before) gets the event once they are all in
  // flight, and without a stream each copy is waited for on the host.
  int gpu_items = 0, gpu_device = 0;
  for (size_t i : sent) {
    if (!(*pins)[i]->gpu()) continue;
    if (gpu_items++ == 0) gpu_device = (*pins)[i]->device();
  }
  const bool batch_event = gpu.event != nullptr && gpu_items > 1;
  const GpuSync item_sync = batch_event ? GpuSync{gpu.stream, nullptr} : gpu;
  std::vector<size_t> found(items.size(), 0);
  std::vector<absl::Status> read;
  absl::Status s = LookupAndRead(
      keys, deadline_ms,
      [&](size_t j, const v1::ObjectLocation& loc, bool cached) {
        size_t i = sent[j];
        const BufferRegistry::Pin& pin = *(*pins)[i];
        found[i] = loc.size();
        return ReadToTarget(loc,
                            ReadTarget{pin.data(), pin.length(), pin.gpu(), pin.device(), item_sync,
                                       pin.rdma_registered()},
                            deadline_ms, cached);
      },
      &read);
  // Recorded even when the batch failed: cached items may have copies in
  // flight, which the caller's stream waits for and the event must mark.
  if (batch_event && gpu.stream != nullptr) {
    absl::Status r = gpu_.RecordOnStream(gpu_device, gpu);
    if (s.ok()) s = r;
  }
  if (!s.ok()) return s;
  for (size_t j = 0; j < sent.size(); ++j) results[sent[j]] = read[j];
  statuses->clear();
  for (const absl::Status& r : results) statuses->push_back(FromAbsl(r));
  if (sizes != nullptr) *sizes = std::move(found);
  return absl::OkStatus();
}

Status ClientImpl::BatchGetInto(const std::vector<GetIntoItem>& items,
                                std::vector<Status>* statuses, std::vector<size_t>* sizes,
                                Deadline deadline, const GpuSync& gpu) {
  if (statuses == nullptr) {
    return Status(StatusCode::kInvalidArgument, "BatchGetInto: null statuses");
  }
  statuses->clear();  // empty unless the batch as a whole succeeds
  if (sizes != nullptr) sizes->clear();
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  std::vector<PinOr> pins = PinForGet(items);
  return FromAbsl(BatchGetIntoPinned(items, &pins, deadline_ms, gpu, statuses, sizes));
}

absl::Status ClientImpl::BatchPutFromPinned(const std::vector<PutFromItem>& items,
                                            std::vector<PinOr>* pins, const PutOptions& options,
                                            uint64_t deadline_ms, std::vector<Status>* statuses) {
  if (absl::Status s = ValidateBatchSize(items.size(), "blocks"); !s.ok()) return s;
  std::vector<absl::Status> results(items.size());
  std::vector<size_t> host, device;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::Status v = ValidateKey(items[i].key);
    if (v.ok()) v = (*pins)[i].status();
    if (v.ok() && items[i].size == 0) v = absl::InvalidArgumentError("a block needs a size > 0");
    if (v.ok()) v = CheckBlockInfo(items[i].block);
    if (!v.ok()) {
      results[i] = v;
      continue;
    }
    ((*pins)[i]->gpu() ? device : host).push_back(i);
  }
  // Host blocks: one batch, written straight from the buffer.
  std::vector<HostPut> puts;
  puts.reserve(host.size());
  for (size_t i : host) {
    puts.push_back({&items[i].key, (*pins)[i]->data(), items[i].size,
                    items[i].block.empty() ? nullptr : &items[i].block});
  }
  std::vector<absl::Status> put;
  if (absl::Status s = PutHostBlocks(puts, options, deadline_ms, &put); !s.ok()) return s;
  for (size_t j = 0; j < host.size(); ++j) results[host[j]] = put[j];
  // Device blocks: staged into bounce buffers a window at a time (the pool
  // of pinned buffers is bounded), each window one batch. Only the first
  // buffer of a window is waited for; the window ends at the first one not
  // free at once, so concurrent callers never hold some buffers while
  // waiting for more.
  const size_t window_max = std::max<size_t>(1, transfer_pool_->threads());
  for (size_t next = 0; next < device.size();) {
    std::vector<GpuStaging::Bounce> bounces;
    bounces.reserve(window_max);
    std::vector<HostPut> staged;
    std::vector<size_t> staged_index;
    while (next < device.size() && bounces.size() < window_max) {
      size_t i = device[next];
      const BufferRegistry::Pin& pin = *(*pins)[i];
      absl::StatusOr<GpuStaging::Bounce> b =
          gpu_.Acquire(pin.length(), bounces.empty() ? deadline_ms : MonoMs());
      if (!b.ok() && !bounces.empty() && b.status().code() == absl::StatusCode::kDeadlineExceeded) {
        break;  // none free now: put this window first
      }
      ++next;
      absl::Status st = b.status();
      if (st.ok()) st = gpu_.FromDevice(pin.device(), &*b, pin.data(), pin.length(), options.gpu);
      if (!st.ok()) {
        results[i] = st;
        continue;
      }
      stats_.bytes_staged_gpu.fetch_add(pin.length());
      bounces.push_back(*std::move(b));
      staged.push_back({&items[i].key, bounces.back().data(), pin.length(),
                        items[i].block.empty() ? nullptr : &items[i].block});
      staged_index.push_back(i);
    }
    if (absl::Status s = PutHostBlocks(staged, options, deadline_ms, &put); !s.ok()) {
      for (size_t i : staged_index) results[i] = s;
      continue;
    }
    for (size_t j = 0; j < staged_index.size(); ++j) results[staged_index[j]] = put[j];
  }
  statuses->clear();
  for (const absl::Status& r : results) statuses->push_back(FromAbsl(r));
  return absl::OkStatus();
}

Status ClientImpl::BatchPutFrom(const std::vector<PutFromItem>& items,
                                std::vector<Status>* statuses, const PutOptions& options) {
  if (statuses == nullptr) {
    return Status(StatusCode::kInvalidArgument, "BatchPutFrom: null statuses");
  }
  statuses->clear();  // empty unless the batch as a whole succeeds
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(PutDeadline(options), &deadline_ms); !s.ok()) return FromAbsl(s);
  if (!options.block.empty()) return Status(StatusCode::kInvalidArgument, kBatchBlockInfoError);
  std::vector<PinOr> pins = PinForPut(items);
  return FromAbsl(BatchPutFromPinned(items, &pins, options, deadline_ms, statuses));
}

}  // namespace shelf
