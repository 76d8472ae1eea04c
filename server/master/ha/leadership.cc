#include "server/master/ha/leadership.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace shelf::master {

void Leadership::Lead(uint64_t term, std::vector<std::string> expected,
                      uint64_t recovery_deadline_ms) {
  leader_ = true;
  term_ = term;
  hint_.clear();
  expected_ = std::move(expected);
  recovering_ = !expected_.empty();
  recovery_deadline_ms_ = recovery_deadline_ms;
}

bool Leadership::StepDown(const std::string& hint) {
  bool was = leader_;
  leader_ = false;
  recovering_ = false;
  hint_ = hint;
  return was;
}

void Leadership::Standby() {
  leader_ = false;
  term_ = 0;
}

void Leadership::SetHint(const std::string& address) {
  if (!leader_) hint_ = address;
}

absl::Status Leadership::Check(bool write) const {
  if (leader_ && lease_check_ && !lease_check_()) {
    return absl::UnavailableError(
        "NOT_LEADER: this master's leader lease lapsed; it serves nothing until re-elected");
  }
  if (!leader_) {
    return absl::UnavailableError(
        absl::StrCat("NOT_LEADER: this master is a standby",
                     hint_.empty() ? "" : absl::StrCat("; the leader is ", hint_)));
  }
  if (write && recovering_) {
    return absl::UnavailableError(
        "master recovering: stores are re-registering after a leader change; retry shortly");
  }
  return absl::OkStatus();
}

bool Leadership::EndRecovery(uint64_t now_ms, size_t reported) {
  if (!leader_ || !recovering_) return false;
  if (reported < expected_.size() && now_ms < recovery_deadline_ms_) return false;
  recovering_ = false;
  return true;
}

}  // namespace shelf::master
