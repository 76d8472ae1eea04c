// IbVerbs: forwards each VerbsApi call to libibverbs (see ib_verbs.h).
#include "transport/rdma/ib_verbs.h"

#include <cerrno>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace shelf::transport::rdma {
namespace {

// Verbs report failure either by returning an errno value (ibv_post_send,
// ibv_modify_qp, ...) or by returning NULL/-1 with errno set (ibv_reg_mr,
// ibv_query_gid, ...). Some providers return -1 and leave errno unset; those
// become UNKNOWN rather than OK.
absl::Status VerbError(int err, const char* verb) {
  if (err <= 0) return absl::UnknownError(absl::StrCat(verb, " failed without an errno"));
  return absl::ErrnoToStatus(err, verb);
}

absl::Status FromRc(int rc, const char* verb) {
  if (rc == 0) return absl::OkStatus();
  return VerbError(rc > 0 ? rc : errno, verb);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> IbVerbs::ListDevices() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    // ENOSYS: the kernel has no RDMA support at all; that is "no devices".
    if (errno == ENOSYS) return std::vector<std::string>{};
    return VerbError(errno, "ibv_get_device_list");
  }
  std::vector<std::string> names;
  names.reserve(n);
  for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return names;
}

absl::StatusOr<ibv_context*> IbVerbs::OpenDevice(const std::string& name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    if (errno == ENOSYS) return absl::NotFoundError("no RDMA support in this kernel");
    return VerbError(errno, "ibv_get_device_list");
  }
  ibv_context* ctx = nullptr;
  int err = 0;
  bool found = false;
  for (int i = 0; i < n && !found; ++i) {
    if (name != ibv_get_device_name(list[i])) continue;
    found = true;
    ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) err = errno;
  }
  // The opened context keeps its own reference to the device.
  ibv_free_device_list(list);
  if (!found) return absl::NotFoundError(absl::StrCat("no RDMA device named ", name));
  if (ctx == nullptr) return VerbError(err, "ibv_open_device");
  return ctx;
}

absl::Status IbVerbs::CloseDevice(ibv_context* ctx) {
  return FromRc(ibv_close_device(ctx), "ibv_close_device");
}

absl::Status IbVerbs::QueryDevice(ibv_context* ctx, ibv_device_attr* attr) {
  return FromRc(ibv_query_device(ctx, attr), "ibv_query_device");
}

absl::Status IbVerbs::QueryPort(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr) {
  return FromRc(ibv_query_port(ctx, port_num, attr), "ibv_query_port");
}

absl::Status IbVerbs::QueryGid(ibv_context* ctx, uint8_t port_num, int gid_index, ibv_gid* gid) {
  return FromRc(ibv_query_gid(ctx, port_num, gid_index, gid), "ibv_query_gid");
}

absl::StatusOr<GidType> IbVerbs::QueryGidType(ibv_context* ctx, uint8_t port_num, int gid_index) {
  if (gid_index < 0) return absl::InvalidArgumentError("negative GID index");
#if SHELF_HAVE_IBV_QUERY_GID_EX
  ibv_gid_entry entry{};
  int rc = ibv_query_gid_ex(ctx, port_num, static_cast<uint32_t>(gid_index), &entry, 0);
  if (rc == 0) {
    switch (entry.gid_type) {
      case IBV_GID_TYPE_IB:
        return GidType::kInfiniBand;
      case IBV_GID_TYPE_ROCE_V1:
        return GidType::kRoceV1;
      case IBV_GID_TYPE_ROCE_V2:
        return GidType::kRoceV2;
      default:
        return absl::UnimplementedError(absl::StrCat("unknown GID type ", entry.gid_type));
    }
  }
  if (rc == ENODATA) return absl::NotFoundError("unused GID table entry");
    // Other failures (an old kernel without the query ioctl): read sysfs.
#endif
  ibv_port_attr port{};
  if (absl::Status s = QueryPort(ctx, port_num, &port); !s.ok()) return s;
  const std::string path =
      absl::StrCat("/sys/class/infiniband/", ibv_get_device_name(ctx->device), "/ports/",
                   static_cast<int>(port_num), "/gid_attrs/types/", gid_index);
  std::ifstream file(path);
  std::string type;
  // The kernel refuses to read the type of an unused entry (EINVAL).
  if (!file || !std::getline(file, type)) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, " (unused entry?)"));
  }
  absl::string_view t = absl::StripAsciiWhitespace(type);
  if (t == "RoCE v2") return GidType::kRoceV2;
  if (t == "IB/RoCE v1") {
    return port.link_layer == IBV_LINK_LAYER_ETHERNET ? GidType::kRoceV1 : GidType::kInfiniBand;
  }
  return absl::UnimplementedError(absl::StrCat(path, ": unknown GID type '", t, "'"));
}

absl::StatusOr<ibv_pd*> IbVerbs::AllocPd(ibv_context* ctx) {
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == nullptr) return VerbError(errno, "ibv_alloc_pd");
  return pd;
}

absl::Status IbVerbs::DeallocPd(ibv_pd* pd) { return FromRc(ibv_dealloc_pd(pd), "ibv_dealloc_pd"); }

absl::StatusOr<ibv_mr*> IbVerbs::RegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  ibv_mr* mr = ibv_reg_mr(pd, addr, length, access);
  if (mr == nullptr) return VerbError(errno, "ibv_reg_mr");
  return mr;
}

absl::StatusOr<ibv_mr*> IbVerbs::RegDmabufMr(ibv_pd* pd, uint64_t offset, size_t length,
                                             uint64_t iova, int fd, int access) {
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access);
  if (mr == nullptr) return VerbError(errno, "ibv_reg_dmabuf_mr");
  return mr;
}

absl::Status IbVerbs::DeregMr(ibv_mr* mr) { return FromRc(ibv_dereg_mr(mr), "ibv_dereg_mr"); }

absl::StatusOr<ibv_cq*> IbVerbs::CreateCq(ibv_context* ctx, int cqe) {
  ibv_cq* cq = ibv_create_cq(ctx, cqe, /*cq_context=*/nullptr, /*channel=*/nullptr,
                             /*comp_vector=*/0);
  if (cq == nullptr) return VerbError(errno, "ibv_create_cq");
  return cq;
}

absl::Status IbVerbs::DestroyCq(ibv_cq* cq) { return FromRc(ibv_destroy_cq(cq), "ibv_destroy_cq"); }

absl::StatusOr<ibv_qp*> IbVerbs::CreateQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) {
  ibv_qp* qp = ibv_create_qp(pd, init_attr);
  if (qp == nullptr) return VerbError(errno, "ibv_create_qp");
  return qp;
}

absl::Status IbVerbs::ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  return FromRc(ibv_modify_qp(qp, attr, attr_mask), "ibv_modify_qp");
}

absl::Status IbVerbs::DestroyQp(ibv_qp* qp) { return FromRc(ibv_destroy_qp(qp), "ibv_destroy_qp"); }

absl::Status IbVerbs::PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  return FromRc(ibv_post_send(qp, wr, bad_wr), "ibv_post_send");
}

absl::StatusOr<int> IbVerbs::PollCq(ibv_cq* cq, int max_entries, ibv_wc* wc) {
  int n = ibv_poll_cq(cq, max_entries, wc);
  if (n < 0) return absl::InternalError("ibv_poll_cq failed: the completion queue is unusable");
  return n;
}

}  // namespace shelf::transport::rdma
