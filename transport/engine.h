// transport::Engine: the data plane's one interface over its backends (TCP,
// shared memory, RDMA). A caller registers local memory and gets a handle,
// then submits batches of reads and writes between that memory and stores'
// DRAM segments, and polls or waits for each op's status.
//
//   transport::TcpEngine::Options options;
//   options.secret = secret;
//   transport::TcpEngine tcp(options);
//   SHELF_ASSIGN_OR_RETURN(transport::MemoryHandle h,
//                          tcp.RegisterMemory(buf, len, transport::MemoryKind::kHost));
//   transport::Peer store = ...;  // from the master's StoreEndpoint
//   std::vector<transport::Op> ops = {
//       {transport::OpKind::kRead, h, /*local_offset=*/0, &store, segment, offset, 4096}};
//   std::shared_ptr<transport::Batch> batch = tcp.Submit(ops, MonoMs() + 100);
//   batch->Wait();
//   for (const absl::Status& s : batch->statuses()) ...
//   tcp.UnregisterMemory(h);
//
// The generic types below carry nothing of any backend: a Peer names the
// route each transport uses as an opaque string, a write carries the put's
// grant as the master encoded it. Each backend is a subclass keeping its own
// state (connections, mappings, queue pairs, memory registrations).
//
// Every op's status is its own. An op the engine cannot start (unknown
// handle, range outside its region, zero length, a peer this backend does not
// reach) fails alone and the others proceed. Ops are bounded by the batch's
// deadline: once it passes, an op still running fails with DEADLINE_EXCEEDED
// shortly after, so Wait never blocks long past the deadline. After Wait
// returns, the engine no longer touches the memory of that batch's ops.
//
// Thread-safe. REQUIRES: a handle is not unregistered, nor a Peer destroyed,
// while a batch naming it is still running.
#ifndef SHELF_TRANSPORT_ENGINE_H_
#define SHELF_TRANSPORT_ENGINE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/mutex.h"

namespace shelf::transport {

// The transports, in no particular order (negotiation prefers shm, then
// rdma, then tcp).
enum class Kind : uint8_t { kTcp = 0, kShm = 1, kRdma = 2 };
inline constexpr size_t kKinds = 3;
// "tcp", "shm", "rdma".
const char* KindName(Kind kind);

// A store as the data plane sees it. `routes[k]` is how transport k reaches
// it (tcp and rdma: the data port's host:port; shm: the store's Unix socket);
// empty when the store does not offer k.
struct Peer {
  std::string node_id;
  uint64_t incarnation = 0;  // changes on every store start (0: unknown)
  std::string host_id;       // the store's host; shared memory needs the same one
  std::array<std::string, kKinds> routes;

  const std::string& route(Kind kind) const { return routes[static_cast<size_t>(kind)]; }
  void set_route(Kind kind, std::string route) {
    routes[static_cast<size_t>(kind)] = std::move(route);
  }
};

enum class MemoryKind : uint8_t { kHost, kGpu };
using MemoryHandle = uint64_t;  // 0 is never a registered handle

enum class OpKind : uint8_t { kRead, kWrite };

// One transfer between [local_offset, +length) of a registered region and
// [remote_offset, +length) of segment `segment_id` of `peer`. READ copies the
// remote bytes into local memory; WRITE copies local memory there.
struct Op {
  OpKind kind = OpKind::kRead;
  MemoryHandle local = 0;
  uint64_t local_offset = 0;
  const Peer* peer = nullptr;
  uint32_t segment_id = 0;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
  // Writes: the put's grant for this store, as the master issued it
  // (wire::EncodeGrant). Reads: the read credential, the replica's read
  // grant then the key (wire::ReadGrant; empty: none). Backends through
  // which the store checks grants send it; the store refuses a write, and
  // (with read grants on) a read, without a valid one.
  std::string grant;
};

// The completion state of one submitted batch.
class Batch {
 public:
  explicit Batch(size_t ops);
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // True once every op has completed.
  bool Poll() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until every op has completed.
  void Wait() const ABSL_LOCKS_EXCLUDED(mu_);
  // One status per op, in submission order. REQUIRES: Poll() is true.
  const std::vector<absl::Status>& statuses() const { return statuses_; }
  // OK iff every op succeeded; else the first failed op's status.
  // REQUIRES: Poll() is true.
  absl::Status status() const;
  size_t size() const { return statuses_.size(); }

  // For backends: records op `index`'s result. REQUIRES: once per op.
  void Complete(size_t index, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  mutable CondVar done_cv_;  // remaining_ reached 0
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  // Each slot is written once, before `remaining_` drops under mu_; read
  // only after it reaches 0.
  std::vector<absl::Status> statuses_;
};

class Engine {
 public:
  virtual ~Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  virtual Kind kind() const = 0;
  // Whether this backend can reach `peer` at all (it offers the transport;
  // for shared memory, it lives on this host).
  virtual bool Reaches(const Peer& peer) const = 0;

  // Registers [base, base + length) for ops. INVALID_ARGUMENT for a null or
  // empty range; UNIMPLEMENTED for device memory on a backend that moves
  // only host memory (libshelf stages device memory through pinned host
  // buffers for those); otherwise the backend's error (e.g. the RDMA
  // device's).
  absl::StatusOr<MemoryHandle> RegisterMemory(void* base, size_t length, MemoryKind kind)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown handle.
  absl::Status UnregisterMemory(MemoryHandle handle) ABSL_LOCKS_EXCLUDED(mu_);

  // Starts `ops` (copied) and returns their batch. `deadline_ms` is on the
  // MonoMs clock. A backend may run a batch it can finish at once (a memcpy;
  // a single small op) in the calling thread before returning.
  std::shared_ptr<Batch> Submit(absl::Span<const Op> ops, uint64_t deadline_ms)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Submit, Wait, and the batch's status.
  absl::Status Execute(absl::Span<const Op> ops, uint64_t deadline_ms);

 protected:
  Engine() = default;

  // An op that passed the generic checks, with its local memory resolved.
  struct Work {
    size_t index = 0;  // in the batch
    Op op;
    char* local = nullptr;  // the op's first local byte
  };
  // A registered region, as backends see it.
  struct Region {
    char* base = nullptr;
    uint64_t length = 0;
    MemoryKind kind = MemoryKind::kHost;
  };

  // Whether the backend moves device memory itself (RDMA with GPUDirect).
  virtual bool MovesDeviceMemory() const { return false; }
  // Backend hooks around registration (e.g. the RDMA memory registration).
  virtual absl::Status OnRegister(MemoryHandle handle, const Region& region) {
    return absl::OkStatus();
  }
  virtual void OnUnregister(MemoryHandle handle, const Region& region) {}
  // Starts `work` (non-empty). Every item must eventually be completed in
  // `batch`, by its deadline or shortly after.
  virtual void Start(std::shared_ptr<Batch> batch, std::vector<Work> work,
                     uint64_t deadline_ms) = 0;

 private:
  Mutex mu_;
  MemoryHandle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<MemoryHandle, Region> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_ENGINE_H_
