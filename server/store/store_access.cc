// Store: who may read and write what. Write grants, read grants and the
// arena descriptors and RDMA windows they open (docs/security.md), checked
// against the grant key of the store's current registration.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/store/store.h"

namespace shelf::store {

namespace wire = transport::wire;

absl::StatusOr<int> Store::ShmArena(absl::string_view credential, uint32_t segment_id,
                                    uint64_t offset, uint64_t length) {
  if (arenas_ == 0) return absl::FailedPreconditionError("this store's segment has no arenas");
  uint64_t global = 0;
  if (length == 0 || !ToGlobal(segment_id, offset, length, &global)) {
    return absl::OutOfRangeError(
        absl::StrCat("no range [", offset, ", +", length, ") in arena ", segment_id));
  }
  // The master places a tenant's blocks only in arenas it gave that
  // tenant, and grants reads only to principals that may read the tenant:
  // a read grant into an arena is the right to map it.
  if (absl::Status s = CheckRead(credential, "", true, segment_id, offset, length); !s.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("arena ", segment_id, " refused: ", s.message()));
  }
  return segment_->arena_fd(segment_id);
}

absl::StatusOr<int> Store::ShmKeyBoard() {
  if (board_ == nullptr) return absl::FailedPreconditionError("this store keeps no key board");
  return board_->fd();
}

absl::StatusOr<transport::RdmaExposure> Store::RdmaExposes(absl::string_view credential,
                                                           uint32_t segment_id) {
  // One segment: its rkey goes to every authenticated peer, as it always
  // has (reads are checked by nothing the device can enforce).
  if (arenas_ == 0) return transport::RdmaExposure{};
  if (segment_id >= arenas_) return absl::NotFoundError(absl::StrCat("no arena ", segment_id));
  // Without read grants every peer may read every arena anyway.
  if (options_.secret.empty() || !options_.read_grants) return transport::RdmaExposure{};
  // No credential: a queue pair for pulled puts, exposing nothing.
  if (credential.empty()) return transport::RdmaExposure{false, 0};
  // The same right as mapping the arena (ShmArena): a read grant into it.
  absl::string_view key;
  absl::StatusOr<wire::ReadGrant> grant = wire::DecodeReadCredential(credential, &key);
  absl::Status s = grant.status();
  if (s.ok() && grant->length == 0) s = absl::PermissionDeniedError("read grant of no range");
  if (s.ok()) s = CheckRead(credential, "", true, segment_id, grant->offset, grant->length);
  if (!s.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("rdma key of arena ", segment_id, " refused: ", s.message()));
  }
  // The right ends with the grant: the acceptor tears the queue pair down
  // at its expiry, and the client makes a new one with a newer grant.
  return transport::RdmaExposure{true, grant->expires_unix_ms};
}

absl::Status Store::CheckWrite(const wire::Grant& grant, uint32_t segment_id, uint64_t offset,
                               uint64_t length) {
  std::shared_ptr<const HmacKey> key;
  uint64_t term = 0;
  {
    MutexLock lock(&mu_);
    key = grant_mac_;
    term = grant_term_;
  }
  auto verify = [&] {
    if (key == nullptr) return absl::UnavailableError("store not registered with a master yet");
    return wire::VerifyGrant(*key, wire::GrantScope{node_id_, incarnation_, term}, grant,
                             segment_id, offset, length, clock_->UnixMs());
  };
  absl::Status s = verify();
  if (!s.ok() && AwaitRegistration(&key, &term)) s = verify();
  // The range may have been freed and given to a newer put since the
  // grant was made: the grant is bound to its allocation, not the range.
  uint64_t start = 0;
  if (s.ok() && !ToGlobal(grant.segment_id, grant.offset, grant.length, &start)) {
    s = absl::OutOfRangeError("write grant outside the segment");
  }
  if (!s.ok()) return s;
  s = owners_.BeginWrite(start, grant.length, grant.range_seq, grant.key_digest);
  if (s.code() == absl::StatusCode::kPermissionDenied) metrics_.write_grant_refusals.Increment();
  return s;
}

void Store::EndWrite(const wire::Grant& grant) {
  uint64_t start = 0;
  if (ToGlobal(grant.segment_id, grant.offset, grant.length, &start)) {
    owners_.EndWrite(start, grant.range_seq);
  }
}

uint64_t Store::WriteMsLeft(const wire::Grant& grant) {
  const uint64_t now = clock_->UnixMs();
  return grant.expires_unix_ms > now ? grant.expires_unix_ms - now : 0;
}

absl::Status Store::CheckRead(absl::string_view credential, absl::string_view key, bool range,
                              uint32_t segment_id, uint64_t offset, uint64_t length) {
  if (options_.secret.empty() || !options_.read_grants) return absl::OkStatus();
  if (credential.empty()) {
    metrics_.read_grant_refusals.Increment();
    return absl::PermissionDeniedError("a read needs the read grant of a Lookup or MatchPrefix");
  }
  absl::string_view granted_key;
  absl::StatusOr<wire::ReadGrant> grant = wire::DecodeReadCredential(credential, &granted_key);
  absl::Status s = grant.status();
  if (s.ok() && !key.empty() && key != granted_key) {
    s = absl::PermissionDeniedError("read grant is for another key");
  }
  if (s.ok()) {
    std::shared_ptr<const HmacKey> grant_key;
    {
      MutexLock lock(&mu_);
      grant_key = grant_mac_;
    }
    auto verify = [&] {
      if (grant_key == nullptr) {
        return absl::UnavailableError("store not registered with a master yet");
      }
      return wire::VerifyReadGrant(*grant_key, node_id_, incarnation_, granted_key, *grant, range,
                                   segment_id, offset, length, clock_->UnixMs());
    };
    s = verify();
    uint64_t term = 0;
    if (!s.ok() && AwaitRegistration(&grant_key, &term)) s = verify();
  }
  // A read by range: the range must still hold the block the grant names
  // (its key's), not another put's that reused it since.
  uint64_t start = 0;
  if (s.ok() && range && grant->segment_id != wire::kReadGrantNoRange) {
    s = ToGlobal(segment_id, offset, length, &start)
            ? owners_.CheckRead(start, length, wire::KeyDigest(granted_key))
            : absl::OutOfRangeError("read outside the segment");
  }
  if (!s.ok()) metrics_.read_grant_refusals.Increment();
  return s;
}

bool Store::AwaitRegistration(std::shared_ptr<const HmacKey>* key, uint64_t* term) {
  // A grant the master made moments ago can reach this store before the
  // answer to its registration, which brings the key the grant is under
  // (every registration gets a new one): a check that failed waits for a
  // registration in flight, a little while at most, and is made again.
  constexpr uint64_t kRegistrationWaitMs = 2000;
  MutexLock lock(&mu_);
  if (!registering_) return false;
  const uint64_t deadline = MonoMs() + kRegistrationWaitMs;
  for (uint64_t now = MonoMs(); registering_ && now < deadline; now = MonoMs()) {
    registered_cv_.WaitFor(&mu_, std::chrono::milliseconds(deadline - now));
  }
  *key = grant_mac_;
  *term = grant_term_;
  return true;
}

}  // namespace shelf::store
