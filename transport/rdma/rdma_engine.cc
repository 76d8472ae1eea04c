// RdmaEngine: device and port setup, registration and endpoint creation (see
// rdma_engine.h).
#include "transport/rdma/rdma_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "transport/rdma/check.h"

namespace shelf::rdma {
namespace {

// Outstanding RDMA READs per QP we ask for; devices commonly allow 16.
constexpr int kRdAtomicWanted = 16;
// An op's length travels in a 32-bit SGE length; keep well inside it.
constexpr uint64_t kOpBytesLimit = uint64_t{1} << 31;

}  // namespace

absl::StatusOr<std::unique_ptr<RdmaEngine>> RdmaEngine::Open(VerbsApi* verbs, Options options) {
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
  d.gid_index = options.gid_index;
  // From here on the destructor releases whatever was acquired.
  ibv_device_attr device_attr{};
  absl::Status s = verbs->QueryDevice(d.context, &device_attr);
  ibv_port_attr port{};
  if (s.ok()) s = verbs->QueryPort(d.context, options.port_num, &port);
  if (s.ok() && port.state != IBV_PORT_ACTIVE) {
    s = absl::UnavailableError(
        absl::StrCat("RDMA device ", name, " port ", options.port_num, " is not ACTIVE"));
  }
  if (s.ok()) s = verbs->QueryGid(d.context, options.port_num, options.gid_index, &d.gid);
  if (s.ok()) {
    absl::StatusOr<ibv_pd*> pd = verbs->AllocPd(d.context);
    if (pd.ok()) {
      d.pd = *pd;
    } else {
      s = pd.status();
    }
  }
  if (!s.ok()) return s;
  d.lid = port.lid;
  d.active_mtu = port.active_mtu;
  d.rd_atomic = static_cast<uint8_t>(std::max(
      1, std::min({kRdAtomicWanted, device_attr.max_qp_rd_atom, device_attr.max_qp_init_rd_atom})));
  d.msg_bytes_max = port.max_msg_sz;
  d.qp_wr_max = static_cast<uint32_t>(std::max(0, device_attr.max_qp_wr));

  engine->exporter_ = options.dmabuf_exporter;
  if (engine->exporter_ == nullptr) engine->exporter_ = NewCudaDmabufExporter();
  MemoryRegistry::Options registry_options;
  registry_options.gpu = options.gpu_registration;
  registry_options.exporter = engine->exporter_.get();
  registry_options.regions_max = options.regions_max;
  engine->registry_ = std::make_unique<MemoryRegistry>(verbs, d.pd, registry_options);
  d.registry = engine->registry_.get();
  SHELF_LOG(INFO) << "RDMA device opened" << Kv("device", name)
                  << Kv("port", static_cast<int>(options.port_num))
                  << Kv("mtu", engine->mtu_bytes()) << Kv("lid", d.lid);
  return engine;
}

RdmaEngine::~RdmaEngine() {
  SHELF_RDMA_CHECK(live_endpoints_.load() == 0);
  registry_.reset();
  if (device_.pd != nullptr) {
    absl::Status s = device_.verbs->DeallocPd(device_.pd);
    if (!s.ok()) {
      SHELF_LOG(ERROR) << "RDMA: deallocating PD failed: " << s.ToString();
    }
  }
  if (device_.context != nullptr) {
    absl::Status s = device_.verbs->CloseDevice(device_.context);
    if (!s.ok()) {
      SHELF_LOG(ERROR) << "RDMA: closing device failed: " << s.ToString();
    }
  }
}

absl::StatusOr<MemoryRegion> RdmaEngine::RegisterMemory(void* addr, size_t length, MemoryKind kind,
                                                        MemoryAccess access) {
  return registry_->Register(addr, length, kind, access);
}

absl::Status RdmaEngine::UnregisterMemory(const MemoryRegion& region) {
  return registry_->Unregister(region.id);
}

std::optional<MemoryRegion> RdmaEngine::FindMemory(const void* addr, uint64_t bytes) const {
  return registry_->Find(addr, bytes);
}

MemoryRegistry::Stats RdmaEngine::registration_stats() const { return registry_->stats(); }

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
  if (options.expose.has_value() &&
      (options.expose->access == MemoryAccess::kLocal || !registry_->IsLive(*options.expose))) {
    return absl::InvalidArgumentError(
        "RDMA endpoint can expose only a live kRemoteRead or kRemoteReadWrite region of its "
        "engine");
  }
  std::unique_ptr<RdmaEndpoint> endpoint(
      new RdmaEndpoint(device_, std::move(options), &live_endpoints_));
  absl::Status s;
  {
    absl::MutexLock lock(&endpoint->mu_);
    s = endpoint->CreateQpLocked();
  }
  if (!s.ok()) return s;
  return endpoint;
}

}  // namespace shelf::rdma
