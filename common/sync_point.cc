#include "common/sync_point.h"

namespace shelf {

SyncPoint* SyncPoint::Get() {
  static SyncPoint* instance = new SyncPoint();
  return instance;
}

void SyncPoint::SetCallBack(const std::string& point, std::function<void(void*)> fn) {
  MutexLock lock(&mu_);
  callbacks_[point] = std::move(fn);
}

void SyncPoint::LoadDependency(const std::vector<std::pair<std::string, std::string>>& deps) {
  MutexLock lock(&mu_);
  for (const auto& [before, after] : deps) predecessors_[after].push_back(before);
}

void SyncPoint::EnableProcessing() {
  MutexLock lock(&mu_);
  enabled_ = true;
}

void SyncPoint::DisableProcessing() {
  MutexLock lock(&mu_);
  enabled_ = false;
  cv_.SignalAll();
}

void SyncPoint::ClearAll() {
  MutexLock lock(&mu_);
  callbacks_.clear();
  predecessors_.clear();
  reached_.clear();
  counts_.clear();
  cv_.SignalAll();
}

int SyncPoint::Count(const std::string& point) {
  MutexLock lock(&mu_);
  auto it = counts_.find(point);
  return it == counts_.end() ? 0 : it->second;
}

void SyncPoint::Process(const std::string& point, void* arg) {
  std::function<void(void*)> fn;
  {
    MutexLock lock(&mu_);
    if (!enabled_) return;
    auto preds = predecessors_.find(point);
    if (preds != predecessors_.end()) {
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (!enabled_) return true;
        for (const std::string& p : preds->second) {
          if (reached_.count(p) == 0) return false;
        }
        return true;
      };
      while (!ready()) cv_.Wait(&mu_);
    }
    reached_.insert(point);
    ++counts_[point];
    cv_.SignalAll();
    auto cb = callbacks_.find(point);
    if (cb != callbacks_.end()) fn = cb->second;
  }
  if (fn) fn(arg);
}

}  // namespace shelf
