// IbVerbs: VerbsApi over the real libibverbs, for hosts with an RDMA device.
//
//   IbVerbs verbs;
//   auto engine = RdmaEngine::Open(&verbs, RdmaEngine::Options{});
//
// Every method forwards to the ibv_* call of the same name and turns the errno
// it reports into a Status (ENOMEM -> RESOURCE_EXHAUSTED, EINVAL ->
// INVALID_ARGUMENT, ...) whose message names the verb. Holds no state.
//
// Thread-safe (as libibverbs is; see verbs_api.h).
#ifndef SHELF_TRANSPORT_RDMA_IB_VERBS_H_
#define SHELF_TRANSPORT_RDMA_IB_VERBS_H_

#include "transport/rdma/verbs_api.h"

namespace shelf::transport::rdma {

class IbVerbs final : public VerbsApi {
 public:
  absl::StatusOr<std::vector<std::string>> ListDevices() override;
  absl::StatusOr<ibv_context*> OpenDevice(const std::string& name) override;
  absl::Status CloseDevice(ibv_context* ctx) override;
  absl::Status QueryDevice(ibv_context* ctx, ibv_device_attr* attr) override;
  absl::Status QueryPort(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr) override;
  absl::Status QueryGid(ibv_context* ctx, uint8_t port_num, int gid_index, ibv_gid* gid) override;
  absl::StatusOr<GidType> QueryGidType(ibv_context* ctx, uint8_t port_num, int gid_index) override;
  absl::StatusOr<ibv_pd*> AllocPd(ibv_context* ctx) override;
  absl::Status DeallocPd(ibv_pd* pd) override;
  absl::StatusOr<ibv_mr*> RegMr(ibv_pd* pd, void* addr, size_t length, int access) override;
  absl::StatusOr<ibv_mr*> RegDmabufMr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                      int fd, int access) override;
  absl::Status DeregMr(ibv_mr* mr) override;
  absl::StatusOr<ibv_cq*> CreateCq(ibv_context* ctx, int cqe) override;
  absl::Status DestroyCq(ibv_cq* cq) override;
  absl::StatusOr<ibv_qp*> CreateQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) override;
  absl::Status ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) override;
  absl::Status DestroyQp(ibv_qp* qp) override;
  absl::Status PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) override;
  absl::StatusOr<int> PollCq(ibv_cq* cq, int max_entries, ibv_wc* wc) override;
};

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_IB_VERBS_H_
