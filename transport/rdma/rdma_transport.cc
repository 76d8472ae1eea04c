#include "transport/rdma/rdma_transport.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace shelf::rdma {

// ---- RdmaStoreAcceptor

RdmaStoreAcceptor::~RdmaStoreAcceptor() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, region] : segments_) engine_->UnregisterMemory(region).IgnoreError();
}

absl::Status RdmaStoreAcceptor::AddSegment(uint32_t id, void* base, uint64_t size) {
  absl::StatusOr<MemoryRegion> region =
      engine_->RegisterMemory(base, size, MemoryKind::kHost, MemoryAccess::kRemoteRead);
  if (!region.ok()) return region.status();
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = segments_.emplace(id, *region);
  if (!inserted) {
    engine_->UnregisterMemory(*region).IgnoreError();
    return absl::AlreadyExistsError(absl::StrCat("segment ", id, " is already exposed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<void>> RdmaStoreAcceptor::Accept(uint32_t segment_id,
                                                                absl::string_view client_info,
                                                                std::string* store_info) {
  RdmaEndpoint::Options options;
  {
    absl::MutexLock lock(&mu_);
    auto it = segments_.find(segment_id);
    if (it == segments_.end()) {
      return absl::NotFoundError(absl::StrCat("no segment ", segment_id, " on this store"));
    }
    options.expose = it->second;
  }
  // No reconnect callback: after a teardown the client asks again.
  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> endpoint = engine_->CreateEndpoint(options);
  if (!endpoint.ok()) return endpoint.status();
  if (absl::Status s = (*endpoint)->Connect(client_info); !s.ok()) return s;
  absl::StatusOr<std::string> info = (*endpoint)->LocalInfo();
  if (!info.ok()) return info.status();
  *store_info = *std::move(info);
  absl::MutexLock lock(&mu_);
  ++accepted_;
  return std::shared_ptr<void>(std::move(*endpoint));
}

uint64_t RdmaStoreAcceptor::accepted() const {
  absl::MutexLock lock(&mu_);
  return accepted_;
}

// ---- RdmaTransport

RdmaTransport::Connection::~Connection() {
  endpoint.reset();
  if (fd >= 0) close(fd);
}

absl::StatusOr<std::unique_ptr<RdmaTransport>> RdmaTransport::Open(VerbsApi* verbs,
                                                                   Options options) {
  absl::StatusOr<std::unique_ptr<RdmaEngine>> engine = RdmaEngine::Open(verbs, options.device);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<RdmaTransport>(new RdmaTransport(std::move(options), *std::move(engine)));
}

RdmaTransport::RdmaTransport(Options options, std::unique_ptr<RdmaEngine> engine)
    : options_(std::move(options)),
      control_(TcpDataClient::Options{options_.secret, options_.connect_timeout_ms, 0}),
      engine_(std::move(engine)) {}

RdmaTransport::~RdmaTransport() {
  std::map<ConnectionKey, std::shared_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  connections.clear();  // every endpoint before the engine
}

RdmaTransport::Stats RdmaTransport::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Status RdmaTransport::OnRegister(transport::MemoryHandle handle, const Region& region) {
  absl::StatusOr<MemoryRegion> r = engine_->RegisterMemory(
      region.base, region.length,
      region.kind == transport::MemoryKind::kGpu ? MemoryKind::kGpu : MemoryKind::kHost,
      MemoryAccess::kLocal);
  if (!r.ok()) return r.status();
  absl::MutexLock lock(&mu_);
  regions_.emplace(handle, *r);
  return absl::OkStatus();
}

void RdmaTransport::OnUnregister(transport::MemoryHandle handle, const Region&) {
  MemoryRegion r;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(handle);
    if (it == regions_.end()) return;
    r = it->second;
    regions_.erase(it);
  }
  engine_->UnregisterMemory(r).IgnoreError();
}

absl::StatusOr<std::shared_ptr<RdmaTransport::Connection>> RdmaTransport::Dial(
    const ConnectionKey& key, uint64_t deadline_ms) {
  const auto& [route, segment_id, incarnation] = key;
  auto conn = std::make_shared<Connection>();
  absl::StatusOr<int> fd = control_.Dial(route, deadline_ms);
  if (!fd.ok()) return fd.status();
  conn->fd = *fd;
  RdmaEndpoint::Options options = options_.endpoint;
  options.expose.reset();
  // Runs under the endpoint's lock after a teardown: asks the store, on the
  // same control connection, for a new queue pair.
  Connection* raw = conn.get();
  const uint32_t segment = segment_id;
  const uint64_t timeout_ms = options_.connect_timeout_ms;
  options.reconnect = [this, raw, segment,
                       timeout_ms](const std::string& local) -> absl::StatusOr<std::string> {
    return control_.RdmaConnect(raw->fd, segment, local, MonoMs() + timeout_ms);
  };
  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> endpoint = engine_->CreateEndpoint(options);
  if (!endpoint.ok()) return endpoint.status();
  conn->endpoint = *std::move(endpoint);
  absl::StatusOr<std::string> local = conn->endpoint->LocalInfo();
  if (!local.ok()) return local.status();
  absl::StatusOr<std::string> remote =
      control_.RdmaConnect(conn->fd, segment_id, *local, deadline_ms);
  if (!remote.ok()) return remote.status();
  if (absl::Status s = conn->endpoint->Connect(*remote); !s.ok()) return s;
  return conn;
}

absl::StatusOr<std::shared_ptr<RdmaTransport::Connection>> RdmaTransport::Get(
    const ConnectionKey& key, uint64_t deadline_ms) {
  {
    absl::MutexLock lock(&mu_);
    auto it = connections_.find(key);
    if (it != connections_.end()) return it->second;
  }
  absl::StatusOr<std::shared_ptr<Connection>> conn = Dial(key, deadline_ms);
  if (!conn.ok()) return conn.status();
  std::vector<std::shared_ptr<Connection>> stale;  // released after the lock
  absl::MutexLock lock(&mu_);
  ++stats_.connections;
  // A new incarnation at the same route: the store restarted, and the
  // connections to its old incarnation lead nowhere.
  for (auto it = connections_.begin(); it != connections_.end();) {
    const auto& [route, segment, incarnation] = it->first;
    if (route == std::get<0>(key) && incarnation != std::get<2>(key)) {
      stale.push_back(std::move(it->second));
      it = connections_.erase(it);
      ++stats_.dropped;
    } else {
      ++it;
    }
  }
  // Another thread may have dialled meanwhile: the first one stays.
  auto [it, inserted] = connections_.emplace(key, *conn);
  return it->second;
}

void RdmaTransport::Drop(const ConnectionKey& key, const std::shared_ptr<Connection>& conn) {
  std::shared_ptr<Connection> dropped;  // released after the lock
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(key);
  if (it == connections_.end() || it->second != conn) return;
  dropped = std::move(it->second);
  connections_.erase(it);
  ++stats_.dropped;
}

namespace {

// False once the peer closed the connection or it failed.
bool ControlAlive(int fd) {
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

}  // namespace

void RdmaTransport::Start(std::shared_ptr<transport::Batch> batch, std::vector<Work> work,
                          uint64_t deadline_ms) {
  // Group reads by store segment; writes are refused here (see the header).
  std::map<ConnectionKey, std::vector<const Work*>> groups;
  for (const Work& w : work) {
    if (w.op.kind == transport::OpKind::kWrite) {
      batch->Complete(w.index, absl::FailedPreconditionError(
                                   "stores take no one-sided rdma writes: write over tcp or shm, "
                                   "under the put's grant"));
      continue;
    }
    const transport::Peer& peer = *w.op.peer;
    groups[{peer.route(transport::Kind::kRdma), w.op.segment_id, peer.incarnation}].push_back(&w);
  }
  for (auto& [key, items] : groups) {
    absl::StatusOr<std::shared_ptr<Connection>> conn = Get(key, deadline_ms);
    if (!conn.ok()) {
      absl::Status s = absl::Status(conn.status().code(),
                                    absl::StrCat("rdma connection to store ", std::get<0>(key),
                                                 " failed: ", conn.status().message()));
      for (const Work* w : items) batch->Complete(w->index, s);
      continue;
    }
    std::vector<RdmaOp> ops;
    ops.reserve(items.size());
    for (const Work* w : items) {
      ops.push_back(RdmaOp{RdmaOpKind::kRead, w->local, w->op.length, w->op.remote_offset});
    }
    RdmaBatchResult result = (*conn)->endpoint->Execute(ops, deadline_ms);
    uint64_t ok = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      absl::Status s = i < result.ops.size() ? result.ops[i] : result.status;
      ok += s.ok();
      batch->Complete(items[i]->index, std::move(s));
    }
    {
      absl::MutexLock lock(&mu_);
      stats_.ops += ok;
    }
    // A torn-down queue pair is made again on the next batch, over the same
    // control connection; once that connection is gone too (the store
    // restarted or died), the next batch dials afresh.
    if ((*conn)->endpoint->state() == RdmaEndpoint::State::kBroken && !ControlAlive((*conn)->fd)) {
      Drop(key, *conn);
    }
  }
}

}  // namespace shelf::rdma
