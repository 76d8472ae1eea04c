// Store: the shelf-store daemon's core. Hosts one DRAM segment (memfd,
// hugepages when it can) and an optional SSD tier (RocksDB), serves them on
// the TCP data plane and to same-host clients through shared memory,
// registers with the master and heartbeats, and carries out the master's
// tier moves (demote DRAM -> SSD, drop from SSD).
//
// The store never decides placement: it accepts a write only inside a range
// granted by the master (verified by HMAC, no call to the master), and it
// reports its SSD inventory at every registration so a master restart or
// failover loses nothing the store still holds.
//
// Thread-safe.
#ifndef SHELF_SERVER_STORE_STORE_H_
#define SHELF_SERVER_STORE_STORE_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "storage/dram_segment.h"
#include "storage/ssd_tier.h"
#include "transport/data_server.h"
#include "transport/shm.h"

namespace shelf {

struct StoreOptions {
  std::string master;                  // HOST:PORT of the master
  std::string listen = "127.0.0.1:7100";  // data plane
  uint64_t dram_size = 1ull << 30;
  std::string ssd_dir;                 // empty: no SSD tier
  uint64_t ssd_size = 0;               // 0 with --ssd-dir: 64 GiB
  std::string node_id;                 // empty: persisted in ssd_dir, else host:port
  std::string run_dir;                 // empty: /tmp/shelf-store-<port>
  std::map<std::string, std::string> labels;
  std::string secret;
  TlsFiles tls;                        // for the channel to the master
  bool hugepages = true;
  bool mlock = false;
  bool shm = true;                     // offer same-host shared memory
  int max_connections = 1024;
  uint64_t rpc_timeout_ms = 3000;
};

class Store : public DataHandler {
 public:
  static absl::StatusOr<std::unique_ptr<Store>> Start(const StoreOptions& options);
  ~Store() override;

  // Registers and heartbeats until Stop(). Returns when stopped.
  void Run();
  void Stop();

  const std::string& node_id() const { return node_id_; }
  const std::string& data_address() const { return data_address_; }
  bool registered() const { return registered_.load(); }

  // DataHandler.
  absl::StatusOr<Region> Segment(uint32_t id) override;
  absl::Status CheckWrite(const wire::Grant& grant, uint32_t segment_id, uint64_t offset,
                          uint64_t length) override;
  absl::Status ReadKey(absl::string_view key, std::string* out) override;
  void OnRead(uint64_t bytes) override { read_bytes_.fetch_add(bytes); }
  void OnWrite(uint64_t bytes) override { written_bytes_.fetch_add(bytes); }

  uint64_t read_bytes() const { return read_bytes_.load(); }
  uint64_t written_bytes() const { return written_bytes_.load(); }
  SsdTier* ssd() const { return ssd_.get(); }

 private:
  explicit Store(const StoreOptions& options);
  absl::Status Register();
  absl::Status HeartbeatOnce(bool* more_work);
  v1::TierMoveResult Execute(const v1::TierMove& move);
  // Carries out queued tier moves off the heartbeat thread, so a long
  // batch of demotions never delays liveness.
  void MoverLoop();

  const StoreOptions options_;
  std::string node_id_;
  std::string data_address_;
  std::string run_dir_;
  const uint64_t incarnation_;
  std::unique_ptr<DramSegment> segment_;
  std::unique_ptr<SsdTier> ssd_;
  std::unique_ptr<DataServer> data_server_;
  std::unique_ptr<ShmServer> shm_server_;
  std::unique_ptr<v1::MasterService::Stub> master_;
  std::string token_;

  std::mutex mu_;
  std::string grant_key_;                      // guarded by mu_
  uint64_t heartbeat_interval_ms_ = 500;       // guarded by mu_
  std::vector<v1::TierMoveResult> results_;    // guarded by mu_: to report
  std::deque<v1::TierMove> moves_;             // guarded by mu_: to carry out
  bool moving_ = false;                        // guarded by mu_: a move is running
  std::condition_variable moves_cv_;
  std::atomic<bool> registered_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> written_bytes_{0};
};

}  // namespace shelf

#endif  // SHELF_SERVER_STORE_STORE_H_
