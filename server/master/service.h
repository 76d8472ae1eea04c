// gRPC adapters over Master: MasterService (stores, clients) and
// AdminService (operators). Each call resolves its caller's Principal first
// (common/credentials.h), checks the caller's role may make it
// (docs/security.md, "Roles"), then rewrites its keys into the caller's
// tenant namespace (tenant_keys.h).
#ifndef SHELF_SERVER_MASTER_SERVICE_H_
#define SHELF_SERVER_MASTER_SERVICE_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "common/credentials.h"
#include "common/mutex.h"
#include "proto/shelf.grpc.pb.h"
#include "server/master/master.h"

namespace shelf::master {

class MasterServiceImpl final : public v1::MasterService::Service {
 public:
  // `max_call_streams`: Calls streams open at once (0: none served).
  MasterServiceImpl(Master* master, std::shared_ptr<const Authenticator> auth,
                    size_t max_call_streams = kMaxCallStreamsDefault)
      : master_(master), auth_(std::move(auth)), max_call_streams_(max_call_streams) {}
  static constexpr size_t kMaxCallStreamsDefault = 1024;
  grpc::Status RegisterStore(grpc::ServerContext* ctx, const v1::RegisterStoreRequest* req,
                             v1::RegisterStoreResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status PutStart(grpc::ServerContext* ctx, const v1::PutStartRequest* req,
                        v1::PutStartResponse* resp) override;
  grpc::Status BatchPutStart(grpc::ServerContext* ctx, const v1::BatchPutStartRequest* req,
                             v1::BatchPutStartResponse* resp) override;
  grpc::Status PutCommit(grpc::ServerContext* ctx, const v1::PutCommitRequest* req,
                         v1::PutCommitResponse* resp) override;
  grpc::Status PutAbort(grpc::ServerContext* ctx, const v1::PutAbortRequest* req,
                        v1::PutAbortResponse* resp) override;
  grpc::Status Lookup(grpc::ServerContext* ctx, const v1::LookupRequest* req,
                      v1::LookupResponse* resp) override;
  grpc::Status MatchPrefix(grpc::ServerContext* ctx, const v1::MatchPrefixRequest* req,
                           v1::MatchPrefixResponse* resp) override;
  grpc::Status ReleaseLeases(grpc::ServerContext* ctx, const v1::ReleaseLeasesRequest* req,
                             v1::ReleaseLeasesResponse* resp) override;
  grpc::Status Remove(grpc::ServerContext* ctx, const v1::RemoveRequest* req,
                      v1::RemoveResponse* resp) override;
  grpc::Status ListKeys(grpc::ServerContext* ctx, const v1::ListKeysRequest* req,
                        v1::ListKeysResponse* resp) override;
  grpc::Status Locate(grpc::ServerContext* ctx, const v1::LocateRequest* req,
                      v1::LocateResponse* resp) override;
  grpc::Status ReportDataLoss(grpc::ServerContext* ctx, const v1::ReportDataLossRequest* req,
                              v1::ReportDataLossResponse* resp) override;
  grpc::Status RemoveMatching(grpc::ServerContext* ctx, const v1::RemoveMatchingRequest* req,
                              v1::RemoveMatchingResponse* resp) override;
  grpc::Status Promote(grpc::ServerContext* ctx, const v1::PromoteRequest* req,
                       v1::PromoteResponse* resp) override;
  grpc::Status PromoteCommit(grpc::ServerContext* ctx, const v1::PromoteCommitRequest* req,
                             v1::PromoteCommitResponse* resp) override;
  // Answers each call of the stream as its unary method would, in order,
  // under the principal that opened it (each call checked against its own
  // method's roles and request limit). A stream past max_call_streams is
  // refused (RESOURCE_EXHAUSTED): its client makes unary calls instead.
  grpc::Status Calls(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::StreamedCallResponse, v1::StreamedCallRequest>* stream) override
      ABSL_LOCKS_EXCLUDED(streams_mu_);
  // Ends every Calls stream and refuses new ones: called before the server
  // shuts down, which would otherwise wait for them (each waits for its
  // client's next call).
  void EndCallStreams() ABSL_LOCKS_EXCLUDED(streams_mu_);

 private:
  // PutStart within the caller's put and stored-bytes quotas (quotas.h).
  absl::Status PutStartWithQuota(const Principal& caller, const v1::PutStartRequest& req,
                                 v1::PutStartResponse* resp);

  Master* const master_;
  const std::shared_ptr<const Authenticator> auth_;
  const size_t max_call_streams_;
  Mutex streams_mu_;
  absl::flat_hash_set<grpc::ServerContext*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool streams_ended_ ABSL_GUARDED_BY(streams_mu_) = false;
};

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  AdminServiceImpl(Master* master, std::shared_ptr<const Authenticator> auth)
      : master_(master), auth_(std::move(auth)) {}
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusResponse* resp) override;
  grpc::Status Segments(grpc::ServerContext* ctx, const v1::SegmentsRequest* req,
                        v1::SegmentsResponse* resp) override;
  grpc::Status Stat(grpc::ServerContext* ctx, const v1::StatRequest* req,
                    v1::StatResponse* resp) override;
  grpc::Status Drain(grpc::ServerContext* ctx, const v1::DrainRequest* req,
                     v1::DrainResponse* resp) override;
  grpc::Status Evict(grpc::ServerContext* ctx, const v1::EvictRequest* req,
                     v1::EvictResponse* resp) override;
  grpc::Status Pin(grpc::ServerContext* ctx, const v1::PinRequest* req,
                   v1::PinResponse* resp) override;

 private:
  Master* const master_;
  const std::shared_ptr<const Authenticator> auth_;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_SERVICE_H_
