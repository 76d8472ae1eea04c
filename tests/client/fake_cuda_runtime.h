// FakeCudaRuntime: a simulated GPU behind CudaRuntime (client/cuda_runtime.h),
// for testing how GPU staging orders its copies with an engine's streams on
// machines without a GPU.
//
//   FakeCudaRuntime cuda;
//   std::vector<char> kv(4096, 'a');
//   cuda.AddDeviceMemory(kv.data(), kv.size(), /*device=*/0);  // "device memory"
//   CudaRuntime::Stream engine = cuda.NewStream();
//   cuda.EnqueueFill(engine, kv.data(), 'b', kv.size());      // a kernel, not run yet
//   GpuStaging staging(1, &cuda);
//   ... staging.FromDevice(0, &bounce, kv.data(), kv.size(), GpuSync{engine, nullptr});
//   // the bounce holds 'b' only if the staging copy waited for `engine`
//
// The model: "device memory" is host memory the test declares as such. Each
// stream is a queue; nothing enqueued runs until something waits for it on
// the host (StreamSynchronize, EventSynchronize). Then only what that wait
// needs runs: the stream's operations in order and, for a StreamWaitEvent,
// the operations of the stream the event was recorded on up to that record.
// So a copy that does not wait for the engine's stream reads what the engine
// has not written yet, as on a GPU where the copy wins the race. Events keep
// CUDA's meaning: a wait applies to the event as last recorded when the wait
// was enqueued; an event never recorded is complete.
//
// Every enqueued operation is logged per stream (Ops) in enqueue order, in
// the form "copy d2h 4096", "copy h2d 4096", "fill 4096", "record e2",
// "wait e2"; handles print as s<N> and e<N> (Name).
//
// Thread-safe: each call runs whole under one lock, as if the GPU took the
// calls of several host threads one at a time.
#ifndef SHELF_TESTS_CLIENT_FAKE_CUDA_RUNTIME_H_
#define SHELF_TESTS_CLIENT_FAKE_CUDA_RUNTIME_H_

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cuda_runtime.h"

namespace shelf {

class FakeCudaRuntime final : public CudaRuntime {
 public:
  // Runtime calls a test can make fail (FailNext).
  enum class Call {
    kHostAlloc,
    kStreamCreate,
    kEventCreate,
    kEventRecord,
    kStreamWaitEvent,
    kMemcpyAsync,
    kStreamSynchronize,
    kEventSynchronize,
  };

  explicit FakeCudaRuntime(int devices = 1) : devices_(devices) {}
  ~FakeCudaRuntime() override = default;

  // ---- the test's side

  // Declares [base, base + n) device memory of `device`.
  void AddDeviceMemory(const void* base, size_t n, int device) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    device_memory_.push_back({static_cast<const char*>(base), n, device});
  }
  // A stream or event of the engine (not created through the interface,
  // so not counted among libshelf's).
  Stream NewStream() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return NewHandle(&next_stream_, 's');
  }
  Event NewEvent() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return NewHandle(&next_event_, 'e');
  }
  // Enqueues a write of `n` bytes of `value` at `dst` on `stream`, as an
  // engine's kernel would: it happens when the stream runs up to it.
  void EnqueueFill(Stream stream, void* dst, int value, size_t n) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Op op = NewOp(Op::kFill);
    op.dst = dst;
    op.value = value;
    op.n = n;
    Enqueue(stream, op, absl::StrCat("fill ", n));
  }
  // The next call of `call` fails with INTERNAL.
  void FailNext(Call call) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    failing_.insert(call);
  }

  // Operations enqueued on `stream`, in order (header comment).
  std::vector<std::string> Ops(Stream stream) const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    auto it = log_.find(stream);
    return it == log_.end() ? std::vector<std::string>() : it->second;
  }
  // Operations enqueued on `stream` that have not run.
  size_t Pending(Stream stream) const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    auto it = queues_.find(stream);
    return it == queues_.end() ? 0 : it->second.size();
  }
  // The streams StreamCreate made, in order.
  const std::vector<Stream>& created_streams() const { return created_streams_; }
  size_t live_streams() const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return live_streams_;
  }
  size_t live_events() const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return live_events_;
  }
  size_t live_host_allocations() const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return host_allocations_.size();
  }
  std::string Name(const void* handle) const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    auto it = names_.find(handle);
    return it == names_.end() ? absl::StrCat("?", reinterpret_cast<uintptr_t>(handle)) : it->second;
  }

  // ---- CudaRuntime

  bool Built() const override { return true; }
  absl::Status DeviceCount(int* count) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (devices_ == 0) return absl::InternalError("cudaErrorNoDevice: no CUDA-capable device");
    *count = devices_;
    return absl::OkStatus();
  }
  absl::Status GetDevice(int* device) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    *device = current_device_;
    return absl::OkStatus();
  }
  absl::Status SetDevice(int device) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (device < 0 || device >= devices_) return absl::InternalError("cudaErrorInvalidDevice");
    current_device_ = device;
    return absl::OkStatus();
  }
  int current_device() const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return current_device_;
  }
  absl::Status PointerAttributes(const void* p, PointerInfo* info) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const char* c = static_cast<const char*>(p);
    for (const Range& r : device_memory_) {
      if (c >= r.base && c < r.base + r.n) {
        info->type = MemoryType::kDevice;
        info->device = r.device;
        return absl::OkStatus();
      }
    }
    info->type = MemoryType::kHost;
    info->device = -1;
    return absl::OkStatus();
  }
  absl::Status HostAlloc(size_t bytes, void** p) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (absl::Status s = Fail(Call::kHostAlloc, "cudaHostAlloc"); !s.ok()) return s;
    char* mem = new char[bytes];
    host_allocations_.insert(mem);
    *p = mem;
    return absl::OkStatus();
  }
  void FreeHost(void* p) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    host_allocations_.erase(static_cast<char*>(p));
    delete[] static_cast<char*>(p);
  }
  absl::Status StreamCreate(Stream* stream) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (absl::Status s = Fail(Call::kStreamCreate, "cudaStreamCreate"); !s.ok()) return s;
    *stream = NewStream();
    created_streams_.push_back(*stream);
    ++live_streams_;
    return absl::OkStatus();
  }
  void StreamDestroy(Stream) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    --live_streams_;
  }
  absl::Status EventCreate(Event* event) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (absl::Status s = Fail(Call::kEventCreate, "cudaEventCreate"); !s.ok()) return s;
    *event = NewEvent();
    ++live_events_;
    return absl::OkStatus();
  }
  void EventDestroy(Event) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    --live_events_;
  }
  absl::Status EventRecord(Event event, Stream stream) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (absl::Status s = Fail(Call::kEventRecord, "cudaEventRecord"); !s.ok()) return s;
    EventState& e = events_[event];
    Op op = NewOp(Op::kRecord);
    op.event = event;
    op.generation = ++e.recorded;
    e.recorded_on[op.generation] = {stream, op.seq};
    Enqueue(stream, op, absl::StrCat("record ", Name(event)));
    return absl::OkStatus();
  }
  absl::Status StreamWaitEvent(Stream stream, Event event) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (absl::Status s = Fail(Call::kStreamWaitEvent, "cudaStreamWaitEvent"); !s.ok()) return s;
    Op op = NewOp(Op::kWait);
    op.event = event;
    op.generation = events_[event].recorded;  // as last recorded now
    Enqueue(stream, op, absl::StrCat("wait ", Name(event)));
    return absl::OkStatus();
  }
  absl::Status MemcpyAsync(void* dst, const void* src, size_t n, CopyKind kind,
                           Stream stream) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (absl::Status s = Fail(Call::kMemcpyAsync, "cudaMemcpyAsync"); !s.ok()) return s;
    const bool to_device = kind == CopyKind::kHostToDevice;
    if (!IsDevice(to_device ? dst : src, n) || IsDevice(to_device ? src : dst, n)) {
      return absl::InternalError("cudaErrorInvalidValue: copy kind does not match the memory");
    }
    Op op = NewOp(Op::kCopy);
    op.dst = dst;
    op.src = src;
    op.n = n;
    Enqueue(stream, op, absl::StrCat(to_device ? "copy h2d " : "copy d2h ", n));
    return absl::OkStatus();
  }
  absl::Status StreamSynchronize(Stream stream) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (absl::Status s = Fail(Call::kStreamSynchronize, "cudaStreamSynchronize"); !s.ok()) {
      return s;
    }
    return Run(stream, UINT64_MAX);
  }
  absl::Status EventSynchronize(Event event) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (absl::Status s = Fail(Call::kEventSynchronize, "cudaEventSynchronize"); !s.ok()) return s;
    EventState& e = events_[event];
    return RunUntilRecorded(e, e.recorded);
  }

 private:
  struct Range {
    const char* base;
    size_t n;
    int device;
  };
  struct Op {
    enum Kind { kCopy, kFill, kRecord, kWait } kind;
    uint64_t seq = 0;
    void* dst = nullptr;
    const void* src = nullptr;
    size_t n = 0;
    int value = 0;
    Event event = nullptr;
    uint64_t generation = 0;
  };
  struct EventState {
    uint64_t recorded = 0;   // records enqueued
    uint64_t completed = 0;  // the latest record that has run
    struct Where {
      Stream stream;
      uint64_t seq;
    };
    std::map<uint64_t, Where> recorded_on;  // by generation
  };

  void* NewHandle(uintptr_t* next, char kind) {
    // Distinct from null and from CUDA's special stream handles (1, 2).
    void* h = reinterpret_cast<void*>(static_cast<uintptr_t>(kind) << 16 | ++*next);
    names_[h] = absl::StrCat(std::string(1, kind), *next);
    return h;
  }
  Op NewOp(Op::Kind kind) {
    Op op;
    op.kind = kind;
    op.seq = ++next_seq_;
    return op;
  }
  void Enqueue(Stream stream, const Op& op, std::string text) {
    queues_[stream].push_back(op);
    log_[stream].push_back(std::move(text));
  }
  absl::Status Fail(Call call, const char* what) {
    if (failing_.erase(call) == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(what, ": cudaErrorUnknown: injected failure"));
  }
  bool IsDevice(const void* p, size_t n) const {
    const char* c = static_cast<const char*>(p);
    for (const Range& r : device_memory_) {
      if (c >= r.base && c + n <= r.base + r.n) return true;
    }
    return false;
  }

  absl::Status RunUntilRecorded(EventState& e, uint64_t generation) {
    if (generation == 0 || e.completed >= generation) return absl::OkStatus();
    const EventState::Where where = e.recorded_on.at(generation);
    return Run(where.stream, where.seq);
  }

  // Runs the operations of `stream` with seq <= upto, and what they wait for.
  absl::Status Run(Stream stream, uint64_t upto) {
    if (!running_.insert(stream).second) {
      return absl::InternalError("simulated GPU deadlock: streams wait on each other");
    }
    absl::Status result = absl::OkStatus();
    std::deque<Op>& q = queues_[stream];
    while (result.ok() && !q.empty() && q.front().seq <= upto) {
      Op op = q.front();
      if (op.kind == Op::kWait) {
        EventState& e = events_[op.event];
        if (e.completed < op.generation) {
          result = RunUntilRecorded(e, op.generation);
          continue;
        }
      }
      q.pop_front();
      switch (op.kind) {
        case Op::kCopy:
          std::memcpy(op.dst, op.src, op.n);
          break;
        case Op::kFill:
          std::memset(op.dst, op.value, op.n);
          break;
        case Op::kRecord: {
          EventState& e = events_[op.event];
          if (op.generation > e.completed) e.completed = op.generation;
          break;
        }
        case Op::kWait:
          break;
      }
    }
    running_.erase(stream);
    return result;
  }

  const int devices_;
  int current_device_ = 0;
  std::vector<Range> device_memory_;
  uintptr_t next_stream_ = 0;
  uintptr_t next_event_ = 0;
  uint64_t next_seq_ = 0;
  std::map<const void*, std::string> names_;
  std::map<Stream, std::deque<Op>> queues_;
  std::map<Stream, std::vector<std::string>> log_;
  std::map<Event, EventState> events_;
  std::vector<Stream> created_streams_;
  std::set<Call> failing_;
  std::set<Stream> running_;
  std::set<char*> host_allocations_;
  size_t live_streams_ = 0;
  size_t live_events_ = 0;
  // Every call runs under it: a batch's items reach the GPU from several
  // of the client's threads at once. Recursive: a wait runs other streams.
  mutable std::recursive_mutex mu_;
};

}  // namespace shelf

#endif  // SHELF_TESTS_CLIENT_FAKE_CUDA_RUNTIME_H_
