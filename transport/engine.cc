#include "transport/engine.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace shelf::transport {

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kTcp:
      return "tcp";
    case Kind::kShm:
      return "shm";
    case Kind::kRdma:
      return "rdma";
  }
  return "unknown";
}

Batch::Batch(size_t ops) : remaining_(ops), statuses_(ops) {}

bool Batch::Poll() const {
  MutexLock lock(&mu_);
  return remaining_ == 0;
}

void Batch::Wait() const {
  MutexLock lock(&mu_);
  while (remaining_ != 0) done_cv_.Wait(&mu_);
}

absl::Status Batch::status() const {
  for (const absl::Status& s : statuses_) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void Batch::Complete(size_t index, absl::Status status) {
  statuses_[index] = std::move(status);
  MutexLock lock(&mu_);
  // Signalled with mu_ held: the waiter may destroy the batch once it
  // holds mu_ again.
  if (--remaining_ == 0) done_cv_.SignalAll();
}

absl::StatusOr<MemoryHandle> Engine::RegisterMemory(void* base, size_t length, MemoryKind kind) {
  if (base == nullptr || length == 0) {
    return absl::InvalidArgumentError("RegisterMemory: a region needs a base and a length > 0");
  }
  if (kind == MemoryKind::kGpu && !MovesDeviceMemory()) {
    return absl::UnimplementedError(
        absl::StrCat("the ", KindName(this->kind()),
                     " transport moves host memory only: stage device memory through pinned "
                     "host buffers"));
  }
  Region region{static_cast<char*>(base), length, kind};
  MemoryHandle handle;
  {
    MutexLock lock(&mu_);
    handle = next_handle_++;
  }
  if (absl::Status s = OnRegister(handle, region); !s.ok()) return s;
  MutexLock lock(&mu_);
  regions_.emplace(handle, region);
  return handle;
}

absl::Status Engine::UnregisterMemory(MemoryHandle handle) {
  Region region;
  {
    MutexLock lock(&mu_);
    auto it = regions_.find(handle);
    if (it == regions_.end()) {
      return absl::NotFoundError(absl::StrCat("no registered memory with handle ", handle));
    }
    region = it->second;
    regions_.erase(it);
  }
  OnUnregister(handle, region);
  return absl::OkStatus();
}

std::shared_ptr<Batch> Engine::Submit(absl::Span<const Op> ops, uint64_t deadline_ms) {
  auto batch = std::make_shared<Batch>(ops.size());
  std::vector<Work> work;
  work.reserve(ops.size());
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      absl::Status verdict;
      auto it = regions_.find(op.local);
      if (op.length == 0) {
        verdict = absl::InvalidArgumentError("an op needs a length > 0");
      } else if (it == regions_.end()) {
        verdict = absl::InvalidArgumentError(
            absl::StrCat("op names unregistered memory (handle ", op.local, ")"));
      } else if (op.local_offset > it->second.length ||
                 op.length > it->second.length - op.local_offset) {
        verdict = absl::OutOfRangeError(absl::StrCat("op's local range [", op.local_offset, ", +",
                                                     op.length, ") is outside its region of ",
                                                     it->second.length, " bytes"));
      } else if (op.peer == nullptr) {
        verdict = absl::InvalidArgumentError("op names no peer");
      } else if (!Reaches(*op.peer)) {
        verdict = absl::UnavailableError(absl::StrCat(
            "the ", KindName(kind()), " transport does not reach store ", op.peer->node_id));
      }
      if (!verdict.ok()) {
        batch->Complete(i, std::move(verdict));
        continue;
      }
      work.push_back(Work{i, op, it->second.base + op.local_offset});
    }
  }
  if (!work.empty()) Start(batch, std::move(work), deadline_ms);
  return batch;
}

absl::Status Engine::Execute(absl::Span<const Op> ops, uint64_t deadline_ms) {
  std::shared_ptr<Batch> batch = Submit(ops, deadline_ms);
  batch->Wait();
  return batch->status();
}

}  // namespace shelf::transport
