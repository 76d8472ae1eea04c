// MemoryHandler: a DataHandler over one DRAM segment in this process, for
// tests of the data plane without a store: segment 0 is `size` bytes
// (memfd-backed, so it can also be served over shared memory), writes are
// checked against grants under `grant_key` for node `node_id`, and SSD-tier
// keys are a map.
#ifndef SHELF_TESTS_COMMON_MEMORY_HANDLER_H_
#define SHELF_TESTS_COMMON_MEMORY_HANDLER_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "transport/data_server.h"
#include "transport/wire.h"

namespace shelf::testing {

class MemoryHandler : public transport::DataHandler {
 public:
  MemoryHandler(uint64_t size, std::string grant_key, std::string node_id)
      : size_(size), grant_key_(std::move(grant_key)), node_id_(std::move(node_id)) {
    // Sealed like the store's segment (storage/dram_segment.cc): ShmServer
    // serves, and clients map, no descriptor that could be resized.
    memfd_ = memfd_create("shelf-test-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd_ >= 0 && ftruncate(memfd_, static_cast<off_t>(size)) == 0 &&
        fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0) {
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
      // Write-protected for every other holder, as the store's is.
      if (p != MAP_FAILED && fcntl(memfd_, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) == 0) {
        base_ = static_cast<char*>(p);
      }
    }
  }
  ~MemoryHandler() override {
    if (base_ != nullptr) munmap(base_, size_);
    if (memfd_ >= 0) close(memfd_);
  }
  bool ok() const { return base_ != nullptr; }
  char* base() const { return base_; }
  int memfd() const { return memfd_; }
  uint64_t size() const { return size_; }

  // A grant for [offset, +length) of segment 0, valid for `valid_ms`.
  transport::wire::Grant MakeGrant(uint64_t put_id, uint64_t offset, uint64_t length,
                                   uint64_t valid_ms = 60000) const {
    transport::wire::Grant g;
    g.put_id = put_id;
    g.segment_id = 0;
    g.offset = offset;
    g.length = length;
    g.expires_unix_ms = UnixMs() + valid_ms;
    g.mac = transport::wire::GrantMac(grant_key_, Scope(), g);
    return g;
  }

  absl::StatusOr<Region> Segment(uint32_t id) override {
    if (id != 0) return absl::NotFoundError("no such segment");
    return Region{base_, size_};
  }
  absl::Status CheckWrite(const transport::wire::Grant& grant, uint32_t segment_id, uint64_t offset,
                          uint64_t length) override {
    return transport::wire::VerifyGrant(grant_key_, Scope(), grant, segment_id, offset, length,
                                        UnixMs());
  }
  uint64_t WriteMsLeft(const transport::wire::Grant& grant) override {
    const uint64_t now = UnixMs();
    return grant.expires_unix_ms > now ? grant.expires_unix_ms - now : 0;
  }
  absl::Status ReadKey(absl::string_view key, std::string* out) override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    auto it = keys_.find(std::string(key));
    if (it == keys_.end()) return absl::NotFoundError("no such key");
    *out = it->second;
    return absl::OkStatus();
  }
  void OnRead(uint64_t bytes) override { read_.fetch_add(bytes); }
  void OnWrite(uint64_t bytes) override {
    written_.fetch_add(bytes);
    writes_.fetch_add(1);
  }
  void AddKey(const std::string& key, std::string value) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    keys_[key] = std::move(value);
  }
  uint64_t written() const { return written_.load(); }
  uint64_t writes() const { return writes_.load(); }  // requests written
  uint64_t read() const { return read_.load(); }

 private:
  // Incarnation 1 under term 1: the handler stands for one store process.
  transport::wire::GrantScope Scope() const { return transport::wire::GrantScope{node_id_, 1, 1}; }
  const uint64_t size_;
  const std::string grant_key_;
  const std::string node_id_;
  int memfd_ = -1;
  char* base_ = nullptr;
  Mutex mu_;
  std::map<std::string, std::string> keys_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> read_{0}, written_{0}, writes_{0};
};

}  // namespace shelf::testing

#endif  // SHELF_TESTS_COMMON_MEMORY_HANDLER_H_
