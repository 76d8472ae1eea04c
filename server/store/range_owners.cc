// RangeOwners (range_owners.h).
#include "server/store/range_owners.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/hmac.h"

namespace shelf::store {

absl::Status RangeOwners::BeginWrite(uint64_t offset, uint64_t length, uint64_t seq,
                                     absl::string_view key_digest) {
  if (seq == 0 || key_digest.size() != transport::wire::kKeyDigestBytes) {
    return absl::PermissionDeniedError("write grant names no range allocation");
  }
  std::array<char, transport::wire::kKeyDigestBytes> digest;
  std::memcpy(digest.data(), key_digest.data(), digest.size());
  const uint64_t end = offset + length;
  MutexLock lock(&mu_);
  auto first = claims_.lower_bound(offset);
  if (first != claims_.begin()) {
    auto prev = std::prev(first);
    if (prev->second.end > offset) first = prev;
  }
  auto last = first;
  for (; last != claims_.end() && last->first < end; ++last) {
    const Claim& c = last->second;
    if (c.seq > seq) {
      return absl::PermissionDeniedError(absl::StrCat(
          "write grant is stale: [", offset, ", +", length,
          ") was given to a newer put (allocation ", c.seq, ", the grant's ", seq, ")"));
    }
    if (c.seq == seq) {
      if (last->first != offset || c.end != end || c.key_digest != digest) {
        return absl::PermissionDeniedError("write grant disagrees with its allocation's range");
      }
      ++last->second.writers;
      // The same put writes its range again (a retried piece): its block
      // is no longer vouched for until it is recorded again.
      if (board_ != nullptr) board_->ClearRange(offset, length);
      return absl::OkStatus();
    }
    if (c.writers > 0) {
      return absl::UnavailableError(absl::StrCat(
          "[", offset, ", +", length, ") is still being written under an older put's grant"));
    }
  }
  if (board_ != nullptr) {
    for (auto it = first; it != last; ++it)
      board_->ClearRange(it->first, it->second.end - it->first);
    board_->ClearRange(offset, length);
  }
  claims_.erase(first, last);
  claims_.emplace(offset, Claim{end, seq, digest, 1});
  max_seq_ = std::max(max_seq_, seq);
  return absl::OkStatus();
}

void RangeOwners::EndWrite(uint64_t offset, uint64_t seq) {
  MutexLock lock(&mu_);
  auto it = claims_.find(offset);
  if (it != claims_.end() && it->second.seq == seq && it->second.writers > 0) {
    --it->second.writers;
  }
}

bool RangeOwners::CoveredLocked(uint64_t offset, uint64_t length,
                                absl::string_view key_digest) const {
  auto it = claims_.upper_bound(offset);
  if (it == claims_.begin()) return false;
  const Claim& c = std::prev(it)->second;
  return c.end >= offset && c.end - offset >= length &&
         ConstantTimeEqual(absl::string_view(c.key_digest.data(), c.key_digest.size()), key_digest);
}

absl::Status RangeOwners::CheckRead(uint64_t offset, uint64_t length,
                                    absl::string_view key_digest) const {
  MutexLock lock(&mu_);
  if (CoveredLocked(offset, length, key_digest)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      "read grant is stale: its range no longer holds the block it names");
}

void RangeOwners::AttachBoard(transport::KeyBoard* board) {
  MutexLock lock(&mu_);
  board_ = board;
}

void RangeOwners::Publish(uint64_t offset, uint64_t length, absl::string_view key_digest,
                          uint64_t tag) {
  MutexLock lock(&mu_);
  if (board_ != nullptr && CoveredLocked(offset, length, key_digest)) board_->Mark(offset, tag);
}

void RangeOwners::Unpublish(uint64_t offset) {
  MutexLock lock(&mu_);
  if (board_ != nullptr) board_->Clear(offset);
}

uint64_t RangeOwners::max_seq() const {
  MutexLock lock(&mu_);
  return max_seq_;
}

}  // namespace shelf::store
