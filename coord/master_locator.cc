#include "coord/master_locator.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "common/log.h"
#include "coord/election.h"
#include "coord/etcd_client.h"

namespace shelf::coord {

MasterLocator::~MasterLocator() {
  std::unique_ptr<coord::EtcdWatch> watch;
  {
    MutexLock lock(&mu_);
    watch = std::move(watch_);
  }
  watch.reset();  // cancels: no callback runs after this
}

absl::StatusOr<std::unique_ptr<MasterLocator>> MasterLocator::Create(
    const std::string& spec, const coord::EtcdOptions& etcd) {
  std::unique_ptr<MasterLocator> loc(new MasterLocator());
  absl::string_view rest = spec;
  if (absl::ConsumePrefix(&rest, "etcd://")) {
    size_t slash = rest.rfind('/');
    if (slash == absl::string_view::npos || slash + 1 == rest.size() || slash == 0) {
      return absl::InvalidArgumentError("expected etcd://HOST:PORT[,HOST:PORT...]/CLUSTER, got '" +
                                        spec + "'");
    }
    loc->cluster_ = std::string(rest.substr(slash + 1));
    auto client = coord::EtcdClient::Connect(rest.substr(0, slash), etcd);
    if (!client.ok()) return client.status();
    loc->etcd_ = *std::move(client);
    MutexLock lock(&loc->mu_);
    loc->EnsureWatchLocked();  // else Current() reads the key and retries the watch
    return loc;
  }
  for (absl::string_view a : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    loc->static_.emplace_back(a);
  }
  if (loc->static_.empty()) return absl::InvalidArgumentError("no master address given");
  MutexLock lock(&loc->mu_);
  loc->current_ = loc->static_[0];
  return loc;
}

namespace {

void WarnTampered(const coord::LeaderInfo& leader) {
  SHELF_LOG(WARNING) << "ignoring a leader key that was overwritten since its election"
                     << Kv("address", leader.address) << Kv("term", leader.term);
}

}  // namespace

void MasterLocator::RefreshFromEtcdLocked() {
  auto leader = coord::LeaderElection::GetLeader(etcd_.get(), cluster_);
  if (leader.ok() && !leader->intact) {
    WarnTampered(*leader);  // keep the leader known before, if any
    return;
  }
  current_ = leader.ok() ? leader->address : std::string();
}

absl::Status MasterLocator::VerifyLeader(const std::string& address, uint64_t term) {
  if (etcd_ == nullptr) return absl::OkStatus();
  auto leader = coord::LeaderElection::GetLeader(etcd_.get(), cluster_);
  if (!leader.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot check the master's term in etcd: ", leader.status().message()));
  }
  if (!leader->intact || leader->address != address || leader->term <= 0 ||
      static_cast<uint64_t>(leader->term) != term) {
    return absl::PermissionDeniedError(absl::StrCat(
        "master ", address, " claims term ", term, " but etcd's leader key names ", leader->address,
        " with term ", leader->term, leader->intact ? "" : " (the key was overwritten)"));
  }
  return absl::OkStatus();
}

bool MasterLocator::EnsureWatchLocked() {
  if (watch_ != nullptr) return true;
  uint64_t now = MonoMs();
  if (now < watch_retry_ms_) return false;
  // The callback runs on the watch's thread, first before WatchLeader
  // returns (while mu_ is held here): it must not take mu_ then.
  struct First {
    bool pending = true;
    std::string address;
  };
  auto first = std::make_shared<First>();
  auto watch = coord::LeaderElection::WatchLeader(
      etcd_.get(), cluster_, [this, first](const std::optional<coord::LeaderInfo>& l) {
        if (l.has_value() && !l->intact) {
          WarnTampered(*l);  // not a leader: keep the one known
          if (first->pending) first->pending = false;
          return;
        }
        std::string address = l.has_value() ? l->address : std::string();
        if (first->pending) {
          first->pending = false;
          first->address = address;
          return;
        }
        OnLeaderChange(address);
      });
  if (!watch.ok()) {
    watch_retry_ms_ = now + 1000;
    return false;
  }
  watch_ = *std::move(watch);
  if (!first->address.empty()) current_ = first->address;
  return true;
}

void MasterLocator::OnLeaderChange(const std::string& address) {
  {
    MutexLock lock(&mu_);
    if (address == current_) return;
    current_ = address;
  }
  if (address.empty()) return;  // no leader yet: the next put of the key tells
  MutexLock lock(&listener_mu_);
  if (listener_) listener_();
}

void MasterLocator::SetListener(std::function<void()> listener) {
  MutexLock lock(&listener_mu_);
  listener_ = std::move(listener);
}

std::string MasterLocator::Current() {
  MutexLock lock(&mu_);
  if (etcd_ != nullptr) {
    EnsureWatchLocked();
    if (current_.empty()) RefreshFromEtcdLocked();
  }
  return current_;
}

std::string MasterLocator::LeaderHint(const absl::Status& status) {
  absl::string_view msg = status.message();
  if (msg.find("NOT_LEADER") == absl::string_view::npos) return std::string();
  static constexpr absl::string_view kMark = "the leader is ";
  size_t at = msg.find(kMark);
  if (at == absl::string_view::npos) return std::string();
  absl::string_view hint = msg.substr(at + kMark.size());
  size_t end = hint.find_first_of(" ;,)");
  return std::string(hint.substr(0, end));
}

void MasterLocator::Failed(const std::string& address, const absl::Status& status) {
  MutexLock lock(&mu_);
  if (address != current_) return;  // someone moved on already
  if (etcd_ != nullptr) {
    // etcd is the authority: a NOT_LEADER hint names whomever the answering
    // process pleases, so only etcd's leader key is followed.
    RefreshFromEtcdLocked();
    return;
  }
  std::string hint = LeaderHint(status);
  if (!hint.empty()) {
    current_ = hint;
    return;
  }
  next_ = (next_ + 1) % static_.size();
  current_ = static_[next_];
}

std::vector<std::string> MasterLocator::Candidates() {
  if (etcd_ == nullptr) return static_;
  return {Current()};
}

}  // namespace shelf::coord
