#include "server/master/quotas/quotas.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/units.h"

namespace shelf::master {

namespace {

constexpr uint64_t kForever = UINT64_MAX;

std::string LeaseId(const std::string& principal, const std::string& key) {
  return absl::StrCat(principal, std::string(1, '\0'), key);
}

const std::string& LabelOf(const std::string& tenant) {
  static const std::string kNone = "-";
  return tenant.empty() ? kNone : tenant;
}

}  // namespace

QuotaBook::QuotaBook(std::shared_ptr<const Authenticator> auth, bool tenant_namespaces,
                     uint64_t granule, Clock* clock, prom::Exposition& exposition)
    : auth_(std::move(auth)),
      tenant_namespaces_(tenant_namespaces),
      granule_(std::max<uint64_t>(granule, 1)),
      clock_(clock),
      refusals_(prom::AddCounter(exposition.registry(), "shelf_master_quota_refusals_total",
                                 "Calls refused with RESOURCE_EXHAUSTED by a quota, by the "
                                 "caller's tenant and the quota")) {
  if (auth_ == nullptr || !auth_->has_principals()) return;
  // One sample per tenant the credentials file names: label cardinality is
  // the file's.
  gauges_.push_back(exposition.AddCallbackGauge(
      "shelf_master_tenant_stored_bytes",
      "Bytes a tenant's blocks hold, every replica counted, by tier", {"tenant", "tier"}, [this] {
        std::vector<prom::GaugeSample> out;
        for (const std::string& t : auth_->tenants()) {
          out.push_back({{t, "dram"}, static_cast<double>(StoredBytes(t, v1::TIER_DRAM))});
          out.push_back({{t, "ssd"}, static_cast<double>(StoredBytes(t, v1::TIER_SSD))});
        }
        return out;
      }));
}

QuotaBook::~QuotaBook() = default;

uint64_t QuotaBook::Charged(uint64_t bytes) const {
  // Room is taken in whole granules: a 1-byte block holds one, on either
  // tier. Saturates rather than wraps for a size near 2^64 (refused later).
  const uint64_t rem = bytes % granule_;
  return rem == 0 || bytes > UINT64_MAX - (granule_ - rem) ? bytes : bytes + (granule_ - rem);
}

absl::string_view QuotaBook::TenantOf(absl::string_view kept_key) const {
  if (!tenant_namespaces_) return {};
  size_t sep = kept_key.find('/');
  return sep == absl::string_view::npos ? absl::string_view() : kept_key.substr(0, sep);
}

QuotaLimits QuotaBook::TenantLimits(const std::string& tenant) const {
  if (tenant.empty() || auth_ == nullptr) return {};
  std::shared_ptr<const TenantQuotas> q = auth_->tenant_quotas();
  auto it = q->find(tenant);
  if (it == q->end()) return {};
  return it->second;
}

uint16_t QuotaBook::WriterOf(const std::string& name) {
  if (!active() || name.empty()) return 0;
  MutexLock lock(&mu_);
  auto it = writer_of_.find(name);
  if (it != writer_of_.end()) return it->second;
  if (writers_.size() >= kWritersMax) return 0;
  writers_.push_back(name);
  const auto n = static_cast<uint16_t>(writers_.size());
  writer_of_.emplace(name, n);
  return n;
}

void QuotaBook::Stored(absl::string_view kept_key, uint16_t writer, v1::Tier tier, uint64_t bytes,
                       bool added) {
  bytes = Charged(bytes);
  absl::string_view tenant = TenantOf(kept_key);
  if (tenant.empty() && writer == 0) return;
  MutexLock lock(&mu_);
  auto count = [&](Usage& u) {
    uint64_t& n = tier == v1::TIER_DRAM ? u.dram : u.ssd;
    n = added ? n + bytes : n - std::min(n, bytes);
  };
  if (!tenant.empty()) count(tenants_[tenant]);
  if (writer != 0 && writer <= writers_.size()) count(principals_[writers_[writer - 1]]);
}

void QuotaBook::Reset() {
  MutexLock lock(&mu_);
  tenants_.clear();
  principals_.clear();
  puts_.clear();
  pins_.clear();
  leases_.clear();
  next_expiry_ms_ = 0;
}

bool QuotaBook::any_guarantee() const {
  if (!tenant_namespaces_ || auth_ == nullptr) return false;
  std::shared_ptr<const TenantQuotas> q = auth_->tenant_quotas();
  return std::any_of(q->begin(), q->end(),
                     [](const auto& t) { return t.second.guarantee_dram_bytes != 0; });
}

bool QuotaBook::OverGuarantee(absl::string_view kept_key) {
  absl::string_view tenant = TenantOf(kept_key);
  if (tenant.empty()) return true;
  uint64_t share = TenantLimits(std::string(tenant)).guarantee_dram_bytes;
  if (share == 0) return true;
  MutexLock lock(&mu_);
  auto it = tenants_.find(tenant);
  return it != tenants_.end() && it->second.dram > share;
}

uint64_t QuotaBook::StoredBytes(const std::string& tenant, v1::Tier tier) {
  MutexLock lock(&mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return 0;
  return tier == v1::TIER_DRAM ? it->second.dram : it->second.ssd;
}

absl::Status QuotaBook::Refuse(const Principal& p, bool of_tenant, const char* quota,
                               const std::string& figures) {
  prom::Child(refusals_, {{"tenant", LabelOf(p.tenant)}, {"quota", quota}}).Increment();
  std::string whose = of_tenant ? absl::StrCat("tenant '", p.tenant, "'")
                                : absl::StrCat("principal '", p.name, "'");
  return absl::ResourceExhaustedError(
      absl::StrCat("quota ", quota, " of ", whose, ": ", figures, " (docs/security.md#quotas)"));
}

void QuotaBook::ExpireLocked(uint64_t now) {
  if (now < next_expiry_ms_) return;
  uint64_t next = kForever;
  for (auto it = puts_.begin(); it != puts_.end();) {
    auto cur = it++;
    if (cur->second.deadline_ms > now) {
      next = std::min(next, cur->second.deadline_ms);
      continue;
    }
    EndPutLocked(cur);
  }
  for (auto* holds : {&pins_, &leases_}) {
    bool pin = holds == &pins_;
    std::vector<std::string> done;
    for (const auto& [id, h] : *holds) {
      if (h.until_ms <= now) {
        done.push_back(id);
      } else if (h.until_ms != kForever) {
        next = std::min(next, h.until_ms);
      }
    }
    for (const std::string& id : done) DropHoldLocked(*holds, id, pin);
  }
  next_expiry_ms_ = next;
}

void QuotaBook::EndPutLocked(absl::flat_hash_map<uint64_t, OpenPut>::iterator it) {
  const OpenPut& put = it->second;
  for (Usage* u : {&principals_[put.principal], &tenants_[put.tenant]}) {
    u->puts -= std::min<uint64_t>(u->puts, 1);
    u->put_bytes -= std::min(u->put_bytes, put.bytes);
  }
  puts_.erase(it);
}

void QuotaBook::DropHoldLocked(absl::flat_hash_map<std::string, Hold>& holds, const std::string& id,
                               bool pin) {
  auto it = holds.find(id);
  if (it == holds.end()) return;
  const Hold& h = it->second;
  for (Usage* u : {&principals_[h.principal], &tenants_[h.tenant]}) {
    uint64_t& n = pin ? u->pinned : u->leased;
    n -= std::min(n, h.bytes);
  }
  holds.erase(it);
}

absl::Status QuotaBook::ReservePut(const Principal& p, uint64_t bytes, uint32_t replicas,
                                   uint64_t replaced_dram) {
  bytes = Charged(bytes);
  const QuotaLimits& mine = p.quotas;
  QuotaLimits theirs = TenantLimits(p.tenant);
  uint64_t total = bytes * std::max<uint32_t>(replicas, 1);
  MutexLock lock(&mu_);
  ExpireLocked(clock_->NowMs());
  Usage& pu = principals_[p.name];
  Usage& tu = tenants_[p.tenant];
  for (int i = 0; i < 2; ++i) {
    const QuotaLimits& q = i == 0 ? mine : theirs;
    const Usage& u = i == 0 ? pu : tu;
    if (i == 1 && p.tenant.empty()) break;
    if (q.puts != 0 && u.puts + 1 > q.puts) {
      return Refuse(p, i == 1, "puts",
                    absl::StrCat(u.puts, " puts in flight, the limit is ", q.puts));
    }
    if (q.put_bytes != 0 && u.put_bytes + total > q.put_bytes) {
      return Refuse(p, i == 1, "put_bytes",
                    absl::StrCat(u.put_bytes, " bytes in flight + ", total, " asked > ",
                                 q.put_bytes, " (", FormatBytes(q.put_bytes), ")"));
    }
    // Stored bytes: what is in DRAM, what puts in flight will add, this put;
    // less what a replace's commit frees (it holds both only until then).
    const uint64_t stays = u.dram - std::min(u.dram, replaced_dram);
    if (q.dram_bytes != 0 && stays + u.put_bytes + total > q.dram_bytes) {
      return Refuse(p, i == 1, "dram",
                    absl::StrCat(u.dram, " bytes stored + ", u.put_bytes, " in flight + ", total,
                                 " asked > ", q.dram_bytes, " (", FormatBytes(q.dram_bytes), ")"));
    }
    if (q.ssd_bytes != 0 && u.ssd > q.ssd_bytes) {
      return Refuse(p, i == 1, "ssd",
                    absl::StrCat(u.ssd, " bytes on SSD > ", q.ssd_bytes, " (",
                                 FormatBytes(q.ssd_bytes), ")"));
    }
  }
  for (Usage* u : {&pu, &tu}) {
    u->puts += 1;
    u->put_bytes += total;
  }
  return absl::OkStatus();
}

void QuotaBook::PutStarted(const Principal& p, uint64_t put_id, uint64_t bytes, uint32_t replicas,
                           uint64_t ttl_ms) {
  bytes = Charged(bytes);
  MutexLock lock(&mu_);
  uint64_t deadline = clock_->NowMs() + ttl_ms;
  if (auto it = puts_.find(put_id); it != puts_.end()) EndPutLocked(it);  // an id reused
  puts_[put_id] = OpenPut{p.name, p.tenant, bytes * std::max<uint32_t>(replicas, 1), deadline};
  next_expiry_ms_ = std::min(next_expiry_ms_, deadline);
}

void QuotaBook::CancelPut(const Principal& p, uint64_t bytes, uint32_t replicas) {
  bytes = Charged(bytes);
  uint64_t total = bytes * std::max<uint32_t>(replicas, 1);
  MutexLock lock(&mu_);
  for (Usage* u : {&principals_[p.name], &tenants_[p.tenant]}) {
    u->puts -= std::min<uint64_t>(u->puts, 1);
    u->put_bytes -= std::min(u->put_bytes, total);
  }
}

void QuotaBook::EndPut(uint64_t put_id) {
  MutexLock lock(&mu_);
  auto it = puts_.find(put_id);
  if (it != puts_.end()) EndPutLocked(it);
}

absl::Status QuotaBook::CheckPin(const Principal& p, const std::string& kept_key, uint64_t size,
                                 uint64_t ttl_ms, bool hard) {
  size = Charged(size);
  const QuotaLimits& mine = p.quotas;
  QuotaLimits theirs = TenantLimits(p.tenant);
  MutexLock lock(&mu_);
  ExpireLocked(clock_->NowMs());
  // A pin already counted for this key is replaced, not added to.
  uint64_t already = 0;
  if (auto it = pins_.find(kept_key); it != pins_.end()) already = it->second.bytes;
  for (int i = 0; i < 2; ++i) {
    const QuotaLimits& q = i == 0 ? mine : theirs;
    if (i == 1 && p.tenant.empty()) break;
    const Usage& u = i == 0 ? principals_[p.name] : tenants_[p.tenant];
    if (q.pin_ttl_ms != 0 && (hard || ttl_ms == 0 || ttl_ms > q.pin_ttl_ms)) {
      std::string asked = hard          ? std::string("a hard pin (no expiry)")
                          : ttl_ms == 0 ? std::string("a pin until unpinned")
                                        : absl::StrCat("a pin of ", ttl_ms, " ms");
      return Refuse(p, i == 1, "pin_ttl",
                    absl::StrCat(asked, " asked, the longest is ", q.pin_ttl_ms, " ms"));
    }
    uint64_t held = u.pinned - std::min(u.pinned, already);
    if (q.pinned_bytes != 0 && held + size > q.pinned_bytes) {
      return Refuse(p, i == 1, "pinned",
                    absl::StrCat(held, " bytes pinned + ", size, " asked > ", q.pinned_bytes, " (",
                                 FormatBytes(q.pinned_bytes), ")"));
    }
  }
  return absl::OkStatus();
}

void QuotaBook::Pinned(const Principal& p, const std::string& kept_key, uint64_t size,
                       uint64_t ttl_ms) {
  size = Charged(size);
  MutexLock lock(&mu_);
  DropHoldLocked(pins_, kept_key, /*pin=*/true);
  const uint64_t now = clock_->NowMs();
  uint64_t until = ttl_ms == 0 || ttl_ms >= kForever - now ? kForever : now + ttl_ms;
  pins_[kept_key] = Hold{p.name, p.tenant, size, until};
  for (Usage* u : {&principals_[p.name], &tenants_[p.tenant]}) u->pinned += size;
  if (until != kForever) next_expiry_ms_ = std::min(next_expiry_ms_, until);
  has_pins_.store(true, std::memory_order_relaxed);
}

void QuotaBook::Unpinned(const std::string& kept_key) {
  MutexLock lock(&mu_);
  DropHoldLocked(pins_, kept_key, /*pin=*/true);
}

void QuotaBook::ObjectGone(absl::string_view kept_key) {
  if (!has_pins_.load(std::memory_order_relaxed)) return;
  MutexLock lock(&mu_);
  DropHoldLocked(pins_, std::string(kept_key), /*pin=*/true);
}

bool QuotaBook::TracksLeases(const Principal& p) const {
  return p.quotas.leased_bytes != 0 || TenantLimits(p.tenant).leased_bytes != 0;
}

absl::Status QuotaBook::CheckLease(const Principal& p) {
  const QuotaLimits& mine = p.quotas;
  QuotaLimits theirs = TenantLimits(p.tenant);
  if (mine.leased_bytes == 0 && theirs.leased_bytes == 0) return absl::OkStatus();
  MutexLock lock(&mu_);
  ExpireLocked(clock_->NowMs());
  for (int i = 0; i < 2; ++i) {
    const QuotaLimits& q = i == 0 ? mine : theirs;
    if (i == 1 && p.tenant.empty()) break;
    const Usage& u = i == 0 ? principals_[p.name] : tenants_[p.tenant];
    if (q.leased_bytes != 0 && u.leased >= q.leased_bytes) {
      return Refuse(p, i == 1, "leased",
                    absl::StrCat(u.leased, " bytes under read leases, the limit is ",
                                 q.leased_bytes, " (", FormatBytes(q.leased_bytes),
                                 "): release leases (ReleaseLeases) or let them expire"));
    }
  }
  return absl::OkStatus();
}

void QuotaBook::Leased(const Principal& p, const std::string& kept_key, uint64_t size,
                       uint64_t lease_ms) {
  size = Charged(size);
  MutexLock lock(&mu_);
  std::string id = LeaseId(p.name, kept_key);
  DropHoldLocked(leases_, id, /*pin=*/false);
  uint64_t until = clock_->NowMs() + lease_ms;
  leases_[id] = Hold{p.name, p.tenant, size, until};
  for (Usage* u : {&principals_[p.name], &tenants_[p.tenant]}) u->leased += size;
  next_expiry_ms_ = std::min(next_expiry_ms_, until);
}

void QuotaBook::Released(const Principal& p, const std::string& kept_key) {
  MutexLock lock(&mu_);
  DropHoldLocked(leases_, LeaseId(p.name, kept_key), /*pin=*/false);
}

absl::Status QuotaBook::BeforePut(const Principal& p, const v1::PutStartRequest& req,
                                  uint64_t replaced_dram) {
  if (!active()) return absl::OkStatus();
  return ReservePut(p, req.size(), req.options().replicas(), replaced_dram);
}

void QuotaBook::AfterPut(const Principal& p, const v1::PutStartRequest& req, const absl::Status& s,
                         const v1::PutStartResponse& resp, uint64_t put_timeout_ms) {
  if (!active()) return;
  if (s.ok() && resp.state() == v1::PUT_STARTED) {
    // Forgotten a while after the master would reclaim it.
    PutStarted(p, resp.put_id(), req.size(), req.options().replicas(), put_timeout_ms + 1000);
  } else {
    CancelPut(p, req.size(), req.options().replicas());
  }
}

void QuotaBook::AfterEnd(const google::protobuf::RepeatedField<uint64_t>& put_ids,
                         const google::protobuf::RepeatedPtrField<v1::RpcStatus>& statuses) {
  if (!active()) return;
  for (int i = 0; i < put_ids.size() && i < statuses.size(); ++i) {
    auto code = static_cast<absl::StatusCode>(statuses[i].code());
    // FAILED_PRECONDITION: a replace of a key pinned since its start,
    // refused and its ranges freed.
    if (code == absl::StatusCode::kOk || code == absl::StatusCode::kNotFound ||
        code == absl::StatusCode::kAlreadyExists || code == absl::StatusCode::kFailedPrecondition) {
      EndPut(put_ids[i]);
    }
  }
}

void QuotaBook::AfterLookup(const Principal& p, bool leased,
                            const google::protobuf::RepeatedPtrField<v1::ObjectLocation>& objects,
                            uint64_t lease_ms) {
  if (!active() || !leased || !TracksLeases(p)) return;
  for (const v1::ObjectLocation& o : objects) {
    if (o.found()) Leased(p, o.key(), o.size(), lease_ms);
  }
}

}  // namespace shelf::master
