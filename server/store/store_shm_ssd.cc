// Same-host reads of the SSD tier. A client on this host never opens the
// tier's files: it asks, on its shared-memory socket, for a block; the store
// reads it (O_DIRECT, checksum-verified, as for TCP) into a range of the
// window past the master's part of the segment, and the client copies it
// from its read-only mapping. The range is pinned (nothing else is read into
// it) until the client releases the pin or its connection closes
// (transport/shm_write.h), so the bytes cannot change under the copy; the
// client verifies the checksum again after it.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/prom.h"
#include "server/store/store.h"

namespace shelf::store {

uint64_t Store::WindowBytes() const {
  if (!options_.shm || options_.ssd_dir.empty() || options_.shm_ssd_window == 0 ||
      options_.shm_arena_bytes != 0) {
    return 0;  // with arenas the window would be shared by every tenant
  }
  // Whole hugepages, so the segment keeps a hugepage-sized length.
  constexpr uint64_t kGrain = 2ull << 20;
  return (options_.shm_ssd_window + kGrain - 1) / kGrain * kGrain;
}

absl::StatusOr<transport::DataHandler::Pinned> Store::PinSsdKey(absl::string_view key,
                                                                uint64_t size) {
  if (ssd_ == nullptr) return absl::NotFoundError("this store has no SSD tier");
  const std::string k(key);
  if (absl::Status s = CheckNotDropping(key); !s.ok()) return s;
  uint64_t have = 0, checksum = 0;
  if (!ssd_->Info(k, &have, &checksum)) return absl::NotFoundError("not on the SSD tier");
  if (size != 0 && have != size) {
    return absl::FailedPreconditionError(
        absl::StrCat("the SSD block has ", have, " bytes, not ", size));
  }
  const uint64_t bytes =
      std::max<uint64_t>((have + kWindowAlign - 1) / kWindowAlign, 1) * kWindowAlign;
  uint64_t at = 0;
  {
    MutexLock lock(&pin_mu_);
    if (window_ == nullptr) {
      return absl::FailedPreconditionError("this store has no window for shared-memory SSD reads");
    }
    absl::StatusOr<uint64_t> off = window_->Allocate(bytes);
    if (!off.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no room for ", bytes,
                       " bytes in the shared-memory SSD window: ", off.status().message()));
    }
    at = *off;
  }
  // The window's range is this read's alone: the tier reads into it
  // directly (aligned, room for the rounded size).
  char* dst = segment_->data() + dram_bytes_ + at;
  uint64_t got = 0;
  absl::Status s;
  {
    prom::ScopedTimer timer(metrics_.ssd_read_seconds);
    s = ssd_->GetInto(k, dst, bytes, &got);
  }
  if (s.code() == absl::StatusCode::kDataLoss) metrics_.checksum_failures.Increment();
  if (s.ok() && size != 0 && got != size) {
    // Rewritten with another size between Info and the read.
    s = absl::FailedPreconditionError(
        absl::StrCat("the SSD block has ", got, " bytes, not ", size));
  }
  if (s.ok()) s = CheckNotDropping(key);
  uint64_t pin = 0;
  {
    MutexLock lock(&pin_mu_);
    if (s.ok()) {
      pin = ++next_pin_;
      pinned_[pin] = PinnedRange{at, bytes};
    } else {
      window_->Free(at, bytes).IgnoreError();
    }
  }
  if (!s.ok()) return s;
  metrics_.read_ssd_shm.Increment(static_cast<double>(got));
  if (options_.promote_on_hit) {
    // As after a TCP read: the mover copies it up into DRAM.
    MutexLock lock(&mu_);
    if (promotions_.size() < kPromotionsMax) {
      promotions_.push_back(Promotion{k, std::string(dst, got), checksum});
      moves_cv_.Signal();
    }
  }
  return Pinned{kSegmentId, dram_bytes_ + at, got, pin};
}

void Store::Unpin(uint64_t pin) {
  MutexLock lock(&pin_mu_);
  auto it = pinned_.find(pin);
  if (it == pinned_.end() || window_ == nullptr) return;
  window_->Free(it->second.offset, it->second.bytes).IgnoreError();
  pinned_.erase(it);
}

}  // namespace shelf::store
