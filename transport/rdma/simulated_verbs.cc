// SimulatedVerbs: the simulated device's objects and rules (see
// simulated_verbs.h for what it enforces and why).
#include "transport/rdma/simulated_verbs.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shelf::transport::rdma {

// The libibverbs struct comes first in each simulated object so that the
// pointer handed out is the object's own address; the maps validate every
// pointer that comes back before it is used.
struct SimulatedVerbs::Device {
  std::string name;
  int index = 0;
  std::vector<SimulatedGid> gids;  // gid_table_len entries; all zero: unused
  uint16_t lid = 0;
  int max_qp_rd_atom = 0;
};

struct SimulatedVerbs::Context {
  ibv_context ctx{};
  Device* device = nullptr;
};

struct SimulatedVerbs::Pd {
  ibv_pd pd{};
  Context* context = nullptr;
};

struct SimulatedVerbs::Mr {
  ibv_mr mr{};
  Pd* pd = nullptr;
  uint64_t addr = 0;  // host address (the iova of a dmabuf MR)
  uint64_t length = 0;
  int access = 0;
};

struct SimulatedVerbs::Cq {
  struct Entry {
    ibv_wc wc;
    uint32_t retires;  // send-queue slots freed when this entry is polled
  };
  ibv_cq cq{};
  Context* context = nullptr;
  int capacity = 0;
  bool overflowed = false;
  int users = 0;  // QPs using this CQ
  std::deque<Entry> entries;
};

struct SimulatedVerbs::Qp {
  ibv_qp qp{};
  Context* context = nullptr;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  ibv_qp_state state = IBV_QPS_RESET;
  int access_flags = 0;  // remote access the QP accepts (set at INIT)
  uint8_t port = 0;
  bool sq_sig_all = false;
  uint32_t max_send_wr = 0;
  uint32_t max_send_sge = 0;
  uint16_t pkey_index = 0;
  // Connection, set at RTR and RTS.
  uint32_t dest_qp_num = 0;
  bool is_global = false;
  uint8_t sgid_index = 0;
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
  uint8_t max_rd_atomic = 0;
  uint8_t max_dest_rd_atomic = 0;
  ibv_gid dest_gid{};
  uint16_t dest_lid = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  // Send-queue accounting.
  uint32_t sq_outstanding = 0;    // WRs posted, not yet retired by a polled completion
  uint32_t since_completion = 0;  // WRs posted since the last one that generated a completion
};

namespace {

absl::Status Errno(int err, const std::string& what) {
  return absl::ErrnoToStatus(err, absl::StrCat("simulated device: ", what));
}

bool Covers(uint64_t base, uint64_t length, uint64_t addr, uint64_t bytes) {
  return addr >= base && bytes <= length && addr - base <= length - bytes;
}

bool ValidMtu(int mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096; }

bool IsZero(const std::array<uint8_t, 16>& gid) {
  for (uint8_t b : gid) {
    if (b != 0) return false;
  }
  return true;
}

constexpr int kAccessKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_RELAXED_ORDERING;

}  // namespace

std::vector<SimulatedGid> SimulatedVerbs::DefaultGids() {
  SimulatedGid link_local;
  link_local.gid[0] = 0xfe;
  link_local.gid[1] = 0x80;
  SimulatedGid ipv4;  // ::ffff:10.0.0.0
  ipv4.gid[10] = 0xff;
  ipv4.gid[11] = 0xff;
  ipv4.gid[12] = 10;
  std::vector<SimulatedGid> gids = {link_local, link_local, ipv4, ipv4};
  gids[0].type = gids[2].type = GidType::kRoceV1;
  gids[1].type = gids[3].type = GidType::kRoceV2;
  return gids;
}

SimulatedVerbs::SimulatedVerbs() : SimulatedVerbs(Options{}) {}

SimulatedVerbs::SimulatedVerbs(Options options) : options_(std::move(options)) {
  for (size_t i = 0; i < options_.device_names.size(); ++i) {
    auto device = std::make_unique<Device>();
    device->name = options_.device_names[i];
    device->index = static_cast<int>(i);
    device->gids.resize(std::max<size_t>(options_.gid_table_len, options_.gids.size()));
    for (size_t g = 0; g < options_.gids.size(); ++g) {
      SimulatedGid entry = options_.gids[g];
      if (!IsZero(entry.gid)) entry.gid[15] = static_cast<uint8_t>(entry.gid[15] + i + 1);
      device->gids[g] = entry;
    }
    device->lid = static_cast<uint16_t>(i + 1);
    auto depth = options_.max_qp_rd_atom_of.find(device->name);
    device->max_qp_rd_atom =
        depth == options_.max_qp_rd_atom_of.end() ? options_.max_qp_rd_atom : depth->second;
    devices_.push_back(std::move(device));
  }
}

SimulatedVerbs::~SimulatedVerbs() = default;

absl::Status SimulatedVerbs::TakeFault(Call call) {
  auto it = faults_.find(call);
  if (it == faults_.end() || it->second.empty()) return absl::OkStatus();
  int err = it->second.front();
  it->second.erase(it->second.begin());
  return Errno(err, "injected failure");
}

SimulatedVerbs::Context* SimulatedVerbs::FindContext(ibv_context* ctx) const {
  auto it = contexts_.find(ctx);
  return it == contexts_.end() ? nullptr : it->second.get();
}
SimulatedVerbs::Pd* SimulatedVerbs::FindPd(ibv_pd* pd) const {
  auto it = pds_.find(pd);
  return it == pds_.end() ? nullptr : it->second.get();
}
SimulatedVerbs::Cq* SimulatedVerbs::FindCq(ibv_cq* cq) const {
  auto it = cqs_.find(cq);
  return it == cqs_.end() ? nullptr : it->second.get();
}
SimulatedVerbs::Qp* SimulatedVerbs::FindQp(ibv_qp* qp) const {
  auto it = qps_.find(qp);
  return it == qps_.end() ? nullptr : it->second.get();
}

absl::StatusOr<std::vector<std::string>> SimulatedVerbs::ListDevices() {
  return options_.device_names;
}

absl::StatusOr<ibv_context*> SimulatedVerbs::OpenDevice(const std::string& name) {
  MutexLock lock(&mu_);
  for (const auto& device : devices_) {
    if (device->name != name) continue;
    auto context = std::make_unique<Context>();
    context->device = device.get();
    ibv_context* handle = &context->ctx;
    contexts_.emplace(handle, std::move(context));
    ++stats_.live_contexts;
    return handle;
  }
  return absl::NotFoundError(absl::StrCat("simulated device: no device named ", name));
}

absl::Status SimulatedVerbs::CloseDevice(ibv_context* ctx) {
  MutexLock lock(&mu_);
  Context* context = FindContext(ctx);
  if (context == nullptr) return Errno(EINVAL, "CloseDevice: unknown context");
  for (const auto& [handle, pd] : pds_) {
    if (pd->context == context) return Errno(EBUSY, "CloseDevice: a PD is still allocated");
  }
  for (const auto& [handle, cq] : cqs_) {
    if (cq->context == context) return Errno(EBUSY, "CloseDevice: a CQ still exists");
  }
  contexts_.erase(ctx);
  --stats_.live_contexts;
  return absl::OkStatus();
}

absl::Status SimulatedVerbs::QueryDevice(ibv_context* ctx, ibv_device_attr* attr) {
  MutexLock lock(&mu_);
  Context* context = FindContext(ctx);
  if (context == nullptr) return Errno(EINVAL, "QueryDevice: unknown context");
  *attr = ibv_device_attr{};
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "simulated");
  attr->max_mr_size = ~uint64_t{0};
  attr->max_qp = 1 << 16;
  attr->max_qp_wr = options_.max_qp_wr;
  attr->max_sge = options_.max_sge;
  attr->max_cq = 1 << 16;
  attr->max_cqe = options_.max_cqe;
  attr->max_mr = 1 << 20;
  attr->max_pd = 1 << 16;
  attr->max_qp_rd_atom = context->device->max_qp_rd_atom;
  attr->max_qp_init_rd_atom = context->device->max_qp_rd_atom;
  attr->phys_port_cnt = 1;
  return absl::OkStatus();
}

absl::Status SimulatedVerbs::QueryPort(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr) {
  MutexLock lock(&mu_);
  Context* context = FindContext(ctx);
  if (context == nullptr) return Errno(EINVAL, "QueryPort: unknown context");
  if (port_num != 1) return Errno(EINVAL, "QueryPort: the device has only port 1");
  *attr = ibv_port_attr{};
  attr->state = IBV_PORT_ACTIVE;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = options_.active_mtu;
  attr->gid_tbl_len = static_cast<int>(context->device->gids.size());
  attr->pkey_tbl_len = static_cast<uint16_t>(options_.pkey_table_len);
  attr->max_msg_sz = options_.max_msg_bytes;
  attr->lid = context->device->lid;
  attr->link_layer = options_.link_layer;
  return absl::OkStatus();
}

absl::Status SimulatedVerbs::QueryGid(ibv_context* ctx, uint8_t port_num, int gid_index,
                                      ibv_gid* gid) {
  MutexLock lock(&mu_);
  Context* context = FindContext(ctx);
  if (context == nullptr) return Errno(EINVAL, "QueryGid: unknown context");
  const std::vector<SimulatedGid>& gids = context->device->gids;
  if (port_num != 1 || gid_index < 0 || static_cast<size_t>(gid_index) >= gids.size()) {
    return Errno(EINVAL, "QueryGid: no such port or index");
  }
  std::copy(gids[gid_index].gid.begin(), gids[gid_index].gid.end(), gid->raw);
  return absl::OkStatus();
}

absl::StatusOr<GidType> SimulatedVerbs::QueryGidType(ibv_context* ctx, uint8_t port_num,
                                                     int gid_index) {
  MutexLock lock(&mu_);
  Context* context = FindContext(ctx);
  if (context == nullptr) return Errno(EINVAL, "QueryGidType: unknown context");
  const std::vector<SimulatedGid>& gids = context->device->gids;
  if (port_num != 1 || gid_index < 0 || static_cast<size_t>(gid_index) >= gids.size()) {
    return Errno(EINVAL, "QueryGidType: no such port or index");
  }
  // As ibv_query_gid_ex: an unused entry has no type.
  if (IsZero(gids[gid_index].gid)) return Errno(ENODATA, "QueryGidType: unused entry");
  return gids[gid_index].type;
}

absl::StatusOr<ibv_pd*> SimulatedVerbs::AllocPd(ibv_context* ctx) {
  MutexLock lock(&mu_);
  Context* context = FindContext(ctx);
  if (context == nullptr) return Errno(EINVAL, "AllocPd: unknown context");
  auto pd = std::make_unique<Pd>();
  pd->context = context;
  pd->pd.context = ctx;
  ibv_pd* handle = &pd->pd;
  pds_.emplace(handle, std::move(pd));
  ++stats_.live_pds;
  return handle;
}

absl::Status SimulatedVerbs::DeallocPd(ibv_pd* handle) {
  MutexLock lock(&mu_);
  Pd* pd = FindPd(handle);
  if (pd == nullptr) return Errno(EINVAL, "DeallocPd: unknown PD");
  for (const auto& [h, mr] : mrs_) {
    if (mr->pd == pd) return Errno(EBUSY, "DeallocPd: an MR is still registered");
  }
  for (const auto& [h, qp] : qps_) {
    if (qp->pd == pd) return Errno(EBUSY, "DeallocPd: a QP still exists");
  }
  pds_.erase(handle);
  --stats_.live_pds;
  return absl::OkStatus();
}

absl::StatusOr<ibv_mr*> SimulatedVerbs::AddMr(Pd* pd, uint64_t addr, size_t length, int access,
                                              bool dmabuf) {
  if (length == 0) return Errno(EINVAL, "register: zero length");
  if ((access & ~kAccessKnown) != 0) return Errno(EINVAL, "register: unknown access flags");
  // As on hardware, remote write needs local write.
  if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    return Errno(EINVAL, "register: REMOTE_WRITE requires LOCAL_WRITE");
  }
  if (addr + length < addr) return Errno(EINVAL, "register: range wraps around");
  auto mr = std::make_unique<Mr>();
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  mr->access = access;
  // Keys look like a hardware key: a table index and an 8-bit variant.
  uint32_t key = (next_key_index_++ << 8) | 0x5a;
  mr->mr.context = pd->pd.context;
  mr->mr.pd = &pd->pd;
  mr->mr.addr = reinterpret_cast<void*>(addr);
  mr->mr.length = length;
  mr->mr.lkey = key;
  mr->mr.rkey = key;
  ibv_mr* handle = &mr->mr;
  mrs_by_key_[key] = mr.get();
  mrs_.emplace(handle, std::move(mr));
  ++stats_.live_mrs;
  ++stats_.mrs_registered;
  if (dmabuf) ++stats_.dmabuf_mrs_registered;
  return handle;
}

absl::StatusOr<ibv_mr*> SimulatedVerbs::RegMr(ibv_pd* handle, void* addr, size_t length,
                                              int access) {
  MutexLock lock(&mu_);
  Pd* pd = FindPd(handle);
  if (pd == nullptr) return Errno(EINVAL, "RegMr: unknown PD");
  if (addr == nullptr) return Errno(EFAULT, "RegMr: null address");
  if (absl::Status s = TakeFault(Call::kRegMr); !s.ok()) return s;
  return AddMr(pd, reinterpret_cast<uint64_t>(addr), length, access, /*dmabuf=*/false);
}

absl::StatusOr<ibv_mr*> SimulatedVerbs::RegDmabufMr(ibv_pd* handle, uint64_t offset, size_t length,
                                                    uint64_t iova, int fd, int access) {
  MutexLock lock(&mu_);
  Pd* pd = FindPd(handle);
  if (pd == nullptr) return Errno(EINVAL, "RegDmabufMr: unknown PD");
  if (fd < 0) return Errno(EBADF, "RegDmabufMr: bad fd");
  if (iova == 0) return Errno(EINVAL, "RegDmabufMr: null iova");
  if (absl::Status s = TakeFault(Call::kRegDmabufMr); !s.ok()) return s;
  return AddMr(pd, iova, length, access, /*dmabuf=*/true);
}

absl::Status SimulatedVerbs::DeregMr(ibv_mr* handle) {
  MutexLock lock(&mu_);
  auto it = mrs_.find(handle);
  if (it == mrs_.end()) return Errno(EINVAL, "DeregMr: unknown MR");
  mrs_by_key_.erase(handle->lkey);
  mrs_.erase(it);
  --stats_.live_mrs;
  return absl::OkStatus();
}

absl::StatusOr<ibv_cq*> SimulatedVerbs::CreateCq(ibv_context* ctx, int cqe) {
  MutexLock lock(&mu_);
  Context* context = FindContext(ctx);
  if (context == nullptr) return Errno(EINVAL, "CreateCq: unknown context");
  if (cqe < 1 || cqe > options_.max_cqe) return Errno(EINVAL, "CreateCq: bad size");
  auto cq = std::make_unique<Cq>();
  cq->context = context;
  cq->capacity = cqe;
  cq->cq.context = ctx;
  cq->cq.cqe = cqe;
  ibv_cq* handle = &cq->cq;
  cqs_.emplace(handle, std::move(cq));
  ++stats_.live_cqs;
  return handle;
}

absl::Status SimulatedVerbs::DestroyCq(ibv_cq* handle) {
  MutexLock lock(&mu_);
  Cq* cq = FindCq(handle);
  if (cq == nullptr) return Errno(EINVAL, "DestroyCq: unknown CQ");
  if (cq->users > 0) return Errno(EBUSY, "DestroyCq: a QP still uses it");
  cqs_.erase(handle);
  --stats_.live_cqs;
  return absl::OkStatus();
}

absl::StatusOr<ibv_qp*> SimulatedVerbs::CreateQp(ibv_pd* pd_handle, ibv_qp_init_attr* init) {
  MutexLock lock(&mu_);
  Pd* pd = FindPd(pd_handle);
  if (pd == nullptr) return Errno(EINVAL, "CreateQp: unknown PD");
  Cq* send_cq = FindCq(init->send_cq);
  Cq* recv_cq = FindCq(init->recv_cq);
  if (send_cq == nullptr || recv_cq == nullptr) return Errno(EINVAL, "CreateQp: unknown CQ");
  if (send_cq->context != pd->context || recv_cq->context != pd->context) {
    return Errno(EINVAL, "CreateQp: CQ and PD belong to different contexts");
  }
  if (init->qp_type != IBV_QPT_RC) return Errno(EOPNOTSUPP, "CreateQp: only RC QPs");
  if (init->srq != nullptr) return Errno(EOPNOTSUPP, "CreateQp: no SRQ support");
  if (init->cap.max_send_wr < 1 ||
      init->cap.max_send_wr > static_cast<uint32_t>(options_.max_qp_wr) ||
      init->cap.max_recv_wr > static_cast<uint32_t>(options_.max_qp_wr) ||
      init->cap.max_send_sge < 1 ||
      init->cap.max_send_sge > static_cast<uint32_t>(options_.max_sge) ||
      init->cap.max_recv_sge > static_cast<uint32_t>(options_.max_sge)) {
    return Errno(EINVAL, "CreateQp: capabilities exceed the device's");
  }
  if (absl::Status s = TakeFault(Call::kCreateQp); !s.ok()) return s;
  auto qp = std::make_unique<Qp>();
  qp->context = pd->context;
  qp->pd = pd;
  qp->send_cq = send_cq;
  qp->recv_cq = recv_cq;
  qp->sq_sig_all = init->sq_sig_all != 0;
  qp->max_send_wr = init->cap.max_send_wr;
  qp->max_send_sge = init->cap.max_send_sge;
  qp->qp.context = pd->pd.context;
  qp->qp.pd = pd_handle;
  qp->qp.send_cq = init->send_cq;
  qp->qp.recv_cq = init->recv_cq;
  qp->qp.qp_num = next_qp_num_++ & 0xffffff;
  qp->qp.state = IBV_QPS_RESET;
  qp->qp.qp_type = IBV_QPT_RC;
  ++send_cq->users;
  ++recv_cq->users;
  ibv_qp* handle = &qp->qp;
  qps_by_num_[handle->qp_num] = qp.get();
  qps_.emplace(handle, std::move(qp));
  ++stats_.live_qps;
  return handle;
}

void SimulatedVerbs::SetState(Qp* qp, ibv_qp_state state) {
  qp->state = state;
  qp->qp.state = state;
}

absl::Status SimulatedVerbs::ModifyQp(ibv_qp* handle, ibv_qp_attr* attr, int mask) {
  MutexLock lock(&mu_);
  Qp* qp = FindQp(handle);
  if (qp == nullptr) return Errno(EINVAL, "ModifyQp: unknown QP");
  if (!(mask & IBV_QP_STATE)) return Errno(EINVAL, "ModifyQp: IBV_QP_STATE missing");
  if (absl::Status s = TakeFault(Call::kModifyQp); !s.ok()) return s;
  auto require = [mask](int needed) { return (mask & needed) == needed; };
  const ibv_qp_state to = attr->qp_state;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    if (to == IBV_QPS_RESET) {
      qp->sq_outstanding = 0;
      qp->since_completion = 0;
    }
    SetState(qp, to);
    return absl::OkStatus();
  }
  switch (qp->state) {
    case IBV_QPS_RESET:
      if (to != IBV_QPS_INIT) break;
      if (!require(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        return Errno(EINVAL, "ModifyQp RESET->INIT: missing attributes");
      }
      if (attr->port_num != 1) return Errno(EINVAL, "ModifyQp RESET->INIT: bad port");
      if (attr->pkey_index >= options_.pkey_table_len) {
        return Errno(EINVAL, "ModifyQp RESET->INIT: pkey_index outside the P_Key table");
      }
      qp->port = attr->port_num;
      qp->pkey_index = attr->pkey_index;
      qp->access_flags = attr->qp_access_flags;
      SetState(qp, IBV_QPS_INIT);
      return absl::OkStatus();
    case IBV_QPS_INIT:
      if (to != IBV_QPS_RTR) break;
      if (!require(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        return Errno(EINVAL, "ModifyQp INIT->RTR: missing attributes");
      }
      if (!ValidMtu(attr->path_mtu) || attr->path_mtu > options_.active_mtu) {
        return Errno(EINVAL, "ModifyQp INIT->RTR: path MTU above the port's");
      }
      if (attr->max_dest_rd_atomic > qp->context->device->max_qp_rd_atom) {
        return Errno(EINVAL, "ModifyQp INIT->RTR: max_dest_rd_atomic above the device's");
      }
      if (attr->dest_qp_num > 0xffffff || attr->rq_psn > 0xffffff) {
        return Errno(EINVAL, "ModifyQp INIT->RTR: QPN or PSN over 24 bits");
      }
      if (attr->ah_attr.sl > 15) return Errno(EINVAL, "ModifyQp INIT->RTR: SL over 4 bits");
      if (attr->ah_attr.is_global) {
        const std::vector<SimulatedGid>& gids = qp->context->device->gids;
        const uint8_t sgid = attr->ah_attr.grh.sgid_index;
        if (sgid >= gids.size() || IsZero(gids[sgid].gid)) {
          return Errno(EINVAL, "ModifyQp INIT->RTR: sgid_index names no GID");
        }
      } else if (options_.link_layer == IBV_LINK_LAYER_ETHERNET) {
        return Errno(EINVAL, "ModifyQp INIT->RTR: RoCE needs a global route header");
      }
      qp->dest_qp_num = attr->dest_qp_num;
      qp->rq_psn = attr->rq_psn;
      qp->is_global = attr->ah_attr.is_global != 0;
      qp->dest_gid = attr->ah_attr.grh.dgid;
      qp->dest_lid = attr->ah_attr.dlid;
      qp->sgid_index = attr->ah_attr.grh.sgid_index;
      qp->traffic_class = attr->ah_attr.grh.traffic_class;
      qp->service_level = attr->ah_attr.sl;
      qp->max_dest_rd_atomic = attr->max_dest_rd_atomic;
      SetState(qp, IBV_QPS_RTR);
      return absl::OkStatus();
    case IBV_QPS_RTR:
      if (to != IBV_QPS_RTS) break;
      if (!require(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                   IBV_QP_MAX_QP_RD_ATOMIC)) {
        return Errno(EINVAL, "ModifyQp RTR->RTS: missing attributes");
      }
      if (attr->max_rd_atomic > qp->context->device->max_qp_rd_atom || attr->sq_psn > 0xffffff) {
        return Errno(EINVAL, "ModifyQp RTR->RTS: bad attributes");
      }
      qp->sq_psn = attr->sq_psn;
      qp->max_rd_atomic = attr->max_rd_atomic;
      SetState(qp, IBV_QPS_RTS);
      return absl::OkStatus();
    default:
      break;
  }
  return Errno(EINVAL, absl::StrCat("ModifyQp: no transition from state ", qp->state, " to ", to));
}

absl::Status SimulatedVerbs::DestroyQp(ibv_qp* handle) {
  MutexLock lock(&mu_);
  Qp* qp = FindQp(handle);
  if (qp == nullptr) return Errno(EINVAL, "DestroyQp: unknown QP");
  --qp->send_cq->users;
  --qp->recv_cq->users;
  qps_by_num_.erase(handle->qp_num);
  qps_.erase(handle);
  --stats_.live_qps;
  return absl::OkStatus();
}

SimulatedVerbs::Qp* SimulatedVerbs::Peer(const Qp& qp) const {
  auto it = qps_by_num_.find(qp.dest_qp_num);
  if (it == qps_by_num_.end()) return nullptr;
  Qp* peer = it->second;
  if (peer->state != IBV_QPS_RTR && peer->state != IBV_QPS_RTS) return nullptr;
  const Device& peer_device = *peer->context->device;
  const Device& device = *qp.context->device;
  // Routed by GID, each end's destination is the other's source GID (the
  // one at its sgid_index), and both sources are of one type.
  if (qp.is_global != peer->is_global) return nullptr;
  bool addressed = false;
  bool back = false;
  if (qp.is_global) {
    const SimulatedGid& source = device.gids[qp.sgid_index];
    const SimulatedGid& peer_source = peer_device.gids[peer->sgid_index];
    addressed = std::memcmp(qp.dest_gid.raw, peer_source.gid.data(), 16) == 0 &&
                source.type == peer_source.type;
    back = std::memcmp(peer->dest_gid.raw, source.gid.data(), 16) == 0;
  } else {
    addressed = qp.dest_lid == peer_device.lid;
    back = peer->dest_lid == device.lid;
  }
  // The peer must be connected back to this QP, with matching PSNs.
  if (!addressed || !back || peer->dest_qp_num != qp.qp.qp_num || peer->rq_psn != qp.sq_psn) {
    return nullptr;
  }
  return peer;
}

ibv_wc_status SimulatedVerbs::Execute(Qp* qp, const ibv_send_wr& wr) {
  const bool read = wr.opcode == IBV_WR_RDMA_READ;
  // Local side: every SGE inside an MR of this QP's PD with the right access.
  uint64_t total = 0;
  for (int i = 0; i < wr.num_sge; ++i) {
    const ibv_sge& sge = wr.sg_list[i];
    auto it = mrs_by_key_.find(sge.lkey);
    if (it == mrs_by_key_.end() || it->second->pd != qp->pd ||
        !Covers(it->second->addr, it->second->length, sge.addr, sge.length) ||
        (read && !(it->second->access & IBV_ACCESS_LOCAL_WRITE))) {
      return IBV_WC_LOC_PROT_ERR;
    }
    total += sge.length;
  }
  if (total > options_.max_msg_bytes) return IBV_WC_LOC_LEN_ERR;
  Qp* peer = Peer(*qp);
  if (peer == nullptr) return IBV_WC_RETRY_EXC_ERR;
  if (read && qp->max_rd_atomic > peer->max_dest_rd_atomic) return IBV_WC_REM_INV_REQ_ERR;
  // Remote side: the rkey must be the peer PD's and grant access to the whole
  // range, and the peer QP must accept that kind of remote access.
  const int needed = read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
  auto it = mrs_by_key_.find(wr.wr.rdma.rkey);
  if (it == mrs_by_key_.end() || it->second->pd != peer->pd || !(it->second->access & needed) ||
      !(peer->access_flags & needed) ||
      !Covers(it->second->addr, it->second->length, wr.wr.rdma.remote_addr, total)) {
    SetState(peer, IBV_QPS_ERR);
    return IBV_WC_REM_ACCESS_ERR;
  }
  char* remote = reinterpret_cast<char*>(wr.wr.rdma.remote_addr);
  for (int i = 0; i < wr.num_sge; ++i) {
    const ibv_sge& sge = wr.sg_list[i];
    char* local = reinterpret_cast<char*>(sge.addr);
    // memmove: a loopback transfer may overlap itself.
    if (read) {
      std::memmove(local, remote, sge.length);
    } else {
      std::memmove(remote, local, sge.length);
    }
    remote += sge.length;
  }
  (read ? stats_.bytes_read : stats_.bytes_written) += total;
  return IBV_WC_SUCCESS;
}

void SimulatedVerbs::Complete(Qp* qp, const ibv_send_wr& wr, ibv_wc_status status,
                              uint32_t byte_len) {
  ++qp->since_completion;
  const bool signaled = qp->sq_sig_all || (wr.send_flags & IBV_SEND_SIGNALED);
  if (status == IBV_WC_SUCCESS && !signaled) return;
  const uint32_t retires = qp->since_completion;
  qp->since_completion = 0;
  if (drop_completions_ > 0) {
    --drop_completions_;
    ++stats_.completions_dropped;
    return;
  }
  Cq* cq = qp->send_cq;
  if (cq->overflowed || static_cast<int>(cq->entries.size()) >= cq->capacity) {
    cq->overflowed = true;
    return;
  }
  ibv_wc wc{};
  wc.wr_id = wr.wr_id;
  wc.status = status;
  wc.opcode = wr.opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
  wc.byte_len = byte_len;
  wc.qp_num = qp->qp.qp_num;
  cq->entries.push_back(Cq::Entry{wc, retires});
  ++stats_.completions;
  if (status != IBV_WC_SUCCESS) ++stats_.error_completions;
}

absl::Status SimulatedVerbs::PostSend(ibv_qp* handle, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  MutexLock lock(&mu_);
  *bad_wr = wr;
  Qp* qp = FindQp(handle);
  if (qp == nullptr) return Errno(EINVAL, "PostSend: unknown QP");
  if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_INIT || qp->state == IBV_QPS_RTR) {
    return Errno(EINVAL, "PostSend: QP not ready to send");
  }
  if (absl::Status s = TakeFault(Call::kPostSend); !s.ok()) return s;
  ++stats_.post_calls;
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    if (wr->opcode != IBV_WR_RDMA_READ && wr->opcode != IBV_WR_RDMA_WRITE) {
      return Errno(EOPNOTSUPP, "PostSend: only RDMA READ and WRITE are simulated");
    }
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->max_send_sge) {
      return Errno(EINVAL, "PostSend: too many SGEs");
    }
    if (wr->send_flags & ~(IBV_SEND_SIGNALED | IBV_SEND_FENCE)) {
      return Errno(EINVAL, "PostSend: unsupported send flags");
    }
    if (qp->sq_outstanding >= qp->max_send_wr) {
      return Errno(ENOMEM, "PostSend: send queue full");
    }
    ++qp->sq_outstanding;
    ++stats_.wrs_posted;
    uint32_t bytes = 0;
    for (int i = 0; i < wr->num_sge; ++i) bytes += wr->sg_list[i].length;
    ibv_wc_status status = IBV_WC_WR_FLUSH_ERR;
    if (qp->state == IBV_QPS_RTS) {
      status = Execute(qp, *wr);
      if (status != IBV_WC_SUCCESS) SetState(qp, IBV_QPS_ERR);
    }
    Complete(qp, *wr, status, bytes);
  }
  *bad_wr = nullptr;
  return absl::OkStatus();
}

absl::StatusOr<int> SimulatedVerbs::PollCq(ibv_cq* handle, int max_entries, ibv_wc* wc) {
  MutexLock lock(&mu_);
  Cq* cq = FindCq(handle);
  if (cq == nullptr) return Errno(EINVAL, "PollCq: unknown CQ");
  if (cq->overflowed) return absl::InternalError("simulated device: PollCq: CQ overflowed");
  int n = 0;
  while (n < max_entries && !cq->entries.empty()) {
    const Cq::Entry& entry = cq->entries.front();
    wc[n++] = entry.wc;
    auto it = qps_by_num_.find(entry.wc.qp_num);
    if (it != qps_by_num_.end()) it->second->sq_outstanding -= entry.retires;
    cq->entries.pop_front();
  }
  return n;
}

void SimulatedVerbs::FailNext(Call call, int err) {
  MutexLock lock(&mu_);
  faults_[call].push_back(err);
}

absl::Status SimulatedVerbs::ForceQpError(uint32_t qp_num) {
  MutexLock lock(&mu_);
  auto it = qps_by_num_.find(qp_num);
  if (it == qps_by_num_.end()) return absl::NotFoundError(absl::StrCat("no QP ", qp_num));
  SetState(it->second, IBV_QPS_ERR);
  return absl::OkStatus();
}

void SimulatedVerbs::DropCompletions(int count) {
  MutexLock lock(&mu_);
  drop_completions_ += count;
}

SimulatedVerbs::Stats SimulatedVerbs::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

absl::StatusOr<SimulatedVerbs::QpAttributes> SimulatedVerbs::QpAttrs(uint32_t qp_num) const {
  MutexLock lock(&mu_);
  auto it = qps_by_num_.find(qp_num);
  if (it == qps_by_num_.end()) return absl::NotFoundError(absl::StrCat("no QP ", qp_num));
  const Qp& qp = *it->second;
  QpAttributes a;
  a.state = qp.state;
  a.pkey_index = qp.pkey_index;
  a.is_global = qp.is_global;
  a.sgid_index = qp.sgid_index;
  a.traffic_class = qp.traffic_class;
  a.service_level = qp.service_level;
  a.max_rd_atomic = qp.max_rd_atomic;
  a.max_dest_rd_atomic = qp.max_dest_rd_atomic;
  return a;
}

absl::StatusOr<ibv_qp_state> SimulatedVerbs::QpState(uint32_t qp_num) const {
  MutexLock lock(&mu_);
  auto it = qps_by_num_.find(qp_num);
  if (it == qps_by_num_.end()) return absl::NotFoundError(absl::StrCat("no QP ", qp_num));
  return it->second->state;
}

std::vector<uint32_t> SimulatedVerbs::LiveQpNums() const {
  MutexLock lock(&mu_);
  std::vector<uint32_t> nums;
  nums.reserve(qps_by_num_.size());
  for (const auto& [num, qp] : qps_by_num_) nums.push_back(num);
  return nums;
}

}  // namespace shelf::transport::rdma
