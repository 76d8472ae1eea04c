#include "transport/rdma/rdma_transport.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/clock.h"
#include "transport/wire.h"

namespace shelf::transport::rdma {

// ---- RdmaStoreAcceptor

namespace {

// With no exposure about to end, the expiry thread still looks again this
// often (a bound on every wait, whatever the clock does).
constexpr uint64_t kExpiryIdleWaitMs = 60000;

}  // namespace

RdmaStoreAcceptor::~RdmaStoreAcceptor() {
  std::thread expiry;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    replan_cv_.SignalAll();
    expiry = std::move(expiry_thread_);
  }
  if (expiry.joinable()) expiry.join();
  MutexLock lock(&mu_);
  SHELF_CHECK(queue_pairs_.empty()) << "an RDMA queue pair outlives its acceptor";
  for (auto& [id, region] : segments_) engine_->UnregisterMemory(region).IgnoreError();
}

absl::Status RdmaStoreAcceptor::AddSegment(uint32_t id, void* base, uint64_t size, Domain domain) {
  uint32_t pd = kDefaultDomain;
  if (domain == Domain::kOwn) {
    absl::StatusOr<uint32_t> own = engine_->NewDomain();
    if (!own.ok()) return own.status();
    pd = *own;
  }
  absl::StatusOr<MemoryRegion> region =
      engine_->RegisterMemory(base, size, MemoryKind::kHost, MemoryAccess::kRemoteRead, pd);
  if (!region.ok()) return region.status();
  MutexLock lock(&mu_);
  auto [it, inserted] = segments_.emplace(id, *region);
  if (!inserted) {
    engine_->UnregisterMemory(*region).IgnoreError();
    return absl::AlreadyExistsError(absl::StrCat("segment ", id, " is already exposed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<void>> RdmaStoreAcceptor::Accept(uint32_t segment_id,
                                                                absl::string_view client_info,
                                                                const RdmaExposure& exposure,
                                                                std::string* store_info) {
  RdmaEndpoint::Options options;
  {
    MutexLock lock(&mu_);
    auto it = segments_.find(segment_id);
    if (it == segments_.end()) {
      return absl::NotFoundError(absl::StrCat("no segment ", segment_id, " on this store"));
    }
    if (stats_.live >= queue_pairs_max_) {
      ++stats_.refused;
      return absl::ResourceExhaustedError(
          absl::StrCat("this store serves at most ", queue_pairs_max_, " rdma queue pairs"));
    }
    ++stats_.live;  // held from here; given back by the deleter, at expiry, or below
    // In the segment's protection domain, exposed or not: a queue pair
    // reaches no other segment's memory, not even for a pull's destination.
    options.domain = it->second.domain;
    // Unexposed, the queue pair refuses the client's READs and its
    // connection info names no region: the client learns no rkey.
    if (exposure.expose) options.expose = it->second;
  }
  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> endpoint =
      MakeQueuePair(options, client_info, store_info);
  MutexLock lock(&mu_);
  if (!endpoint.ok()) {
    --stats_.live;
    return endpoint.status();
  }
  ++stats_.accepted;
  if (!exposure.expose) ++stats_.unexposed;
  const uint64_t id = next_queue_pair_++;
  QueuePair& qp = queue_pairs_[id];
  qp.endpoint = endpoint->get();
  qp.until_unix_ms = exposure.expose ? exposure.until_unix_ms : 0;
  if (qp.until_unix_ms != 0) {
    ++timed_exposures_;
    replan_cv_.SignalAll();
    if (!expiry_thread_.joinable()) expiry_thread_ = std::thread([this] { ExpiryLoop(); });
  }
  // The queue pair counts against queue_pairs_max until the connection
  // releases it (or it expires).
  return std::shared_ptr<void>((*endpoint).release(), [this, id](void* p) {
    {
      MutexLock release(&mu_);
      auto it = queue_pairs_.find(id);
      SHELF_CHECK(it != queue_pairs_.end());
      if (!it->second.expired) --stats_.live;
      // Out of the table before it goes: the expiry thread touches only
      // what is in it.
      queue_pairs_.erase(it);
    }
    delete static_cast<RdmaEndpoint*>(p);
  });
}

absl::StatusOr<std::unique_ptr<RdmaEndpoint>> RdmaStoreAcceptor::MakeQueuePair(
    const RdmaEndpoint::Options& options, absl::string_view client_info, std::string* store_info) {
  // No reconnect callback: after a teardown the client asks again.
  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> endpoint = engine_->CreateEndpoint(options);
  if (!endpoint.ok()) return endpoint.status();
  if (absl::Status s = (*endpoint)->Connect(client_info); !s.ok()) return s;
  absl::StatusOr<std::string> info = (*endpoint)->LocalInfo();
  if (!info.ok()) return info.status();
  *store_info = *std::move(info);
  return endpoint;
}

uint64_t RdmaStoreAcceptor::ExpireLocked(uint64_t now_unix_ms) {
  uint64_t next = 0;
  for (auto& [id, qp] : queue_pairs_) {
    if (qp.until_unix_ms == 0 || qp.expired) continue;
    if (qp.until_unix_ms > now_unix_ms) {
      if (next == 0 || qp.until_unix_ms < next) next = qp.until_unix_ms;
      continue;
    }
    // The right the grant gave ends with it: the queue pair goes (the
    // client's READs through it fail), and the client asks again with a
    // grant that is still valid.
    qp.endpoint->TearDown(absl::PermissionDeniedError(
        "rdma: the read grant this queue pair was exposed under has expired"));
    qp.expired = true;
    --stats_.live;
    ++stats_.expired;
  }
  return next;
}

void RdmaStoreAcceptor::ExpiryLoop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    const uint64_t now = clock_->UnixMs();
    const uint64_t next = ExpireLocked(now);
    const uint64_t wait_ms =
        next == 0 ? kExpiryIdleWaitMs : std::min(next - now, kExpiryIdleWaitMs);
    // Up at the next end, or sooner when a new exposure may end before it.
    const uint64_t planned = timed_exposures_;
    clock_->WaitUntil(&mu_, &replan_cv_, clock_->NowMs() + wait_ms,
                      [this, planned]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                        return stopping_ || timed_exposures_ != planned;
                      });
  }
}

absl::Status RdmaStoreAcceptor::Pull(void* queue_pair, char* dst, uint64_t length,
                                     const wire::RdmaSource& source, uint64_t deadline_ms) {
  auto* endpoint = static_cast<RdmaEndpoint*>(queue_pair);
  // The READ's destination is exactly the granted range; its source is the
  // client's memory under the rkey the client sent, which the client's
  // device checks.
  RdmaOp op{RdmaOpKind::kRead, dst, length, source.addr, source.rkey};
  RdmaBatchResult result = endpoint->Execute({&op, 1}, deadline_ms);
  absl::Status s = result.ops.empty() ? result.status : result.ops[0];
  MutexLock lock(&mu_);
  if (s.ok()) {
    ++stats_.pulls;
    stats_.pull_bytes += length;
  } else {
    ++stats_.pull_errors;
  }
  return s;
}

uint64_t RdmaStoreAcceptor::accepted() const {
  MutexLock lock(&mu_);
  return stats_.accepted;
}

RdmaStoreAcceptor::Stats RdmaStoreAcceptor::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

// ---- RdmaTransport

RdmaTransport::Connection::~Connection() {
  endpoint.reset();
  if (fd >= 0) close(fd);
}

bool RdmaTransport::Connection::Exposed() const {
  std::optional<RemoteSegment> remote = endpoint->remote_segment();
  return remote.has_value() && remote->length > 0;
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
    MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  connections.clear();  // every endpoint before the engine
}

RdmaTransport::Stats RdmaTransport::stats() const {
  MutexLock lock(&mu_);
  Stats s = stats_;
  s.live_connections = connections_.size();
  s.live_regions = regions_.size();
  const MemoryRegistry::Stats r = engine_->registration_stats();
  s.registration_hits = r.hits;
  s.registration_misses = r.misses;
  s.registered_regions = r.live_regions;
  return s;
}

absl::Status RdmaTransport::OnRegister(transport::MemoryHandle handle, const Region& region) {
  const bool gpu = region.kind == transport::MemoryKind::kGpu;
  if (gpu) {
    MutexLock lock(&mu_);
    if (stats_.live_gpu_regions >= options_.gpu_regions_max) {
      return absl::ResourceExhaustedError(absl::StrCat("rdma: GPU regions are at their bound of ",
                                                       options_.gpu_regions_max,
                                                       " (gpu_regions_max)"));
    }
    ++stats_.live_gpu_regions;  // held from here; given back below on failure
  }
  // A store pulls puts from registered memory: that needs remote READ.
  absl::StatusOr<MemoryRegion> r = engine_->RegisterMemory(
      region.base, region.length, gpu ? MemoryKind::kGpu : MemoryKind::kHost,
      options_.store_pull_writes ? MemoryAccess::kRemoteRead : MemoryAccess::kLocal);
  MutexLock lock(&mu_);
  if (!r.ok()) {
    if (gpu) --stats_.live_gpu_regions;
    return r.status();
  }
  regions_.emplace(handle, *r);
  return absl::OkStatus();
}

void RdmaTransport::OnUnregister(transport::MemoryHandle handle, const Region& region) {
  MemoryRegion r;
  {
    MutexLock lock(&mu_);
    auto it = regions_.find(handle);
    if (it == regions_.end()) return;
    r = it->second;
    regions_.erase(it);
    if (region.kind == transport::MemoryKind::kGpu) --stats_.live_gpu_regions;
  }
  engine_->UnregisterMemory(r).IgnoreError();
}

absl::StatusOr<std::shared_ptr<RdmaTransport::Connection>> RdmaTransport::Dial(
    const ConnectionKey& key, const std::string& credential, uint64_t deadline_ms) {
  const auto& [route, segment_id, incarnation] = key;
  auto conn = std::make_shared<Connection>();
  absl::StatusOr<int> fd = control_.Dial(route, deadline_ms);
  if (!fd.ok()) return fd.status();
  conn->fd = *fd;
  {
    MutexLock control(&conn->control_mu);
    conn->credential = credential;
    conn->grant_expires_unix_ms = wire::ReadGrantExpiry(credential);
  }
  RdmaEndpoint::Options options = options_.endpoint;
  options.expose.reset();
  options.peer_may_read = options_.store_pull_writes;
  // Runs under the endpoint's lock after a teardown: asks the store, on the
  // same control connection, for a new queue pair.
  Connection* raw = conn.get();
  const uint32_t segment = segment_id;
  const uint64_t timeout_ms = options_.connect_timeout_ms;
  options.reconnect = [this, raw, segment,
                       timeout_ms](const std::string& local) -> absl::StatusOr<std::string> {
    MutexLock control(&raw->control_mu);
    absl::StatusOr<std::string> remote =
        control_.RdmaConnect(raw->fd, segment, local, raw->credential, MonoMs() + timeout_ms);
    if (remote.ok()) raw->grant_expires_unix_ms = wire::ReadGrantExpiry(raw->credential);
    return remote;
  };
  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> endpoint = engine_->CreateEndpoint(options);
  if (!endpoint.ok()) return endpoint.status();
  conn->endpoint = *std::move(endpoint);
  absl::StatusOr<std::string> local = conn->endpoint->LocalInfo();
  if (!local.ok()) return local.status();
  absl::StatusOr<std::string> remote =
      control_.RdmaConnect(conn->fd, segment_id, *local, credential, deadline_ms);
  if (!remote.ok()) return remote.status();
  if (absl::Status s = conn->endpoint->Connect(*remote); !s.ok()) return s;
  return conn;
}

absl::StatusOr<std::shared_ptr<RdmaTransport::Connection>> RdmaTransport::Get(
    const ConnectionKey& key, const std::string& credential, uint64_t deadline_ms) {
  std::vector<std::shared_ptr<Connection>> stale;  // released after the lock
  {
    MutexLock lock(&mu_);
    auto it = connections_.find(key);
    if (it != connections_.end()) {
      it->second->last_used = ++use_clock_;
      return it->second;
    }
    // Room for one more: close the least recently used connection that no
    // batch is using (only the map holds it).
    if (connections_.size() >= options_.connections_max) {
      auto victim = connections_.end();
      for (auto c = connections_.begin(); c != connections_.end(); ++c) {
        if (c->second.use_count() == 1 &&
            (victim == connections_.end() || c->second->last_used < victim->second->last_used)) {
          victim = c;
        }
      }
      if (victim == connections_.end()) {
        return absl::ResourceExhaustedError(
            absl::StrCat("rdma: ", options_.connections_max,
                         " store connections in use already (connections_max)"));
      }
      stale.push_back(std::move(victim->second));
      connections_.erase(victim);
      ++stats_.evicted;
    }
  }
  absl::StatusOr<std::shared_ptr<Connection>> conn = Dial(key, credential, deadline_ms);
  if (!conn.ok()) return conn.status();
  MutexLock lock(&mu_);
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
  if (!inserted) stale.push_back(*std::move(conn));
  it->second->last_used = ++use_clock_;
  return it->second;
}

void RdmaTransport::Drop(const ConnectionKey& key, const std::shared_ptr<Connection>& conn) {
  std::shared_ptr<Connection> dropped;  // released after the lock
  MutexLock lock(&mu_);
  auto it = connections_.find(key);
  if (it == connections_.end() || it->second != conn) return;
  dropped = std::move(it->second);
  connections_.erase(it);
  ++stats_.dropped;
}

bool RdmaTransport::ExposureEnding(Connection* conn, bool write,
                                   uint64_t grant_expires_unix_ms) const {
  uint64_t until = 0;
  {
    MutexLock control(&conn->control_mu);
    until = conn->grant_expires_unix_ms;
  }
  // A store that exposes for as long as the connection lives (one segment)
  // sees a connection made again once per grant lifetime: cheap, and this
  // end cannot tell the two kinds of store apart.
  if (until == 0 || UnixMs() + options_.exposure_renew_ms < until) return false;
  // A write needs the queue pair in the store's hands: a new one, exposing
  // nothing, has no end. A read gains only from a grant that lasts longer
  // (each renewal moves the end forward, so they cannot churn).
  return write || grant_expires_unix_ms > until;
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
  // Group by store segment, reads apart from writes.
  std::map<std::pair<ConnectionKey, bool>, std::vector<const Work*>> groups;
  for (const Work& w : work) {
    const bool write = w.op.kind == transport::OpKind::kWrite;
    if (write && !options_.store_pull_writes) {
      batch->Complete(w.index, absl::FailedPreconditionError(
                                   "stores take no one-sided rdma writes: write over tcp or shm, "
                                   "under the put's grant"));
      continue;
    }
    const transport::Peer& peer = *w.op.peer;
    groups[{{peer.route(transport::Kind::kRdma), w.op.segment_id, peer.incarnation}, write}]
        .push_back(&w);
  }
  for (auto& [group, items] : groups) {
    const auto& [key, write] = group;
    // Reads present the read credential whose grant lasts longest (any
    // grant into the segment will do): a store of tenant arenas tells an
    // arena's rkey only against a read grant into it, and exposes the
    // arena until that grant expires.
    std::string credential;
    uint64_t expires = 0;
    for (const Work* w : items) {
      if (write || w->op.grant.empty()) continue;
      const uint64_t e = wire::ReadGrantExpiry(w->op.grant);
      if (credential.empty() || e > expires) {
        credential = w->op.grant;
        expires = e;
      }
    }
    absl::StatusOr<std::shared_ptr<Connection>> conn = Get(key, credential, deadline_ms);
    // A pull needs both queue pairs in RTS; a torn-down one on this side
    // means the store's is gone too: start afresh. A read needs the
    // segment exposed: a connection a put made, with no read credential,
    // may expose nothing (a store of arenas), and is made again with one.
    // Either is made again, with this batch's grant, before the store
    // tears its queue pair down at the end of the grant it was made with.
    const bool ending = conn.ok() && ExposureEnding(conn->get(), write, expires);
    if (conn.ok() &&
        (ending || (write && (*conn)->endpoint->state() != RdmaEndpoint::State::kConnected) ||
         (!write && !credential.empty() && !(*conn)->Exposed()))) {
      Drop(key, *conn);
      if (ending) {
        MutexLock lock(&mu_);
        ++stats_.renewed;
      }
      conn = Get(key, credential, deadline_ms);
    }
    if (!conn.ok()) {
      absl::Status s = absl::Status(conn.status().code(),
                                    absl::StrCat("rdma connection to store ", std::get<0>(key),
                                                 " failed: ", conn.status().message()));
      for (const Work* w : items) batch->Complete(w->index, s);
      continue;
    }
    if (write) {
      Pull(key, *conn, items, batch.get(), deadline_ms);
    } else {
      Read(key, *conn, credential, items, batch.get(), deadline_ms);
    }
  }
}

void RdmaTransport::Read(const ConnectionKey& key, const std::shared_ptr<Connection>& conn,
                         const std::string& credential, const std::vector<const Work*>& items,
                         transport::Batch* batch, uint64_t deadline_ms) {
  if (!credential.empty()) {
    // A queue pair made again after a teardown presents the grant that
    // lasts longest, not one that may have expired since.
    MutexLock control(&conn->control_mu);
    if (wire::ReadGrantExpiry(credential) >= wire::ReadGrantExpiry(conn->credential)) {
      conn->credential = credential;
    }
  }
  std::vector<RdmaOp> ops;
  ops.reserve(items.size());
  for (const Work* w : items) {
    ops.push_back(RdmaOp{RdmaOpKind::kRead, w->local, w->op.length, w->op.remote_offset});
  }
  RdmaBatchResult result = conn->endpoint->Execute(ops, deadline_ms);
  uint64_t ok = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::Status s = i < result.ops.size() ? result.ops[i] : result.status;
    ok += s.ok();
    batch->Complete(items[i]->index, std::move(s));
  }
  {
    MutexLock lock(&mu_);
    stats_.ops += ok;
  }
  // A torn-down queue pair is made again on the next batch, over the same
  // control connection; once that connection is gone too (the store
  // restarted or died), the next batch dials afresh.
  if (conn->endpoint->state() == RdmaEndpoint::State::kBroken && !ControlAlive(conn->fd)) {
    Drop(key, conn);
  }
}

void RdmaTransport::Pull(const ConnectionKey& key, const std::shared_ptr<Connection>& conn,
                         const std::vector<const Work*>& items, transport::Batch* batch,
                         uint64_t deadline_ms) {
  bool failed = false;
  for (const Work* w : items) {
    absl::Status s;
    std::optional<MemoryRegion> region = engine_->FindMemory(w->local, w->op.length);
    if (failed) {
      s = absl::UnavailableError("rdma: an earlier pull on this connection failed");
    } else if (!region.has_value() || region->access == MemoryAccess::kLocal) {
      s = absl::FailedPreconditionError("rdma: a pull's source must be registered for remote READ");
    } else {
      MutexLock control(&conn->control_mu);
      s = control_.RdmaPull(conn->fd, w->op.segment_id, w->op.remote_offset, w->op.length,
                            wire::RdmaSource{reinterpret_cast<uint64_t>(w->local), region->rkey},
                            w->op.grant, deadline_ms);
      failed = !s.ok();
    }
    MutexLock lock(&mu_);
    if (s.ok()) {
      ++stats_.pulls;
      stats_.pull_bytes += w->op.length;
    } else {
      ++stats_.pull_errors;
    }
    batch->Complete(w->index, std::move(s));
  }
  // Whatever failed (a refused grant, a queue pair in error on either end, a
  // store gone mid-pull), the next put starts on a fresh connection and
  // queue pairs: the store's side may be unusable now.
  if (failed) Drop(key, conn);
}

}  // namespace shelf::transport::rdma
