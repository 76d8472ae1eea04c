// LocalCluster: starts a real Shelf cluster on loopback, as separate
// processes (one shelf-master, N shelf-store), for tests, benchmarks and the
// README's main job. Every process gets PR_SET_PDEATHSIG, so nothing is left
// running when the owner dies; the destructor stops them all and removes the
// cluster's temporary directory.
//
//   LocalCluster::Options opts;
//   opts.stores = 2;
//   auto cluster = LocalCluster::Start(opts);
//   std::string master = (*cluster)->master_address();
//
// Not thread-safe: drive it from one thread.
#ifndef SHELF_TESTING_LOCAL_CLUSTER_H_
#define SHELF_TESTING_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shelf {

// The folder holding shelf-master and friends: $SHELF_BIN_DIR if set, else
// the folder of the running executable (binaries build into one folder).
std::string DefaultBinDir();

// A child process with its stdout/stderr sent to a log file.
class Process {
 public:
  // Starts `argv[0]` (a path) with arguments. The child dies with us.
  static absl::StatusOr<std::unique_ptr<Process>> Spawn(const std::vector<std::string>& argv,
                                                        const std::string& log_path);
  ~Process();  // SIGTERM, then SIGKILL after 3 s
  pid_t pid() const { return pid_; }
  bool Running();
  void Signal(int sig);
  // Waits for exit; returns the wait status, or -1 on timeout.
  int Wait(uint64_t timeout_ms);
  void Stop();  // SIGTERM then SIGKILL; waits

 private:
  explicit Process(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  bool reaped_ = false;
  int status_ = 0;
};

class LocalCluster {
 public:
  struct Options {
    int stores = 2;
    uint64_t dram_bytes = 64ull << 20;
    uint64_t ssd_bytes = 0;                // 0: stores without SSD tier
    std::string bin_dir;                   // empty: DefaultBinDir()
    std::string work_dir;                  // empty: a fresh temporary directory
    std::string secret;                    // written to a file and passed to all
    std::vector<std::string> master_args;  // extra flags
    std::vector<std::string> store_args;
    // What WaitForLiveNodes calls the master with when it authenticates
    // principals (--credentials in master_args): an admin's
    // PrincipalToken. Empty: the secret's token.
    std::string admin_token;
    bool keep_work_dir = false;
    // Start returns only once every store's populator has written its
    // segment through (WaitForPopulated): what a benchmark measures then
    // does not share the host with it. The stores must populate (the
    // default; not with --populate-dram=false).
    bool wait_populated = false;
  };
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const Options& options);
  ~LocalCluster();

  const std::string& master_address() const { return master_address_; }
  const std::string& work_dir() const { return work_dir_; }
  // Store i's log: its stdout and stderr, appended to across restarts.
  std::string store_log(int i) const;
  const std::string& secret_file() const { return secret_file_; }
  const std::string& bin_dir() const { return bin_dir_; }
  int store_count() const { return static_cast<int>(stores_.size()); }
  const std::string& store_address(int i) const { return stores_[i].address; }
  // The real port of a daemon's /metrics endpoint, from its ready file (so
  // `--metrics-listen 127.0.0.1:0` works); 0 when it serves none.
  uint16_t master_metrics_port() const { return master_metrics_port_; }
  uint16_t store_metrics_port(int i) const { return stores_[i].metrics_port; }
  const std::string& store_ssd_dir(int i) const { return stores_[i].ssd_dir; }
  Process* store_process(int i) { return stores_[i].process.get(); }
  Process* master_process() { return master_.get(); }

  // Adds a store (index returned); waits until it is registered.
  absl::StatusOr<int> AddStore(const std::vector<std::string>& extra_args = {});
  // kill -9 a store.
  void KillStore(int i);
  // Restarts store i with the same SSD dir and node id (a new port).
  absl::Status RestartStore(int i);
  // Waits until the master reports `live` live nodes.
  absl::Status WaitForLiveNodes(int live, uint64_t timeout_ms);
  // Waits until every store's log says its DRAM segment is populated, or
  // that its populator stopped early (writes fault the rest in).
  absl::Status WaitForPopulated(uint64_t timeout_ms);
  // Runs shelfctl with `args` (plus --master, --secret-file); returns its
  // exit status and stdout.
  int Shelfctl(const std::vector<std::string>& args, std::string* out);

 private:
  struct StoreProc {
    std::unique_ptr<Process> process;
    std::string address;
    std::string ssd_dir;
    std::string node_id;
    std::vector<std::string> extra_args;
    uint16_t metrics_port = 0;
  };
  LocalCluster() = default;
  absl::Status StartStore(int i);

  Options options_;
  std::string bin_dir_;
  std::string work_dir_;
  std::string secret_file_;
  std::string master_address_;
  uint16_t master_metrics_port_ = 0;
  std::unique_ptr<Process> master_;
  std::vector<StoreProc> stores_;
  bool owns_work_dir_ = false;
};

// Polls for a file to appear (non-empty) and returns its first line.
absl::StatusOr<std::string> WaitForFileLine(const std::string& path, uint64_t timeout_ms,
                                            Process* process);
// The port of a ready file's "metrics HOST:PORT" line; 0 without one.
uint16_t ReadyFileMetricsPort(const std::string& path);

}  // namespace shelf

#endif  // SHELF_TESTING_LOCAL_CLUSTER_H_
