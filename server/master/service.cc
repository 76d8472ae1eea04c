#include "server/master/service.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "server/master/quotas/tenant_keys.h"
#include "server/master/rpc_limits.h"

namespace shelf::master {

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

// Which roles may make each call (docs/security.md, "Roles"). An admin may
// make every call; so may the all-roles principal of a cluster without a
// credentials file, which is an admin without a tenant.
constexpr unsigned kEngine = 1u << static_cast<int>(Role::kEngine);
constexpr unsigned kStore = 1u << static_cast<int>(Role::kStore);
constexpr unsigned kGateway = 1u << static_cast<int>(Role::kGateway);
constexpr unsigned kAdmin = 1u << static_cast<int>(Role::kAdmin);
constexpr unsigned kKeyUsers = kEngine | kGateway | kAdmin;

unsigned MethodRoles(const char* method) {
  static constexpr struct {
    const char* method;
    unsigned roles;
  } kRules[] = {
      // A store's own calls.
      {"RegisterStore", kStore | kAdmin},
      {"Heartbeat", kStore | kAdmin},
      {"Promote", kStore | kAdmin},
      {"PromoteCommit", kStore | kAdmin},
      // Reading and writing blocks: engines and gateways, on their tenant's keys.
      {"PutStart", kKeyUsers},
      {"BatchPutStart", kKeyUsers},
      {"PutCommit", kKeyUsers},
      {"PutAbort", kKeyUsers},
      {"Lookup", kKeyUsers},
      {"MatchPrefix", kKeyUsers},
      {"ReleaseLeases", kKeyUsers},
      {"Remove", kKeyUsers},
      {"ListKeys", kKeyUsers},
      {"Locate", kKeyUsers},
      {"RemoveMatching", kKeyUsers},
      // A reader reporting a replica whose bytes failed their checksum; it
      // presents the read grant it was given for that replica.
      {"ReportDataLoss", kKeyUsers},
      // A stream of the calls above (each checked for its own method too).
      {"Calls", kKeyUsers},
      // Pinning its own tenant's keys is an engine's call too.
      {"Pin", kKeyUsers},
      // The cluster's state and its operation: admins.
      {"Status", kAdmin},
      {"Segments", kAdmin},
      {"Stat", kAdmin},
      {"Drain", kAdmin},
      {"Evict", kAdmin},
  };
  for (const auto& rule : kRules) {
    if (std::strcmp(rule.method, method) == 0) return rule.roles;
  }
  return kAdmin;  // a method nobody listed: admins only
}

// The call's principal, or UNAUTHENTICATED (no token, unknown principal,
// wrong secret), or PERMISSION_DENIED (its role may not make this call).
absl::StatusOr<Principal> Authorize(const grpc::ServerContext* ctx, const Authenticator& auth,
                                    unsigned roles, const char* method) {
  absl::StatusOr<Principal> p = auth.Authenticate(CallToken(ctx));
  if (!p.ok()) return p.status();
  if ((roles & (1u << static_cast<int>(p->role))) == 0) {
    return absl::PermissionDeniedError(absl::StrCat("principal '", p->name, "' (role ",
                                                    RoleName(p->role), ") may not call ", method));
  }
  return p;
}

// A pin within the caller's pin quotas (quotas.h), counted once made.
absl::Status PinWithQuota(Master* master, const Principal& caller, const v1::PinRequest& req) {
  QuotaBook& quotas = master->quotas();
  if (!quotas.active()) return master->Pin(req);
  if (req.unpin()) {
    absl::Status s = master->Pin(req);
    if (s.ok()) quotas.Unpinned(req.key());
    return s;
  }
  v1::StatRequest stat;
  stat.set_key(req.key());
  v1::StatResponse found;
  uint64_t size = master->Stat(stat, &found).ok() ? found.object().size() : 0;
  if (absl::Status s = quotas.CheckPin(caller, req.key(), size, req.ttl_ms(), req.hard());
      !s.ok()) {
    return s;
  }
  absl::Status s = master->Pin(req);
  if (s.ok()) quotas.Pinned(caller, req.key(), size, req.hard() ? 0 : req.ttl_ms());
  return s;
}

}  // namespace

absl::Status MasterServiceImpl::PutStartWithQuota(const Principal& caller,
                                                  const v1::PutStartRequest& req,
                                                  v1::PutStartResponse* resp) {
  QuotaBook& quotas = master_->quotas();
  const uint64_t replaced =
      quotas.active() && req.options().replace() ? master_->DramBytesOf(req.key()) : 0;
  if (const uint64_t pin_ms = req.options().soft_pin_ttl_ms(); pin_ms != 0 && quotas.active()) {
    // As a Pin would be checked: the commit pins.
    if (absl::Status s = quotas.CheckPin(caller, req.key(), req.size(), pin_ms, /*hard=*/false);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = quotas.BeforePut(caller, req, replaced); !s.ok()) return s;
  absl::Status s = master_->PutStart(req, req.options().client_host_id(), caller.name, resp);
  quotas.AfterPut(caller, req, s, *resp, master_->options().put_timeout_ms);
  return s;
}

// Resolves the caller (`caller`, a Principal) and checks its role may make
// this call, then refuses a request body above the method's limit
// (rpc_limits.h).
#define SHELF_CHECK_TOKEN()                                                                 \
  static const size_t kRpcMethod = MasterMetrics::RpcIndex(__func__);                       \
  static const size_t kRequestBytesMax = RpcRequestBytesMax(__func__);                      \
  static const unsigned kRoles = MethodRoles(__func__);                                     \
  RpcScope rpc_scope(master_->metrics(), kRpcMethod);                                       \
  absl::StatusOr<Principal> authorized = Authorize(ctx, *auth_, kRoles, __func__);          \
  if (!authorized.ok()) return rpc_scope.Done(ToGrpc(authorized.status()));                 \
  const Principal& caller = *authorized;                                                    \
  static_cast<void>(caller);                                                                \
  if (absl::Status size = CheckRequestSize(*req, kRequestBytesMax, __func__); !size.ok()) { \
    return rpc_scope.Done(ToGrpc(size));                                                    \
  }

// A store principal acts only as the node ids its `nodes=` names: any
// other registration, heartbeat or promotion changes nothing.
#define SHELF_CHECK_NODE(node_id)                                                          \
  if (!caller.MayActAsNode(node_id)) {                                                     \
    return rpc_scope.Done(ToGrpc(absl::PermissionDeniedError(                              \
        absl::StrCat("principal '", caller.name, "' may not act as store node '", node_id, \
                     "' (not in its nodes=)"))));                                          \
  }

grpc::Status MasterServiceImpl::Calls(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::StreamedCallResponse, v1::StreamedCallRequest>* stream) {
  // The opener's principal is checked here, and again by each call for
  // its own method: a credentials reload reaches open streams.
  static const unsigned kRoles = MethodRoles("Calls");
  if (absl::StatusOr<Principal> p = Authorize(ctx, *auth_, kRoles, "Calls"); !p.ok()) {
    return ToGrpc(p.status());
  }
  {
    MutexLock lock(&streams_mu_);
    if (streams_ended_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "master stopping");
    if (streams_.size() >= max_call_streams_) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("the master serves ", max_call_streams_,
                                       " call streams at once (--max-call-streams); make unary "
                                       "calls"));
    }
    streams_.insert(ctx);
    master_->metrics().call_streams.Set(static_cast<double>(streams_.size()));
  }
  v1::StreamedCallRequest req;
  while (stream->Read(&req)) {
    v1::StreamedCallResponse resp;
    resp.set_id(req.id());
    grpc::Status s;
    switch (req.call_case()) {
      case v1::StreamedCallRequest::kPutStart:
        s = PutStart(ctx, &req.put_start(), resp.mutable_put_start());
        break;
      case v1::StreamedCallRequest::kBatchPutStart:
        s = BatchPutStart(ctx, &req.batch_put_start(), resp.mutable_batch_put_start());
        break;
      case v1::StreamedCallRequest::kPutCommit:
        s = PutCommit(ctx, &req.put_commit(), resp.mutable_put_commit());
        break;
      case v1::StreamedCallRequest::kLookup:
        s = Lookup(ctx, &req.lookup(), resp.mutable_lookup());
        break;
      case v1::StreamedCallRequest::CALL_NOT_SET:
        s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a streamed call names no method");
        break;
    }
    if (!s.ok()) resp.clear_result();
    resp.mutable_status()->set_code(static_cast<int>(s.error_code()));
    resp.mutable_status()->set_message(s.error_message());
    if (!stream->Write(resp)) break;
  }
  MutexLock lock(&streams_mu_);
  streams_.erase(ctx);
  master_->metrics().call_streams.Set(static_cast<double>(streams_.size()));
  return grpc::Status::OK;
}

void MasterServiceImpl::EndCallStreams() {
  MutexLock lock(&streams_mu_);
  streams_ended_ = true;
  for (grpc::ServerContext* ctx : streams_) ctx->TryCancel();
}

grpc::Status MasterServiceImpl::RegisterStore(grpc::ServerContext* ctx,
                                              const v1::RegisterStoreRequest* req,
                                              v1::RegisterStoreResponse* resp) {
  SHELF_CHECK_TOKEN();
  SHELF_CHECK_NODE(req->endpoint().node_id());
  return rpc_scope.Done(ToGrpc(master_->RegisterStore(*req, resp)));
}

grpc::Status MasterServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* resp) {
  SHELF_CHECK_TOKEN();
  SHELF_CHECK_NODE(req->node_id());
  return rpc_scope.Done(ToGrpc(master_->Heartbeat(*req, resp)));
}

grpc::Status MasterServiceImpl::PutStart(grpc::ServerContext* ctx, const v1::PutStartRequest* req,
                                         v1::PutStartResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (!caller.tenant.empty()) {
    v1::PutStartRequest kept = *req;
    if (absl::Status s = ToKept(caller, &kept); !s.ok()) return rpc_scope.Done(ToGrpc(s));
    return rpc_scope.Done(ToGrpc(PutStartWithQuota(caller, kept, resp)));
  }
  return rpc_scope.Done(ToGrpc(PutStartWithQuota(caller, *req, resp)));
}

grpc::Status MasterServiceImpl::BatchPutStart(grpc::ServerContext* ctx,
                                              const v1::BatchPutStartRequest* req,
                                              v1::BatchPutStartResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (req->puts_size() == 0 || static_cast<size_t>(req->puts_size()) > kBatchItemsMax) {
    return rpc_scope.Done(ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("a batch put takes 1..", kBatchItemsMax, " blocks"))));
  }
  for (const v1::PutStartRequest& put : req->puts()) {
    v1::PutStartRequest kept;
    absl::Status s;
    if (!caller.tenant.empty()) {
      kept = put;
      s = ToKept(caller, &kept);
    }
    const v1::PutStartRequest& named = caller.tenant.empty() ? put : kept;
    if (s.ok()) {
      s = PutStartWithQuota(caller, named, resp->add_results());
    } else {
      resp->add_results();
    }
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
  QuotaBook& quotas = master_->quotas();
  std::vector<Master::CommitPin> pinned;
  master_->PutCommit(*req, caller.name, resp, quotas.active() ? &pinned : nullptr);
  // A tenant's locations name its keys as it asked for them, and the
  // stores' keys apart (as Lookup answers).
  ToCaller(caller, {}, resp->mutable_locations());
  quotas.AfterEnd(req->put_ids(), resp->statuses());
  for (const Master::CommitPin& pin : pinned) quotas.Pinned(caller, pin.key, pin.size, pin.ttl_ms);
  return grpc::Status::OK;
}

grpc::Status MasterServiceImpl::PutAbort(grpc::ServerContext* ctx, const v1::PutAbortRequest* req,
                                         v1::PutAbortResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (static_cast<size_t>(req->put_ids_size()) > kBatchItemsMax) {
    return rpc_scope.Done(ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("an abort takes at most ", kBatchItemsMax, " put ids"))));
  }
  master_->PutAbort(*req, caller.name, resp);
  master_->quotas().AfterEnd(req->put_ids(), resp->statuses());
  return grpc::Status::OK;
}

grpc::Status MasterServiceImpl::Lookup(grpc::ServerContext* ctx, const v1::LookupRequest* req,
                                       v1::LookupResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (!caller.tenant.empty()) {
    v1::LookupRequest kept = *req;
    if (absl::Status s = ToKept(caller, kept.mutable_keys(), false); !s.ok()) {
      return rpc_scope.Done(ToGrpc(s));
    }
    const bool leased = !req->no_lease() && !req->peek();
    if (leased) {
      if (absl::Status s = master_->quotas().CheckLease(caller); !s.ok()) {
        return rpc_scope.Done(ToGrpc(s));
      }
    }
    absl::Status s = master_->Lookup(kept, resp);
    master_->quotas().AfterLookup(caller, leased, resp->objects(), master_->options().lease_ms);
    ToCaller(caller, req->keys(), resp->mutable_objects());
    return rpc_scope.Done(ToGrpc(s));
  }
  return rpc_scope.Done(ToGrpc(master_->Lookup(*req, resp)));
}

grpc::Status MasterServiceImpl::MatchPrefix(grpc::ServerContext* ctx,
                                            const v1::MatchPrefixRequest* req,
                                            v1::MatchPrefixResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (!caller.tenant.empty()) {
    v1::MatchPrefixRequest kept = *req;
    if (absl::Status s = ToKept(caller, kept.mutable_keys(), false); !s.ok()) {
      return rpc_scope.Done(ToGrpc(s));
    }
    const bool leased = !req->no_lease() && !req->count_only();
    if (leased) {
      if (absl::Status s = master_->quotas().CheckLease(caller); !s.ok()) {
        return rpc_scope.Done(ToGrpc(s));
      }
    }
    absl::Status s = master_->MatchPrefix(kept, resp);
    master_->quotas().AfterLookup(caller, leased, resp->objects(), master_->options().lease_ms);
    ToCaller(caller, req->keys(), resp->mutable_objects());
    return rpc_scope.Done(ToGrpc(s));
  }
  return rpc_scope.Done(ToGrpc(master_->MatchPrefix(*req, resp)));
}

grpc::Status MasterServiceImpl::ReleaseLeases(grpc::ServerContext* ctx,
                                              const v1::ReleaseLeasesRequest* req,
                                              v1::ReleaseLeasesResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (!caller.tenant.empty()) {
    v1::ReleaseLeasesRequest kept = *req;
    if (absl::Status s = ToKept(caller, kept.mutable_keys(), false); !s.ok()) {
      return rpc_scope.Done(ToGrpc(s));
    }
    for (const std::string& key : kept.keys()) master_->quotas().Released(caller, key);
    return rpc_scope.Done(ToGrpc(master_->ReleaseLeases(kept)));
  }
  return rpc_scope.Done(ToGrpc(master_->ReleaseLeases(*req)));
}

grpc::Status MasterServiceImpl::Remove(grpc::ServerContext* ctx, const v1::RemoveRequest* req,
                                       v1::RemoveResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (!caller.tenant.empty()) {
    v1::RemoveRequest kept = *req;
    if (absl::Status s = ToKept(caller, kept.mutable_keys(), true); !s.ok()) {
      return rpc_scope.Done(ToGrpc(s));
    }
    absl::Status s = master_->Remove(kept, resp);
    return rpc_scope.Done(ToGrpc(s));
  }
  return rpc_scope.Done(ToGrpc(master_->Remove(*req, resp)));
}

grpc::Status MasterServiceImpl::ListKeys(grpc::ServerContext* ctx, const v1::ListKeysRequest* req,
                                         v1::ListKeysResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (!caller.tenant.empty()) {
    // Within the caller's namespace: the pattern matches its own form of
    // its own keys.
    v1::ListKeysRequest kept = *req;
    if (!req->cursor().empty()) {
      absl::StatusOr<std::string> cursor = KeptKey(caller, req->cursor(), false);
      if (!cursor.ok()) return rpc_scope.Done(ToGrpc(cursor.status()));
      kept.set_cursor(*std::move(cursor));
    }
    absl::Status s = master_->ListKeys(kept, resp, TenantScope(caller));
    for (std::string& k : *resp->mutable_keys()) k = CallerKey(caller, k);
    if (!resp->next_cursor().empty()) resp->set_next_cursor(CallerKey(caller, resp->next_cursor()));
    return rpc_scope.Done(ToGrpc(s));
  }
  return rpc_scope.Done(ToGrpc(master_->ListKeys(*req, resp)));
}

grpc::Status MasterServiceImpl::Locate(grpc::ServerContext* ctx, const v1::LocateRequest* req,
                                       v1::LocateResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (!caller.tenant.empty()) {
    v1::LocateRequest kept = *req;
    if (absl::Status s = ToKept(caller, kept.mutable_keys(), false); !s.ok()) {
      return rpc_scope.Done(ToGrpc(s));
    }
    absl::Status s = master_->Locate(kept, resp);
    return rpc_scope.Done(ToGrpc(s));
  }
  return rpc_scope.Done(ToGrpc(master_->Locate(*req, resp)));
}

grpc::Status MasterServiceImpl::ReportDataLoss(grpc::ServerContext* ctx,
                                               const v1::ReportDataLossRequest* req,
                                               v1::ReportDataLossResponse* resp) {
  SHELF_CHECK_TOKEN();
  if (!caller.tenant.empty()) {
    // A report drops replicas, as a remove does: only a principal that may
    // write the key may make one. A reader of a shared tenant's blocks
    // gets DATA_LOSS for a bad copy, and cannot drop the tenant's blocks.
    absl::StatusOr<std::string> key = KeptKey(caller, req->key(), /*write=*/true);
    if (!key.ok()) return rpc_scope.Done(ToGrpc(key.status()));
    v1::ReportDataLossRequest kept = *req;
    kept.set_key(*std::move(key));
    return rpc_scope.Done(ToGrpc(master_->ReportDataLoss(kept, resp)));
  }
  return rpc_scope.Done(ToGrpc(master_->ReportDataLoss(*req, resp)));
}

grpc::Status MasterServiceImpl::RemoveMatching(grpc::ServerContext* ctx,
                                               const v1::RemoveMatchingRequest* req,
                                               v1::RemoveMatchingResponse* resp) {
  SHELF_CHECK_TOKEN();
  return rpc_scope.Done(ToGrpc(master_->RemoveMatching(*req, resp, TenantScope(caller))));
}

grpc::Status MasterServiceImpl::Promote(grpc::ServerContext* ctx, const v1::PromoteRequest* req,
                                        v1::PromoteResponse* resp) {
  SHELF_CHECK_TOKEN();
  SHELF_CHECK_NODE(req->node_id());
  return rpc_scope.Done(ToGrpc(master_->Promote(*req, resp)));
}

grpc::Status MasterServiceImpl::PromoteCommit(grpc::ServerContext* ctx,
                                              const v1::PromoteCommitRequest* req,
                                              v1::PromoteCommitResponse* resp) {
  SHELF_CHECK_TOKEN();
  SHELF_CHECK_NODE(req->node_id());
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
  if (!caller.tenant.empty()) {
    v1::PinRequest kept = *req;
    absl::StatusOr<std::string> key = KeptKey(caller, req->key(), /*write=*/true);
    if (!key.ok()) return rpc_scope.Done(ToGrpc(key.status()));
    kept.set_key(*std::move(key));
    return rpc_scope.Done(ToGrpc(PinWithQuota(master_, caller, kept)));
  }
  return rpc_scope.Done(ToGrpc(PinWithQuota(master_, caller, *req)));
}

}  // namespace shelf::master
