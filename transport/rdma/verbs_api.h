// VerbsApi: the seam between the RDMA backend and libibverbs.
//
// It wraps exactly the verbs calls the backend makes, and nothing else, so
// that everything above it (registration cache, connection setup, batching,
// error recovery) runs unchanged against either a real device (IbVerbs, in
// ib_verbs.h) or an in-process simulated device (SimulatedVerbs, in
// simulated_verbs.h) on machines without RDMA hardware.
//
// The seam keeps the libibverbs object and work-request types (ibv_pd,
// ibv_mr, ibv_qp, ibv_send_wr, ibv_wc, ...) so that code written against it
// reads like ordinary verbs code; only failures change shape: every call
// returns an absl::Status built from the errno the verb reported.
//
//   IbVerbs verbs;
//   SHELF_ASSIGN_OR_RETURN(std::vector<std::string> names, verbs.ListDevices());
//   SHELF_ASSIGN_OR_RETURN(ibv_context* ctx, verbs.OpenDevice(names[0]));
//   SHELF_ASSIGN_OR_RETURN(ibv_pd* pd, verbs.AllocPd(ctx));
//   SHELF_ASSIGN_OR_RETURN(ibv_mr* mr, verbs.RegMr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE));
//
// Thread-safety: implementations are thread-safe to the same degree as
// libibverbs: calls on distinct objects may run concurrently; PostSend on one
// QP and PollCq on one CQ may each be called from one thread at a time.
// Ownership: every object a call returns stays owned by the implementation
// until the matching destroy call (CloseDevice, DeallocPd, DeregMr,
// DestroyCq, DestroyQp); the caller must destroy it exactly once, children
// before parents, and not use it afterwards.
#ifndef SHELF_TRANSPORT_RDMA_VERBS_API_H_
#define SHELF_TRANSPORT_RDMA_VERBS_API_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shelf::transport::rdma {

// What a GID table entry addresses with. RoCE v1 frames are plain Ethernet
// (one L2 segment); RoCE v2 frames are UDP/IP, routable.
enum class GidType { kInfiniBand, kRoceV1, kRoceV2 };

class VerbsApi {
 public:
  virtual ~VerbsApi() = default;

  // Names of the RDMA devices present (ibv_get_device_list). An empty list is
  // not an error.
  virtual absl::StatusOr<std::vector<std::string>> ListDevices() = 0;
  // Opens the named device (ibv_open_device). NOT_FOUND if no such device.
  virtual absl::StatusOr<ibv_context*> OpenDevice(const std::string& name) = 0;
  // ibv_close_device. REQUIRES: every PD, CQ and QP of `ctx` destroyed.
  virtual absl::Status CloseDevice(ibv_context* ctx) = 0;

  virtual absl::Status QueryDevice(ibv_context* ctx, ibv_device_attr* attr) = 0;
  virtual absl::Status QueryPort(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr) = 0;
  // The GID at `gid_index`; an unused entry reads as all zero, as it does
  // through ibv_query_gid.
  virtual absl::Status QueryGid(ibv_context* ctx, uint8_t port_num, int gid_index,
                                ibv_gid* gid) = 0;
  // The type of the GID at `gid_index` (ibv_query_gid_ex, or
  // /sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index> where
  // that call is missing). Every entry of an InfiniBand port is kInfiniBand.
  // An error (NOT_FOUND for an unused entry) when the type cannot be read.
  virtual absl::StatusOr<GidType> QueryGidType(ibv_context* ctx, uint8_t port_num,
                                               int gid_index) = 0;

  virtual absl::StatusOr<ibv_pd*> AllocPd(ibv_context* ctx) = 0;
  // FAILED_PRECONDITION while MRs or QPs of the PD still exist.
  virtual absl::Status DeallocPd(ibv_pd* pd) = 0;

  // Registers [addr, addr + length) of this process's memory (ibv_reg_mr).
  // `access` is a mask of ibv_access_flags.
  virtual absl::StatusOr<ibv_mr*> RegMr(ibv_pd* pd, void* addr, size_t length, int access) = 0;
  // Registers `length` bytes at `offset` into the dmabuf `fd`, addressed by
  // the device as [iova, iova + length) (ibv_reg_dmabuf_mr). The MR holds its
  // own reference to the dmabuf: the caller may close `fd` afterwards.
  virtual absl::StatusOr<ibv_mr*> RegDmabufMr(ibv_pd* pd, uint64_t offset, size_t length,
                                              uint64_t iova, int fd, int access) = 0;
  virtual absl::Status DeregMr(ibv_mr* mr) = 0;

  // A completion queue with room for at least `cqe` completions.
  virtual absl::StatusOr<ibv_cq*> CreateCq(ibv_context* ctx, int cqe) = 0;
  // FAILED_PRECONDITION while a QP still uses the CQ.
  virtual absl::Status DestroyCq(ibv_cq* cq) = 0;

  // Creates a QP in the RESET state (ibv_create_qp). Only IBV_QPT_RC is used.
  virtual absl::StatusOr<ibv_qp*> CreateQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) = 0;
  // ibv_modify_qp: one state transition (RESET->INIT->RTR->RTS, or ->ERR).
  virtual absl::Status ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) = 0;
  virtual absl::Status DestroyQp(ibv_qp* qp) = 0;

  // Posts a chain of work requests (ibv_post_send). On failure `*bad_wr`
  // points at the first WR that was not posted; the WRs before it were.
  virtual absl::Status PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) = 0;
  // Takes up to `max_entries` completions (ibv_poll_cq); returns how many.
  // INTERNAL when the CQ is unusable (e.g. it overflowed).
  virtual absl::StatusOr<int> PollCq(ibv_cq* cq, int max_entries, ibv_wc* wc) = 0;
};

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_VERBS_API_H_
