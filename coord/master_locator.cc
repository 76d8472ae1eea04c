#include "coord/master_locator.h"

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coord/election.h"
#include "coord/etcd_client.h"

namespace shelf {

MasterLocator::~MasterLocator() = default;

absl::StatusOr<std::unique_ptr<MasterLocator>> MasterLocator::Create(const std::string& spec) {
  std::unique_ptr<MasterLocator> loc(new MasterLocator());
  absl::string_view rest = spec;
  if (absl::ConsumePrefix(&rest, "etcd://")) {
    size_t slash = rest.rfind('/');
    if (slash == absl::string_view::npos || slash + 1 == rest.size() || slash == 0) {
      return absl::InvalidArgumentError(
          "expected etcd://HOST:PORT[,HOST:PORT...]/CLUSTER, got '" + spec + "'");
    }
    loc->cluster_ = std::string(rest.substr(slash + 1));
    auto client = coord::EtcdClient::Connect(rest.substr(0, slash));
    if (!client.ok()) return client.status();
    loc->etcd_ = *std::move(client);
    return loc;
  }
  for (absl::string_view a : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    loc->static_.emplace_back(a);
  }
  if (loc->static_.empty()) return absl::InvalidArgumentError("no master address given");
  loc->current_ = loc->static_[0];
  return loc;
}

void MasterLocator::RefreshFromEtcdLocked() {
  auto leader = coord::LeaderElection::GetLeader(etcd_.get(), cluster_);
  current_ = leader.ok() ? leader->address : std::string();
}

std::string MasterLocator::Current() {
  std::lock_guard<std::mutex> lock(mu_);
  if (etcd_ != nullptr && current_.empty()) RefreshFromEtcdLocked();
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
  std::lock_guard<std::mutex> lock(mu_);
  if (address != current_) return;  // someone moved on already
  std::string hint = LeaderHint(status);
  if (etcd_ != nullptr) {
    current_ = hint;
    if (current_.empty() || current_ == address) RefreshFromEtcdLocked();
    return;
  }
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

}  // namespace shelf
