// Shared host memory: memory of this process, backed by a sealed memfd,
// that a same-host store may map read-only and copy puts from directly.
// A put from anywhere else is first copied into the writer's staging memfd
// (transport/shm_write.h); a put from a source is copied once, by the store.
//
//   absl::StatusOr<char*> kv = AllocateShmSource(pool_bytes);
//   ... fill *kv, put from it through ShmEngine (one copy) ...
//   FreeShmSource(*kv);
//
// Every source of the process is in one table (ShmSources::Process()), so
// any writer finds the source a put's bytes lie in by address. A source's
// memfd is sealed against shrinking (F_SEAL_SHRINK | F_SEAL_SEAL): no holder
// can truncate it under a store's mapping (SIGBUS in the store).
//
// Thread-safe.
#ifndef SHELF_TRANSPORT_SHM_SOURCES_H_
#define SHELF_TRANSPORT_SHM_SOURCES_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace shelf::transport {

// One registered source: [base, base + size) of this process, offset 0 of
// `fd` (the table's own descriptor, closed when the last reference goes).
struct ShmSource {
  ShmSource(uint64_t source_id, const char* source_base, uint64_t source_size, int source_fd)
      : id(source_id), base(source_base), size(source_size), fd(source_fd) {}
  ~ShmSource();
  ShmSource(const ShmSource&) = delete;
  ShmSource& operator=(const ShmSource&) = delete;

  const uint64_t id;  // process-unique, never reused
  const char* const base;
  const uint64_t size;
  const int fd;
};

class ShmSources {
 public:
  // The process's table.
  static ShmSources& Process();

  // Registers [base, base + size), the mapping of `fd` from offset 0 (the
  // table keeps a duplicate of `fd`). INVALID_ARGUMENT for an empty range
  // or one overlapping a registered source; FAILED_PRECONDITION when `fd`
  // is not sealed against shrinking.
  absl::StatusOr<uint64_t> Add(const char* base, uint64_t size, int fd) ABSL_LOCKS_EXCLUDED(mu_);
  // Unregisters source `id`; false when it is not registered. Writers drop
  // the store's mapping of it at their next put.
  bool Remove(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The source holding all of [p, p + length) (length >= 1), or null.
  std::shared_ptr<const ShmSource> Find(const char* p, uint64_t length) const
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Alive(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  // How many removals there have been: a writer that saw the same count
  // before has no dead source to drop.
  uint64_t removals() const { return removals_.load(std::memory_order_acquire); }

 private:
  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // By base address.
  std::map<const char*, std::shared_ptr<const ShmSource>> by_base_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> removals_{0};
};

// `size` bytes (1 or more) of zeroed host memory backed by a new memfd,
// mapped read-write, populated, and registered in ShmSources::Process().
// RESOURCE_EXHAUSTED or INTERNAL when the memory cannot be had.
absl::StatusOr<char*> AllocateShmSource(uint64_t size);
// Unregisters and unmaps what AllocateShmSource returned. INVALID_ARGUMENT
// for any other address.
absl::Status FreeShmSource(char* base);

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_SHM_SOURCES_H_
