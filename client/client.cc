#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/rpc.h"

namespace shelf {
namespace {

constexpr size_t kKeyBytesMax = 256;
constexpr size_t kBatchMax = 1024;

absl::Status ValidateKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (key.size() > kKeyBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("key of ", key.size(), " bytes exceeds the limit of 256"));
  }
  return absl::OkStatus();
}

absl::Status FromRpcStatus(const v1::RpcStatus& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
}

}  // namespace

Status FromAbsl(const absl::Status& s) {
  return Status(static_cast<StatusCode>(s.code()), std::string(s.message()));
}

Status Client::Open(const ClientOptions& options, std::unique_ptr<Client>* out) {
  if (options.masters.empty()) {
    return Status(StatusCode::kInvalidArgument, "ClientOptions.masters is empty");
  }
  auto impl = std::make_unique<ClientImpl>(options);
  if (absl::Status s = impl->Connect(); !s.ok()) return FromAbsl(s);
  *out = std::move(impl);
  return Status::Ok();
}

ClientImpl::ClientImpl(const ClientOptions& options)
    : options_(options),
      token_(AuthToken(options.secret)),
      tcp_(TcpDataClient::Options{options.secret}),
      shm_(options.secret) {}

absl::Status ClientImpl::Connect() {
  TlsFiles tls;
  tls.ca = options_.tls_ca;
  for (const std::string& m : options_.masters) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = MakeChannel(m, tls);
    if (!ch.ok()) return ch.status();
    masters_.push_back(v1::MasterService::NewStub(*ch));
  }
  return absl::OkStatus();
}

uint64_t ClientImpl::DeadlineMs(uint64_t timeout_ms) const {
  return MonoMs() + (timeout_ms != 0 ? timeout_ms : options_.timeout_ms);
}

absl::Status ClientImpl::CheckOpen() const {
  if (closed_.load()) return absl::FailedPreconditionError("client is closed");
  return absl::OkStatus();
}

template <typename Req, typename Resp>
absl::Status ClientImpl::CallMaster(
    grpc::Status (v1::MasterService::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
    const Req& req, Resp* resp, uint64_t deadline_ms) {
  absl::Status last = absl::DeadlineExceededError("deadline passed before the master call");
  for (size_t attempt = 0; attempt < masters_.size(); ++attempt) {
    uint64_t now = MonoMs();
    if (now >= deadline_ms) break;
    size_t idx = current_master_.load() % masters_.size();
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_, deadline_ms - now);
    last = FromGrpc((masters_[idx].get()->*method)(&ctx, req, resp));
    if (last.code() != absl::StatusCode::kUnavailable) return last;
    current_master_.store(idx + 1);  // try the next master
  }
  return last;
}

v1::PutStartRequest ClientImpl::MakePutStart(const std::string& key, const void* data,
                                             size_t size, const PutOptions& options) const {
  v1::PutStartRequest req;
  req.set_key(key);
  req.set_size(size);
  req.set_checksum(BlockChecksum(data, size));
  v1::PutOptions* po = req.mutable_options();
  po->set_replicas(options.replicas);
  po->set_best_effort(options.best_effort);
  po->set_prefer_local(options.prefer_local);
  po->set_spread_label(options.spread_label);
  po->set_client_host_id(HostId());
  return req;
}

absl::Status ClientImpl::WriteReplica(const v1::Replica& replica, const v1::WriteGrant& grant,
                                      const char* data, uint64_t size, uint64_t deadline_ms) {
  const v1::StoreEndpoint& store = replica.store();
  if (options_.allow_shm && !store.shm_socket().empty() && store.host_id() == HostId()) {
    absl::StatusOr<std::shared_ptr<ShmMapping>> map = shm_.Get(store.shm_socket());
    if (map.ok() && (*map)->segment_id == replica.segment_id() &&
        replica.offset() <= (*map)->size && size <= (*map)->size - replica.offset()) {
      std::memcpy((*map)->base + replica.offset(), data, size);
      stats_.bytes_stored.fetch_add(size);
      return absl::OkStatus();
    }
    // Fall through to TCP: the socket may belong to a restarted store.
    shm_.Forget(store.shm_socket());
  }
  if (!options_.allow_tcp) {
    return absl::UnavailableError("no shared transport with store " + store.data_address());
  }
  wire::Grant g;
  g.put_id = grant.put_id();
  g.segment_id = grant.segment_id();
  g.offset = grant.offset();
  g.length = grant.length();
  g.expires_unix_ms = grant.expires_unix_ms();
  g.mac = grant.mac();
  absl::Status s = tcp_.Write(store.data_address(), g, replica.segment_id(), replica.offset(),
                              data, size, deadline_ms);
  if (s.ok()) stats_.bytes_stored.fetch_add(size);
  return s;
}

absl::Status ClientImpl::FinishPut(const v1::PutStartResponse& started, const char* data,
                                   uint64_t size, uint64_t deadline_ms) {
  absl::Status written = absl::OkStatus();
  for (int i = 0; i < started.replicas_size() && written.ok(); ++i) {
    written = WriteReplica(started.replicas(i), started.grants(i), data, size, deadline_ms);
  }
  if (!written.ok()) {
    v1::PutAbortRequest abort;
    abort.add_put_ids(started.put_id());
    v1::PutAbortResponse unused;
    CallMaster(&v1::MasterService::Stub::PutAbort, abort, &unused, MonoMs() + 2000)
        .IgnoreError();
    return written;
  }
  v1::PutCommitRequest commit;
  commit.add_put_ids(started.put_id());
  v1::PutCommitResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::PutCommit, commit, &resp, deadline_ms);
  if (!s.ok()) return s;
  if (resp.statuses_size() != 1) return absl::InternalError("malformed commit response");
  s = FromRpcStatus(resp.statuses(0));
  if (s.code() == absl::StatusCode::kNotFound) {
    // The put was reclaimed (timeout) or a target store died: retryable.
    return absl::AbortedError(absl::StrCat("put was reclaimed before commit: ", s.message()));
  }
  return s;
}

absl::Status ClientImpl::PutOnce(const std::string& key, const char* data, size_t size,
                                 const PutOptions& options, uint64_t deadline_ms) {
  v1::PutStartRequest req = MakePutStart(key, data, size, options);
  // A put of the same key by another writer is in flight: wait for it to
  // commit (or vanish, then write it ourselves).
  for (uint64_t backoff_ms = 2;; backoff_ms = std::min<uint64_t>(backoff_ms * 2, 100)) {
    v1::PutStartResponse started;
    absl::Status s = CallMaster(&v1::MasterService::Stub::PutStart, req, &started, deadline_ms);
    if (!s.ok()) return s;
    switch (started.state()) {
      case v1::PUT_ALREADY_EXISTS:
        return absl::OkStatus();
      case v1::PUT_STARTED:
        if (started.replicas_size() != started.grants_size() || started.replicas_size() == 0) {
          return absl::InternalError("malformed PutStart response");
        }
        return FinishPut(started, data, size, deadline_ms);
      case v1::PUT_IN_FLIGHT:
        break;
      default:
        return absl::InternalError("unknown PutStart state");
    }
    if (MonoMs() + backoff_ms >= deadline_ms) {
      return absl::DeadlineExceededError("another writer's put of this key is still open");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
  }
}

Status ClientImpl::Put(const std::string& key, const void* data, size_t size,
                       const PutOptions& options) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateKey(key); !s.ok()) return FromAbsl(s);
  if (size == 0 || data == nullptr) {
    return Status(StatusCode::kInvalidArgument, "a block needs data and a size > 0");
  }
  uint64_t deadline = DeadlineMs(options.timeout_ms);
  absl::Status s = PutOnce(key, static_cast<const char*>(data), size, options, deadline);
  if (s.code() == absl::StatusCode::kAborted) {
    // One retry: placement picks live stores again.
    s = PutOnce(key, static_cast<const char*>(data), size, options, deadline);
  }
  return FromAbsl(s);
}

Status ClientImpl::BatchPut(const std::vector<PutItem>& items, std::vector<Status>* statuses,
                            const PutOptions& options) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (items.empty() || items.size() > kBatchMax) {
    return Status(StatusCode::kInvalidArgument, "a batch holds 1..1024 blocks");
  }
  uint64_t deadline = DeadlineMs(options.timeout_ms);
  statuses->assign(items.size(), Status());
  v1::BatchPutStartRequest req;
  std::vector<size_t> sent;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::Status v = ValidateKey(items[i].key);
    if (v.ok() && (items[i].size == 0 || items[i].data == nullptr)) {
      v = absl::InvalidArgumentError("a block needs data and a size > 0");
    }
    if (!v.ok()) {
      (*statuses)[i] = FromAbsl(v);
      continue;
    }
    *req.add_puts() = MakePutStart(items[i].key, items[i].data, items[i].size, options);
    sent.push_back(i);
  }
  if (sent.empty()) return Status::Ok();
  v1::BatchPutStartResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::BatchPutStart, req, &resp, deadline);
  if (!s.ok()) return FromAbsl(s);
  if (resp.results_size() != static_cast<int>(sent.size())) {
    return Status(StatusCode::kInternal, "malformed batch response");
  }
  for (size_t j = 0; j < sent.size(); ++j) {
    size_t i = sent[j];
    const PutItem& item = items[i];
    absl::Status st = FromRpcStatus(resp.statuses(j));
    const v1::PutStartResponse& started = resp.results(j);
    if (st.ok() && started.state() == v1::PUT_STARTED) {
      st = FinishPut(started, static_cast<const char*>(item.data), item.size, deadline);
    } else if (st.ok() && started.state() == v1::PUT_IN_FLIGHT) {
      st = PutOnce(item.key, static_cast<const char*>(item.data), item.size, options, deadline);
    }
    if (st.code() == absl::StatusCode::kAborted) {
      st = PutOnce(item.key, static_cast<const char*>(item.data), item.size, options, deadline);
    }
    (*statuses)[i] = FromAbsl(st);
  }
  return Status::Ok();
}

absl::Status ClientImpl::ReadReplica(const v1::Replica& replica, const std::string& key,
                                     char* dst, uint64_t size, uint64_t deadline_ms,
                                     const char** transport) {
  const v1::StoreEndpoint& store = replica.store();
  if (replica.tier() == v1::TIER_SSD) {
    *transport = "tcp";
    if (!options_.allow_tcp) return absl::UnavailableError("SSD reads need the tcp transport");
    return tcp_.ReadKey(store.data_address(), key, size, dst, deadline_ms);
  }
  if (options_.allow_shm && !store.shm_socket().empty() && store.host_id() == HostId()) {
    absl::StatusOr<std::shared_ptr<ShmMapping>> map = shm_.Get(store.shm_socket());
    if (map.ok() && (*map)->segment_id == replica.segment_id() &&
        replica.offset() <= (*map)->size && size <= (*map)->size - replica.offset()) {
      *transport = "shm";
      std::memcpy(dst, (*map)->base + replica.offset(), size);
      return absl::OkStatus();
    }
    shm_.Forget(store.shm_socket());
  }
  *transport = "tcp";
  if (!options_.allow_tcp) {
    return absl::UnavailableError("no shared transport with store " + store.data_address());
  }
  return tcp_.Read(store.data_address(), replica.segment_id(), replica.offset(), size, dst,
                   deadline_ms);
}

absl::Status ClientImpl::ReadObject(const v1::ObjectLocation& loc, char* dst,
                                    uint64_t deadline_ms) {
  absl::Status last = absl::UnavailableError("the block has no reachable replica");
  bool mismatch = false;
  for (int i = 0; i < loc.replicas_size(); ++i) {
    const v1::Replica& r = loc.replicas(i);
    if (i > 0) stats_.replica_failovers.fetch_add(1);
    const char* transport = "tcp";
    absl::Status s = ReadReplica(r, loc.key(), dst, loc.size(), deadline_ms, &transport);
    if (!s.ok()) {
      last = s;
      if (s.code() == absl::StatusCode::kDeadlineExceeded) break;
      continue;
    }
    // The lease protects the range only until it ends: bytes read after
    // that may belong to another block, so the read does not count.
    if (loc.lease_expires_unix_ms() != 0 && UnixMs() > loc.lease_expires_unix_ms()) {
      last = absl::DeadlineExceededError("read lease expired during the read");
      continue;
    }
    bool verify = options_.verify_checksums || r.tier() == v1::TIER_SSD;
    if (verify && BlockChecksum(dst, loc.size()) != loc.checksum()) {
      stats_.checksum_mismatches.fetch_add(1);
      mismatch = true;
      last = absl::DataLossError(
          absl::StrCat("checksum mismatch from store ", r.store().data_address()));
      continue;
    }
    stats_.bytes_loaded.fetch_add(loc.size());
    if (r.tier() == v1::TIER_SSD) {
      stats_.bytes_loaded_ssd.fetch_add(loc.size());
      stats_.blocks_loaded_ssd.fetch_add(1);
    } else {
      stats_.blocks_loaded_dram.fetch_add(1);
    }
    (std::strcmp(transport, "shm") == 0 ? stats_.bytes_loaded_shm : stats_.bytes_loaded_tcp)
        .fetch_add(loc.size());
    return absl::OkStatus();
  }
  if (mismatch && last.code() != absl::StatusCode::kDataLoss) {
    return absl::DataLossError("every replica failed or had wrong bytes");
  }
  return last;
}

Status ClientImpl::GetInto(const std::string& key, void* buffer, size_t capacity, size_t* size,
                           uint64_t timeout_ms) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateKey(key); !s.ok()) return FromAbsl(s);
  uint64_t deadline = DeadlineMs(timeout_ms);
  v1::LookupRequest req;
  req.add_keys(key);
  req.set_client_host_id(HostId());
  v1::LookupResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::Lookup, req, &resp, deadline);
  if (!s.ok()) return FromAbsl(s);
  if (resp.objects_size() != 1 || !resp.objects(0).found()) {
    return Status(StatusCode::kNotFound, "no such key");
  }
  const v1::ObjectLocation& loc = resp.objects(0);
  if (size != nullptr) *size = loc.size();
  if (loc.size() > capacity) {
    return Status(StatusCode::kOutOfRange, absl::StrCat("block of ", loc.size(),
                                                        " bytes exceeds the buffer of ", capacity));
  }
  return FromAbsl(ReadObject(loc, static_cast<char*>(buffer), deadline));
}

Status ClientImpl::Get(const std::string& key, std::string* out, uint64_t timeout_ms) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateKey(key); !s.ok()) return FromAbsl(s);
  std::vector<std::string> values;
  std::vector<Status> statuses;
  Status s = BatchGet({key}, &values, &statuses, timeout_ms);
  if (!s.ok()) return s;
  if (statuses[0].ok()) *out = std::move(values[0]);
  return statuses[0];
}

Status ClientImpl::BatchGet(const std::vector<std::string>& keys,
                            std::vector<std::string>* values, std::vector<Status>* statuses,
                            uint64_t timeout_ms) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (keys.empty() || keys.size() > kBatchMax) {
    return Status(StatusCode::kInvalidArgument, "a batch holds 1..1024 keys");
  }
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
  }
  uint64_t deadline = DeadlineMs(timeout_ms);
  v1::LookupRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_client_host_id(HostId());
  v1::LookupResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::Lookup, req, &resp, deadline);
  if (!s.ok()) return FromAbsl(s);
  if (resp.objects_size() != static_cast<int>(keys.size())) {
    return Status(StatusCode::kInternal, "malformed lookup response");
  }
  values->assign(keys.size(), std::string());
  statuses->assign(keys.size(), Status());
  for (size_t i = 0; i < keys.size(); ++i) {
    const v1::ObjectLocation& loc = resp.objects(i);
    if (!loc.found()) {
      (*statuses)[i] = Status(StatusCode::kNotFound, "no such key");
      continue;
    }
    std::string& v = (*values)[i];
    v.resize(loc.size());
    absl::Status r = ReadObject(loc, v.data(), deadline);
    if (!r.ok()) v.clear();
    (*statuses)[i] = FromAbsl(r);
  }
  return Status::Ok();
}

Status ClientImpl::Exists(const std::vector<std::string>& keys, std::vector<bool>* present,
                          uint64_t timeout_ms) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (keys.empty() || keys.size() > kBatchMax) {
    return Status(StatusCode::kInvalidArgument, "a batch holds 1..1024 keys");
  }
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
  }
  v1::LookupRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_no_lease(true);
  v1::LookupResponse resp;
  absl::Status s =
      CallMaster(&v1::MasterService::Stub::Lookup, req, &resp, DeadlineMs(timeout_ms));
  if (!s.ok()) return FromAbsl(s);
  present->assign(keys.size(), false);
  for (int i = 0; i < resp.objects_size() && i < static_cast<int>(keys.size()); ++i) {
    (*present)[i] = resp.objects(i).found();
  }
  return Status::Ok();
}

Status ClientImpl::Remove(const std::string& key, uint64_t timeout_ms) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateKey(key); !s.ok()) return FromAbsl(s);
  v1::RemoveRequest req;
  req.add_keys(key);
  v1::RemoveResponse resp;
  absl::Status s =
      CallMaster(&v1::MasterService::Stub::Remove, req, &resp, DeadlineMs(timeout_ms));
  if (!s.ok()) return FromAbsl(s);
  if (resp.statuses_size() != 1) return Status(StatusCode::kInternal, "malformed response");
  return FromAbsl(FromRpcStatus(resp.statuses(0)));
}

Status ClientImpl::MatchPrefix(const std::vector<std::string>& keys, size_t* matched,
                               uint64_t timeout_ms) {
  if (absl::Status s = CheckOpen(); !s.ok()) return FromAbsl(s);
  if (keys.empty() || keys.size() > kBatchMax) {
    return Status(StatusCode::kInvalidArgument, "a prefix match takes 1..1024 keys");
  }
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
  }
  v1::MatchPrefixRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_client_host_id(HostId());
  v1::MatchPrefixResponse resp;
  absl::Status s =
      CallMaster(&v1::MasterService::Stub::MatchPrefix, req, &resp, DeadlineMs(timeout_ms));
  if (!s.ok()) return FromAbsl(s);
  *matched = resp.matched();
  return Status::Ok();
}

ClientStats ClientImpl::stats() const {
  ClientStats s;
  s.bytes_stored = stats_.bytes_stored.load();
  s.bytes_loaded = stats_.bytes_loaded.load();
  s.bytes_loaded_shm = stats_.bytes_loaded_shm.load();
  s.bytes_loaded_tcp = stats_.bytes_loaded_tcp.load();
  s.bytes_loaded_ssd = stats_.bytes_loaded_ssd.load();
  s.blocks_loaded_dram = stats_.blocks_loaded_dram.load();
  s.blocks_loaded_ssd = stats_.blocks_loaded_ssd.load();
  s.checksum_mismatches = stats_.checksum_mismatches.load();
  s.replica_failovers = stats_.replica_failovers.load();
  return s;
}

void ClientImpl::Close() { closed_.store(true); }

}  // namespace shelf
