// SimulatedVerbs: an in-process simulated RDMA device behind VerbsApi, for
// testing the RDMA backend on machines without RDMA hardware.
//
// It is not a mock: it keeps devices, PDs, MRs, CQs and RC QPs as objects and
// enforces the rules a real HCA enforces, so that a bug in the backend shows
// up here as it would on hardware:
//   - QPs move RESET -> INIT -> RTR -> RTS (or to ERR) with the attribute
//     masks libibverbs requires; posting before RTS fails with EINVAL.
//   - Each port has a GID table with typed entries (by default a RoCE port
//     laid out like a ConnectX one: RoCE v1 and v2 link-local GIDs, then
//     RoCE v1 and v2 IPv4-mapped GIDs, then unused entries that read as all
//     zero). An RTR's sgid_index must name a used entry, the service level
//     must fit in 4 bits and the READ depths in the device's limits; a
//     P_Key index must fall inside the port's P_Key table.
//   - Two QPs are a connected pair when each one's RTR attributes (remote QPN,
//     PSN, and the GID at the peer's sgid_index or its LID) name the other,
//     and, when routed by GID, both source GIDs have the same type (RoCE v1
//     and v2 do not talk). READ and WRITE then execute by memcpy between
//     registered regions, synchronously inside PostSend.
//   - A READ from a QP whose max_rd_atomic exceeds the responder QP's
//     max_dest_rd_atomic completes with IBV_WC_REM_INV_REQ_ERR: a responder
//     refuses the READ that overflows its resources, which on hardware
//     happens as soon as that many are outstanding.
//   - lkeys and rkeys are checked: the key must exist, belong to the QP's PD,
//     grant the access (LOCAL_WRITE for a READ's destination, REMOTE_READ /
//     REMOTE_WRITE on the remote MR and the remote QP) and cover the whole
//     range. A remote violation completes with IBV_WC_REM_ACCESS_ERR and moves
//     both QPs to ERR (the responder's QP fails too, as on hardware); a local
//     one completes with IBV_WC_LOC_PROT_ERR. A peer that is missing or not
//     connected back completes with IBV_WC_RETRY_EXC_ERR.
//   - After an error, every later WR completes with IBV_WC_WR_FLUSH_ERR.
//   - Only signalled WRs (or all WRs of an sq_sig_all QP) generate a
//     completion on success; errors always do. A send-queue slot is freed only
//     when a completion that covers its WR is polled, so posting more than
//     max_send_wr unretired WRs fails with ENOMEM, as on hardware.
//   - A CQ that would overflow becomes unusable (PollCq fails).
// Memory registered through RegDmabufMr is treated as host memory at `iova`
// (the simulated device cannot follow a dmabuf fd; tests pass host memory).
//
// Faults can be injected: FailNext (the next call of a kind fails with an
// errno), ForceQpError (a QP drops to ERR, as on a link failure) and
// DropCompletions (completions are lost, to exercise deadlines).
//
//   SimulatedVerbs sim;  // devices "sim0" and "sim1", one simulated fabric
//   RdmaEngine::Options options;
//   options.device_name = "sim0";
//   auto client = RdmaEngine::Open(&sim, options);
//   sim.DropCompletions(1);  // the next completion is lost
//
// Thread-safe: one mutex serialises every call.
#ifndef SHELF_TRANSPORT_RDMA_SIMULATED_VERBS_H_
#define SHELF_TRANSPORT_RDMA_SIMULATED_VERBS_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "transport/rdma/verbs_api.h"

namespace shelf::transport::rdma {

// One entry of a simulated port's GID table.
struct SimulatedGid {
  std::array<uint8_t, 16> gid{};
  GidType type = GidType::kRoceV2;
};

class SimulatedVerbs final : public VerbsApi {
 public:
  // A ConnectX-like RoCE table: fe80::/64 RoCE v1 and v2 (indexes 0 and 1),
  // then ::ffff:10.0.0.0 RoCE v1 and v2 (indexes 2 and 3).
  static std::vector<SimulatedGid> DefaultGids();

  struct Options {
    // One simulated device per name; all share one simulated fabric.
    std::vector<std::string> device_names = {"sim0", "sim1"};
    int max_qp_wr = 1024;
    int max_sge = 4;
    int max_cqe = 1 << 16;
    int max_qp_rd_atom = 16;  // also max_qp_init_rd_atom
    // Per device name, overrides max_qp_rd_atom (devices of different depths).
    std::map<std::string, int> max_qp_rd_atom_of;
    ibv_mtu active_mtu = IBV_MTU_4096;
    uint32_t max_msg_bytes = 1u << 31;
    uint8_t link_layer = IBV_LINK_LAYER_ETHERNET;
    // The port's used GID entries, from index 0. Every device has this table
    // with its own number (1, 2, ...) added to the last byte of each GID, so
    // that each device's GIDs differ. The table has gid_table_len entries;
    // those past the list are unused.
    std::vector<SimulatedGid> gids = DefaultGids();
    int gid_table_len = 16;
    int pkey_table_len = 2;
  };

  // The calls FailNext can make fail.
  enum class Call { kRegMr, kRegDmabufMr, kCreateQp, kModifyQp, kPostSend };

  // A QP's attributes as the last transitions set them.
  struct QpAttributes {
    ibv_qp_state state = IBV_QPS_RESET;
    uint16_t pkey_index = 0;
    bool is_global = false;
    uint8_t sgid_index = 0;
    uint8_t traffic_class = 0;
    uint8_t service_level = 0;
    uint8_t max_rd_atomic = 0;
    uint8_t max_dest_rd_atomic = 0;
  };

  struct Stats {
    uint64_t post_calls = 0;             // PostSend calls that got past argument checks
    uint64_t wrs_posted = 0;             // WRs accepted onto a send queue
    uint64_t completions = 0;            // completions queued on a CQ (success or error)
    uint64_t error_completions = 0;      // of which not IBV_WC_SUCCESS
    uint64_t completions_dropped = 0;    // lost through DropCompletions
    uint64_t bytes_read = 0;             // moved by successful RDMA READs
    uint64_t bytes_written = 0;          // moved by successful RDMA WRITEs
    uint64_t mrs_registered = 0;         // RegMr + RegDmabufMr successes, ever
    uint64_t dmabuf_mrs_registered = 0;  // RegDmabufMr successes, ever
    int live_contexts = 0;
    int live_pds = 0;
    int live_mrs = 0;
    int live_cqs = 0;
    int live_qps = 0;
  };

  SimulatedVerbs();
  explicit SimulatedVerbs(Options options);
  ~SimulatedVerbs() override;
  SimulatedVerbs(const SimulatedVerbs&) = delete;
  SimulatedVerbs& operator=(const SimulatedVerbs&) = delete;

  // VerbsApi.
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

  // Fault injection.
  // The next call of kind `call` fails with `err` (an errno value, e.g.
  // ENOMEM) before doing anything; a failed PostSend reports its first WR as
  // bad. Faults of one kind queue up.
  void FailNext(Call call, int err);
  // Moves the QP to ERR, as a link failure would: later WRs are flushed.
  // NOT_FOUND if no live QP has that number.
  absl::Status ForceQpError(uint32_t qp_num);
  // The next `count` completions generated (on any CQ) are lost. Their WRs'
  // send-queue slots are never freed, as when a completion never arrives.
  void DropCompletions(int count);

  // Inspection.
  Stats stats() const;
  // NOT_FOUND if no live QP has that number.
  absl::StatusOr<ibv_qp_state> QpState(uint32_t qp_num) const;
  // The numbers of every live QP, ascending.
  std::vector<uint32_t> LiveQpNums() const;
  // NOT_FOUND if no live QP has that number.
  absl::StatusOr<QpAttributes> QpAttrs(uint32_t qp_num) const;

 private:
  struct Device;
  struct Context;
  struct Pd;
  struct Mr;
  struct Cq;
  struct Qp;

  absl::Status TakeFault(Call call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Context* FindContext(ibv_context* ctx) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Pd* FindPd(ibv_pd* pd) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Cq* FindCq(ibv_cq* cq) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Qp* FindQp(ibv_qp* qp) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<ibv_mr*> AddMr(Pd* pd, uint64_t addr, size_t length, int access, bool dmabuf)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one WR on a QP in RTS; returns the completion status.
  ibv_wc_status Execute(Qp* qp, const ibv_send_wr& wr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finds the QP connected back to `qp`, or null.
  Qp* Peer(const Qp& qp) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetState(Qp* qp, ibv_qp_state state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes one WR: queues a completion if it must generate one.
  void Complete(Qp* qp, const ibv_send_wr& wr, ibv_wc_status status, uint32_t byte_len)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  std::vector<std::unique_ptr<Device>> devices_;  // constant after construction

  mutable Mutex mu_;
  std::map<ibv_context*, std::unique_ptr<Context>> contexts_ ABSL_GUARDED_BY(mu_);
  std::map<ibv_pd*, std::unique_ptr<Pd>> pds_ ABSL_GUARDED_BY(mu_);
  std::map<ibv_mr*, std::unique_ptr<Mr>> mrs_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, Mr*> mrs_by_key_ ABSL_GUARDED_BY(mu_);
  std::map<ibv_cq*, std::unique_ptr<Cq>> cqs_ ABSL_GUARDED_BY(mu_);
  std::map<ibv_qp*, std::unique_ptr<Qp>> qps_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, Qp*> qps_by_num_ ABSL_GUARDED_BY(mu_);
  std::map<Call, std::vector<int>> faults_ ABSL_GUARDED_BY(mu_);
  int drop_completions_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t next_key_index_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t next_qp_num_ ABSL_GUARDED_BY(mu_) = 0x100;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_SIMULATED_VERBS_H_
