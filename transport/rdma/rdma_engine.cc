// RdmaEngine: device and port setup, registration and endpoint creation (see
// rdma_engine.h).
#include "transport/rdma/rdma_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/log.h"

namespace shelf::transport::rdma {
namespace {

// Outstanding RDMA READs per QP we ask for; devices commonly allow 16.
constexpr int kRdAtomicWanted = 16;
// An op's length travels in a 32-bit SGE length; keep well inside it.
constexpr uint64_t kOpBytesLimit = uint64_t{1} << 31;

constexpr int kGidIndexMax = 255;      // ibv_global_route.sgid_index is a u8
constexpr int kTrafficClassMax = 255;  // ibv_global_route.traffic_class is a u8
constexpr int kServiceLevelMax = 15;   // the SL is 4 bits
constexpr int kRdAtomicMax = 255;      // ibv_qp_attr.max_rd_atomic is a u8
static_assert(kRdAtomicWanted <= kRdAtomicMax);

bool IsZero(const ibv_gid& gid) {
  return std::all_of(std::begin(gid.raw), std::end(gid.raw), [](uint8_t b) { return b == 0; });
}

// fe80::/10: reachable only inside one L2 segment.
bool IsLinkLocal(const ibv_gid& gid) { return gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80; }

std::string Where(const std::string& device, uint8_t port, int gid_index) {
  return absl::StrCat("RDMA device ", device, " port ", static_cast<int>(port), " GID index ",
                      gid_index);
}

// The auto choice of GID index (see Options::gid_index).
absl::StatusOr<int> ChooseGidIndex(VerbsApi* verbs, ibv_context* ctx, const std::string& device,
                                   uint8_t port_num, const ibv_port_attr& port) {
  // UNSPECIFIED is what old kernels report for InfiniBand.
  if (port.link_layer != IBV_LINK_LAYER_ETHERNET) return 0;
  const int entries = std::min(port.gid_tbl_len, kGidIndexMax + 1);
  int link_local = -1;
  for (int i = 0; i < entries; ++i) {
    absl::StatusOr<GidType> type = verbs->QueryGidType(ctx, port_num, i);
    if (!type.ok() || *type != GidType::kRoceV2) continue;  // unused, or not v2
    ibv_gid gid{};
    if (!verbs->QueryGid(ctx, port_num, i, &gid).ok() || IsZero(gid)) continue;
    if (!IsLinkLocal(gid)) return i;
    if (link_local < 0) link_local = i;
  }
  if (link_local >= 0) return link_local;
  return absl::FailedPreconditionError(
      absl::StrCat("RDMA device ", device, " port ", static_cast<int>(port_num),
                   ": no RoCE v2 GID among ", entries,
                   " entries (does its network interface have an IP address?); give a GID index "
                   "to use another type"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RdmaEngine>> RdmaEngine::Open(VerbsApi* verbs,
                                                             const Options& options) {
  if (options.gid_index != kGidIndexAuto &&
      (options.gid_index < 0 || options.gid_index > kGidIndexMax)) {
    return absl::InvalidArgumentError(absl::StrCat("RDMA gid_index ", options.gid_index,
                                                   "; want 0..", kGidIndexMax, " or auto (",
                                                   kGidIndexAuto, ")"));
  }
  if (options.traffic_class < 0 || options.traffic_class > kTrafficClassMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA traffic_class ", options.traffic_class, "; want 0..", kTrafficClassMax));
  }
  if (options.service_level < 0 || options.service_level > kServiceLevelMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA service_level ", options.service_level, "; want 0..", kServiceLevelMax));
  }
  if (options.pkey_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA pkey_index ", options.pkey_index, " is negative"));
  }
  if (options.domains_max < 1) {
    return absl::InvalidArgumentError("RDMA domains_max must be at least 1 (the default domain)");
  }
  absl::StatusOr<std::vector<std::string>> names = verbs->ListDevices();
  if (!names.ok()) return names.status();
  if (names->empty()) return absl::NotFoundError("no RDMA devices");
  std::string name = options.device_name.empty() ? names->front() : options.device_name;
  absl::StatusOr<ibv_context*> ctx = verbs->OpenDevice(name);
  if (!ctx.ok()) return ctx.status();

  std::unique_ptr<RdmaEngine> engine(new RdmaEngine);
  engine->device_name_ = name;
  EndpointDevice& d = engine->device_;
  d.verbs = verbs;
  d.context = *ctx;
  d.port_num = options.port_num;
  d.traffic_class = static_cast<uint8_t>(options.traffic_class);
  d.service_level = static_cast<uint8_t>(options.service_level);
  // From here on the destructor releases whatever was acquired.
  ibv_device_attr device_attr{};
  absl::Status s = verbs->QueryDevice(d.context, &device_attr);
  ibv_port_attr port{};
  if (s.ok()) s = verbs->QueryPort(d.context, options.port_num, &port);
  if (s.ok() && port.state != IBV_PORT_ACTIVE) {
    s = absl::UnavailableError(absl::StrCat("RDMA device ", name, " port ",
                                            static_cast<int>(options.port_num), " is not ACTIVE"));
  }
  // Index 0 is taken on trust: some providers report no P_Key table at all.
  if (s.ok() && options.pkey_index > 0 && options.pkey_index >= port.pkey_tbl_len) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "RDMA device ", name, " port ", static_cast<int>(options.port_num), ": pkey_index ",
        options.pkey_index, " outside its ", port.pkey_tbl_len, "-entry P_Key table"));
  }
  d.pkey_index = static_cast<uint16_t>(options.pkey_index);
  d.gid_index = options.gid_index;
  if (s.ok() && d.gid_index == kGidIndexAuto) {
    absl::StatusOr<int> chosen = ChooseGidIndex(verbs, d.context, name, options.port_num, port);
    if (chosen.ok()) {
      d.gid_index = *chosen;
    } else {
      s = chosen.status();
    }
  }
  if (s.ok()) {
    s = verbs->QueryGid(d.context, options.port_num, d.gid_index, &d.gid);
    if (!s.ok()) {
      s = absl::Status(s.code(),
                       absl::StrCat(Where(name, options.port_num, d.gid_index), ": ", s.message()));
    }
  }
  // An unused GID entry reads as zeros. A QP with that source GID would
  // send frames no peer can answer, so refuse it here rather than have every
  // connection time out.
  if (s.ok() && IsZero(d.gid)) {
    s = absl::FailedPreconditionError(absl::StrCat(
        Where(name, options.port_num, d.gid_index),
        ": the GID is all zero (an unused entry; on RoCE, no IP address behind it); pick an "
        "index that has a GID (ibv_devinfo -v, show_gids) or leave the index on auto"));
  }
  if (!s.ok()) return s;
  d.lid = port.lid;
  d.active_mtu = port.active_mtu;
  d.rd_atomic_responder =
      static_cast<uint8_t>(std::clamp(device_attr.max_qp_rd_atom, 1, kRdAtomicWanted));
  d.rd_atomic_initiator =
      static_cast<uint8_t>(std::clamp(device_attr.max_qp_init_rd_atom, 1, kRdAtomicWanted));
  d.msg_bytes_max = port.max_msg_sz;
  d.qp_wr_max = static_cast<uint32_t>(std::max(0, device_attr.max_qp_wr));

  engine->exporter_ = options.dmabuf_exporter;
  if (engine->exporter_ == nullptr) engine->exporter_ = NewCudaDmabufExporter();
  engine->gpu_registration_ = options.gpu_registration;
  engine->regions_max_ = options.regions_max;
  engine->domains_max_ = options.domains_max;
  {
    MutexLock lock(&engine->domains_mu_);
    if (absl::Status pd = engine->AddDomainLocked(); !pd.ok()) return pd;
    d.pd = engine->domains_[kDefaultDomain]->pd;
    d.registry = engine->domains_[kDefaultDomain]->registry.get();
  }
  SHELF_LOG(INFO) << "RDMA device opened" << Kv("device", name)
                  << Kv("port", static_cast<int>(options.port_num)) << Kv("gid_index", d.gid_index)
                  << Kv("mtu", engine->mtu_bytes()) << Kv("lid", d.lid);
  return engine;
}

RdmaEngine::~RdmaEngine() {
  SHELF_CHECK(live_endpoints_.load() == 0);
  MutexLock lock(&domains_mu_);
  // Every MR before the PDs (no QP is left: the endpoints are gone).
  for (std::unique_ptr<Domain>& domain : domains_) domain->registry.reset();
  for (std::unique_ptr<Domain>& domain : domains_) {
    absl::Status s = device_.verbs->DeallocPd(domain->pd);
    if (!s.ok()) {
      SHELF_LOG(ERROR) << "RDMA: deallocating PD failed: " << s.ToString();
    }
  }
  domains_.clear();
  if (device_.context != nullptr) {
    absl::Status s = device_.verbs->CloseDevice(device_.context);
    if (!s.ok()) {
      SHELF_LOG(ERROR) << "RDMA: closing device failed: " << s.ToString();
    }
  }
}

absl::Status RdmaEngine::AddDomainLocked() {
  if (domains_.size() >= domains_max_) {
    return absl::ResourceExhaustedError(absl::StrCat("RDMA device ", device_name_, ": ",
                                                     domains_max_,
                                                     " protection domains already (domains_max)"));
  }
  absl::StatusOr<ibv_pd*> pd = device_.verbs->AllocPd(device_.context);
  if (!pd.ok()) return pd.status();
  auto domain = std::make_unique<Domain>();
  domain->pd = *pd;
  MemoryRegistry::Options registry_options;
  registry_options.gpu = gpu_registration_;
  registry_options.exporter = exporter_.get();
  registry_options.regions_max = regions_max_;
  registry_options.domain = static_cast<uint32_t>(domains_.size());
  domain->registry = std::make_unique<MemoryRegistry>(device_.verbs, *pd, registry_options);
  domains_.push_back(std::move(domain));
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> RdmaEngine::NewDomain() {
  MutexLock lock(&domains_mu_);
  if (absl::Status s = AddDomainLocked(); !s.ok()) return s;
  return static_cast<uint32_t>(domains_.size() - 1);
}

RdmaEngine::Domain* RdmaEngine::FindDomain(uint32_t id) const {
  MutexLock lock(&domains_mu_);
  return id < domains_.size() ? domains_[id].get() : nullptr;
}

absl::StatusOr<MemoryRegion> RdmaEngine::RegisterMemory(void* addr, size_t length, MemoryKind kind,
                                                        MemoryAccess access, uint32_t domain) {
  Domain* d = FindDomain(domain);
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat("RDMA: no protection domain ", domain));
  }
  return d->registry->Register(addr, length, kind, access);
}

absl::Status RdmaEngine::UnregisterMemory(const MemoryRegion& region) {
  Domain* d = FindDomain(region.domain);
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat("RDMA: no protection domain ", region.domain));
  }
  return d->registry->Unregister(region.id);
}

std::optional<MemoryRegion> RdmaEngine::FindMemory(const void* addr, uint64_t bytes,
                                                   uint32_t domain) const {
  Domain* d = FindDomain(domain);
  if (d == nullptr) return std::nullopt;
  return d->registry->Find(addr, bytes);
}

MemoryRegistry::Stats RdmaEngine::registration_stats(uint32_t domain) const {
  Domain* d = FindDomain(domain);
  return d == nullptr ? MemoryRegistry::Stats{} : d->registry->stats();
}

absl::StatusOr<std::unique_ptr<RdmaEndpoint>> RdmaEngine::CreateEndpoint(
    RdmaEndpoint::Options options) {
  if (options.sq_depth < 1 || options.sq_depth > device_.qp_wr_max) {
    return absl::InvalidArgumentError(absl::StrCat("RDMA sq_depth ", options.sq_depth,
                                                   "; the device allows 1..", device_.qp_wr_max));
  }
  if (options.signal_interval < 1 || options.signal_interval > options.sq_depth) {
    return absl::InvalidArgumentError("RDMA signal_interval must be in 1..sq_depth");
  }
  if (options.op_bytes_max < 1 || options.op_bytes_max > kOpBytesLimit ||
      options.batch_ops_max < 1 || options.batches_max < 1) {
    return absl::InvalidArgumentError("RDMA endpoint limits out of range");
  }
  Domain* domain = FindDomain(options.domain);
  if (domain == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA endpoint in protection domain ", options.domain, ": no such domain"));
  }
  if (options.expose.has_value() &&
      (options.expose->access == MemoryAccess::kLocal || options.expose->domain != options.domain ||
       !domain->registry->IsLive(*options.expose))) {
    return absl::InvalidArgumentError(
        "RDMA endpoint can expose only a live kRemoteRead or kRemoteReadWrite region of its "
        "engine, in the endpoint's protection domain");
  }
  // The QP goes in the domain's PD, and its ops find their lkeys in the
  // domain's registry.
  EndpointDevice device = device_;
  device.pd = domain->pd;
  device.registry = domain->registry.get();
  std::unique_ptr<RdmaEndpoint> endpoint(
      new RdmaEndpoint(device, std::move(options), &live_endpoints_));
  absl::Status s;
  {
    MutexLock lock(&endpoint->mu_);
    s = endpoint->CreateQpLocked();
  }
  if (!s.ok()) return s;
  return endpoint;
}

}  // namespace shelf::transport::rdma
