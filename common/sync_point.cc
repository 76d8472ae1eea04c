#include "common/sync_point.h"

namespace shelf {

SyncPoint* SyncPoint::Get() {
  static SyncPoint* instance = new SyncPoint();
  return instance;
}

void SyncPoint::SetCallBack(const std::string& point, std::function<void(void*)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_[point] = std::move(fn);
}

void SyncPoint::LoadDependency(const std::vector<std::pair<std::string, std::string>>& deps) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [before, after] : deps) predecessors_[after].push_back(before);
}

void SyncPoint::EnableProcessing() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = true;
}

void SyncPoint::DisableProcessing() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = false;
  cv_.notify_all();
}

void SyncPoint::ClearAll() {
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.clear();
  predecessors_.clear();
  reached_.clear();
  counts_.clear();
  cv_.notify_all();
}

int SyncPoint::Count(const std::string& point) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(point);
  return it == counts_.end() ? 0 : it->second;
}

void SyncPoint::Process(const std::string& point, void* arg) {
  std::function<void(void*)> fn;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!enabled_) return;
    auto preds = predecessors_.find(point);
    if (preds != predecessors_.end()) {
      cv_.wait(lock, [&] {
        if (!enabled_) return true;
        for (const std::string& p : preds->second) {
          if (reached_.count(p) == 0) return false;
        }
        return true;
      });
    }
    reached_.insert(point);
    ++counts_[point];
    cv_.notify_all();
    auto cb = callbacks_.find(point);
    if (cb != callbacks_.end()) fn = cb->second;
  }
  if (fn) fn(arg);
}

}  // namespace shelf
