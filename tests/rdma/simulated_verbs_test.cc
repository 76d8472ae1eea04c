// SimulatedVerbs at the verbs level: the simulated device must hold the
// backend to the rules a real HCA enforces (QP states, key and bounds checks,
// error and flush completions, selective signalling, send-queue room), or
// the backend's tests against it would prove nothing.
#include "transport/rdma/simulated_verbs.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace shelf::transport::rdma {
namespace {

constexpr int kRemoteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

// One side of a connection: context, PD, CQ, QP and a registered buffer.
struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<char> buf = std::vector<char>(1 << 16);
};

class SimulatedVerbsTest : public ::testing::Test {
 protected:
  void Open(Side* s, const char* device, int access, uint32_t sq_depth) {
    s->ctx = *sim_.OpenDevice(device);
    s->pd = *sim_.AllocPd(s->ctx);
    s->cq = *sim_.CreateCq(s->ctx, 256);
    s->mr = *sim_.RegMr(s->pd, s->buf.data(), s->buf.size(), access);
    ibv_qp_init_attr init{};
    init.send_cq = s->cq;
    init.recv_cq = s->cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = sq_depth;
    init.cap.max_send_sge = 1;
    s->qp = *sim_.CreateQp(s->pd, &init);
  }

  absl::Status ToInit(Side* s, int qp_access) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = qp_access;
    return sim_.ModifyQp(s->qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }

  absl::Status ToRtrRts(Side* s, const Side& peer, uint32_t my_psn, uint32_t peer_psn) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = peer.qp->qp_num;
    a.rq_psn = peer_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    ibv_gid gid{};
    EXPECT_TRUE(sim_.QueryGid(peer.ctx, 1, 0, &gid).ok());
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.port_num = 1;
    absl::Status st =
        sim_.ModifyQp(s->qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (!st.ok()) return st;
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    return sim_.ModifyQp(s->qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  }

  // a (initiator, local access only) connected to b (exposes its buffer).
  void ConnectPair(uint32_t sq_depth = 64) {
    Open(&a_, "sim0", IBV_ACCESS_LOCAL_WRITE, sq_depth);
    Open(&b_, "sim1", kRemoteAccess, sq_depth);
    ASSERT_TRUE(ToInit(&a_, 0).ok());
    ASSERT_TRUE(ToInit(&b_, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE).ok());
    ASSERT_TRUE(ToRtrRts(&a_, b_, 100, 200).ok());
    ASSERT_TRUE(ToRtrRts(&b_, a_, 200, 100).ok());
  }

  absl::Status Post(Side* s, ibv_wr_opcode op, uint64_t local, uint32_t len, uint64_t remote,
                    uint32_t rkey, bool signaled, uint64_t wr_id = 1, uint32_t lkey = 0) {
    ibv_sge sge{local, len, lkey == 0 ? s->mr->lkey : lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return sim_.PostSend(s->qp, &wr, &bad);
  }

  std::vector<ibv_wc> Poll(Side* s) {
    std::vector<ibv_wc> out(64);
    absl::StatusOr<int> n = sim_.PollCq(s->cq, 64, out.data());
    EXPECT_TRUE(n.ok()) << n.status();
    out.resize(n.ok() ? *n : 0);
    return out;
  }

  void Close(Side* s) {
    if (s->qp != nullptr) {
      ASSERT_TRUE(sim_.DestroyQp(s->qp).ok());
    }
    ASSERT_TRUE(sim_.DeregMr(s->mr).ok());
    ASSERT_TRUE(sim_.DestroyCq(s->cq).ok());
    ASSERT_TRUE(sim_.DeallocPd(s->pd).ok());
    ASSERT_TRUE(sim_.CloseDevice(s->ctx).ok());
  }

  void TearDown() override {
    if (a_.ctx != nullptr) Close(&a_);
    if (b_.ctx != nullptr) Close(&b_);
    SimulatedVerbs::Stats s = sim_.stats();
    EXPECT_EQ(s.live_contexts + s.live_pds + s.live_mrs + s.live_cqs + s.live_qps, 0);
  }

  uint64_t Addr(const Side& s, size_t offset = 0) {
    return reinterpret_cast<uint64_t>(s.buf.data()) + offset;
  }

  SimulatedVerbs sim_;
  Side a_, b_;
};

TEST_F(SimulatedVerbsTest, ListsAndQueriesDevices) {
  absl::StatusOr<std::vector<std::string>> names = sim_.ListDevices();
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"sim0", "sim1"}));
  EXPECT_EQ(sim_.OpenDevice("mlx5_9").status().code(), absl::StatusCode::kNotFound);
  ibv_context* ctx = *sim_.OpenDevice("sim1");
  ibv_port_attr port{};
  ASSERT_TRUE(sim_.QueryPort(ctx, 1, &port).ok());
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_FALSE(sim_.QueryPort(ctx, 2, &port).ok());
  ASSERT_TRUE(sim_.CloseDevice(ctx).ok());
}

TEST_F(SimulatedVerbsTest, QpMustReachRtsBeforePosting) {
  Open(&a_, "sim0", IBV_ACCESS_LOCAL_WRITE, 16);
  Open(&b_, "sim1", kRemoteAccess, 16);
  absl::Status s = Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);  // RESET
  // INIT without its attributes, and skipping a state, are refused.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  EXPECT_FALSE(sim_.ModifyQp(a_.qp, &attr, IBV_QP_STATE).ok());
  attr.qp_state = IBV_QPS_RTS;
  EXPECT_FALSE(sim_.ModifyQp(a_.qp, &attr, IBV_QP_STATE).ok());
  ASSERT_TRUE(ToInit(&a_, 0).ok());
  s = Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);  // INIT
}

TEST_F(SimulatedVerbsTest, WriteAndReadMoveBytes) {
  ConnectPair();
  std::memcpy(a_.buf.data(), "hello, shelf", 12);
  ASSERT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 12, Addr(b_, 1000), b_.mr->rkey, true).ok());
  std::vector<ibv_wc> wc = Poll(&a_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(b_.buf.data() + 1000, "hello, shelf", 12), 0);
  ASSERT_TRUE(
      Post(&a_, IBV_WR_RDMA_READ, Addr(a_, 500), 12, Addr(b_, 1000), b_.mr->rkey, true, 7).ok());
  wc = Poll(&a_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc[0].byte_len, 12u);
  EXPECT_EQ(std::memcmp(a_.buf.data() + 500, "hello, shelf", 12), 0);
}

TEST_F(SimulatedVerbsTest, UnsignaledWrsCompleteSilentlyAndHoldSendQueueSlots) {
  ConnectPair(/*sq_depth=*/4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, /*signaled=*/i == 3, i)
            .ok());
  }
  // The queue is full until the signalled completion is polled.
  EXPECT_EQ(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).code(),
            absl::StatusCode::kResourceExhausted);
  std::vector<ibv_wc> wc = Poll(&a_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 3u);
  EXPECT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).ok());
  EXPECT_EQ(sim_.stats().completions, 2u);
}

TEST_F(SimulatedVerbsTest, BadRkeyIsRemoteAccessErrorAndBreaksBothQps) {
  ConnectPair();
  ASSERT_TRUE(
      Post(&a_, IBV_WR_RDMA_READ, Addr(a_), 8, Addr(b_), b_.mr->rkey + 0x100, false, 1).ok());
  std::vector<ibv_wc> wc = Poll(&a_);
  ASSERT_EQ(wc.size(), 1u);  // errors complete even when unsignalled
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(*sim_.QpState(a_.qp->qp_num), IBV_QPS_ERR);
  EXPECT_EQ(*sim_.QpState(b_.qp->qp_num), IBV_QPS_ERR);
  // Later WRs are flushed, not executed.
  b_.buf[0] = 'x';
  ASSERT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, false, 2).ok());
  wc = Poll(&a_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(b_.buf[0], 'x');
}

TEST_F(SimulatedVerbsTest, OutOfBoundsIsRemoteAccessError) {
  ConnectPair();
  const uint64_t end = Addr(b_, b_.buf.size());
  ASSERT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 16, end - 8, b_.mr->rkey, true).ok());
  std::vector<ibv_wc> wc = Poll(&a_);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(SimulatedVerbsTest, RemoteAccessNeedsBothMrAndQpPermission) {
  Open(&a_, "sim0", IBV_ACCESS_LOCAL_WRITE, 16);
  Open(&b_, "sim1", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 16);
  ASSERT_TRUE(ToInit(&a_, 0).ok());
  ASSERT_TRUE(ToInit(&b_, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE).ok());
  ASSERT_TRUE(ToRtrRts(&a_, b_, 1, 2).ok());
  ASSERT_TRUE(ToRtrRts(&b_, a_, 2, 1).ok());
  // b's MR allows READ but not WRITE.
  ASSERT_TRUE(Post(&a_, IBV_WR_RDMA_READ, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).ok());
  ASSERT_EQ(Poll(&a_).at(0).status, IBV_WC_SUCCESS);
  ASSERT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).ok());
  EXPECT_EQ(Poll(&a_).at(0).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(SimulatedVerbsTest, QpWithoutRemoteAccessRefusesEvenAValidRkey) {
  ConnectPair();
  // a's QP was created with no remote access; b tries to read a's buffer.
  ASSERT_TRUE(Post(&b_, IBV_WR_RDMA_READ, Addr(b_), 8, Addr(a_), a_.mr->rkey, true).ok());
  EXPECT_EQ(Poll(&b_).at(0).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(SimulatedVerbsTest, ReadIntoMrWithoutLocalWriteIsLocalProtectionError) {
  Open(&a_, "sim0", IBV_ACCESS_LOCAL_WRITE, 16);
  Open(&b_, "sim1", kRemoteAccess, 16);
  ASSERT_TRUE(ToInit(&a_, 0).ok());
  ASSERT_TRUE(ToInit(&b_, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE).ok());
  ASSERT_TRUE(ToRtrRts(&a_, b_, 1, 2).ok());
  ASSERT_TRUE(ToRtrRts(&b_, a_, 2, 1).ok());
  std::vector<char> ro(64);
  ibv_mr* ro_mr = *sim_.RegMr(a_.pd, ro.data(), ro.size(), 0);
  ASSERT_TRUE(Post(&a_, IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(ro.data()), 8, Addr(b_),
                   b_.mr->rkey, true, 1, ro_mr->lkey)
                  .ok());
  EXPECT_EQ(Poll(&a_).at(0).status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(*sim_.QpState(b_.qp->qp_num), IBV_QPS_RTS);  // the responder is unaffected
  ASSERT_TRUE(sim_.DeregMr(ro_mr).ok());
}

TEST_F(SimulatedVerbsTest, MismatchedPsnOrPeerIsRetryExceeded) {
  Open(&a_, "sim0", IBV_ACCESS_LOCAL_WRITE, 16);
  Open(&b_, "sim1", kRemoteAccess, 16);
  ASSERT_TRUE(ToInit(&a_, 0).ok());
  ASSERT_TRUE(ToInit(&b_, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE).ok());
  ASSERT_TRUE(ToRtrRts(&a_, b_, 1, 2).ok());
  ASSERT_TRUE(ToRtrRts(&b_, a_, 2, /*peer_psn=*/99).ok());  // b expects the wrong PSN
  ASSERT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).ok());
  EXPECT_EQ(Poll(&a_).at(0).status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(SimulatedVerbsTest, FaultInjection) {
  ConnectPair();
  sim_.FailNext(SimulatedVerbs::Call::kPostSend, ENOMEM);
  EXPECT_EQ(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).ok());
  EXPECT_EQ(Poll(&a_).size(), 1u);

  sim_.DropCompletions(1);
  EXPECT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).ok());
  EXPECT_EQ(Poll(&a_).size(), 0u);
  EXPECT_EQ(sim_.stats().completions_dropped, 1u);

  ASSERT_TRUE(sim_.ForceQpError(a_.qp->qp_num).ok());
  EXPECT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).ok());
  EXPECT_EQ(Poll(&a_).at(0).status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(sim_.ForceQpError(0xfffff).code(), absl::StatusCode::kNotFound);

  sim_.FailNext(SimulatedVerbs::Call::kRegMr, EFAULT);
  std::vector<char> buf(16);
  EXPECT_FALSE(sim_.RegMr(a_.pd, buf.data(), buf.size(), 0).ok());
}

TEST_F(SimulatedVerbsTest, ParentsCannotGoWhileChildrenLive) {
  ConnectPair();
  EXPECT_EQ(sim_.DeallocPd(a_.pd).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sim_.DestroyCq(a_.cq).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sim_.CloseDevice(a_.ctx).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SimulatedVerbsTest, CqOverflowMakesTheCqUnusable) {
  Open(&a_, "sim0", IBV_ACCESS_LOCAL_WRITE, 16);
  Open(&b_, "sim1", kRemoteAccess, 16);
  // Replace a's QP by one on a 2-entry CQ.
  ASSERT_TRUE(sim_.DestroyQp(a_.qp).ok());
  ibv_cq* small = *sim_.CreateCq(a_.ctx, 2);
  ibv_qp_init_attr init{};
  init.send_cq = small;
  init.recv_cq = small;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 16;
  init.cap.max_send_sge = 1;
  a_.qp = *sim_.CreateQp(a_.pd, &init);
  ASSERT_TRUE(ToInit(&a_, 0).ok());
  ASSERT_TRUE(ToInit(&b_, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE).ok());
  ASSERT_TRUE(ToRtrRts(&a_, b_, 1, 2).ok());
  ASSERT_TRUE(ToRtrRts(&b_, a_, 2, 1).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Post(&a_, IBV_WR_RDMA_WRITE, Addr(a_), 8, Addr(b_), b_.mr->rkey, true).ok());
  }
  ibv_wc wc[4];
  EXPECT_EQ(sim_.PollCq(small, 4, wc).status().code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(sim_.DestroyQp(a_.qp).ok());
  a_.qp = nullptr;
  ASSERT_TRUE(sim_.DestroyCq(small).ok());
}

}  // namespace
}  // namespace shelf::transport::rdma
