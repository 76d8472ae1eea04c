// The RDMA backend of transport::Engine (RdmaTransport) and the store side
// (RdmaStoreAcceptor behind a real DataServer on loopback), on the simulated
// RDMA device (this machine has no RDMA hardware): the control channel's
// RDMA_CONNECT over real sockets, one-sided READs of the store's segment,
// per-op errors, writes refused, a store without rdma, a wrong secret, a
// queue pair forced into error and re-established, and a store that goes
// away.
#include "transport/rdma/rdma_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/clock.h"
#include "tests/common/memory_handler.h"
#include "transport/data_server.h"
#include "transport/rdma/simulated_verbs.h"
#include "transport/wire.h"

namespace shelf::rdma {
namespace {

using transport::Kind;
using transport::MemoryKind;
using transport::Op;
using transport::OpKind;

constexpr char kSecret[] = "rdma-transport-secret";
constexpr uint64_t kSegment = 16 << 20;

class SimulatedRdmaTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(handler_.ok());
    std::mt19937_64 rng(5);
    for (uint64_t i = 0; i < kSegment; ++i) handler_.base()[i] = static_cast<char>(rng());
    RdmaEngine::Options so;
    so.device_name = "sim1";
    auto store_engine = RdmaEngine::Open(&sim_, so);
    ASSERT_TRUE(store_engine.ok()) << store_engine.status();
    store_engine_ = std::move(*store_engine);
    acceptor_ = std::make_unique<RdmaStoreAcceptor>(store_engine_.get());
    ASSERT_TRUE(acceptor_->AddSegment(0, handler_.base(), handler_.size()).ok());
    EXPECT_EQ(acceptor_->AddSegment(0, handler_.base(), 4096).code(),
              absl::StatusCode::kAlreadyExists);
    StartServer(acceptor_.get());
    RdmaTransport::Options co;
    co.secret = kSecret;
    co.device.device_name = "sim0";
    auto client = RdmaTransport::Open(&sim_, co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    acceptor_.reset();
    store_engine_.reset();
    SimulatedVerbs::Stats s = sim_.stats();
    EXPECT_EQ(s.live_contexts + s.live_pds + s.live_mrs + s.live_cqs + s.live_qps, 0)
        << "simulated objects leaked";
  }
  void StartServer(RdmaAcceptor* acceptor) {
    server_.reset();
    DataServer::Options o;
    o.listen = HostPort{"127.0.0.1", 0};
    o.secret = kSecret;
    o.rdma = acceptor;
    auto server = DataServer::Start(o, &handler_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    peer_.node_id = "store";
    peer_.incarnation = ++incarnation_;
    peer_.set_route(Kind::kRdma, server_->bound().ToString());
  }
  Op Read(transport::MemoryHandle h, uint64_t local_offset, uint64_t remote, uint64_t length) {
    return Op{OpKind::kRead, h, local_offset, &peer_, 0, remote, length, ""};
  }

  SimulatedVerbs sim_;
  testing::MemoryHandler handler_{kSegment, "grant-key", "store"};
  std::unique_ptr<RdmaEngine> store_engine_;
  std::unique_ptr<RdmaStoreAcceptor> acceptor_;
  std::unique_ptr<DataServer> server_;
  std::unique_ptr<RdmaTransport> client_;
  transport::Peer peer_;
  uint64_t incarnation_ = 0;
};

TEST_F(SimulatedRdmaTransportTest, ReadsAreOneSidedReadsOfTheStoresSegment) {
  std::string dst(4 << 20, '\0');
  auto h = client_->RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok()) << h.status();
  std::vector<Op> ops;
  for (uint64_t i = 0; i < 16; ++i)
    ops.push_back(Read(*h, i * (256 << 10), i * 777 * 1024, 256 << 10));
  std::shared_ptr<transport::Batch> batch = client_->Submit(ops, MonoMs() + 5000);
  batch->Wait();
  ASSERT_TRUE(batch->status().ok()) << batch->status();
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_EQ(
        std::memcmp(dst.data() + i * (256 << 10), handler_.base() + i * 777 * 1024, 256 << 10), 0)
        << i;
  }
  // The bytes moved as RDMA READs; the TCP data plane served no read.
  EXPECT_EQ(sim_.stats().bytes_read, 16u * (256 << 10));
  EXPECT_EQ(handler_.read(), 0u);
  EXPECT_EQ(acceptor_->accepted(), 1u);
  // A second batch reuses the queue pair.
  ASSERT_TRUE(client_->Execute(ops, MonoMs() + 5000).ok());
  EXPECT_EQ(acceptor_->accepted(), 1u);
  EXPECT_EQ(client_->stats().connections, 1u);
  EXPECT_EQ(client_->stats().ops, 32u);
  EXPECT_TRUE(client_->UnregisterMemory(*h).ok());
}

TEST_F(SimulatedRdmaTransportTest, EachOpGetsItsOwnStatusAndWritesAreRefused) {
  std::string buf(1 << 20, 'w');
  auto h = client_->RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  const std::string before(handler_.base(), 1 << 20);
  std::vector<Op> ops = {
      Read(*h, 0, 0, 4096),               // ok
      Read(*h, 0, kSegment - 100, 4096),  // past the segment
      Op{OpKind::kWrite, *h, 0, &peer_, 0, 0, 4096,
         wire::EncodeGrant(handler_.MakeGrant(1, 0, 4096))},  // refused
      Read(*h, 8192, 65536, 4096),                            // ok
  };
  std::shared_ptr<transport::Batch> batch = client_->Submit(ops, MonoMs() + 5000);
  batch->Wait();
  const auto& st = batch->statuses();
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_FALSE(st[1].ok());
  EXPECT_EQ(st[2].code(), absl::StatusCode::kFailedPrecondition) << st[2];
  EXPECT_TRUE(st[3].ok()) << st[3];
  EXPECT_EQ(std::memcmp(buf.data() + 8192, handler_.base() + 65536, 4096), 0);
  EXPECT_EQ(std::string(handler_.base(), 1 << 20), before) << "the store's segment changed";
}

TEST_F(SimulatedRdmaTransportTest, TheSegmentIsExposedForReadOnly) {
  // Even a client that bypasses RdmaTransport's refusal cannot write: the
  // store's queue pair and memory region allow remote READ only.
  RdmaEngine::Options o;
  o.device_name = "sim0";
  auto raw = RdmaEngine::Open(&sim_, o);
  ASSERT_TRUE(raw.ok());
  std::string local(4096, 'x');
  auto region = (*raw)->RegisterMemory(local.data(), local.size(), rdma::MemoryKind::kHost,
                                       MemoryAccess::kLocal);
  ASSERT_TRUE(region.ok());
  auto ep = (*raw)->CreateEndpoint({});
  ASSERT_TRUE(ep.ok());
  TcpDataClient control(TcpDataClient::Options{kSecret, 2000, 0});
  auto fd = control.Dial(server_->bound().ToString(), MonoMs() + 2000);
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto remote = control.RdmaConnect(*fd, 0, *(*ep)->LocalInfo(), "", MonoMs() + 2000);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ASSERT_TRUE((*ep)->Connect(*remote).ok());
  const std::string before(handler_.base(), 4096);
  RdmaBatchResult r =
      (*ep)->Execute({{RdmaOpKind::kWrite, local.data(), 4096, 0}}, MonoMs() + 2000);
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(std::string(handler_.base(), 4096), before);
  ep->reset();
  close(*fd);
  raw->reset();
}

TEST_F(SimulatedRdmaTransportTest, AStoreWithoutRdmaOrAWrongSecretFailsTheOps) {
  StartServer(nullptr);
  std::string buf(4096, '\0');
  auto h = client_->RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  Op op = Read(*h, 0, 0, 4096);
  absl::Status s = client_->Execute({&op, 1}, MonoMs() + 2000);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("no rdma"), absl::string_view::npos) << s;

  StartServer(acceptor_.get());
  RdmaTransport::Options co;
  co.secret = "wrong";
  co.device.device_name = "sim0";
  auto wrong = RdmaTransport::Open(&sim_, co);
  ASSERT_TRUE(wrong.ok());
  auto h2 = (*wrong)->RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost);
  ASSERT_TRUE(h2.ok());
  op = Read(*h2, 0, 0, 4096);
  s = (*wrong)->Execute({&op, 1}, MonoMs() + 2000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_EQ(acceptor_->accepted(), 0u);
}

TEST_F(SimulatedRdmaTransportTest, AQueuePairInErrorIsReestablished) {
  std::string dst(64 << 10, '\0');
  auto h = client_->RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  Op op = Read(*h, 0, 4096, dst.size());
  ASSERT_TRUE(client_->Execute({&op, 1}, MonoMs() + 2000).ok());
  // Every QP of the simulated fabric drops to ERR, as on a link failure
  // (the simulated device numbers QPs from 0x100).
  int forced = 0;
  for (uint32_t qpn = 0x100; qpn < 0x140; ++qpn) forced += sim_.ForceQpError(qpn).ok();
  ASSERT_EQ(forced, 2);
  absl::Status s = client_->Execute({&op, 1}, MonoMs() + 2000);
  EXPECT_FALSE(s.ok()) << "a read on a queue pair in error succeeded";
  // The failed batch tore the pair down; the next one makes a new pair over
  // the same control connection.
  s = client_->Execute({&op, 1}, MonoMs() + 2000);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::memcmp(dst.data(), handler_.base() + 4096, dst.size()), 0);
  EXPECT_EQ(acceptor_->accepted(), 2u);
  EXPECT_EQ(client_->stats().connections, 1u);
}

TEST_F(SimulatedRdmaTransportTest, AStoreThatGoesAwayIsDialledAgain) {
  std::string dst(4096, '\0');
  auto h = client_->RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  Op op = Read(*h, 0, 0, 4096);
  ASSERT_TRUE(client_->Execute({&op, 1}, MonoMs() + 2000).ok());
  // The store restarts: its data server (and every queue pair) goes, a new
  // one comes up at a new address with a new incarnation.
  StartServer(acceptor_.get());
  op = Read(*h, 0, 0, 4096);
  absl::Status s = client_->Execute({&op, 1}, MonoMs() + 2000);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(client_->stats().connections, 2u);
  EXPECT_EQ(std::memcmp(dst.data(), handler_.base(), 4096), 0);
  // Back at the old route with a new incarnation (a restart on the same
  // port): the old incarnation's connection is dropped, not kept forever.
  transport::Peer again = peer_;
  again.incarnation = 1000;
  op.peer = &again;
  ASSERT_TRUE(client_->Execute({&op, 1}, MonoMs() + 2000).ok());
  EXPECT_EQ(client_->stats().dropped, 1u);
  EXPECT_EQ(client_->stats().connections, 3u);
}

}  // namespace
}  // namespace shelf::rdma
