// EtcdClient: endpoint handling, the retry loop and the unary KV and lease
// calls. The keepalive thread is in etcd_keepalive.cc, watches in
// etcd_watch.cc.
#include "coord/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"
#include "coord/etcd_internal.h"

namespace shelf::coord {

namespace internal {

namespace {

// gRPC's default reconnect backoff grows to two minutes; an etcd member that
// restarts must be found again within a lease TTL.
constexpr int kReconnectBackoffInitialMs = 100;
constexpr int kReconnectBackoffMaxMs = 1000;
// gRPC reads GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as the least time a connect
// attempt gets (default 20 s): small values abort handshakes on a busy host.
// Calls carry their own deadlines, so this only bounds a hung connect.
constexpr int kConnectTimeoutMinMs = 2000;
// HTTP/2 pings find a dead peer under a long-lived watch stream. etcd
// rejects pings more often than every 5 s (--grpc-keepalive-min-time) and
// pings on a connection with no stream, so stay above that and ping only
// under a call.
constexpr int kKeepaliveTimeMs = 10000;
constexpr int kKeepaliveTimeoutMs = 5000;
static_assert(kKeepaliveTimeMs > 5000, "etcd answers faster pings with GOAWAY");

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const EtcdSecurity& security) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectBackoffInitialMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMinMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectBackoffMaxMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (security.tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = security.ca_pem;  // empty: the system's roots
    ssl.pem_cert_chain = security.cert_pem;
    ssl.pem_private_key = security.key_pem;
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(address, creds, args);
}

}  // namespace

EtcdChannels::EtcdChannels(std::vector<std::string> addresses, const EtcdOptions& options,
                           EtcdSecurity security)
    : addresses_(std::move(addresses)), options_(options), security_(std::move(security)) {
  SHELF_CHECK(!addresses_.empty());
  SHELF_CHECK(options_.attempts_max >= 1);
  for (const std::string& address : addresses_) {
    auto ep = std::make_unique<EtcdEndpoint>();
    ep->address = address;
    ep->channel = MakeChannel(address, security_);
    ep->auth = etcdserverpb::Auth::NewStub(ep->channel);
    ep->kv = etcdserverpb::KV::NewStub(ep->channel);
    ep->lease = etcdserverpb::Lease::NewStub(ep->channel);
    ep->watch = etcdserverpb::Watch::NewStub(ep->channel);
    endpoints_.push_back(std::move(ep));
  }
  connectivity_thread_ = std::thread([this] { WatchConnectivity(); });
}

EtcdChannels::~EtcdChannels() {
  {
    // No watch may be armed on a queue that is shut down.
    MutexLock lock(&connectivity_mu_);
    stopping_ = true;
    connectivity_cq_.Shutdown();
  }
  // Armed watches end by their deadline; then Next() returns false.
  connectivity_thread_.join();
}

void EtcdChannels::WatchConnectivity() {
  auto arm = [this](size_t i) {
    grpc::Channel* channel = endpoints_[i]->channel.get();
    grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
    channel->NotifyOnStateChange(
        state, std::chrono::system_clock::now() + std::chrono::milliseconds(kConnectivityPollMs),
        &connectivity_cq_, reinterpret_cast<void*>(i));
  };
  {
    MutexLock lock(&connectivity_mu_);
    for (size_t i = 0; i < endpoints_.size() && !stopping_; ++i) arm(i);
  }
  void* tag = nullptr;
  bool changed = false;
  while (connectivity_cq_.Next(&tag, &changed)) {
    MutexLock lock(&connectivity_mu_);
    if (!stopping_) arm(reinterpret_cast<size_t>(tag));
  }
}

absl::Status EtcdChannels::WithRetries(
    absl::string_view what,
    const std::function<absl::Status(const EtcdEndpoint&, grpc::ClientContext*)>& attempt) {
  absl::Status last;
  bool reauthenticated = false;
  for (int i = 0; i < options_.attempts_max; ++i) {
    size_t index = current();
    const EtcdEndpoint& ep = endpoint(index);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(options_.call_timeout_ms));
    std::string token;
    last = Authorize(index, &ctx, &token);
    if (last.ok()) last = attempt(ep, &ctx);
    if (last.ok()) return last;
    if (TokenRejected(last) && !token.empty() && !reauthenticated) {
      // Expired (or made stale by a change to etcd's users): log in again
      // and retry, on the same endpoint and without backoff.
      InvalidateToken(token);
      SHELF_LOG(DEBUG) << "etcd token rejected, authenticating again" << Kv("call", what)
                       << Kv("error", last.ToString());
      reauthenticated = true;
      --i;  // not an attempt of its own
      continue;
    }
    if (!IsRetryable(last)) return last;
    SHELF_LOG(DEBUG) << "etcd call failed, retrying" << Kv("call", what)
                     << Kv("endpoint", ep.address) << Kv("attempt", i + 1)
                     << Kv("error", last.ToString());
    Failed(index);
    if (i + 1 < options_.attempts_max) SleepMs(BackoffMs(i));
  }
  return last;
}

void EtcdChannels::Failed(size_t index) {
  // Only the first thread to see `index` fail moves on, so one failure does
  // not skip a healthy endpoint.
  current_.compare_exchange_strong(index, (index + 1) % endpoints_.size(),
                                   std::memory_order_relaxed);
}

uint64_t EtcdChannels::BackoffMs(int retry) const {
  uint64_t full = options_.backoff_initial_ms;
  for (int i = 0; i < retry && full < options_.backoff_max_ms; ++i) full *= 2;
  full = std::min(full, options_.backoff_max_ms);
  if (full < 2) return full;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<uint64_t> jitter(full / 2, full);
  return jitter(rng);
}

absl::Status FromGrpc(const grpc::Status& status, const EtcdEndpoint& endpoint) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("etcd ", endpoint.address, ": ", status.error_message()));
}

bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

KeyValue FromProto(const mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

void SleepMs(uint64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace internal

using internal::EtcdEndpoint;
using internal::FromGrpc;
using internal::FromProto;

absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view endpoints,
                                                            bool* tls) {
  std::vector<std::string> out;
  int https = 0, plain = 0;
  for (absl::string_view entry : absl::StrSplit(endpoints, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    if (absl::ConsumePrefix(&entry, "https://")) {
      ++https;
    } else {
      ++plain;
      absl::ConsumePrefix(&entry, "http://");
    }
    while (absl::ConsumeSuffix(&entry, "/")) {
    }
    if (absl::StrContains(entry, "://") || absl::StrContains(entry, "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", entry, "': expected [http://]HOST:PORT"));
    }
    auto hp = ParseHostPort(entry);
    if (!hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("etcd endpoint: ", hp.status().message()));
    }
    out.emplace_back(entry);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no etcd endpoint in '", endpoints, "'"));
  }
  if (https > 0 && plain > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd endpoints '", endpoints, "': http and https mixed"));
  }
  if (tls != nullptr) *tls = https > 0;
  return out;
}

std::string PrefixRangeEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  // Every key: etcd reads range_end "\0" as "to the end".
  return std::string(1, '\0');
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(absl::string_view endpoints,
                                                                const EtcdOptions& options) {
  if (options.attempts_max < 1 || options.call_timeout_ms == 0) {
    return absl::InvalidArgumentError("etcd options: attempts_max and call_timeout_ms must be > 0");
  }
  bool https = false;
  auto addresses = ParseEtcdEndpoints(endpoints, &https);
  if (!addresses.ok()) return addresses.status();
  auto security = internal::LoadSecurity(options, https);
  if (!security.ok()) return security.status();
  auto channels = std::make_shared<internal::EtcdChannels>(*std::move(addresses), options,
                                                           *std::move(security));
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(channels)));
}

EtcdClient::EtcdClient(std::shared_ptr<internal::EtcdChannels> channels)
    : channels_(std::move(channels)) {}

EtcdClient::~EtcdClient() = default;

const std::vector<std::string>& EtcdClient::endpoints() const { return channels_->addresses(); }
const EtcdOptions& EtcdClient::options() const { return channels_->options(); }

absl::StatusOr<RangeResult> EtcdClient::Range(absl::string_view key, absl::string_view range_end) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(key));
  request.set_range_end(std::string(range_end));
  etcdserverpb::RangeResponse response;
  absl::Status s =
      channels_->WithRetries("Range", [&](const EtcdEndpoint& ep, grpc::ClientContext* ctx) {
        response.Clear();
        return FromGrpc(ep.kv->Range(ctx, request, &response), ep);
      });
  if (!s.ok()) return s;
  RangeResult out;
  out.revision = response.header().revision();
  out.kvs.reserve(response.kvs_size());
  for (const mvccpb::KeyValue& kv : response.kvs()) out.kvs.push_back(FromProto(kv));
  return out;
}

absl::StatusOr<KeyValue> EtcdClient::Get(absl::string_view key) {
  auto range = Range(key);
  if (!range.ok()) return range.status();
  if (range->kvs.empty()) return absl::NotFoundError(absl::StrCat("etcd key '", key, "' absent"));
  return std::move(range->kvs.front());
}

absl::StatusOr<RangeResult> EtcdClient::GetPrefix(absl::string_view prefix) {
  return Range(prefix, PrefixRangeEnd(prefix));
}

absl::StatusOr<int64_t> EtcdClient::Put(absl::string_view key, absl::string_view value,
                                        int64_t lease_id) {
  etcdserverpb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease_id);
  etcdserverpb::PutResponse response;
  absl::Status s =
      channels_->WithRetries("Put", [&](const EtcdEndpoint& ep, grpc::ClientContext* ctx) {
        response.Clear();
        return FromGrpc(ep.kv->Put(ctx, request, &response), ep);
      });
  if (!s.ok()) return s;
  return response.header().revision();
}

namespace {

absl::StatusOr<int64_t> DeleteRange(internal::EtcdChannels* channels, absl::string_view key,
                                    absl::string_view range_end) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(std::string(key));
  request.set_range_end(std::string(range_end));
  etcdserverpb::DeleteRangeResponse response;
  absl::Status s =
      channels->WithRetries("DeleteRange", [&](const EtcdEndpoint& ep, grpc::ClientContext* ctx) {
        response.Clear();
        return FromGrpc(ep.kv->DeleteRange(ctx, request, &response), ep);
      });
  if (!s.ok()) return s;
  return response.deleted();
}

absl::StatusOr<etcdserverpb::TxnResponse> Txn(internal::EtcdChannels* channels,
                                              const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse response;
  absl::Status s =
      channels->WithRetries("Txn", [&](const EtcdEndpoint& ep, grpc::ClientContext* ctx) {
        response.Clear();
        return FromGrpc(ep.kv->Txn(ctx, request, &response), ep);
      });
  if (!s.ok()) return s;
  return response;
}

}  // namespace

absl::StatusOr<int64_t> EtcdClient::Delete(absl::string_view key) {
  return DeleteRange(channels_.get(), key, "");
}

absl::StatusOr<int64_t> EtcdClient::DeletePrefix(absl::string_view prefix) {
  return DeleteRange(channels_.get(), prefix, PrefixRangeEnd(prefix));
}

absl::StatusOr<bool> EtcdClient::DeleteIfCreateRevision(absl::string_view key,
                                                        int64_t create_revision) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* cmp = request.add_compare();
  cmp->set_key(std::string(key));
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_create_revision(create_revision);
  request.add_success()->mutable_request_delete_range()->set_key(std::string(key));
  auto response = Txn(channels_.get(), request);
  if (!response.ok()) return response.status();
  return response->succeeded();
}

absl::StatusOr<bool> EtcdClient::DeleteIfModRevision(absl::string_view key, int64_t mod_revision) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* cmp = request.add_compare();
  cmp->set_key(std::string(key));
  cmp->set_target(etcdserverpb::Compare::MOD);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_mod_revision(mod_revision);
  request.add_success()->mutable_request_delete_range()->set_key(std::string(key));
  auto response = Txn(channels_.get(), request);
  if (!response.ok()) return response.status();
  return response->succeeded();
}

absl::StatusOr<CreateResult> EtcdClient::CreateIfAbsent(absl::string_view key,
                                                        absl::string_view value, int64_t lease_id) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* cmp = request.add_compare();
  cmp->set_key(std::string(key));
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_create_revision(0);  // absent
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(std::string(key));
  put->set_value(std::string(value));
  put->set_lease(lease_id);
  request.add_failure()->mutable_request_range()->set_key(std::string(key));

  auto response = Txn(channels_.get(), request);
  if (!response.ok()) return response.status();
  CreateResult out;
  out.revision = response->header().revision();
  if (response->succeeded()) {
    // The put is the transaction's only write, so the key was created at
    // the transaction's revision.
    out.created = true;
    out.kv.key = std::string(key);
    out.kv.value = std::string(value);
    out.kv.create_revision = out.revision;
    out.kv.mod_revision = out.revision;
    out.kv.version = 1;
    out.kv.lease = lease_id;
    return out;
  }
  if (response->responses_size() != 1 || !response->responses(0).has_response_range() ||
      response->responses(0).response_range().kvs_size() != 1) {
    // The comparison failed, so the key existed when the read ran.
    return absl::InternalError(
        absl::StrCat("etcd txn on '", key, "': unexpected response to the read"));
  }
  out.kv = FromProto(response->responses(0).response_range().kvs(0));
  // An earlier attempt of this call may have written the key before its
  // answer was lost; the lease tells.
  out.created = lease_id != 0 && out.kv.lease == lease_id && out.kv.value == value;
  return out;
}

absl::StatusOr<Lease> EtcdClient::LeaseGrant(int64_t ttl_s) {
  if (ttl_s < 1) return absl::InvalidArgumentError("lease TTL must be at least 1 s");
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_s);
  etcdserverpb::LeaseGrantResponse response;
  uint64_t sent_ms = 0;
  absl::Status s =
      channels_->WithRetries("LeaseGrant", [&](const EtcdEndpoint& ep, grpc::ClientContext* ctx) {
        response.Clear();
        sent_ms = MonoMs();
        return FromGrpc(ep.lease->LeaseGrant(ctx, request, &response), ep);
      });
  if (!s.ok()) return s;
  if (!response.error().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("etcd lease grant: ", response.error()));
  }
  Lease lease;
  lease.id = response.id();
  lease.ttl_s = response.ttl();
  lease.granted_mono_ms = sent_ms;
  return lease;
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  return channels_->WithRetries(
      "LeaseRevoke", [&](const EtcdEndpoint& ep, grpc::ClientContext* ctx) {
        return FromGrpc(ep.lease->LeaseRevoke(ctx, request, &response), ep);
      });
}

}  // namespace shelf::coord
