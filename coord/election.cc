// LeaderElection: the campaign loop on its own thread.
//
// A candidate holds one lease (a "session") for as long as it can keep it
// alive, leading or not, and campaigns with a transaction that creates the
// leader key with that lease only if the key is absent. A session whose
// lease is presumed lost is dropped: its lease is revoked as soon as etcd
// answers (so a key it may still carry goes at once) and a new one granted.
#include "coord/election.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"

namespace shelf::coord {

struct LeaderElection::Session {
  Lease lease;
  std::unique_ptr<LeaseKeepAlive> keepalive;
};

namespace {

constexpr size_t kClusterNameBytesMax = 64;
// Between failed campaign steps: short enough to win soon after etcd returns.
constexpr uint64_t kCampaignBackoffMaxMs = 1000;

absl::Status ValidateCluster(absl::string_view cluster) {
  if (cluster.empty() || cluster.size() > kClusterNameBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster name must be 1 to ", kClusterNameBytesMax, " bytes"));
  }
  for (char c : cluster) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster name '", cluster, "': only [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

// Repairs of an overwritten leader key, by the role of who made them.
prom::Family<prom::Counter>& RepairsFamily() {
  static prom::Family<prom::Counter>& family =
      prom::AddCounter(DefaultExposition().registry(), "shelf_master_leader_key_repairs_total",
                       "Leader keys found overwritten since their election and deleted, so that "
                       "the masters elect a leader again.");
  return family;
}

prom::Counter& RepairsCounter(bool leading) {
  static prom::Counter& by_leader = prom::Child(RepairsFamily(), {{"role", "leader"}});
  static prom::Counter& by_standby = prom::Child(RepairsFamily(), {{"role", "standby"}});
  return leading ? by_leader : by_standby;
}

LeaderInfo ToLeaderInfo(const KeyValue& kv) {
  LeaderInfo info;
  info.address = kv.value;
  info.term = kv.create_revision;
  info.lease_id = kv.lease;
  info.intact = kv.version == 1 && kv.lease != 0;
  return info;
}

}  // namespace

std::string LeaderElection::LeaderKey(absl::string_view cluster, absl::string_view key_prefix) {
  return absl::StrCat(key_prefix, "/", cluster, "/leader");
}

LeaderElection::LeaderElection(EtcdClient* client, ElectionOptions options)
    : client_(client),
      options_(std::move(options)),
      key_(LeaderKey(options_.cluster, options_.key_prefix)) {
  // Registered up front, so that a scrape shows 0 rather than nothing.
  RepairsCounter(true);
  RepairsCounter(false);
}

LeaderElection::~LeaderElection() { Stop(); }

absl::Status LeaderElection::Start() {
  absl::Status valid = ValidateCluster(options_.cluster);
  if (!valid.ok()) return valid;
  if (options_.address.empty()) return absl::InvalidArgumentError("election needs an address");
  if (options_.lease_ttl_s < 1) return absl::InvalidArgumentError("lease TTL must be >= 1 s");
  if (!options_.on_elected || !options_.on_lost) {
    return absl::InvalidArgumentError("election needs on_elected and on_lost");
  }
  MutexLock join_lock(&join_mu_);
  MutexLock lock(&mu_);
  if (running_) return absl::FailedPreconditionError("election already running");
  running_ = true;
  stopping_ = false;
  session_lost_ = false;
  key_changed_ = false;
  health_.clear();
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void LeaderElection::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  Join();
  MutexLock lock(&mu_);
  running_ = false;
}

absl::Status LeaderElection::Resign() {
  Stop();
  int64_t held_term = 0;
  int64_t lease_id = 0;
  {
    MutexLock lock(&mu_);
    std::swap(held_term, held_term_);
    std::swap(lease_id, lease_id_);
  }
  absl::Status result;
  if (held_term != 0) {
    auto deleted = client_->DeleteIfCreateRevision(key_, held_term);
    if (!deleted.ok()) result = deleted.status();
  }
  if (lease_id != 0) {
    absl::Status revoked = client_->LeaseRevoke(lease_id);
    if (!revoked.ok() && !absl::IsNotFound(revoked) && result.ok()) result = revoked;
  }
  SHELF_LOG(INFO) << "resigned from election" << Kv("key", key_) << Kv("term", held_term)
                  << Kv("result", result.ToString());
  return result;
}

void LeaderElection::Join() {
  MutexLock lock(&join_mu_);
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    SHELF_LOG(ERROR) << "LeaderElection::Stop/Resign called from an election callback";
    std::abort();
  }
  thread_.join();
}

bool LeaderElection::is_leader() const {
  MutexLock lock(&mu_);
  return term_ != 0 && keepalive_ != nullptr && keepalive_->alive();
}

int64_t LeaderElection::term() const {
  MutexLock lock(&mu_);
  return term_;
}

void LeaderElection::Run() {
  std::unique_ptr<Session> session;
  int64_t stale_lease = 0;
  {
    // A lease left behind by Stop() is not refreshed any more: drop it.
    MutexLock lock(&mu_);
    std::swap(stale_lease, lease_id_);
    held_term_ = 0;
  }
  int failures = 0;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (stale_lease != 0) {
      absl::Status s = client_->LeaseRevoke(stale_lease);
      if (!s.ok() && !absl::IsNotFound(s)) {
        SHELF_LOG(DEBUG) << "revoking an old election lease failed" << Kv("lease", stale_lease)
                         << Kv("error", s.ToString());
        if (!Backoff(&failures)) break;
        continue;
      }
      stale_lease = 0;
    }
    if (session == nullptr) {
      {
        MutexLock lock(&mu_);
        session_lost_ = false;
        health_.clear();
      }
      auto lease = client_->LeaseGrant(options_.lease_ttl_s);
      if (!lease.ok()) {
        SHELF_LOG(WARNING) << "election: cannot get an etcd lease" << Kv("key", key_)
                           << Kv("error", lease.status().ToString());
        if (!Backoff(&failures)) break;
        continue;
      }
      session = std::make_unique<Session>();
      session->lease = *lease;
      KeepAliveCallbacks callbacks;
      callbacks.on_lost = [this](const absl::Status&) {
        MutexLock lock(&mu_);
        session_lost_ = true;
        cv_.SignalAll();
      };
      callbacks.on_health = [this](const absl::Status& health) {
        MutexLock lock(&mu_);
        health_.push_back(health);
        cv_.SignalAll();
      };
      auto keepalive = client_->KeepAlive(session->lease, std::move(callbacks));
      if (!keepalive.ok()) {  // only on arguments this code got wrong
        SHELF_LOG(ERROR) << "election: keepalive refused" << Kv("error", keepalive.status());
        std::abort();
      }
      session->keepalive = *std::move(keepalive);
      MutexLock lock(&mu_);
      lease_id_ = session->lease.id;
      keepalive_ = session->keepalive.get();
    }

    auto campaign = client_->CreateIfAbsent(key_, options_.address, session->lease.id);
    Wake wake = Wake::kTimeout;
    if (!campaign.ok()) {
      SHELF_LOG(WARNING) << "election: campaign failed" << Kv("key", key_)
                         << Kv("error", campaign.status().ToString());
      // NOT_FOUND: etcd no longer has our lease.
      if (absl::IsNotFound(campaign.status())) {
        wake = Wake::kSessionLost;
      } else if (!Backoff(&failures)) {
        break;
      }
    } else if (campaign->created && !HeldIntact(*session, campaign->kv)) {
      // Our key, recognised by lease and value, but written since: repair
      // it before leading under it.
      if (RepairKey(campaign->kv, /*leading=*/true).ok()) {
        failures = 0;
      } else if (!Backoff(&failures)) {
        break;
      }
    } else {
      failures = 0;
      wake = campaign->created ? Lead(session.get(), campaign->kv, campaign->revision)
                               : StandBy(session.get(), campaign->kv, campaign->revision);
    }
    if (wake == Wake::kStop) break;
    if (wake == Wake::kSessionLost || !session->keepalive->alive()) {
      session->keepalive->Stop();
      {
        MutexLock lock(&mu_);
        keepalive_ = nullptr;
        lease_id_ = 0;
      }
      stale_lease = session->lease.id;
      session.reset();
    }
  }
  // Leaving: the lease stays until Resign() revokes it or it expires.
  if (session != nullptr) session->keepalive->Stop();
  MutexLock lock(&mu_);
  keepalive_ = nullptr;
  lease_id_ = session != nullptr ? session->lease.id : stale_lease;
}

LeaderElection::Wake LeaderElection::Lead(Session* session, const KeyValue& kv, int64_t revision) {
  const int64_t term = kv.create_revision;
  {
    MutexLock lock(&mu_);
    term_ = term;
    held_term_ = term;
    key_changed_ = false;
    health_.clear();  // reports from before this term are not about it
  }
  SHELF_LOG(INFO) << "elected leader" << Kv("key", key_) << Kv("term", term)
                  << Kv("address", options_.address) << Kv("lease", session->lease.id);
  options_.on_elected(term);

  // Someone deleting the key, or a key of another term in its place, ends
  // this term as surely as losing the lease; so does a write over the key,
  // which is then repaired. Any event, or the watch ending, has the key
  // read again.
  std::unique_ptr<EtcdWatch> watch = WatchKey(revision);
  std::optional<KeyValue> overwritten;
  Wake wake;
  while (true) {
    wake = WaitForWake(session, /*timeout_ms=*/0, /*leading=*/true);
    if (wake != Wake::kChanged) break;
    auto now = client_->Range(key_);
    // Unreadable, deleted or replaced: the term ends and the campaign reads
    // the key again (finding ours intact, it leads on under the same term).
    if (!now.ok() || now->kvs.empty() || now->kvs.front().create_revision != term) break;
    if (!HeldIntact(*session, now->kvs.front())) {
      overwritten = now->kvs.front();
      break;
    }
    // Still as created (the watch ended, say): watch again from this read.
    if (watch != nullptr) watch->Cancel();
    watch = WatchKey(now->revision);
  }
  {
    MutexLock lock(&mu_);
    term_ = 0;
    if (wake == Wake::kChanged) held_term_ = 0;
  }
  const char* why = wake == Wake::kStop          ? "stopped"
                    : wake == Wake::kSessionLost ? "lease lost"
                    : overwritten.has_value()    ? "key overwritten"
                                                 : "key deleted or replaced";
  if (wake == Wake::kStop) {
    SHELF_LOG(INFO) << "leadership ended" << Kv("key", key_) << Kv("term", term) << Kv("why", why);
  } else {
    SHELF_LOG(WARNING) << "leadership ended" << Kv("key", key_) << Kv("term", term)
                       << Kv("why", why);
  }
  options_.on_lost();
  if (watch != nullptr) watch->Cancel();
  // Only now that this term is over: a standby may win the moment the key
  // goes. A failed repair is retried by the campaign, which finds the key
  // still overwritten.
  if (overwritten.has_value()) RepairKey(*overwritten, /*leading=*/true).IgnoreError();
  return wake;
}

LeaderElection::Wake LeaderElection::StandBy(Session* session, const KeyValue& holder,
                                             int64_t revision) {
  {
    MutexLock lock(&mu_);
    key_changed_ = false;
  }
  const bool overwritten = !ToLeaderInfo(holder).intact;
  if (overwritten) {
    SHELF_LOG(WARNING) << "the leader key was overwritten since its election; deleting it unless "
                          "it changes within the lease TTL"
                       << Kv("key", key_) << Kv("term", holder.create_revision)
                       << Kv("version", holder.version) << Kv("value_bytes", holder.value.size())
                       << Kv("ttl_s", session->lease.ttl_s);
  } else {
    SHELF_LOG(DEBUG) << "standing by" << Kv("key", key_) << Kv("leader", holder.value)
                     << Kv("term", holder.create_revision);
  }
  // Any change (the key deleted, or written over) wakes the campaign, which
  // reads the key again.
  std::unique_ptr<EtcdWatch> watch = WatchKey(revision);
  // The watch makes takeover fast; the periodic re-read makes it certain
  // even while the watch cannot reach etcd.
  Wake wake = WaitForWake(session, static_cast<uint64_t>(session->lease.ttl_s) * 1000,
                          /*leading=*/false);
  if (watch != nullptr) watch->Cancel();
  // Overwritten and unchanged for a whole TTL: its leader, were it alive,
  // would have repaired it by now; delete it so that the masters elect a
  // leader again. (It is not trusted either way; a lease an intruder keeps
  // alive on it would otherwise keep it forever.)
  if (overwritten && wake == Wake::kTimeout) {
    if (absl::Status s = RepairKey(holder, /*leading=*/false); !s.ok()) {
      int failures = 0;
      if (!Backoff(&failures)) return Wake::kStop;
    }
  }
  return wake;
}

bool LeaderElection::HeldIntact(const Session& session, const KeyValue& kv) const {
  return kv.version == 1 && kv.mod_revision == kv.create_revision && kv.lease == session.lease.id &&
         kv.value == options_.address;
}

absl::Status LeaderElection::RepairKey(const KeyValue& kv, bool leading) {
  auto deleted = client_->DeleteIfModRevision(key_, kv.mod_revision);
  if (!deleted.ok()) {
    SHELF_LOG(WARNING) << "election: cannot delete the overwritten leader key" << Kv("key", key_)
                       << Kv("error", deleted.status().ToString());
    return deleted.status();
  }
  if (!*deleted) {
    SHELF_LOG(INFO) << "the overwritten leader key changed again before its repair"
                    << Kv("key", key_) << Kv("mod_revision", kv.mod_revision);
    return absl::OkStatus();
  }
  // The value is whatever the writer chose: its length only.
  SHELF_LOG(WARNING) << "deleted a leader key overwritten since its election; electing again"
                     << Kv("key", key_) << Kv("term", kv.create_revision)
                     << Kv("version", kv.version) << Kv("value_bytes", kv.value.size())
                     << Kv("lease", kv.lease) << Kv("by", leading ? "leader" : "standby");
  RepairsCounter(leading).Increment();
  return absl::OkStatus();
}

std::unique_ptr<EtcdWatch> LeaderElection::WatchKey(int64_t revision) {
  WatchOptions options;
  options.start_revision = revision + 1;
  options.on_events = [this](const std::vector<WatchEvent>& events, int64_t) {
    if (events.empty()) return;
    MutexLock lock(&mu_);
    key_changed_ = true;
    cv_.SignalAll();
  };
  options.on_error = [this](const absl::Status&) {
    // The watch is over (history compacted): re-read the key.
    MutexLock lock(&mu_);
    key_changed_ = true;
    cv_.SignalAll();
  };
  auto watch = client_->Watch(key_, std::move(options));
  if (!watch.ok()) {
    SHELF_LOG(WARNING) << "election: cannot watch the leader key" << Kv("key", key_)
                       << Kv("error", watch.status().ToString());
    return nullptr;
  }
  return *std::move(watch);
}

LeaderElection::Wake LeaderElection::WaitForWake(Session* session, uint64_t timeout_ms,
                                                 bool leading) {
  const uint64_t deadline = timeout_ms == 0 ? UINT64_MAX : MonoMs() + timeout_ms;
  MutexLock lock(&mu_);
  while (true) {
    if (stopping_) return Wake::kStop;
    if (session_lost_) return Wake::kSessionLost;
    if (key_changed_) {
      key_changed_ = false;
      return Wake::kChanged;
    }
    if (!health_.empty()) {
      std::vector<absl::Status> reports;
      reports.swap(health_);
      if (leading && options_.on_health) {
        mu_.Unlock();
        for (const absl::Status& report : reports) options_.on_health(report);
        mu_.Lock();
      }
      continue;
    }
    uint64_t now = MonoMs();
    uint64_t until = deadline;
    if (leading) {
      // Do not depend on the keepalive thread being scheduled on time: the
      // local deadline alone ends the term.
      uint64_t expiry = session->keepalive->expiry_mono_ms();
      if (now >= expiry) return Wake::kSessionLost;
      until = std::min(until, expiry);
    }
    if (now >= until) return Wake::kTimeout;
    cv_.WaitFor(&mu_, std::chrono::milliseconds(std::min<uint64_t>(until - now, 1000)));
  }
}

bool LeaderElection::Backoff(int* failures) {
  uint64_t backoff_ms = client_->options().backoff_initial_ms << std::min(*failures, 10);
  uint64_t until = MonoMs() + std::min<uint64_t>(backoff_ms, kCampaignBackoffMaxMs);
  ++*failures;
  MutexLock lock(&mu_);
  while (!stopping_) {
    uint64_t now = MonoMs();
    if (now >= until) return true;
    cv_.WaitFor(&mu_, std::chrono::milliseconds(until - now));
  }
  return false;
}

absl::StatusOr<LeaderInfo> LeaderElection::GetLeader(EtcdClient* client, absl::string_view cluster,
                                                     absl::string_view key_prefix) {
  absl::Status valid = ValidateCluster(cluster);
  if (!valid.ok()) return valid;
  auto kv = client->Get(LeaderKey(cluster, key_prefix));
  if (absl::IsNotFound(kv.status())) {
    return absl::NotFoundError(absl::StrCat("cluster '", cluster, "' has no leader"));
  }
  if (!kv.ok()) return kv.status();
  return ToLeaderInfo(*kv);
}

absl::StatusOr<std::unique_ptr<EtcdWatch>> LeaderElection::WatchLeader(
    EtcdClient* client, absl::string_view cluster,
    std::function<void(const std::optional<LeaderInfo>&)> on_change, absl::string_view key_prefix) {
  absl::Status valid = ValidateCluster(cluster);
  if (!valid.ok()) return valid;
  if (!on_change) return absl::InvalidArgumentError("WatchLeader needs on_change");
  std::string key = LeaderKey(cluster, key_prefix);
  auto now = client->Range(key);
  if (!now.ok()) return now.status();
  std::optional<LeaderInfo> current;
  if (!now->kvs.empty()) current = ToLeaderInfo(now->kvs.front());
  on_change(current);

  WatchOptions options;
  options.start_revision = now->revision + 1;
  options.on_events = [on_change = std::move(on_change)](const std::vector<WatchEvent>& events,
                                                         int64_t) {
    // Only the state after the batch matters to a reader of "who leads".
    const WatchEvent& last = events.back();
    std::optional<LeaderInfo> leader;
    if (last.type == WatchEvent::Type::kPut) leader = ToLeaderInfo(last.kv);
    on_change(leader);
  };
  return client->Watch(key, std::move(options));
}

}  // namespace shelf::coord
