// Named sync points, after RocksDB's test_util/sync_point.h: code marks a
// point with SHELF_SYNC_POINT("Master::PutStart:BeforeWait"); a test
// installs a callback there, or orders points across threads
// ("A" must run before "B" proceeds), to replay a race deterministically.
// They compile to nothing unless SHELF_SYNC_POINTS is defined (CMake option
// SHELF_SYNC_POINTS, off by default and on in the builds of tests/run.sh);
// without it the registry itself is not linked in.
//
//   SyncPoint::Get()->SetCallBack("Master::Tick:Start", [&](void*) { ... });
//   SyncPoint::Get()->EnableProcessing();
//   ...
//   SyncPoint::Get()->DisableProcessing();
//   SyncPoint::Get()->ClearAll();
//
// Thread-safe. Callbacks run on the thread that reaches the point, with no
// lock of the sync-point registry held.
#ifndef SHELF_COMMON_SYNC_POINT_H_
#define SHELF_COMMON_SYNC_POINT_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace shelf {

class SyncPoint {
 public:
  static SyncPoint* Get();

  // `fn` runs each time `point` is reached (argument: the point's context).
  void SetCallBack(const std::string& point, std::function<void(void*)> fn)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Each pair {a, b}: a thread reaching b waits until a has been reached.
  void LoadDependency(const std::vector<std::pair<std::string, std::string>>& deps)
      ABSL_LOCKS_EXCLUDED(mu_);
  void EnableProcessing() ABSL_LOCKS_EXCLUDED(mu_);
  void DisableProcessing() ABSL_LOCKS_EXCLUDED(mu_);
  void ClearAll() ABSL_LOCKS_EXCLUDED(mu_);
  // How often `point` was reached while processing was enabled.
  int Count(const std::string& point) ABSL_LOCKS_EXCLUDED(mu_);

  void Process(const std::string& point, void* arg) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Mutex mu_;
  CondVar cv_;  // a point was reached, or processing stopped
  bool enabled_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::function<void(void*)>> callbacks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::string>> predecessors_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> reached_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf

#ifdef SHELF_SYNC_POINTS
#define SHELF_SYNC_POINT(name) ::shelf::SyncPoint::Get()->Process(name, nullptr)
#define SHELF_SYNC_POINT_ARG(name, arg) ::shelf::SyncPoint::Get()->Process(name, arg)
#else
#define SHELF_SYNC_POINT(name)
#define SHELF_SYNC_POINT_ARG(name, arg)
#endif

#endif  // SHELF_COMMON_SYNC_POINT_H_
