// Quotas per principal and tenant (docs/security.md, "Quotas"): what the
// master counts for each tenant and principal, and the refusals.
//
// The limits come from the credentials file (common/credentials.h): a
// principal's line carries its own, a `tenant=` line its tenant's; both are
// re-read with the file on SIGHUP. What is counted:
//   - stored bytes per tier, per tenant and per principal: every replica of
//     a committed block, from the moment it enters the index (commit,
//     inventory, demotion, promotion) until it leaves (remove, eviction,
//     demotion, node death); a principal's are those of the blocks its
//     puts stored (the object records it as WriterOf's number);
//   - puts in flight and their bytes, per principal and tenant, from
//     PutStart to commit, abort or expiry;
//   - bytes under read leases and bytes pinned, per principal and tenant.
// A call that would go over a quota is RESOURCE_EXHAUSTED, its message
// naming the quota, whose it is, and its figures.
//
// Thread-safe: one mutex, a leaf (taken under the master's mu_ by the
// stored-bytes hooks, never the other way).
#ifndef SHELF_SERVER_MASTER_QUOTAS_QUOTAS_H_
#define SHELF_SERVER_MASTER_QUOTAS_QUOTAS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "common/mutex.h"
#include "common/prom.h"
#include "proto/shelf.pb.h"

namespace shelf::master {

class QuotaBook {
 public:
  // `auth` (may be null: no quotas) gives principals' and tenants' limits
  // as of its last reload. Without `tenant_namespaces` no key has a tenant.
  // Every size is charged in whole `granule`s (the allocation unit of the
  // DRAM segments, which the SSD tier's 4 KiB blocks also fit), as the
  // tiers allocate it: a tenant of tiny blocks cannot hold more room than
  // its quota says.
  QuotaBook(std::shared_ptr<const Authenticator> auth, bool tenant_namespaces, uint64_t granule,
            Clock* clock, prom::Exposition& exposition);
  ~QuotaBook();
  QuotaBook(const QuotaBook&) = delete;
  QuotaBook& operator=(const QuotaBook&) = delete;

  // The tenant a kept key belongs to ("" for none).
  absl::string_view TenantOf(absl::string_view kept_key) const;

  // The number a block stored by principal `name` records as its writer
  // (Object::writer in index/object.h, 16 bits): 1.. in the order principals first
  // store, for the master's life; 0 (counted for no principal) without
  // principals, for "", or once kWritersMax names are numbered.
  uint16_t WriterOf(const std::string& name);
  static constexpr size_t kWritersMax = 65535;
  // Stored bytes (the master's index hooks; under its mu_): for the
  // tenant of `kept_key` and the principal numbered `writer`.
  void Stored(absl::string_view kept_key, uint16_t writer, v1::Tier tier, uint64_t bytes,
              bool added);
  // `bytes` rounded up to whole granules: what a block of that size holds.
  uint64_t Charged(uint64_t bytes) const;
  // A new term starts with an empty index, no puts and no pins: so do the
  // counts (the writers' numbers stay).
  void Reset();
  // Whether some tenant has a guaranteed DRAM share (eviction prefers
  // tenants over theirs only then).
  bool any_guarantee() const;
  // Whether the tenant of `kept_key` holds more DRAM than its guaranteed
  // share (a key without a tenant, or a tenant without a share: always).
  bool OverGuarantee(absl::string_view kept_key);

  // Puts. ReservePut checks and counts a put of `bytes` (`replicas`
  // copies) for `p`; then PutStarted binds it to its put id, or CancelPut
  // undoes it when no put started (the key existed, an error). EndPut:
  // commit or abort (by the writer, or NOT_FOUND: the master reclaimed it).
  // Puts not ended are forgotten `ttl_ms` after they started.
  // `replaced_dram`: the DRAM bytes of the commit a replace takes the
  // place of, not counted as staying.
  absl::Status ReservePut(const Principal& p, uint64_t bytes, uint32_t replicas,
                          uint64_t replaced_dram = 0);
  void PutStarted(const Principal& p, uint64_t put_id, uint64_t bytes, uint32_t replicas,
                  uint64_t ttl_ms);
  void CancelPut(const Principal& p, uint64_t bytes, uint32_t replicas);
  void EndPut(uint64_t put_id);

  // Pins: CheckPin before a pin of `kept_key` (`size` bytes; ttl_ms 0 =
  // until unpinned); Pinned after it; Unpinned after an unpin. ObjectGone:
  // the key left the index (its pin with it).
  absl::Status CheckPin(const Principal& p, const std::string& kept_key, uint64_t size,
                        uint64_t ttl_ms, bool hard);
  void Pinned(const Principal& p, const std::string& kept_key, uint64_t size, uint64_t ttl_ms);
  void Unpinned(const std::string& kept_key);
  void ObjectGone(absl::string_view kept_key);

  // Read leases: CheckLease before a lookup that takes leases (refused when
  // the leases `p` or its tenant holds already reach a quota); Leased with
  // what it found; Released when the reader gives them back.
  absl::Status CheckLease(const Principal& p);
  void Leased(const Principal& p, const std::string& kept_key, uint64_t size, uint64_t lease_ms);
  void Released(const Principal& p, const std::string& kept_key);
  // Whether `p` or its tenant has a lease quota (lookups record leases
  // only then).
  bool TracksLeases(const Principal& p) const;

  // The service layer's calls (no-ops for a cluster without principals).
  // Before and after a PutStart of the kept request `req` (a replace:
  // `replaced_dram`, the DRAM bytes of the key's commit now).
  absl::Status BeforePut(const Principal& p, const v1::PutStartRequest& req,
                         uint64_t replaced_dram = 0);
  void AfterPut(const Principal& p, const v1::PutStartRequest& req, const absl::Status& s,
                const v1::PutStartResponse& resp, uint64_t put_timeout_ms);
  // After a PutCommit or PutAbort: each id whose status (`statuses`,
  // parallel) says it ended (committed, aborted, refused and freed: a
  // replace of a key pinned meanwhile, or unknown to the master:
  // reclaimed) stops counting. One refused for
  // another reason (not its owner's, not the leader) still counts.
  void AfterEnd(const google::protobuf::RepeatedField<uint64_t>& put_ids,
                const google::protobuf::RepeatedPtrField<v1::RpcStatus>& statuses);
  // After a Lookup or MatchPrefix (kept keys, before ToCaller).
  void AfterLookup(const Principal& p, bool leased,
                   const google::protobuf::RepeatedPtrField<v1::ObjectLocation>& objects,
                   uint64_t lease_ms);
  bool active() const { return auth_ != nullptr && auth_->has_principals(); }

  // For tests and metrics: a tenant's stored bytes in `tier`.
  uint64_t StoredBytes(const std::string& tenant, v1::Tier tier);

 private:
  struct Usage {
    uint64_t dram = 0, ssd = 0;
    uint64_t puts = 0, put_bytes = 0;
    uint64_t leased = 0, pinned = 0;
  };
  struct OpenPut {
    std::string principal, tenant;
    uint64_t bytes = 0;
    uint64_t deadline_ms = 0;
  };
  struct Hold {  // a pin or a lease
    std::string principal, tenant;
    uint64_t bytes = 0;
    uint64_t until_ms = 0;  // UINT64_MAX: until unpinned
  };
  QuotaLimits TenantLimits(const std::string& tenant) const;
  // The refusal, counted by tenant and quota.
  absl::Status Refuse(const Principal& p, bool of_tenant, const char* quota,
                      const std::string& figures) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndPutLocked(absl::flat_hash_map<uint64_t, OpenPut>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropHoldLocked(absl::flat_hash_map<std::string, Hold>& holds, const std::string& id,
                      bool pin) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const Authenticator> auth_;
  const bool tenant_namespaces_;
  const uint64_t granule_;
  Clock* const clock_;
  std::atomic<bool> has_pins_{false};
  prom::Family<prometheus::Counter>& refusals_;

  Mutex mu_;
  absl::flat_hash_map<std::string, Usage> tenants_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Usage> principals_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> writers_ ABSL_GUARDED_BY(mu_);  // WriterOf's number - 1
  absl::flat_hash_map<std::string, uint16_t> writer_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, OpenPut> puts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Hold> pins_ ABSL_GUARDED_BY(mu_);    // by kept key
  absl::flat_hash_map<std::string, Hold> leases_ ABSL_GUARDED_BY(mu_);  // by principal \0 key
  uint64_t next_expiry_ms_ ABSL_GUARDED_BY(mu_) = 0;
  // Last: removed first, before the state its callbacks read.
  std::vector<prom::CallbackHandle> gauges_;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_QUOTAS_QUOTAS_H_
