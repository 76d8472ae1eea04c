#include "server/master/service.h"

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "server/master/rpc_limits.h"

namespace shelf {

namespace {

// Times a call and counts its failure by code, for shelf_master_rpc_*.
// `method` is the handler's index in MasterMetrics::kRpcMethods: the
// children are resolved once per method and code, not per call.
class RpcScope {
 public:
  RpcScope(const MasterMetrics& m, size_t method)
      : metrics_(m), method_(method), timer_(m.RpcSeconds(method)) {}
  grpc::Status Done(grpc::Status s) {
    if (!s.ok()) metrics_.RpcErrors(method_, s.error_code()).Increment();
    return s;
  }

 private:
  const MasterMetrics& metrics_;
  const size_t method_;
  prom::ScopedTimer timer_;
};

absl::Status CheckRequestSize(const google::protobuf::Message& req, size_t bytes_max,
                              const char* method) {
  size_t bytes = req.ByteSizeLong();
  if (bytes <= bytes_max) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(method, " request of ", bytes, " bytes: the limit is ", bytes_max));
}

// Who is calling: the principal a put belongs to. The cluster token is the
// only credential there is, so every holder of it is the one principal
// "cluster"; per-principal credentials will name their holder here.
std::string CallerPrincipal(const grpc::ServerContext* ctx) { return "cluster"; }

}  // namespace

// Checks the cluster token, then refuses a request body above the method's
// limit (rpc_limits.h).
#define SHELF_CHECK_TOKEN()                                                                 \
  static const size_t kRpcMethod = MasterMetrics::RpcIndex(__func__);                       \
  static const size_t kRequestBytesMax = RpcRequestBytesMax(__func__);                      \
  RpcScope rpc_scope(master_->metrics(), kRpcMethod);                                       \
  if (absl::Status auth = CheckToken(ctx, token_); !auth.ok()) {                            \
    return rpc_scope.Done(ToGrpc(auth));                                                    \
  }                                                                                         \
  if (absl::Status size = CheckRequestSize(*req, kRequestBytesMax, __func__); !size.ok()) { \
    return rpc_scope.Done(ToGrpc(size));                                                    \
  }

grpc::Status MasterServiceImpl::RegisterStore(grpc::ServerContext* ctx,
                                              const v1::RegisterStoreRequest* req,
                                              v1::RegisterStoreResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->RegisterStore(*req, resp)));
}

grpc::Status MasterServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Heartbeat(*req, resp)));
}

grpc::Status MasterServiceImpl::PutStart(grpc::ServerContext* ctx, const v1::PutStartRequest* req,
                                         v1::PutStartResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(
      ToGrpc(master_->PutStart(*req, req->options().client_host_id(), CallerPrincipal(ctx), resp)));
}

grpc::Status MasterServiceImpl::BatchPutStart(grpc::ServerContext* ctx,
                                              const v1::BatchPutStartRequest* req,
                                              v1::BatchPutStartResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (req->puts_size() == 0 || static_cast<size_t>(req->puts_size()) > kBatchItemsMax) {
    return rpc_scope.Done(ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("a batch put takes 1..", kBatchItemsMax, " blocks"))));
  }
  const std::string owner = CallerPrincipal(ctx);
  for (const v1::PutStartRequest& put : req->puts()) {
    absl::Status s =
        master_->PutStart(put, put.options().client_host_id(), owner, resp->add_results());
    v1::RpcStatus* st = resp->add_statuses();
    st->set_code(static_cast<int>(s.code()));
    st->set_message(std::string(s.message()));
  }
  return grpc::Status::OK;
}

grpc::Status MasterServiceImpl::PutCommit(grpc::ServerContext* ctx, const v1::PutCommitRequest* req,
                                          v1::PutCommitResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (static_cast<size_t>(req->put_ids_size()) > kBatchItemsMax) {
    return rpc_scope.Done(ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("a commit takes at most ", kBatchItemsMax, " put ids"))));
  }
  master_->PutCommit(*req, CallerPrincipal(ctx), resp);
  return grpc::Status::OK;
}

grpc::Status MasterServiceImpl::PutAbort(grpc::ServerContext* ctx, const v1::PutAbortRequest* req,
                                         v1::PutAbortResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (static_cast<size_t>(req->put_ids_size()) > kBatchItemsMax) {
    return rpc_scope.Done(ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("an abort takes at most ", kBatchItemsMax, " put ids"))));
  }
  master_->PutAbort(*req, CallerPrincipal(ctx), resp);
  return grpc::Status::OK;
}

grpc::Status MasterServiceImpl::Lookup(grpc::ServerContext* ctx, const v1::LookupRequest* req,
                                       v1::LookupResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Lookup(*req, resp)));
}

grpc::Status MasterServiceImpl::MatchPrefix(grpc::ServerContext* ctx,
                                            const v1::MatchPrefixRequest* req,
                                            v1::MatchPrefixResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->MatchPrefix(*req, resp)));
}

grpc::Status MasterServiceImpl::ReleaseLeases(grpc::ServerContext* ctx,
                                              const v1::ReleaseLeasesRequest* req,
                                              v1::ReleaseLeasesResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->ReleaseLeases(*req)));
}

grpc::Status MasterServiceImpl::Remove(grpc::ServerContext* ctx, const v1::RemoveRequest* req,
                                       v1::RemoveResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Remove(*req, resp)));
}

grpc::Status MasterServiceImpl::ListKeys(grpc::ServerContext* ctx, const v1::ListKeysRequest* req,
                                         v1::ListKeysResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->ListKeys(*req, resp)));
}

grpc::Status MasterServiceImpl::Locate(grpc::ServerContext* ctx, const v1::LocateRequest* req,
                                       v1::LocateResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Locate(*req, resp)));
}

grpc::Status MasterServiceImpl::ReportDataLoss(grpc::ServerContext* ctx,
                                               const v1::ReportDataLossRequest* req,
                                               v1::ReportDataLossResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->ReportDataLoss(*req, resp)));
}

grpc::Status MasterServiceImpl::RemoveMatching(grpc::ServerContext* ctx,
                                               const v1::RemoveMatchingRequest* req,
                                               v1::RemoveMatchingResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->RemoveMatching(*req, resp)));
}

grpc::Status MasterServiceImpl::Promote(grpc::ServerContext* ctx, const v1::PromoteRequest* req,
                                        v1::PromoteResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Promote(*req, resp)));
}

grpc::Status MasterServiceImpl::PromoteCommit(grpc::ServerContext* ctx,
                                              const v1::PromoteCommitRequest* req,
                                              v1::PromoteCommitResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->PromoteCommit(*req)));
}

grpc::Status AdminServiceImpl::Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                                      v1::StatusResponse* resp) {
  SHELF_CHECK_TOKEN();
  master_->Status(resp);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::Segments(grpc::ServerContext* ctx, const v1::SegmentsRequest* req,
                                        v1::SegmentsResponse* resp) {
  SHELF_CHECK_TOKEN();
  master_->Segments(resp);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::Stat(grpc::ServerContext* ctx, const v1::StatRequest* req,
                                    v1::StatResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Stat(*req, resp)));
}

grpc::Status AdminServiceImpl::Drain(grpc::ServerContext* ctx, const v1::DrainRequest* req,
                                     v1::DrainResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Drain(*req, resp)));
}

grpc::Status AdminServiceImpl::Evict(grpc::ServerContext* ctx, const v1::EvictRequest* req,
                                     v1::EvictResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Evict(*req, resp)));
}

grpc::Status AdminServiceImpl::Pin(grpc::ServerContext* ctx, const v1::PinRequest* req,
                                   v1::PinResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->Pin(*req)));
}

}  // namespace shelf
