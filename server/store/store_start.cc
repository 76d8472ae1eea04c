// Store's construction and start-up: the DRAM segment, the SSD tier, the
// data plane (TCP, RDMA, shared memory), the node's identity and gauges.
// The running store (registration, heartbeats, tier moves) is store.cc.
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_text.h"
#include "common/hmac.h"
#include "common/io_buffer.h"
#include "common/log.h"
#include "common/net.h"
#include "server/store/store.h"
#if SHELF_WITH_RDMA
#include "transport/rdma/ib_verbs.h"
#include "transport/rdma/rdma_transport.h"
#endif

namespace shelf::store {
namespace {

uint64_t RandomIncarnation() {
  std::string b = RandomBytes(8);
  uint64_t v = 0;
  std::memcpy(&v, b.data(), sizeof(v));
  return v == 0 ? 1 : v;
}

// The node id persists in the SSD directory so a restarted store (even on
// another port) is the same node and its SSD blocks come back with it.
std::string LoadOrCreateNodeId(const std::string& dir) {
  std::string path = dir + "/NODE_ID";
  std::ifstream in(path);
  std::string id;
  if (in && std::getline(in, id) && !id.empty()) return id;
  id = absl::StrCat("node-", absl::BytesToHexString(RandomBytes(6)));
  std::ofstream out(path);
  out << id << "\n";
  return id;
}

// The default run directory: systemd's RuntimeDirectory= (the first path
// of $RUNTIME_DIRECTORY), else /run/shelf. Never /tmp: anyone may create
// there the directory a store would then trust.
std::string DefaultRunDir() {
  // Read at start-up; nothing in the store sets the environment.
  const char* env = std::getenv("RUNTIME_DIRECTORY");  // NOLINT(concurrency-mt-unsafe)
  if (env != nullptr && *env != '\0') {
    std::string first(absl::string_view(env).substr(0, absl::string_view(env).find(':')));
    if (!first.empty()) return first;
  }
  return "/run/shelf";
}

// Makes `dir` when missing (mode 0700), then checks that only this process's
// user controls it: whoever can write the directory can replace the socket
// and answer engines in the store's name. An error says why not.
absl::Status PrepareRunDir(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot stat ", dir, ": ", ErrnoText(errno)));
    }
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), ec);
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", dir, ": ", ErrnoText(errno)));
    }
    if (stat(dir.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot stat ", dir, ": ", ErrnoText(errno)));
    }
  }
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(dir + " is not a directory");
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is owned by uid ", st.st_uid, ", not the store's uid ", geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is ", (st.st_mode & S_IWOTH) != 0 ? "world" : "group",
                     "-writable (mode ", absl::StrFormat("%04o", st.st_mode & 07777),
                     "): it must be writable by the store's user alone"));
  }
  return absl::OkStatus();
}

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

Store::Metrics::Metrics(prom::Exposition& e)
    : read_bytes(prom::AddCounter(e.registry(), "shelf_store_read_bytes_total",
                                  "Bytes served, by tier and transport (shared-memory reads of "
                                  "DRAM are counted by clients)")),
      read_dram_tcp(prom::Child(read_bytes, {{"tier", "dram"}, {"transport", "tcp"}})),
      read_ssd_tcp(prom::Child(read_bytes, {{"tier", "ssd"}, {"transport", "tcp"}})),
      read_ssd_shm(prom::Child(read_bytes, {{"tier", "ssd"}, {"transport", "shm"}})),
      written_bytes(prom::AddCounter(e.registry(), "shelf_store_written_bytes_total",
                                     "Bytes written, by tier and transport")),
      written_dram_tcp(prom::Child(written_bytes, {{"tier", "dram"}, {"transport", "tcp"}})),
      written_dram_shm(prom::Child(written_bytes, {{"tier", "dram"}, {"transport", "shm"}})),
      written_dram_rdma(prom::Child(written_bytes, {{"tier", "dram"}, {"transport", "rdma"}})),
      written_ssd_local(prom::Child(written_bytes, {{"tier", "ssd"}, {"transport", "local"}})),
      demotions(
          prom::AddCounter(e.registry(), "shelf_store_demotions_total", "DRAM-to-SSD copies")),
      demotions_ok(prom::Child(demotions, {{"result", "ok"}})),
      demotions_failed(prom::Child(demotions, {{"result", "failed"}})),
      demotion_copies(prom::AddUnlabelledCounter(
          e.registry(), "shelf_store_demotion_copies_total",
          "Demotions written from a copy, not straight from the DRAM segment (--demote-copy)")),
      checksum_failures(
          prom::AddUnlabelledCounter(e.registry(), "shelf_store_checksum_failures_total",
                                     "Blocks whose bytes did not match their checksum")),
      read_grant_refusals(prom::AddUnlabelledCounter(
          e.registry(), "shelf_store_read_grant_refusals_total",
          "READ and READ_KEY frames refused for a missing or invalid read grant")),
      write_grant_refusals(prom::AddUnlabelledCounter(
          e.registry(), "shelf_store_stale_write_grant_refusals_total",
          "Writes refused because a newer put has been given their range")),
      ssd_seconds(prom::AddHistogram(e.registry(), "shelf_store_ssd_op_seconds",
                                     "SSD tier operation time")),
      promotions(prom::AddUnlabelledCounter(
          e.registry(), "shelf_store_promotions_total",
          "SSD blocks copied up to DRAM after a read (--promote-on-hit)")),
      ssd_read_seconds(prom::Child(ssd_seconds, {{"op", "read"}})),
      ssd_write_seconds(prom::Child(ssd_seconds, {{"op", "write"}})),
      data_closed(prom::AddCounter(e.registry(), "shelf_store_data_connections_closed_total",
                                   "Data-plane connections the store refused or closed, by rule")) {
}

Store::Store(const StoreOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      incarnation_(RandomIncarnation()),
      metrics_(DefaultExposition()) {}

#if SHELF_WITH_RDMA
struct Store::Rdma {
  transport::rdma::IbVerbs verbs;
  std::unique_ptr<transport::rdma::RdmaEngine> engine;
  std::unique_ptr<transport::rdma::RdmaStoreAcceptor> acceptor;  // before engine
  ~Rdma() { acceptor.reset(); }
};
#else
struct Store::Rdma {};
#endif

namespace {

// Opens the RDMA device and exposes the segment on it; null (logged) when
// that fails or the build has no RDMA.
std::unique_ptr<Store::Rdma> OpenRdma(const StoreOptions& options, storage::DramSegment* segment,
                                      uint32_t segment_id) {
  if (options.rdma_device.empty()) return nullptr;
#if SHELF_WITH_RDMA
  auto r = std::make_unique<Store::Rdma>();
  transport::rdma::RdmaEngine::Options eo;
  eo.device_name = options.rdma_device;
  eo.port_num = static_cast<uint8_t>(options.rdma_port);
  eo.gid_index = options.rdma_gid_index;
  eo.traffic_class = options.rdma_traffic_class;
  eo.service_level = options.rdma_service_level;
  eo.pkey_index = options.rdma_pkey_index;
  absl::Status s;
  transport::rdma::VerbsApi* verbs =
      options.rdma_verbs != nullptr ? static_cast<transport::rdma::VerbsApi*>(options.rdma_verbs)
                                    : &r->verbs;
  auto engine = transport::rdma::RdmaEngine::Open(verbs, eo);
  if (engine.ok()) {
    r->engine = *std::move(engine);
    // The store's clock: exposures end with read grants, which CheckRead
    // judges by it.
    r->acceptor = std::make_unique<transport::rdma::RdmaStoreAcceptor>(
        r->engine.get(), static_cast<uint64_t>(std::max(options.rdma_queue_pairs_max, 1)),
        options.clock != nullptr ? options.clock : Clock::Real());
    if (segment->arenas() == 0) {
      s = r->acceptor->AddSegment(segment_id, segment->data(), segment->size());
    }
    // One memory region (and rkey) per arena, each in a protection domain
    // of its own: a client is told the rkey of an arena only with a
    // location in it, and a queue pair made for one arena reads no other.
    for (uint32_t i = 0; s.ok() && i < segment->arenas(); ++i) {
      s = r->acceptor->AddSegment(i, segment->data() + i * segment->arena_bytes(),
                                  segment->arena_bytes(),
                                  transport::rdma::RdmaStoreAcceptor::Domain::kOwn);
    }
  } else {
    s = engine.status();
  }
  if (s.ok()) {
    SHELF_LOG(INFO) << "rdma offered" << Kv("device", options.rdma_device)
                    << Kv("mtu", r->engine->mtu_bytes());
    return r;
  }
  SHELF_LOG(ERROR) << "RDMA UNAVAILABLE: serving tcp and shm only"
                   << Kv("device", options.rdma_device) << Kv("error", s.message());
#else
  (void)segment;
  (void)segment_id;
  SHELF_LOG(ERROR) << "RDMA UNAVAILABLE: this build has no RDMA support (libibverbs not found)"
                   << Kv("device", options.rdma_device);
#endif
  return nullptr;
}

}  // namespace

Store::~Store() {
  gauges_.clear();
  Stop();
  data_server_.reset();
  shm_server_.reset();
  rdma_.reset();
}

uint64_t DefaultArenaBytes(uint64_t dram_size) {
  constexpr uint64_t kArenaMin = 1ull << 20, kPage = 4096, kHugePage = 2ull << 20;
  constexpr uint64_t kArenasMax = 16;
  const uint64_t most = std::clamp<uint64_t>(dram_size / kArenaMin, 2, kArenasMax);
  uint64_t fallback = 0;
  for (uint64_t k = most; k >= 2; --k) {
    if (dram_size % k != 0 || (dram_size / k) % kPage != 0) continue;
    if ((dram_size / k) % kHugePage == 0) return dram_size / k;
    if (fallback == 0) fallback = dram_size / k;
  }
  return fallback;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Start(const StoreOptions& options) {
  if (options.master.empty()) return absl::InvalidArgumentError("--master is required");
  if (options.demote_copy != "auto" && options.demote_copy != "always" &&
      options.demote_copy != "never") {
    return absl::InvalidArgumentError(
        absl::StrCat("--demote-copy takes auto, always or never, not '", options.demote_copy, "'"));
  }
  std::unique_ptr<Store> store(new Store(options));
  storage::DramSegment::Options dram;
  store->dram_bytes_ = options.dram_size;
  dram.size_bytes = options.dram_size + store->WindowBytes();
  dram.try_hugepages = options.hugepages;
  dram.mlock = options.mlock;
  dram.populate = options.populate_dram;
  dram.arena_bytes = options.shm_arena_bytes;
  auto seg = storage::DramSegment::Create(dram);
  if (!seg.ok()) return seg.status();
  store->segment_ = *std::move(seg);
  store->arenas_ = store->segment_->arenas();
  if (store->arenas_ == 1 || store->arenas_ > 64) {
    // One arena would hold every tenant; a master takes 64 segments at most.
    return absl::InvalidArgumentError(absl::StrCat("--shm-arena makes ", store->arenas_,
                                                   " arenas of --dram-size: 2 to 64 are needed"));
  }
  if (store->segment_->size() > store->dram_bytes_) {
    MutexLock lock(&store->pin_mu_);
    store->window_ = std::make_unique<storage::RangeAllocator>(
        store->segment_->size() - store->dram_bytes_, kWindowAlign);
  }

  store->OpenSsdTier();
  if (absl::Status s = store->ServeData(); !s.ok()) return s;
  store->ChooseIdentity();
  store->OfferShm();
  store->AddGauges();

  auto locator = coord::MasterLocator::Create(options.master, options.etcd);
  if (!locator.ok()) return locator.status();
  store->locator_ = *std::move(locator);
  store->token_ = options.master_token.empty() ? AuthToken(options.secret) : options.master_token;
  SHELF_LOG(INFO) << "store serving" << Kv("node", store->node_id_)
                  << Kv("listen", store->data_address_) << Kv("dram_bytes", options.dram_size)
                  << Kv("hugepages", store->segment_->hugepages())
                  << Kv("shm", store->shm_server_ != nullptr ? store->shm_server_->path() : "off")
                  << Kv("rdma", store->rdma_ != nullptr ? options.rdma_device : "off");
  return store;
}

void Store::OpenSsdTier() {
  if (options_.ssd_dir.empty()) return;
  storage::SsdTier::Options so;
  so.dir = options_.ssd_dir;
  so.capacity_bytes = options_.ssd_size != 0 ? options_.ssd_size : (64ull << 30);
  // Demotions from a segment of 4 KiB pages: blocks of 2 MiB and more
  // copied to hugepage buffers (Execute), runs of smaller ones gathered
  // into one (stage_runs), so that either reaches the disk in large
  // requests; not where private memory has no hugepages either.
  const bool small_pages = !segment_->large_pages();
  const bool copy = options_.demote_copy == "always" ||
                    (options_.demote_copy == "auto" && small_pages && ThpAdvisable("enabled"));
  if (copy) demote_copy_min_ = options_.demote_copy == "always" ? 0 : kIoBufferHugePage;
  so.stage_runs = copy;
  auto ssd = storage::SsdTier::Open(so);
  if (!ssd.ok()) {
    // What is there cannot be read: keep it for a post-mortem under
    // another name and start this tier empty. Its blocks are lost to the
    // cache, never served wrong.
    std::string aside = absl::StrCat(options_.ssd_dir, ".unreadable-", UnixMs());
    std::error_code ec;
    std::filesystem::rename(options_.ssd_dir, aside, ec);
    SHELF_LOG(ERROR) << "SSD TIER UNREADABLE: starting it empty" << Kv("dir", options_.ssd_dir)
                     << Kv("error", ssd.status().message())
                     << Kv("moved_to",
                           ec ? std::string("(not moved: ") + ec.message() + ")" : aside);
    if (!ec) {
      ssd = storage::SsdTier::Open(so);
      // Same identity: the node id moves back into the fresh directory.
      std::filesystem::copy_file(aside + "/NODE_ID", options_.ssd_dir + "/NODE_ID", ec);
    }
  }
  if (ssd.ok()) {
    ssd_ = *std::move(ssd);
    SHELF_LOG(INFO) << "SSD tier open" << Kv("dir", options_.ssd_dir)
                    << Kv("used_bytes", ssd_->used_bytes())
                    << Kv("capacity_bytes", so.capacity_bytes)
                    << Kv("demote_copy", options_.demote_copy);
    if (small_pages) {
      SHELF_LOG(WARNING) << "DRAM segment on 4 KiB pages: transparent hugepages are off for "
                            "shared memory (/sys/kernel/mm/transparent_hugepage/shmem_enabled); "
                            "a write straight from it is cut at the disk's segment limit "
                            "(254 pages on a virtio disk), so demotions go through hugepage "
                            "buffers, a copy each, where copying is on; set shmem_enabled to "
                            "advise (docs/operations.md, \"Tuning\")"
                         << Kv("demote_copy", options_.demote_copy) << Kv("copying", copy);
    }
  } else {
    // A broken SSD tier must not take the DRAM tier down with it.
    SHELF_LOG(ERROR) << "SSD TIER UNAVAILABLE: serving DRAM only" << Kv("dir", options_.ssd_dir)
                     << Kv("error", ssd.status().message());
  }
}

absl::Status Store::ServeData() {
  absl::StatusOr<HostPort> listen = ParseHostPort(options_.listen);
  if (!listen.ok()) return listen.status();
  transport::DataServer::Options dso;
  dso.listen = *listen;
  dso.secret = options_.secret;
  dso.max_connections = options_.max_connections;
  dso.max_connections_per_source = options_.max_connections_per_source;
  dso.handshake_timeout_ms = options_.handshake_timeout_ms;
  dso.idle_timeout_ms = options_.idle_timeout_ms;
  dso.max_unauthenticated = options_.max_unauthenticated;
  dso.max_unauthenticated_per_source = options_.max_unauthenticated_per_source;
  dso.session_tag_payload = options_.session_tag_payload;
  if (options_.data_tls) {
    auto tls = transport::wire::DataTls::ForServer(
        {options_.data_tls_files.cert, options_.data_tls_files.key, options_.data_tls_files.ca});
    if (!tls.ok()) return tls.status();
    dso.tls = *std::move(tls);
    SHELF_LOG(INFO) << "data-plane TLS 1.3 on" << Kv("kernel_tls", "not used")
                    << Kv("client_certificates",
                          options_.data_tls_files.ca.empty() ? "no" : "required");
  }
  rdma_ = OpenRdma(options_, segment_.get(), kSegmentId);
#if SHELF_WITH_RDMA
  if (rdma_ != nullptr) dso.rdma = rdma_->acceptor.get();
#endif
  auto server = transport::DataServer::Start(dso, this);
  if (!server.ok()) return server.status();
  data_server_ = *std::move(server);
  return absl::OkStatus();
}

void Store::ChooseIdentity() {
  HostPort bound = data_server_->bound();
  if (bound.host == "0.0.0.0" || bound.host == "::" || bound.host.empty()) {
    bound.host = HostName();
  }
  data_address_ = bound.ToString();

  if (!options_.node_id.empty()) {
    node_id_ = options_.node_id;
  } else if (ssd_ != nullptr) {
    node_id_ = LoadOrCreateNodeId(options_.ssd_dir);
  } else {
    node_id_ = absl::StrCat(HostName(), ":", bound.port);
  }
  // What the data-plane handshake proves to clients.
  data_server_->SetIdentity(node_id_, incarnation_);

  if (options_.run_dir.empty()) {
    // Several stores may share the default directory: one socket each.
    run_dir_ = DefaultRunDir();
    shm_socket_ = absl::StrCat(run_dir_, "/shm-", bound.port, ".sock");
  } else {
    run_dir_ = options_.run_dir;
    shm_socket_ = run_dir_ + "/shm.sock";
  }
}

void Store::OfferShm() {
  if (!options_.shm) return;
  if (absl::Status s = PrepareRunDir(run_dir_); !s.ok()) {
    SHELF_LOG(ERROR) << "SHARED MEMORY REFUSED: serving same-host clients over tcp"
                     << Kv("run_dir", run_dir_) << Kv("reason", s.message());
    return;
  }
  // Same-host clients check cached locations against the board, not by
  // asking; a store without one is asked (ShmKeyBoard refuses).
  if (arenas_ == 0 && options_.shm_key_board) {
    auto board = transport::KeyBoard::Create(segment_->size());
    if (board.ok()) {
      board_ = *std::move(board);
      owners_.AttachBoard(board_.get());
    } else {
      SHELF_LOG(WARNING) << "no key board: cached same-host reads ask the store"
                         << Kv("error", board.status().message());
    }
  }
  // With arenas no descriptor goes with the handshake: each arena's is
  // handed over for a read grant into it (ShmServer::StartArenas).
  auto shm =
      arenas_ > 0
          ? transport::ShmServer::StartArenas(shm_socket_, segment_->arena_bytes(), options_.secret,
                                              options_.shm_allow_uids, this)
          : transport::ShmServer::Start(shm_socket_, segment_->fd(), kSegmentId, segment_->size(),
                                        options_.secret, options_.shm_allow_uids, this);
  if (shm.ok()) {
    shm_server_ = *std::move(shm);
  } else {
    SHELF_LOG(WARNING) << "shared memory disabled" << Kv("error", shm.status().message());
  }
}

void Store::AddGauges() {
  prom::Exposition& r = DefaultExposition();
  gauges_.push_back(
      r.AddCallbackGauge("shelf_store_capacity_bytes", "Capacity by tier", {"tier"}, [this] {
        std::vector<prom::GaugeSample> out = {{{"dram"}, static_cast<double>(dram_bytes_)}};
        if (ssd_ != nullptr) {
          out.push_back({{"ssd"}, static_cast<double>(ssd_->capacity_bytes())});
        }
        return out;
      }));
  gauges_.push_back(r.AddCallbackGauge(
      "shelf_store_used_bytes", "Used bytes by tier (DRAM use is tracked by the master)", {"tier"},
      [this] {
        std::vector<prom::GaugeSample> out;
        if (ssd_ != nullptr) {
          out.push_back({{"ssd"}, static_cast<double>(ssd_->used_bytes())});
        }
        return out;
      }));
  gauges_.push_back(
      r.AddCallbackGauge("shelf_store_connections", "Open data-plane connections",
                         [this] { return static_cast<double>(data_server_->connections()); }));
#if SHELF_WITH_RDMA
  if (rdma_ != nullptr) {
    gauges_.push_back(r.AddCallbackGauge(
        "shelf_store_rdma",
        "RDMA: live client queue pairs, those refused or expired, and puts pulled (count, bytes, "
        "errors)",
        {"what"}, [this] {
          transport::rdma::RdmaStoreAcceptor::Stats s = rdma_->acceptor->stats();
          return std::vector<prom::GaugeSample>{
              {{"queue_pairs"}, static_cast<double>(s.live)},
              {{"queue_pairs_refused"}, static_cast<double>(s.refused)},
              {{"queue_pairs_expired"}, static_cast<double>(s.expired)},
              {{"pulls"}, static_cast<double>(s.pulls)},
              {{"pull_bytes"}, static_cast<double>(s.pull_bytes)},
              {{"pull_errors"}, static_cast<double>(s.pull_errors)}};
        }));
  }
#endif
}

}  // namespace shelf::store
