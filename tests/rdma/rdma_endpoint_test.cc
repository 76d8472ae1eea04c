// RdmaEngine and RdmaEndpoint against the simulated device (this machine has
// no RDMA hardware): connection setup, READ and WRITE of many sizes and
// batches, selective signalling, initiator-side checks, remote errors and
// reconnection, deadlines, and the security of unexposed memory.
//
// The layout mirrors production: engine "client" on device sim0 initiates;
// engine "store" on device sim1 exposes a segment on one endpoint per client
// connection. The reconnect callback plays the store's control channel.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "transport/rdma/rdma_engine.h"
#include "transport/rdma/simulated_verbs.h"

namespace shelf::transport::rdma {
namespace {

constexpr size_t kSegmentBytes = 8 << 20;
constexpr size_t kClientBytes = 8 << 20;
constexpr uint64_t kDeadlineMs = 5000;  // generous: nothing here should come close

void Fill(char* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    p[i] = static_cast<char>((i * 131 + size_t{seed} * 7 + (i >> 9)) & 0xff);
  }
}

class SimulatedRdmaEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RdmaEngine::Options client_options;
    client_options.device_name = "sim0";
    absl::StatusOr<std::unique_ptr<RdmaEngine>> client = RdmaEngine::Open(&sim_, client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    RdmaEngine::Options store_options;
    store_options.device_name = "sim1";
    absl::StatusOr<std::unique_ptr<RdmaEngine>> store = RdmaEngine::Open(&sim_, store_options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);

    segment_.assign(kSegmentBytes, 0);
    local_.assign(kClientBytes, 0);
    absl::StatusOr<MemoryRegion> seg = store_->RegisterMemory(
        segment_.data(), segment_.size(), MemoryKind::kHost, MemoryAccess::kRemoteReadWrite);
    ASSERT_TRUE(seg.ok()) << seg.status();
    segment_region_ = *seg;
    absl::StatusOr<MemoryRegion> loc = client_->RegisterMemory(
        local_.data(), local_.size(), MemoryKind::kHost, MemoryAccess::kLocal);
    ASSERT_TRUE(loc.ok()) << loc.status();
    local_region_ = *loc;
  }

  void TearDown() override {
    client_ep_.reset();
    store_eps_.clear();
    client_.reset();
    store_.reset();
    SimulatedVerbs::Stats s = sim_.stats();
    EXPECT_EQ(s.live_contexts + s.live_pds + s.live_mrs + s.live_cqs + s.live_qps, 0)
        << "simulated objects leaked";
  }

  // The store's side of a handshake: a fresh endpoint exposing the segment,
  // connected to the client's info; returns the store's info.
  absl::StatusOr<std::string> StoreAccept(const std::string& client_info) {
    RdmaEndpoint::Options options;
    options.expose = segment_region_;
    absl::StatusOr<std::unique_ptr<RdmaEndpoint>> ep = store_->CreateEndpoint(options);
    if (!ep.ok()) return ep.status();
    absl::Status s = (*ep)->Connect(client_info);
    if (!s.ok()) return s;
    absl::StatusOr<std::string> info = (*ep)->LocalInfo();
    ++accepts_;
    store_eps_.push_back(std::move(*ep));
    return info;
  }

  RdmaEndpoint::Options ClientOptions() {
    RdmaEndpoint::Options options;
    options.reconnect = [this](const std::string& info) { return StoreAccept(info); };
    return options;
  }

  // Creates and connects the client endpoint through the store.
  void Connect(RdmaEndpoint::Options options) {
    absl::StatusOr<std::unique_ptr<RdmaEndpoint>> ep = client_->CreateEndpoint(std::move(options));
    ASSERT_TRUE(ep.ok()) << ep.status();
    client_ep_ = std::move(*ep);
    absl::StatusOr<std::string> info = client_ep_->LocalInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    absl::StatusOr<std::string> store_info = StoreAccept(*info);
    ASSERT_TRUE(store_info.ok()) << store_info.status();
    ASSERT_TRUE(client_ep_->Connect(*store_info).ok());
  }
  void Connect() { Connect(ClientOptions()); }

  // Connects with the store's info altered by `forge` (a peer lying about
  // its segment), so that the device, not the initiator, catches bad access.
  void ConnectForged(void (*forge)(ConnectionInfo*)) {
    RdmaEndpoint::Options options = ClientOptions();
    absl::StatusOr<std::unique_ptr<RdmaEndpoint>> ep = client_->CreateEndpoint(options);
    ASSERT_TRUE(ep.ok()) << ep.status();
    client_ep_ = std::move(*ep);
    absl::StatusOr<std::string> store_info = StoreAccept(*client_ep_->LocalInfo());
    ASSERT_TRUE(store_info.ok());
    ConnectionInfo info = *DecodeConnectionInfo(*store_info);
    forge(&info);
    ASSERT_TRUE(client_ep_->Connect(EncodeConnectionInfo(info)).ok());
  }

  RdmaBatchResult Run(const std::vector<RdmaOp>& ops, uint64_t timeout_ms = kDeadlineMs) {
    return client_ep_->Execute(ops, MonoMs() + timeout_ms);
  }

  RdmaOp Op(RdmaOpKind kind, size_t local_offset, uint64_t length, uint64_t remote_offset) {
    return RdmaOp{kind, local_.data() + local_offset, length, remote_offset};
  }

  SimulatedVerbs sim_;
  std::unique_ptr<RdmaEngine> client_;
  std::unique_ptr<RdmaEngine> store_;
  std::vector<char> segment_;
  std::vector<char> local_;
  MemoryRegion segment_region_;
  MemoryRegion local_region_;
  std::unique_ptr<RdmaEndpoint> client_ep_;
  std::vector<std::unique_ptr<RdmaEndpoint>> store_eps_;
  int accepts_ = 0;
};

TEST_F(SimulatedRdmaEndpointTest, ConnectionInfoRoundTrip) {
  RdmaEndpoint::Options options;
  options.expose = segment_region_;
  std::unique_ptr<RdmaEndpoint> store_ep = *store_->CreateEndpoint(options);
  std::unique_ptr<RdmaEndpoint> client_ep = *client_->CreateEndpoint(RdmaEndpoint::Options{});
  EXPECT_EQ(store_ep->state(), RdmaEndpoint::State::kUnconnected);

  absl::StatusOr<std::string> store_bytes = store_ep->LocalInfo();
  absl::StatusOr<std::string> client_bytes = client_ep->LocalInfo();
  ASSERT_TRUE(store_bytes.ok() && client_bytes.ok());
  ConnectionInfo store_info = *DecodeConnectionInfo(*store_bytes);
  ConnectionInfo client_info = *DecodeConnectionInfo(*client_bytes);
  EXPECT_EQ(store_info.qp_num, store_ep->qp_num());
  EXPECT_EQ(client_info.qp_num, client_ep->qp_num());
  EXPECT_NE(store_info.gid, client_info.gid);  // two devices
  EXPECT_EQ(store_info.mtu, static_cast<int>(IBV_MTU_4096));
  EXPECT_EQ(store_info.segment.addr, reinterpret_cast<uint64_t>(segment_.data()));
  EXPECT_EQ(store_info.segment.length, kSegmentBytes);
  EXPECT_EQ(store_info.segment.rkey, segment_region_.rkey);
  EXPECT_EQ(client_info.segment.length, 0u);  // the client exposes nothing

  ASSERT_TRUE(store_ep->Connect(*client_bytes).ok());
  ASSERT_TRUE(client_ep->Connect(*store_bytes).ok());
  EXPECT_EQ(client_ep->state(), RdmaEndpoint::State::kConnected);
  EXPECT_EQ(*sim_.QpState(client_ep->qp_num()), IBV_QPS_RTS);
  EXPECT_EQ(*sim_.QpState(store_ep->qp_num()), IBV_QPS_RTS);
  ASSERT_TRUE(client_ep->remote_segment().has_value());
  EXPECT_EQ(client_ep->remote_segment()->rkey, segment_region_.rkey);
  // Connecting twice, or with garbage, is refused.
  EXPECT_EQ(client_ep->Connect(*store_bytes).code(), absl::StatusCode::kFailedPrecondition);
  std::unique_ptr<RdmaEndpoint> other = *client_->CreateEndpoint(RdmaEndpoint::Options{});
  EXPECT_EQ(other->Connect("not connection info").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SimulatedRdmaEndpointTest, SubmitBeforeConnectFails) {
  client_ep_ = *client_->CreateEndpoint(ClientOptions());
  absl::StatusOr<uint64_t> id = client_ep_->Submit({Op(RdmaOpKind::kRead, 0, 8, 0)});
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(accepts_, 0);
}

TEST_F(SimulatedRdmaEndpointTest, WriteThenReadVariousSizes) {
  Connect();
  const uint64_t sizes[] = {1, 7, 64, 4095, 4096, 4097, 65536, 1 << 20, 3 << 20};
  uint64_t remote = 0;
  uint32_t seed = 1;
  for (uint64_t size : sizes) {
    SCOPED_TRACE(size);
    Fill(local_.data(), size, seed);
    RdmaBatchResult w = Run({Op(RdmaOpKind::kWrite, 0, size, remote)});
    ASSERT_TRUE(w.status.ok()) << w.status;
    ASSERT_EQ(std::memcmp(segment_.data() + remote, local_.data(), size), 0);
    std::memset(local_.data() + (4 << 20), 0, size);
    RdmaBatchResult r = Run({Op(RdmaOpKind::kRead, 4 << 20, size, remote)});
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(std::memcmp(local_.data() + (4 << 20), local_.data(), size), 0);
    remote = (remote + size + 13) % (kSegmentBytes - (4 << 20));
    ++seed;
  }
  // The last byte of the segment is reachable, one past it is not.
  local_[0] = 'z';
  ASSERT_TRUE(Run({Op(RdmaOpKind::kWrite, 0, 1, kSegmentBytes - 1)}).status.ok());
  EXPECT_EQ(segment_.back(), 'z');
  EXPECT_EQ(Run({Op(RdmaOpKind::kWrite, 0, 2, kSegmentBytes - 1)}).status.code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(SimulatedRdmaEndpointTest, BatchesLargerThanTheSendQueue) {
  RdmaEndpoint::Options options = ClientOptions();
  options.sq_depth = 32;
  options.signal_interval = 8;
  Connect(options);
  // 1000 scattered 1 KiB blocks: written in one batch, read back in another.
  constexpr int kOps = 1000;
  constexpr uint64_t kBlock = 1024;
  Fill(local_.data(), kOps * kBlock, 42);
  std::vector<RdmaOp> writes, reads;
  for (int i = 0; i < kOps; ++i) {
    const uint64_t remote = static_cast<uint64_t>((i * 7919) % kOps) * kBlock * 2;
    writes.push_back(Op(RdmaOpKind::kWrite, i * kBlock, kBlock, remote));
    reads.push_back(Op(RdmaOpKind::kRead, (4 << 20) + i * kBlock, kBlock, remote));
  }
  RdmaBatchResult w = Run(writes);
  ASSERT_TRUE(w.status.ok()) << w.status;
  ASSERT_EQ(w.ops.size(), static_cast<size_t>(kOps));
  RdmaBatchResult r = Run(reads);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(std::memcmp(local_.data() + (4 << 20), local_.data(), kOps * kBlock), 0);
  EXPECT_EQ(client_ep_->stats().ops_posted, 2u * kOps);
}

TEST_F(SimulatedRdmaEndpointTest, SelectiveSignallingCountsCompletions) {
  RdmaEndpoint::Options options = ClientOptions();
  options.signal_interval = 16;
  Connect(options);
  struct Case {
    int ops;
    uint64_t completions;
  };
  // Every 16th op and the last one are signalled.
  for (Case c : {Case{64, 4}, Case{10, 1}, Case{33, 3}, Case{1, 1}, Case{16, 1}}) {
    SCOPED_TRACE(c.ops);
    std::vector<RdmaOp> ops;
    ops.reserve(c.ops);
    for (int i = 0; i < c.ops; ++i) {
      ops.push_back(Op(RdmaOpKind::kWrite, size_t{64} * i, 64, uint64_t{64} * i));
    }
    const uint64_t before = sim_.stats().completions;
    RdmaBatchResult r = Run(ops);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(sim_.stats().completions - before, c.completions);
  }
}

TEST_F(SimulatedRdmaEndpointTest, InitiatorChecksFailOpsWithoutPostingThem) {
  Connect();
  std::vector<char> unregistered(64);
  const uint64_t posted_before = sim_.stats().wrs_posted;
  RdmaBatchResult r = Run({
      Op(RdmaOpKind::kWrite, 0, 64, 0),                       // fine
      Op(RdmaOpKind::kWrite, 0, 64, kSegmentBytes - 32),      // past the segment's end
      Op(RdmaOpKind::kRead, 0, 64, ~uint64_t{0} - 8),         // offset overflows
      RdmaOp{RdmaOpKind::kRead, unregistered.data(), 64, 0},  // local memory not registered
      Op(RdmaOpKind::kRead, kClientBytes - 32, 64, 0),        // straddles the local region
      Op(RdmaOpKind::kRead, 0, 0, 0),                         // empty
      Op(RdmaOpKind::kRead, 64, 64, 0),                       // fine
  });
  ASSERT_EQ(r.ops.size(), 7u);
  EXPECT_TRUE(r.ops[0].ok());
  EXPECT_EQ(r.ops[1].code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(r.ops[2].code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(r.ops[3].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.ops[4].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.ops[5].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.ops[6].ok());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kOutOfRange);  // the first failure
  EXPECT_EQ(sim_.stats().wrs_posted - posted_before, 2u);
  // The connection is unharmed.
  EXPECT_EQ(client_ep_->state(), RdmaEndpoint::State::kConnected);
  EXPECT_EQ(client_ep_->stats().teardowns, 0u);
  // Batch-level limits.
  EXPECT_EQ(client_ep_->Submit({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SimulatedRdmaEndpointTest, BadRkeyFailsTearsDownAndReconnects) {
  ConnectForged([](ConnectionInfo* info) { info->segment.rkey = 0xdead005a; });
  const uint32_t store_qp = store_eps_.back()->qp_num();
  const uint32_t client_qp = client_ep_->qp_num();
  RdmaBatchResult r = Run({Op(RdmaOpKind::kRead, 0, 4096, 0)});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kPermissionDenied) << r.status;
  // Like hardware, both ends' QPs went to the error state; the client's is gone.
  EXPECT_EQ(*sim_.QpState(store_qp), IBV_QPS_ERR);
  EXPECT_EQ(sim_.QpState(client_qp).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_ep_->state(), RdmaEndpoint::State::kBroken);

  // The next use reconnects through the callback (with the true rkey) and works.
  Fill(segment_.data(), 4096, 9);
  r = Run({Op(RdmaOpKind::kRead, 0, 4096, 0)});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(std::memcmp(local_.data(), segment_.data(), 4096), 0);
  EXPECT_EQ(client_ep_->stats().reconnects, 1u);
  EXPECT_EQ(accepts_, 2);
  EXPECT_NE(client_ep_->qp_num(), client_qp);
}

TEST_F(SimulatedRdmaEndpointTest, DeviceOutOfBoundsFailsThatOpAndFlushesTheRest) {
  // The peer claims a longer segment than it registered: the initiator's
  // check passes and the device must refuse.
  ConnectForged([](ConnectionInfo* info) { info->segment.length += 1 << 20; });
  RdmaBatchResult r = Run({
      Op(RdmaOpKind::kWrite, 0, 4096, 0),
      Op(RdmaOpKind::kWrite, 4096, 4096, 4096),
      Op(RdmaOpKind::kWrite, 8192, 4096, kSegmentBytes - 100),  // past the registered end
      Op(RdmaOpKind::kWrite, 12288, 4096, 8192),
  });
  ASSERT_EQ(r.ops.size(), 4u);
  EXPECT_TRUE(r.ops[0].ok()) << r.ops[0];
  EXPECT_TRUE(r.ops[1].ok()) << r.ops[1];
  EXPECT_EQ(r.ops[2].code(), absl::StatusCode::kPermissionDenied) << r.ops[2];
  EXPECT_EQ(r.ops[3].code(), absl::StatusCode::kUnavailable) << r.ops[3];
  EXPECT_EQ(r.status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(client_ep_->stats().teardowns, 1u);
  // The reconnected endpoint learns the true segment length.
  r = Run({Op(RdmaOpKind::kWrite, 0, 4096, kSegmentBytes - 100)});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_ep_->remote_segment()->length, kSegmentBytes);
  EXPECT_TRUE(Run({Op(RdmaOpKind::kWrite, 0, 4096, 0)}).status.ok());
}

TEST_F(SimulatedRdmaEndpointTest, QpErrorTearsDownAndReconnects) {
  Connect();
  ASSERT_TRUE(Run({Op(RdmaOpKind::kWrite, 0, 64, 0)}).status.ok());
  // A link failure moves the QP to ERR: the next batch is flushed.
  ASSERT_TRUE(sim_.ForceQpError(client_ep_->qp_num()).ok());
  RdmaBatchResult r = Run({Op(RdmaOpKind::kWrite, 0, 64, 0), Op(RdmaOpKind::kWrite, 64, 64, 64)});
  EXPECT_EQ(r.ops[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.ops[1].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client_ep_->state(), RdmaEndpoint::State::kBroken);
  r = Run({Op(RdmaOpKind::kWrite, 0, 64, 0)});
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(client_ep_->stats().reconnects, 1u);
}

TEST_F(SimulatedRdmaEndpointTest, FailedPostTearsDownAndReconnects) {
  Connect();
  sim_.FailNext(SimulatedVerbs::Call::kPostSend, ENOMEM);
  RdmaBatchResult r = Run({Op(RdmaOpKind::kRead, 0, 64, 0)});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status.message().find("post failed"), absl::string_view::npos) << r.status;
  EXPECT_TRUE(Run({Op(RdmaOpKind::kRead, 0, 64, 0)}).status.ok());
}

TEST_F(SimulatedRdmaEndpointTest, WithoutReconnectCallbackStaysBrokenUntilReconnectedByHand) {
  Connect(RdmaEndpoint::Options{});
  ASSERT_TRUE(sim_.ForceQpError(client_ep_->qp_num()).ok());
  EXPECT_FALSE(Run({Op(RdmaOpKind::kRead, 0, 64, 0)}).status.ok());
  absl::StatusOr<uint64_t> id = client_ep_->Submit({Op(RdmaOpKind::kRead, 0, 64, 0)});
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnavailable);
  // By hand: fresh local info, the store accepts, connect.
  absl::StatusOr<std::string> info = client_ep_->LocalInfo();
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(client_ep_->Connect(*StoreAccept(*info)).ok());
  EXPECT_TRUE(Run({Op(RdmaOpKind::kRead, 0, 64, 0)}).status.ok());
}

TEST_F(SimulatedRdmaEndpointTest, FailedReconnectIsUnavailable) {
  RdmaEndpoint::Options options;
  options.reconnect = [](const std::string&) -> absl::StatusOr<std::string> {
    return absl::UnavailableError("store unreachable");
  };
  Connect(options);
  ASSERT_TRUE(sim_.ForceQpError(client_ep_->qp_num()).ok());
  EXPECT_FALSE(Run({Op(RdmaOpKind::kRead, 0, 64, 0)}).status.ok());
  RdmaBatchResult r = Run({Op(RdmaOpKind::kRead, 0, 64, 0)});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status.message().find("store unreachable"), absl::string_view::npos);
  EXPECT_EQ(client_ep_->state(), RdmaEndpoint::State::kBroken);
}

TEST_F(SimulatedRdmaEndpointTest, LostCompletionHitsTheDeadlineWithoutHanging) {
  Connect();
  sim_.DropCompletions(1);
  const int live_qps = sim_.stats().live_qps;
  const uint64_t start = MonoMs();
  RdmaBatchResult r = Run({Op(RdmaOpKind::kWrite, 0, 64, 0), Op(RdmaOpKind::kWrite, 64, 64, 64)},
                          /*timeout_ms=*/100);
  const uint64_t elapsed = MonoMs() - start;
  EXPECT_EQ(r.ops[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.ops[1].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(elapsed, 100u);
  EXPECT_LT(elapsed, 2000u);
  // The QP was torn down so the device cannot touch the buffers any more.
  EXPECT_EQ(client_ep_->state(), RdmaEndpoint::State::kBroken);
  EXPECT_EQ(sim_.stats().live_qps, live_qps - 1);
  // And the next use reconnects.
  EXPECT_TRUE(Run({Op(RdmaOpKind::kWrite, 0, 64, 0)}).status.ok());
}

TEST_F(SimulatedRdmaEndpointTest, DeadlineTeardownFailsOtherBatchesInFlight) {
  RdmaEndpoint::Options options = ClientOptions();
  options.signal_interval = 4;
  Connect(options);
  // Both batches' completions are lost; waiting on the first tears the QP
  // down, which fails the second too.
  sim_.DropCompletions(2);
  absl::StatusOr<uint64_t> a = client_ep_->Submit({Op(RdmaOpKind::kWrite, 0, 64, 0)});
  absl::StatusOr<uint64_t> b = client_ep_->Submit({Op(RdmaOpKind::kWrite, 64, 64, 64)});
  ASSERT_TRUE(a.ok() && b.ok());
  RdmaBatchResult ra = client_ep_->Wait(*a, MonoMs() + 50);
  EXPECT_EQ(ra.status.code(), absl::StatusCode::kDeadlineExceeded);
  RdmaBatchResult rb = client_ep_->Wait(*b, MonoMs() + 5000);
  EXPECT_EQ(rb.status.code(), absl::StatusCode::kUnavailable) << rb.status;
  EXPECT_EQ(client_ep_->Wait(*b, MonoMs()).status.code(), absl::StatusCode::kNotFound);
}

TEST_F(SimulatedRdmaEndpointTest, LaterCompletionCoversALostOne) {
  Connect();
  // The first batch's completion is lost, but the second batch's covers
  // every WR posted before it, so both succeed.
  sim_.DropCompletions(1);
  absl::StatusOr<uint64_t> a = client_ep_->Submit({Op(RdmaOpKind::kWrite, 0, 64, 0)});
  absl::StatusOr<uint64_t> b = client_ep_->Submit({Op(RdmaOpKind::kWrite, 64, 64, 64)});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(client_ep_->Wait(*a, MonoMs() + 1000).status.ok());
  EXPECT_TRUE(client_ep_->Wait(*b, MonoMs() + 1000).status.ok());
}

TEST_F(SimulatedRdmaEndpointTest, ConcurrentBatchesFromManyThreads) {
  RdmaEndpoint::Options options = ClientOptions();
  options.sq_depth = 64;
  Connect(options);
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  constexpr uint64_t kSlice = 256 << 10;  // each thread owns a slice, both sides
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      char* mine = local_.data() + t * kSlice;
      for (int round = 0; round < kRounds; ++round) {
        Fill(mine, size_t{16} * 1024, t * 1000 + round);
        std::vector<RdmaOp> writes, reads;
        for (size_t i = 0; i < 16; ++i) {
          writes.push_back(
              RdmaOp{RdmaOpKind::kWrite, mine + i * 1024, 1024, t * kSlice + i * 1024});
          reads.push_back(
              RdmaOp{RdmaOpKind::kRead, mine + kSlice / 2 + i * 1024, 1024, t * kSlice + i * 1024});
        }
        if (!client_ep_->Execute(writes, MonoMs() + kDeadlineMs).status.ok()) ++failures;
        if (!client_ep_->Execute(reads, MonoMs() + kDeadlineMs).status.ok()) ++failures;
        if (std::memcmp(mine, mine + kSlice / 2, size_t{16} * 1024) != 0) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(client_ep_->stats().teardowns, 0u);
}

TEST_F(SimulatedRdmaEndpointTest, BatchLimits) {
  RdmaEndpoint::Options options = ClientOptions();
  options.batch_ops_max = 4;
  options.batches_max = 2;
  Connect(options);
  std::vector<RdmaOp> five(5, Op(RdmaOpKind::kRead, 0, 8, 0));
  EXPECT_EQ(client_ep_->Submit(five).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<uint64_t> a = client_ep_->Submit({Op(RdmaOpKind::kRead, 0, 8, 0)});
  absl::StatusOr<uint64_t> b = client_ep_->Submit({Op(RdmaOpKind::kRead, 0, 8, 0)});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(client_ep_->Submit({Op(RdmaOpKind::kRead, 0, 8, 0)}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(client_ep_->Wait(*a, MonoMs() + 1000).status.ok());
  EXPECT_TRUE(client_ep_->Submit({Op(RdmaOpKind::kRead, 0, 8, 0)}).ok());
}

TEST_F(SimulatedRdmaEndpointTest, EndpointOptionsAreValidated) {
  RdmaEndpoint::Options options;
  options.expose = local_region_;  // local-only memory cannot be exposed
  EXPECT_EQ(client_->CreateEndpoint(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.expose = segment_region_;  // another engine's region
  EXPECT_EQ(client_->CreateEndpoint(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = RdmaEndpoint::Options{};
  options.signal_interval = options.sq_depth + 1;
  EXPECT_EQ(client_->CreateEndpoint(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = RdmaEndpoint::Options{};
  options.sq_depth = 1 << 20;  // beyond the device
  EXPECT_EQ(client_->CreateEndpoint(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SimulatedRdmaEndpointTest, UnexposedMemoryIsUnreachableEvenWithItsRkey) {
  Connect();
  // A store that learned a client buffer's address and rkey still cannot
  // touch it: the buffer is registered without remote access and the
  // client's QP accepts no remote operations.
  Fill(local_.data(), 64, 5);
  std::vector<char> before(local_.begin(), local_.begin() + 64);
  // A store-side endpoint connected to a client endpoint, told (falsely)
  // that the client exposes its buffer.
  std::unique_ptr<RdmaEndpoint> fake_client = *client_->CreateEndpoint(RdmaEndpoint::Options{});
  ConnectionInfo info = *DecodeConnectionInfo(*fake_client->LocalInfo());
  info.segment = local_region_.AsRemoteSegment();
  RdmaEndpoint::Options so;
  so.expose = segment_region_;
  std::unique_ptr<RdmaEndpoint> attacker = *store_->CreateEndpoint(so);
  ASSERT_TRUE(attacker->Connect(EncodeConnectionInfo(info)).ok());
  ASSERT_TRUE(fake_client->Connect(*attacker->LocalInfo()).ok());
  RdmaBatchResult r =
      attacker->Execute({RdmaOp{RdmaOpKind::kWrite, segment_.data(), 64, 0}}, MonoMs() + 1000);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kPermissionDenied) << r.status;
  EXPECT_TRUE(std::equal(before.begin(), before.end(), local_.begin()));
}

TEST_F(SimulatedRdmaEndpointTest, RegistrationCacheAcrossTheEngine) {
  // Registering a sub-range of the client's buffer hits the cache.
  const uint64_t mrs = sim_.stats().mrs_registered;
  absl::StatusOr<MemoryRegion> again =
      client_->RegisterMemory(local_.data() + 4096, 4096, MemoryKind::kHost, MemoryAccess::kLocal);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, local_region_.id);
  EXPECT_EQ(sim_.stats().mrs_registered, mrs);
  EXPECT_EQ(client_->registration_stats().hits, 1u);
  EXPECT_EQ(client_->FindMemory(local_.data() + 100, 100)->lkey, local_region_.lkey);
  ASSERT_TRUE(client_->UnregisterMemory(*again).ok());
  EXPECT_TRUE(client_->FindMemory(local_.data(), 1).has_value());  // one reference left
}

TEST_F(SimulatedRdmaEndpointTest, SimulatedGpuMemoryMovesLikeHostMemory) {
  // The simulated device treats GPU registrations as host memory, so the
  // whole GPU path (here the peer-memory fallback, as there is no GPU driver
  // to export a dmabuf) can be driven end to end.
  std::vector<char> gpu(1 << 20);
  absl::StatusOr<MemoryRegion> region =
      client_->RegisterMemory(gpu.data(), gpu.size(), MemoryKind::kGpu, MemoryAccess::kLocal);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_NE(region->path, RegistrationPath::kHost);
  Connect();
  Fill(gpu.data(), 8192, 77);
  ASSERT_TRUE(client_ep_
                  ->Execute({RdmaOp{RdmaOpKind::kWrite, gpu.data(), 8192, 0},
                             RdmaOp{RdmaOpKind::kRead, gpu.data() + 8192, 8192, 0}},
                            MonoMs() + kDeadlineMs)
                  .status.ok());
  EXPECT_EQ(std::memcmp(gpu.data(), gpu.data() + 8192, 8192), 0);
  client_ep_.reset();
  ASSERT_TRUE(client_->UnregisterMemory(*region).ok());
}

TEST_F(SimulatedRdmaEndpointTest, OpenFailsCleanly) {
  RdmaEngine::Options options;
  options.device_name = "mlx5_0";
  EXPECT_EQ(RdmaEngine::Open(&sim_, options).status().code(), absl::StatusCode::kNotFound);
  options.device_name = "sim0";
  options.gid_index = 200;  // past the simulated GID table
  EXPECT_FALSE(RdmaEngine::Open(&sim_, options).ok());
  SimulatedVerbs::Options no_devices;
  no_devices.device_names.clear();
  SimulatedVerbs empty(no_devices);
  EXPECT_EQ(RdmaEngine::Open(&empty, RdmaEngine::Options{}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shelf::transport::rdma
