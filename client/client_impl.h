// ClientImpl: the implementation behind shelf::Client (client.h). Internal.
#ifndef SHELF_CLIENT_CLIENT_IMPL_H_
#define SHELF_CLIENT_CLIENT_IMPL_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "transport/shm.h"
#include "transport/tcp_client.h"

namespace shelf {

Status FromAbsl(const absl::Status& s);

class ClientImpl final : public Client {
 public:
  explicit ClientImpl(const ClientOptions& options);
  absl::Status Connect();

  Status Put(const std::string& key, const void* data, size_t size,
             const PutOptions& options) override;
  Status Get(const std::string& key, std::string* out, uint64_t timeout_ms) override;
  Status GetInto(const std::string& key, void* buffer, size_t capacity, size_t* size,
                 uint64_t timeout_ms) override;
  Status BatchPut(const std::vector<PutItem>& items, std::vector<Status>* statuses,
                  const PutOptions& options) override;
  Status BatchGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                  std::vector<Status>* statuses, uint64_t timeout_ms) override;
  Status Exists(const std::vector<std::string>& keys, std::vector<bool>* present,
                uint64_t timeout_ms) override;
  Status Remove(const std::string& key, uint64_t timeout_ms) override;
  Status MatchPrefix(const std::vector<std::string>& keys, size_t* matched,
                     uint64_t timeout_ms) override;
  ClientStats stats() const override;
  void Close() override;

 private:
  uint64_t DeadlineMs(uint64_t timeout_ms) const;
  absl::Status CheckOpen() const;
  // Runs one master RPC against the current master, moving on to the next
  // configured master when one is unreachable.
  template <typename Req, typename Resp>
  absl::Status CallMaster(grpc::Status (v1::MasterService::Stub::*method)(grpc::ClientContext*,
                                                                           const Req&, Resp*),
                          const Req& req, Resp* resp, uint64_t deadline_ms);
  // Writes one replica's range.
  absl::Status WriteReplica(const v1::Replica& replica, const v1::WriteGrant& grant,
                            const char* data, uint64_t size, uint64_t deadline_ms);
  // Reads one object from the best replica that answers with the right
  // bytes. `dst` holds at least loc.size() bytes.
  absl::Status ReadObject(const v1::ObjectLocation& loc, char* dst, uint64_t deadline_ms);
  absl::Status ReadReplica(const v1::Replica& replica, const std::string& key, char* dst,
                           uint64_t size, uint64_t deadline_ms, const char** transport);
  // Writes the bytes of a started put to all its replicas, then commits.
  absl::Status FinishPut(const v1::PutStartResponse& started, const char* data, uint64_t size,
                         uint64_t deadline_ms);
  absl::Status PutOnce(const std::string& key, const char* data, size_t size,
                       const PutOptions& options, uint64_t deadline_ms);
  v1::PutStartRequest MakePutStart(const std::string& key, const void* data, size_t size,
                                   const PutOptions& options) const;

  const ClientOptions options_;
  const std::string token_;
  TcpDataClient tcp_;
  ShmAttachments shm_;
  std::mutex mu_;
  std::vector<std::unique_ptr<v1::MasterService::Stub>> masters_;  // fixed after Connect
  std::atomic<size_t> current_master_{0};
  std::atomic<bool> closed_{false};

  struct AtomicStats {
    std::atomic<uint64_t> bytes_stored{0}, bytes_loaded{0}, bytes_loaded_shm{0},
        bytes_loaded_tcp{0}, bytes_loaded_ssd{0}, blocks_loaded_dram{0}, blocks_loaded_ssd{0},
        checksum_mismatches{0}, replica_failovers{0};
  };
  mutable AtomicStats stats_;
};

}  // namespace shelf

#endif  // SHELF_CLIENT_CLIENT_IMPL_H_
