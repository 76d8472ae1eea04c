// ClientImpl: opening, options, deadlines, master calls and the metadata
// calls (Exists, Remove, MatchPrefix). See client_impl.h for the other parts.
#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/testing_hooks.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "common/net.h"
#include "common/rpc.h"
#if SHELF_WITH_RDMA
#include "transport/rdma/ib_verbs.h"
#include "transport/rdma/rdma_transport.h"
#endif

namespace shelf {
namespace {

constexpr uint32_t kTransferThreadsMax = 256;
constexpr uint32_t kStreamsPerBlockMax = 16;
constexpr uint32_t kAsyncThreadsMax = 64;
constexpr uint32_t kAsyncQueueMax = 65536;
// Keys a location cache may hold (each entry keeps one replica's endpoint,
// a few hundred bytes).
constexpr size_t kLocationCacheEntriesMax = size_t{16} << 20;
constexpr size_t kMasterCallStreamsMax = 64;
// ParallelFor helpers may queue behind each other; a few per thread keeps
// every transfer thread busy without letting the queue grow unbounded.
constexpr size_t kTransferQueuePerThread = 4;
// Longer timeouts are taken as this (about 35 years): "no deadline"
// written as a huge number must not wrap around into the past.
constexpr uint64_t kTimeoutMsMax = uint64_t{1} << 40;
// Pauses between rounds over the masters while a leader change is under way.
constexpr uint64_t kLeaderWaitFirstMs = 10;
constexpr uint64_t kLeaderWaitMaxMs = 200;

transport::TcpEngine::Options TcpEngineOptions(const ClientOptions& o) {
  transport::TcpEngine::Options t;
  t.secret = o.secret;
  t.tls = o.data_tls;
  t.tls_files = {o.data_tls_cert, o.data_tls_key, o.data_tls_ca};
  t.session_tag_payload = o.session_tag_payload;
  t.streams_per_op = o.tcp_streams_per_block;
  // Every transfer thread may stripe one block: each stripe needs a thread
  // and a pooled connection.
  t.threads = static_cast<size_t>(o.transfer_threads) * o.tcp_streams_per_block;
  t.max_idle_per_peer = std::max<size_t>(32, t.threads + 1);
  return t;
}

// What calls to the master carry: a principal's token, else the cluster
// secret's (common/credentials.h).
absl::StatusOr<std::string> MasterToken(const ClientOptions& o) {
  if (!o.credentials_file.empty()) {
    if (!o.principal_secret.empty()) {
      return absl::InvalidArgumentError(
          "ClientOptions: give principal_secret or credentials_file, not both");
    }
    return TokenFromCredentialsFile(o.credentials_file, o.principal);
  }
  if (o.principal.empty() != o.principal_secret.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions: a principal needs its principal_secret (or a credentials_file)");
  }
  if (!o.principal.empty()) return PrincipalToken(o.principal, o.principal_secret);
  return AuthToken(o.secret);
}

absl::Status ValidateOptions(const ClientOptions& o) {
  if (o.masters.empty()) return absl::InvalidArgumentError("ClientOptions.masters is empty");
  for (const std::string& m : o.masters) {
    if (absl::StartsWith(m, "etcd://") && o.masters.size() > 1) {
      return absl::InvalidArgumentError(
          "ClientOptions.masters: an etcd:// spec names the masters alone (one entry, "
          "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER)");
    }
  }
  if (o.timeout_ms == 0) {
    return absl::InvalidArgumentError("ClientOptions.timeout_ms must be at least 1");
  }
  if (!o.rdma_device.empty() &&
      (o.rdma_port < 1 || o.rdma_port > 255 || o.rdma_gid_index < -1 || o.rdma_gid_index > 255 ||
       o.rdma_traffic_class > 255 || o.rdma_service_level > 15 || o.rdma_pkey_index > 65535)) {
    return absl::InvalidArgumentError(
        "ClientOptions.rdma_port takes 1..255, rdma_gid_index -1 (auto) or 0..255, "
        "rdma_traffic_class 0..255, rdma_service_level 0..15 and rdma_pkey_index 0..65535");
  }
  if (o.data_tls && o.data_tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions.data_tls needs data_tls_ca, the CA that signed the stores' certificates");
  }
  if (o.data_tls_cert.empty() != o.data_tls_key.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions.data_tls_cert and data_tls_key go together: both or neither");
  }
  if (o.tcp_streams_per_block < 1 || o.tcp_streams_per_block > kStreamsPerBlockMax) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.tcp_streams_per_block is ",
                                                   o.tcp_streams_per_block, "; it takes 1..",
                                                   kStreamsPerBlockMax));
  }
  if (o.transfer_threads < 1 || o.transfer_threads > kTransferThreadsMax) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.transfer_threads is ",
                                                   o.transfer_threads, "; it takes 1..",
                                                   kTransferThreadsMax));
  }
  if (o.async_threads < 1 || o.async_threads > kAsyncThreadsMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.async_threads is ", o.async_threads, "; it takes 1..", kAsyncThreadsMax));
  }
  if (o.async_queue_max < 1 || o.async_queue_max > kAsyncQueueMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.async_queue_max is ", o.async_queue_max, "; it takes 1..", kAsyncQueueMax));
  }
  if (o.master_call_streams > kMasterCallStreamsMax) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.master_call_streams is ",
                                                   o.master_call_streams, "; it takes 0..",
                                                   kMasterCallStreamsMax, " (0: unary calls)"));
  }
  if (o.location_cache_entries > kLocationCacheEntriesMax) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.location_cache_entries is ",
                                                   o.location_cache_entries, "; it takes 0..",
                                                   kLocationCacheEntriesMax, " (0: off)"));
  }
  if (o.shm_store_uid < -1 || o.shm_store_uid > static_cast<int64_t>(UINT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.shm_store_uid is ", o.shm_store_uid, "; it takes -1 or a uid"));
  }
  if (!o.allow_tcp && !o.allow_shm) {
    return absl::InvalidArgumentError("ClientOptions allows no transport (allow_tcp, allow_shm)");
  }
  return absl::OkStatus();
}

// Milliseconds on the MonoMs clock, rounded up: a deadline is never earlier
// than asked.
uint64_t ToMonoMsCeil(Deadline::Clock::time_point t) {
  auto since = t.time_since_epoch();
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(since).count();
  return ms < 0 ? 0 : static_cast<uint64_t>(ms);
}

// A master that answers but cannot serve now: a standby, a leader whose
// lease lapsed, or a new leader rebuilding its index (docs/ha.md).
bool MasterInTransition(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable &&
         (absl::StartsWith(s.message(), "NOT_LEADER") ||
          absl::StartsWith(s.message(), "master recovering"));
}

}  // namespace

absl::Status ValidateKey(const std::string& key) {
  if (std::string why = KeyLengthError(key.size()); !why.empty()) {
    return absl::InvalidArgumentError(why);
  }
  return absl::OkStatus();
}

absl::Status ValidateBatchSize(size_t n, const char* what) {
  if (n == 0 || n > kBatchItemsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch holds 1..", kBatchItemsMax, " ", what, ", not ", n));
  }
  return absl::OkStatus();
}

Status FromAbsl(const absl::Status& s) {
  return Status(static_cast<StatusCode>(s.code()), std::string(s.message()));
}

Status Client::Open(const ClientOptions& options, std::unique_ptr<Client>* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "Client::Open: null out");
  if (absl::Status s = ValidateOptions(options); !s.ok()) return FromAbsl(s);
  absl::StatusOr<std::string> token = MasterToken(options);
  if (!token.ok()) return FromAbsl(token.status());
  auto impl = std::make_unique<ClientImpl>(options, *std::move(token));
  if (absl::Status s = impl->Connect(); !s.ok()) return FromAbsl(s);
  *out = std::move(impl);
  return Status::Ok();
}

ClientImpl::ClientImpl(const ClientOptions& options, std::string token)
    : options_(options),
      token_(std::move(token)),
      tcp_(TcpEngineOptions(options)),
      shm_(options.secret, options.shm_store_uid, options.warm_shm_bytes),
      gpu_(2 * static_cast<size_t>(options.transfer_threads) + 2,
           internal::CudaForTesting() != nullptr ? internal::CudaForTesting()
                                                 : CudaRuntime::Default()),
      // Cached reads ask the store over TCP: without it, no cache.
      cache_(options.location_cache_entries == 0 || !options.allow_tcp
                 ? nullptr
                 : std::make_unique<LocationCache>(options.location_cache_entries)),
      call_streams_(options.master_call_streams, token_),
      transfer_pool_(std::make_unique<ThreadPool>(
          options.transfer_threads, kTransferQueuePerThread * options.transfer_threads)),
      async_pool_(std::make_unique<ThreadPool>(options.async_threads, options.async_queue_max)) {
  releaser_ = std::thread([this] { ReleaseLoop(); });
}

ClientImpl::~ClientImpl() {
  Close();
  {
    MutexLock lock(&release_mu_);
    release_stop_ = true;
  }
  release_cv_.SignalAll();
  releaser_.join();
  // Async calls first: they use the transfer threads.
  async_pool_->Shutdown();
  transfer_pool_->Shutdown();
}

absl::Status ClientImpl::Connect() {
  TlsFiles tls{options_.tls_cert, options_.tls_key, options_.tls_ca};
  if (absl::StartsWith(options_.masters[0], "etcd://")) {
    coord::EtcdOptions etcd;
    etcd.tls_ca_file = options_.etcd_ca;
    etcd.tls_cert_file = options_.etcd_cert;
    etcd.tls_key_file = options_.etcd_key;
    etcd.user_file = options_.etcd_user_file;
    absl::StatusOr<std::unique_ptr<coord::MasterLocator>> loc =
        coord::MasterLocator::Create(options_.masters[0], etcd);
    if (!loc.ok()) {
      return absl::Status(loc.status().code(),
                          absl::StrCat("ClientOptions.masters ", options_.masters[0], ": ",
                                       loc.status().message()));
    }
    locator_ = *std::move(loc);
  }
  for (size_t i = 0; locator_ == nullptr && i < options_.masters.size(); ++i) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = MakeChannel(options_.masters[i], tls);
    if (!ch.ok()) return ch.status();
    masters_.push_back(v1::MasterService::NewStub(*ch));
  }
  if (options_.rdma_device.empty()) return absl::OkStatus();
#if SHELF_WITH_RDMA
  std::shared_ptr<transport::rdma::VerbsApi> verbs;
  if (void* fake = internal::RdmaVerbsForTesting(); fake != nullptr) {
    verbs = std::shared_ptr<transport::rdma::VerbsApi>(
        static_cast<transport::rdma::VerbsApi*>(fake), [](auto*) {});
  } else {
    verbs = std::make_shared<transport::rdma::IbVerbs>();
  }
  rdma_verbs_ = verbs;
  transport::rdma::RdmaTransport::Options ro;
  ro.secret = options_.secret;
  ro.device.device_name = options_.rdma_device;
  ro.device.port_num = static_cast<uint8_t>(options_.rdma_port);
  ro.device.gid_index = static_cast<int>(options_.rdma_gid_index);
  ro.device.traffic_class = static_cast<int>(options_.rdma_traffic_class);
  ro.device.service_level = static_cast<int>(options_.rdma_service_level);
  ro.device.pkey_index = static_cast<int>(options_.rdma_pkey_index);
  ro.store_pull_writes = options_.rdma_store_pull_puts;
  ro.connections_max = std::max<uint32_t>(options_.rdma_connections_max, 1);
  ro.gpu_regions_max = options_.rdma_gpu_registrations_max;
  absl::StatusOr<std::unique_ptr<transport::rdma::RdmaTransport>> rdma =
      transport::rdma::RdmaTransport::Open(verbs.get(), ro);
  if (!rdma.ok()) {
    return absl::Status(rdma.status().code(),
                        absl::StrCat("ClientOptions.rdma_device ", options_.rdma_device, ": ",
                                     rdma.status().message()));
  }
  rdma_ = *std::move(rdma);
  return absl::OkStatus();
#else
  return absl::UnimplementedError(
      "ClientOptions.rdma_device is set but this libshelf was built without RDMA (libibverbs)");
#endif
}

absl::Status ClientImpl::CheckOpen() const {
  if (closed_.load())
    return absl::FailedPreconditionError("the client is closed (Close was called)");
  return absl::OkStatus();
}

absl::Status ClientImpl::Begin(const Deadline& deadline, uint64_t* deadline_ms) const {
  if (absl::Status s = CheckOpen(); !s.ok()) return s;
  switch (deadline.kind()) {
    case Deadline::Kind::kClientDefault:
      *deadline_ms = MonoMs() + std::min(options_.timeout_ms, kTimeoutMsMax);
      break;
    case Deadline::Kind::kTimeout:
      *deadline_ms = MonoMs() + std::min(deadline.timeout_ms(), kTimeoutMsMax);
      break;
    case Deadline::Kind::kAt:
      if (deadline.at() <= Deadline::Clock::now()) {
        return absl::DeadlineExceededError(
            "the call's deadline had already passed when the call started");
      }
      *deadline_ms = ToMonoMsCeil(deadline.at());
      break;
  }
  return absl::OkStatus();
}

Deadline ClientImpl::PutDeadline(const PutOptions& options) {
  if (options.deadline.kind() != Deadline::Kind::kClientDefault) return options.deadline;
  return Deadline(options.timeout_ms);
}

Deadline ClientImpl::Absolute(const Deadline& deadline) const {
  switch (deadline.kind()) {
    case Deadline::Kind::kClientDefault:
      return Deadline::After(
          std::chrono::milliseconds(std::min(options_.timeout_ms, kTimeoutMsMax)));
    case Deadline::Kind::kTimeout:
      return Deadline::After(
          std::chrono::milliseconds(std::min(deadline.timeout_ms(), kTimeoutMsMax)));
    case Deadline::Kind::kAt:
      break;
  }
  return deadline;
}

absl::Status ClientImpl::LeaderStub(std::string* address,
                                    std::shared_ptr<v1::MasterService::Stub>* stub) {
  *address = locator_->Current();
  if (address->empty()) {
    // Worded as a leader change, so CallMaster waits for the election.
    return absl::UnavailableError(
        absl::StrCat("NOT_LEADER: etcd names no leading master yet (", options_.masters[0], ")"));
  }
  MutexLock lock(&leader_stubs_mu_);
  std::shared_ptr<v1::MasterService::Stub>& cached = leader_stubs_[*address];
  if (cached == nullptr) {
    TlsFiles tls{options_.tls_cert, options_.tls_key, options_.tls_ca};
    absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = MakeChannel(*address, tls);
    if (!ch.ok()) {
      leader_stubs_.erase(*address);
      return ch.status();
    }
    cached = v1::MasterService::NewStub(*ch);
  }
  *stub = cached;
  return absl::OkStatus();
}

namespace {

// The calls made on call streams (CallStreams), and where each goes in a
// StreamedCallRequest and comes back in its answer. Others are unary.
template <typename Req>
struct Streamed {
  static constexpr bool kStreamed = false;
};
#define SHELF_STREAMED_CALL(Req, Resp, field, Case)                                 \
  template <>                                                                       \
  struct Streamed<v1::Req> {                                                        \
    static constexpr bool kStreamed = true;                                         \
    static void Put(const v1::Req& req, v1::StreamedCallRequest* call) {            \
      *call->mutable_##field() = req;                                               \
    }                                                                               \
    static bool Take(v1::StreamedCallResponse* answer, v1::Resp* resp) {            \
      if (answer->result_case() != v1::StreamedCallResponse::k##Case) return false; \
      resp->Swap(answer->mutable_##field());                                        \
      return true;                                                                  \
    }                                                                               \
  };
SHELF_STREAMED_CALL(PutStartRequest, PutStartResponse, put_start, PutStart)
SHELF_STREAMED_CALL(BatchPutStartRequest, BatchPutStartResponse, batch_put_start, BatchPutStart)
SHELF_STREAMED_CALL(PutCommitRequest, PutCommitResponse, put_commit, PutCommit)
SHELF_STREAMED_CALL(LookupRequest, LookupResponse, lookup, Lookup)
#undef SHELF_STREAMED_CALL

}  // namespace

template <typename Req, typename Resp>
absl::Status ClientImpl::CallMasterOnce(
    grpc::Status (v1::MasterService::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
    const std::string& address, v1::MasterService::Stub* stub, const Req& req, Resp* resp,
    uint64_t deadline_ms) {
  if constexpr (Streamed<Req>::kStreamed) {
    v1::StreamedCallRequest call;
    Streamed<Req>::Put(req, &call);
    v1::StreamedCallResponse answer;
    bool sent = false;
    absl::Status s = call_streams_.Call(address, stub, &call, &answer, deadline_ms, &sent);
    if (sent) {
      if (s.ok() && !Streamed<Req>::Take(&answer, resp)) {
        return absl::InternalError("the master's streamed answer holds no response");
      }
      return s;
    }
  }
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token_, deadline_ms - std::min(deadline_ms, MonoMs()));
  return FromGrpc((stub->*method)(&ctx, req, resp));
}

template <typename Req, typename Resp>
absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
    const Req& req, Resp* resp, uint64_t deadline_ms) {
  absl::Status last = absl::DeadlineExceededError("deadline passed before the master call");
  // Each master once; then, while some master answered that a leader change
  // is under way, again after a pause, until the deadline. When none
  // answers at all, the call fails at once: a cache that is down must not
  // stall the engine for a whole deadline.
  for (uint64_t pause_ms = kLeaderWaitFirstMs;;
       pause_ms = std::min(2 * pause_ms, kLeaderWaitMaxMs)) {
    bool transition = false;
    // With etcd: the named leader, then whichever master the locator moves
    // on to (a NOT_LEADER hint, or a fresh read of the leader key).
    size_t attempts = locator_ != nullptr ? 2 : masters_.size();
    for (size_t attempt = 0; attempt < attempts; ++attempt) {
      uint64_t now = MonoMs();
      if (now >= deadline_ms) return last;
      std::string address;
      std::shared_ptr<v1::MasterService::Stub> leader;
      v1::MasterService::Stub* stub = nullptr;
      size_t idx = 0;
      if (locator_ != nullptr) {
        absl::Status s = LeaderStub(&address, &leader);
        if (!s.ok()) {
          last = s;
          transition = transition || MasterInTransition(s);
          continue;
        }
        stub = leader.get();
      } else {
        idx = current_master_.load() % masters_.size();
        stub = masters_[idx].get();
      }
      last = CallMasterOnce(method, locator_ != nullptr ? address : options_.masters[idx], stub,
                            req, resp, deadline_ms);
      if (last.code() != absl::StatusCode::kUnavailable) return last;
      transition = transition || MasterInTransition(last);
      if (locator_ != nullptr) {
        locator_->Failed(address, last);
      } else {
        current_master_.store(idx + 1);  // try the next master
      }
    }
    if (!transition || MonoMs() + pause_ms >= deadline_ms) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
}

// The master calls the other files make.
template absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*)(grpc::ClientContext*, const v1::PutStartRequest&,
                                              v1::PutStartResponse*),
    const v1::PutStartRequest&, v1::PutStartResponse*, uint64_t);
template absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*)(grpc::ClientContext*, const v1::BatchPutStartRequest&,
                                              v1::BatchPutStartResponse*),
    const v1::BatchPutStartRequest&, v1::BatchPutStartResponse*, uint64_t);
template absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*)(grpc::ClientContext*, const v1::PutCommitRequest&,
                                              v1::PutCommitResponse*),
    const v1::PutCommitRequest&, v1::PutCommitResponse*, uint64_t);
template absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*)(grpc::ClientContext*, const v1::PutAbortRequest&,
                                              v1::PutAbortResponse*),
    const v1::PutAbortRequest&, v1::PutAbortResponse*, uint64_t);
template absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*)(grpc::ClientContext*, const v1::LookupRequest&,
                                              v1::LookupResponse*),
    const v1::LookupRequest&, v1::LookupResponse*, uint64_t);
template absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*)(grpc::ClientContext*, const v1::ReleaseLeasesRequest&,
                                              v1::ReleaseLeasesResponse*),
    const v1::ReleaseLeasesRequest&, v1::ReleaseLeasesResponse*, uint64_t);
template absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*)(grpc::ClientContext*,
                                              const v1::ReportDataLossRequest&,
                                              v1::ReportDataLossResponse*),
    const v1::ReportDataLossRequest&, v1::ReportDataLossResponse*, uint64_t);

void ClientImpl::Parallel(size_t n, const std::function<void(size_t)>& fn) {
  ParallelFor(transfer_pool_.get(), n, transfer_pool_->threads(), fn);
}

Status ClientImpl::Exists(const std::vector<std::string>& keys, std::vector<bool>* present,
                          Deadline deadline) {
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (present == nullptr) return Status(StatusCode::kInvalidArgument, "Exists: null present");
  if (absl::Status s = ValidateBatchSize(keys.size(), "keys"); !s.ok()) return FromAbsl(s);
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
  }
  v1::LookupRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_no_lease(true);
  req.set_store_table(true);  // only `found` is read: each store once, not per replica
  v1::LookupResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::Lookup, req, &resp, deadline_ms);
  if (!s.ok()) return FromAbsl(s);
  if (resp.objects_size() != static_cast<int>(keys.size())) {
    return Status(StatusCode::kInternal, "malformed lookup response");
  }
  present->assign(keys.size(), false);
  for (int i = 0; i < resp.objects_size(); ++i) (*present)[i] = resp.objects(i).found();
  return Status::Ok();
}

Status ClientImpl::Remove(const std::string& key, Deadline deadline, bool force) {
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateKey(key); !s.ok()) return FromAbsl(s);
  v1::RemoveRequest req;
  req.add_keys(key);
  req.set_force(force);
  v1::RemoveResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::Remove, req, &resp, deadline_ms);
  // This client's own removes leave its cache at once (a replace, remove
  // then put, must not read the old block back from here). After the
  // remove, not before: a lookup racing with it may not cache the old
  // location (LocationCache::Stamp).
  if (cache_ != nullptr) cache_->Erase(key);
  DropKeptLease(key);
  if (!s.ok()) return FromAbsl(s);
  if (resp.statuses_size() != 1) return Status(StatusCode::kInternal, "malformed response");
  return Status(static_cast<StatusCode>(resp.statuses(0).code()), resp.statuses(0).message());
}

Status ClientImpl::BatchRemove(const std::vector<std::string>& keys, std::vector<Status>* statuses,
                               Deadline deadline, bool force) {
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (statuses == nullptr) {
    return Status(StatusCode::kInvalidArgument, "BatchRemove: null statuses");
  }
  statuses->clear();
  if (absl::Status s = ValidateBatchSize(keys.size(), "keys"); !s.ok()) return FromAbsl(s);
  v1::RemoveRequest req;
  req.set_force(force);
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
    req.add_keys(k);
  }
  v1::RemoveResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::Remove, req, &resp, deadline_ms);
  if (cache_ != nullptr) {
    for (const std::string& k : keys) cache_->Erase(k);
  }
  for (const std::string& k : keys) DropKeptLease(k);
  if (!s.ok()) return FromAbsl(s);
  if (resp.statuses_size() != static_cast<int>(keys.size())) {
    return Status(StatusCode::kInternal, "malformed remove response");
  }
  statuses->reserve(keys.size());
  for (const v1::RpcStatus& st : resp.statuses()) {
    statuses->emplace_back(static_cast<StatusCode>(st.code()), st.message());
  }
  return Status::Ok();
}

Status ClientImpl::ListKeys(const std::string& cursor, const std::string& pattern, size_t count,
                            std::vector<std::string>* keys, std::string* next_cursor, bool regex,
                            Deadline deadline) {
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (keys == nullptr || next_cursor == nullptr) {
    return Status(StatusCode::kInvalidArgument, "ListKeys: null output");
  }
  if (count == 0 || count > kListKeysMax) {
    return Status(StatusCode::kInvalidArgument,
                  "ListKeys: count must be 1.." + std::to_string(kListKeysMax));
  }
  v1::ListKeysRequest req;
  req.set_cursor(cursor);
  req.set_pattern(pattern);
  req.set_regex(regex);
  req.set_count(static_cast<uint32_t>(count));
  v1::ListKeysResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::ListKeys, req, &resp, deadline_ms);
  if (!s.ok()) return FromAbsl(s);
  keys->assign(resp.keys().begin(), resp.keys().end());
  *next_cursor = resp.next_cursor();
  return Status::Ok();
}

Status ClientImpl::RemoveMatching(const std::string& pattern, uint64_t* removed, bool regex,
                                  bool force, Deadline deadline) {
  if (removed != nullptr) *removed = 0;
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  // Which keys match is the master's to say: forget every location, once
  // the keys are gone (before, a racing lookup could cache one again).
  struct ClearCache {
    ClientImpl* client;
    ~ClearCache() {
      if (client->cache_ != nullptr) client->cache_->Clear();
      client->DropKeptLeases();
    }
  } clear_cache{this};
  v1::RemoveMatchingRequest req;
  req.set_pattern(pattern);
  req.set_regex(regex);
  req.set_force(force);
  // Each call removes a bounded number of keys and makes progress, so the
  // loop ends (or the deadline ends it).
  while (true) {
    v1::RemoveMatchingResponse resp;
    absl::Status s = CallMaster(&v1::MasterService::Stub::RemoveMatching, req, &resp, deadline_ms);
    if (!s.ok()) return FromAbsl(s);
    if (removed != nullptr) *removed += resp.removed();
    if (!resp.more()) return Status::Ok();
    if (resp.removed() == 0) return Status(StatusCode::kInternal, "RemoveMatching: no progress");
  }
}

Status ClientImpl::Locate(const std::vector<std::string>& keys, std::vector<NodeRun>* nodes,
                          size_t* cluster_blocks, Deadline deadline) {
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (nodes == nullptr) return Status(StatusCode::kInvalidArgument, "Locate: null nodes");
  if (keys.empty()) return Status(StatusCode::kInvalidArgument, "Locate: no keys");
  if (absl::Status s = ValidateBatchSize(keys.size(), "keys"); !s.ok()) return FromAbsl(s);
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
  }
  v1::LocateRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  v1::LocateResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::Locate, req, &resp, deadline_ms);
  if (!s.ok()) return FromAbsl(s);
  nodes->clear();
  for (const v1::NodeRun& n : resp.nodes()) {
    if (n.blocks() > keys.size() || n.dram_blocks() > n.blocks() ||
        static_cast<size_t>(n.tiers_size()) != n.blocks()) {
      return Status(StatusCode::kInternal, "malformed Locate response");
    }
    NodeRun out;
    out.node_id = n.store().node_id();
    out.data_address = n.store().data_address();
    out.host_id = n.store().host_id();
    out.blocks = n.blocks();
    out.dram_blocks = n.dram_blocks();
    for (int t : n.tiers()) out.tiers.push_back(t == v1::TIER_DRAM ? Tier::kDram : Tier::kSsd);
    nodes->push_back(std::move(out));
  }
  if (cluster_blocks != nullptr) *cluster_blocks = resp.cluster_blocks();
  return Status::Ok();
}

Status ClientImpl::MatchPrefix(const std::vector<std::string>& keys, size_t* matched,
                               Deadline deadline) {
  uint64_t start_us = MonoUs();
  auto run = [&]() -> Status {
    uint64_t deadline_ms = 0;
    if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
    if (matched == nullptr)
      return Status(StatusCode::kInvalidArgument, "MatchPrefix: null matched");
    if (absl::Status s = ValidateBatchSize(keys.size(), "keys"); !s.ok()) return FromAbsl(s);
    for (const std::string& k : keys) {
      if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
    }
    v1::MatchPrefixRequest req;
    for (const std::string& k : keys) req.add_keys(k);
    req.set_client_host_id(HostId());
    // Only the count is returned: the get that follows takes its own
    // lease, and a lease nobody reads under only keeps blocks from eviction.
    req.set_no_lease(true);
    req.set_count_only(true);  // only `matched` is read: no objects, no grants
    v1::MatchPrefixResponse resp;
    absl::Status s = CallMaster(&v1::MasterService::Stub::MatchPrefix, req, &resp, deadline_ms);
    if (!s.ok()) return FromAbsl(s);
    if (resp.matched() > keys.size()) {
      return Status(StatusCode::kInternal, "malformed prefix-match response");
    }
    *matched = resp.matched();
    return Status::Ok();
  };
  Status s = run();
  RecordOp(Op::kMatchPrefix, s, start_us);
  if (s.ok()) {
    metrics_.prefix_lookups.Increment(keys.size());
    metrics_.prefix_hits.Increment(*matched);
  }
  return s;
}

ClientStats ClientImpl::stats() const {
  ClientStats s;
  s.bytes_stored = stats_.bytes_stored.load();
  s.bytes_stored_shm = stats_.bytes_stored_shm.load();
  s.bytes_stored_tcp = stats_.bytes_stored_tcp.load();
  s.bytes_loaded = stats_.bytes_loaded.load();
  s.bytes_loaded_shm = stats_.bytes_loaded_shm.load();
  s.bytes_loaded_tcp = stats_.bytes_loaded_tcp.load();
  s.bytes_loaded_rdma = stats_.bytes_loaded_rdma.load();
  s.bytes_loaded_ssd = stats_.bytes_loaded_ssd.load();
  s.blocks_loaded_dram = stats_.blocks_loaded_dram.load();
  s.blocks_loaded_ssd = stats_.blocks_loaded_ssd.load();
  s.checksum_mismatches = stats_.checksum_mismatches.load();
  s.replica_failovers = stats_.replica_failovers.load();
  s.bytes_staged_gpu = stats_.bytes_staged_gpu.load();
  s.bytes_stored_rdma = stats_.bytes_stored_rdma.load();
  s.bytes_loaded_gpu_direct = stats_.bytes_loaded_gpu_direct.load();
  s.bytes_gpu_direct_checked = stats_.bytes_gpu_direct_checked.load();
  s.gpu_rdma_registration_failures = stats_.gpu_rdma_registration_failures.load();
#if SHELF_WITH_RDMA
  if (rdma_ != nullptr) {
    s.rdma_registered_buffers =
        static_cast<const transport::rdma::RdmaTransport*>(rdma_.get())->stats().live_regions;
  }
#endif
  s.shm_refusals = shm_.refusals();
  s.bytes_staged_shm = shm_.staged_bytes();
  s.bytes_warmed_shm = shm_.warmed_bytes();
  s.location_cache_hits = stats_.cache_hits.load();
  s.location_cache_misses = stats_.cache_misses.load();
  s.location_cache_fallbacks = stats_.cache_fallbacks.load();
  s.location_cache_entries = cache_ == nullptr ? 0 : cache_->size();
  s.location_cache_board_reads = stats_.cache_board_reads.load();
  s.views_on_kept_leases = stats_.views_on_kept_leases.load();
  s.read_lookups = stats_.read_lookups.load();
  s.read_lookups_joined = stats_.read_lookups_joined.load();
  s.put_calls = stats_.put_calls.load();
  s.put_calls_joined = stats_.put_calls_joined.load();
  return s;
}

ClientImpl::ClientMetrics::ClientMetrics(prom::Exposition& e)
    : ops(prom::AddCounter(e.registry(), "shelf_client_ops_total",
                           "SDK operations by call and result")),
      op_seconds(
          prom::AddHistogram(e.registry(), "shelf_client_op_seconds", "SDK operation latency")),
      bytes(prom::AddCounter(e.registry(), "shelf_client_bytes_total",
                             "Block bytes moved by direction and transport")),
      bytes_load_shm(prom::Child(bytes, {{"direction", "load"}, {"transport", "shm"}})),
      bytes_load_tcp(prom::Child(bytes, {{"direction", "load"}, {"transport", "tcp"}})),
      bytes_load_rdma(prom::Child(bytes, {{"direction", "load"}, {"transport", "rdma"}})),
      bytes_store(prom::Child(bytes, {{"direction", "store"}, {"transport", "any"}})),
      bytes_load_gpu_direct(
          prom::Child(bytes, {{"direction", "load"}, {"transport", "gpudirect"}})),
      gpu_direct_checked(prom::AddUnlabelledCounter(
          e.registry(), "shelf_client_gpu_direct_checked_bytes_total",
          "Bytes read by GPUDirect then copied back to host memory for the checksum")),
      gpu_rdma_registration_failures(prom::AddUnlabelledCounter(
          e.registry(), "shelf_client_gpu_rdma_registration_failures_total",
          "GPU buffers the RDMA device could not register (staged through pinned memory)")),
      rdma_registered_buffers(
          prom::Child(prom::AddGauge(e.registry(), "shelf_client_rdma_registered_buffers",
                                     "Registered buffers the RDMA device holds (host and GPU)"),
                      {})),
      prefix_hits(prom::AddUnlabelledCounter(e.registry(), "shelf_client_prefix_hits_total",
                                             "Blocks found by prefix matching")),
      prefix_lookups(prom::AddUnlabelledCounter(e.registry(), "shelf_client_prefix_lookups_total",
                                                "Blocks asked for by prefix matching")),
      checksum_mismatches(
          prom::AddUnlabelledCounter(e.registry(), "shelf_client_checksum_mismatches_total",
                                     "Replicas whose bytes failed the checksum (never returned)")),
      failovers(prom::AddUnlabelledCounter(e.registry(), "shelf_client_replica_failovers_total",
                                           "Reads that moved on to another replica")),
      shm_refusals(prom::AddUnlabelledCounter(
          e.registry(), "shelf_client_shm_refusals_total",
          "Same-host stores whose shared memory was refused (peer uid, unsealed segment)")),
      bytes_staged_shm(prom::AddUnlabelledCounter(
          e.registry(), "shelf_client_shm_staged_bytes_total",
          "Bytes of same-host puts copied into staging memory first: not in shared host memory")),
      bytes_warmed_shm(prom::AddUnlabelledCounter(
          e.registry(), "shelf_client_shm_warmed_bytes_total",
          "Bytes of same-host stores' segments read through in the background after mapping")),
      cache(prom::AddCounter(e.registry(), "shelf_client_location_cache_total",
                             "Keys read by what the location cache did: hit (read without "
                             "the master), miss, fallback (a cached read that went back to "
                             "the master)")),
      cache_hits(prom::Child(cache, {{"result", "hit"}})),
      cache_misses(prom::Child(cache, {{"result", "miss"}})),
      cache_fallbacks(prom::Child(cache, {{"result", "fallback"}})),
      cache_entries(prom::Child(prom::AddGauge(e.registry(), "shelf_client_location_cache_entries",
                                               "Keys whose location the client holds"),
                                {})) {}

void ClientImpl::RecordOp(Op op, const Status& s, uint64_t start_us) const {
  // The children are resolved on the first call of each op and result, then
  // cached: no label lookup (and no family lock) per operation.
  size_t o = static_cast<size_t>(op);
  const char* name = op == Op::kGet ? "get" : op == Op::kPut ? "put" : "match_prefix";
  int code = static_cast<int>(s.code());
  size_t c = code >= 0 && static_cast<size_t>(code) < kResults ? code : 2;  // 2: kUnknown
  const char* result = c == 0 ? "ok"
                       : c == static_cast<size_t>(StatusCode::kNotFound)
                           ? "miss"
                           : StatusCodeName(static_cast<StatusCode>(c));
  op_children_[o].ops[c].Get(metrics_.ops, {{"op", name}, {"result", result}}).Increment();
  op_children_[o]
      .seconds.Get(metrics_.op_seconds, {{"op", name}}, prom::LatencyBuckets())
      .Observe((MonoUs() - start_us) / 1e6);
}

std::string ClientImpl::MetricsText() const {
  // The byte counters live in stats_; bring the exported counters up to them.
  auto sync = [](prom::Counter& c, uint64_t v) {
    double now = static_cast<double>(v);
    if (now > c.Value()) c.Increment(now - c.Value());
  };
  ClientStats st = stats();
  sync(metrics_.bytes_load_shm, st.bytes_loaded_shm);
  sync(metrics_.bytes_load_tcp, st.bytes_loaded_tcp);
  sync(metrics_.bytes_load_rdma, st.bytes_loaded_rdma);
  sync(metrics_.bytes_store, st.bytes_stored);
  sync(metrics_.bytes_load_gpu_direct, st.bytes_loaded_gpu_direct);
  sync(metrics_.gpu_direct_checked, st.bytes_gpu_direct_checked);
  sync(metrics_.gpu_rdma_registration_failures, st.gpu_rdma_registration_failures);
  metrics_.rdma_registered_buffers.Set(static_cast<double>(st.rdma_registered_buffers));
  sync(metrics_.checksum_mismatches, st.checksum_mismatches);
  sync(metrics_.failovers, st.replica_failovers);
  sync(metrics_.shm_refusals, st.shm_refusals);
  sync(metrics_.bytes_staged_shm, st.bytes_staged_shm);
  sync(metrics_.bytes_warmed_shm, st.bytes_warmed_shm);
  return exposition_->Render();
}

void ClientImpl::Close() { closed_.store(true); }

}  // namespace shelf
