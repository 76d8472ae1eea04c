// The RDMA backend of transport::Engine (RdmaTransport) and the store side
// (RdmaStoreAcceptor behind a real DataServer on loopback), on the simulated
// RDMA device (this machine has no RDMA hardware): the control channel's
// RDMA_CONNECT over real sockets, one-sided READs of the store's segment,
// per-op errors, writes refused, a store without rdma, a wrong secret, a
// queue pair forced into error and re-established, a store that goes
// away, segments in protection domains of their own, and exposures that end
// with their read grant.
#include "transport/rdma/rdma_transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/manual_clock.h"
#include "tests/common/memory_handler.h"
#include "transport/data_server.h"
#include "transport/rdma/simulated_verbs.h"
#include "transport/wire.h"

namespace shelf::transport::rdma {
namespace {

using transport::Kind;
using transport::MemoryKind;
using transport::Op;
using transport::OpKind;

constexpr char kSecret[] = "rdma-transport-secret";
constexpr uint64_t kSegment = 16 << 20;

// Exposes every segment until the expiry of the read grant the client
// presents (with none, for as long as the connection lives), as a store of
// arenas does; verifies no MAC (the store's CheckRead has its own tests).
class GrantExposingHandler : public testing::MemoryHandler {
 public:
  using MemoryHandler::MemoryHandler;
  absl::StatusOr<RdmaExposure> RdmaExposes(absl::string_view credential,
                                           uint32_t segment_id) override {
    return RdmaExposure{true, transport::wire::ReadGrantExpiry(credential)};
  }
};

// A read credential for all of segment 0 that expires at `expires_unix_ms`.
std::string Credential(uint64_t expires_unix_ms) {
  transport::wire::ReadGrant g;
  g.length = kSegment;
  g.expires_unix_ms = expires_unix_ms;
  g.mac = std::string(32, 'm');
  return transport::wire::EncodeReadGrant(g) + "key";
}

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
  GrantExposingHandler handler_{kSegment, "grant-key", "store"};
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
         transport::wire::EncodeGrant(handler_.MakeGrant(1, 0, 4096))},  // refused
      Read(*h, 8192, 65536, 4096),                                       // ok
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
  auto region = (*raw)->RegisterMemory(local.data(), local.size(),
                                       transport::rdma::MemoryKind::kHost, MemoryAccess::kLocal);
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

// A client's queue pair made by hand: RDMA_CONNECT on a control connection
// of its own, as RdmaTransport does, without its checks.
class RawClient {
 public:
  explicit RawClient(SimulatedVerbs* sim) {
    RdmaEngine::Options o;
    o.device_name = "sim0";
    auto engine = RdmaEngine::Open(sim, o);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return;
    engine_ = *std::move(engine);
    auto region = engine_->RegisterMemory(local_.data(), local_.size(),
                                          transport::rdma::MemoryKind::kHost, MemoryAccess::kLocal);
    EXPECT_TRUE(region.ok()) << region.status();
  }
  ~RawClient() {
    endpoints_.clear();
    for (int fd : fds_) close(fd);
    engine_.reset();
  }
  // A connected queue pair for `segment` of the store at `route`, or null.
  // The store's remote_segment() is what it told (address, length, rkey).
  RdmaEndpoint* Connect(const std::string& route, uint32_t segment, const std::string& credential) {
    auto ep = engine_->CreateEndpoint({});
    EXPECT_TRUE(ep.ok()) << ep.status();
    if (!ep.ok()) return nullptr;
    auto fd = control_.Dial(route, MonoMs() + 5000);
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!fd.ok()) return nullptr;
    fds_.push_back(*fd);
    if (!Reconnect(ep->get(), *fd, segment, credential)) return nullptr;
    endpoints_.push_back(*std::move(ep));
    return endpoints_.back().get();
  }
  // RDMA_CONNECT again for `ep` (a fresh QP) on the control connection `fd`.
  bool Reconnect(RdmaEndpoint* ep, int fd, uint32_t segment, const std::string& credential) {
    auto info = ep->LocalInfo();
    EXPECT_TRUE(info.ok()) << info.status();
    if (!info.ok()) return false;
    auto remote = control_.RdmaConnect(fd, segment, *info, credential, MonoMs() + 5000);
    EXPECT_TRUE(remote.ok()) << remote.status();
    if (!remote.ok()) return false;
    absl::Status s = ep->Connect(*remote);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }
  // One READ of 4096 bytes into local(): at `remote` from the start of the
  // exposed segment, or, with `rkey`, at the address `remote` under it.
  absl::Status Read(RdmaEndpoint* ep, uint64_t remote, std::optional<uint32_t> rkey = {}) {
    RdmaOp op{RdmaOpKind::kRead, local_.data(), 4096, remote, rkey};
    return ep->Execute({&op, 1}, MonoMs() + 5000).status;
  }
  char* local() { return local_.data(); }
  int fd(size_t i) const { return fds_[i]; }

 private:
  TcpDataClient control_{TcpDataClient::Options{kSecret, 5000, 0}};
  std::string local_ = std::string(4096, '\0');
  std::unique_ptr<RdmaEngine> engine_;
  std::vector<std::unique_ptr<RdmaEndpoint>> endpoints_;
  std::vector<int> fds_;
};

TEST_F(SimulatedRdmaTransportTest, AQueuePairOfOneSegmentReadsNoOtherInItsOwnDomain) {
  const uint64_t half = kSegment / 2;
  for (auto domain : {RdmaStoreAcceptor::Domain::kOwn, RdmaStoreAcceptor::Domain::kShared}) {
    SCOPED_TRACE(domain == RdmaStoreAcceptor::Domain::kOwn ? "own domains" : "one domain");
    const bool own = domain == RdmaStoreAcceptor::Domain::kOwn;
    // Two arenas, the halves of the handler's memory, on an engine of
    // their own (the fixture's registered the whole segment already).
    RdmaEngine::Options so;
    so.device_name = "sim1";
    auto engine = RdmaEngine::Open(&sim_, so);
    ASSERT_TRUE(engine.ok()) << engine.status();
    const uint64_t pds = sim_.stats().live_pds;
    {
      RdmaStoreAcceptor arenas(engine->get());
      ASSERT_TRUE(arenas.AddSegment(0, handler_.base(), half, domain).ok());
      ASSERT_TRUE(arenas.AddSegment(1, handler_.base() + half, half, domain).ok());
      EXPECT_EQ(sim_.stats().live_pds, pds + (own ? 2 : 0));
      StartServer(&arenas);
      {
        RawClient client(&sim_);
        const std::string route = server_->bound().ToString();
        RdmaEndpoint* a = client.Connect(route, 0, "");
        // B's real address and rkey, told to a connection exposing B.
        RdmaEndpoint* b = client.Connect(route, 1, "");
        ASSERT_TRUE(a != nullptr && b != nullptr);
        const RemoteSegment seg_b = *b->remote_segment();
        EXPECT_EQ(seg_b.addr, reinterpret_cast<uint64_t>(handler_.base() + half));
        ASSERT_NE(seg_b.rkey, a->remote_segment()->rkey);

        EXPECT_TRUE(client.Read(a, 8192).ok());
        EXPECT_EQ(std::memcmp(client.local(), handler_.base() + 8192, 4096), 0);
        // A READ into B through A's queue pair, under B's rkey: the device
        // refuses the key in A's own domain; in one shared domain it reads.
        absl::Status cross = client.Read(a, seg_b.addr + 8192, seg_b.rkey);
        if (own) {
          EXPECT_EQ(cross.code(), absl::StatusCode::kPermissionDenied) << cross;
        } else {
          ASSERT_TRUE(cross.ok()) << cross;
          EXPECT_EQ(std::memcmp(client.local(), handler_.base() + half + 8192, 4096), 0);
        }
        // The same READ through B's own queue pair reads B.
        std::memset(client.local(), 0, 4096);
        ASSERT_TRUE(client.Read(b, seg_b.addr + 8192, seg_b.rkey).ok());
        EXPECT_EQ(std::memcmp(client.local(), handler_.base() + half + 8192, 4096), 0);
      }
      server_.reset();  // every queue pair released before the acceptor goes
    }
    engine->reset();
  }
}

TEST_F(SimulatedRdmaTransportTest, AQueuePairIsTornDownWhenItsReadGrantExpires) {
  ManualClock clock;
  RdmaStoreAcceptor timed(store_engine_.get(), 16, &clock);
  ASSERT_TRUE(
      timed.AddSegment(0, handler_.base(), handler_.size(), RdmaStoreAcceptor::Domain::kOwn).ok());
  StartServer(&timed);
  {
    RawClient client(&sim_);
    const std::string route = server_->bound().ToString();
    RdmaEndpoint* ep = client.Connect(route, 0, Credential(clock.UnixMs() + 5000));
    // Exposed for as long as the connection lives: no grant, no end.
    RdmaEndpoint* forever = client.Connect(route, 0, "");
    ASSERT_TRUE(ep != nullptr && forever != nullptr);
    EXPECT_TRUE(client.Read(ep, 4096).ok());
    clock.Advance(4999);
    EXPECT_TRUE(client.Read(ep, 4096).ok()) << "torn down before its grant expired";
    EXPECT_EQ(timed.stats().expired, 0u);
    clock.Advance(1);
    const uint64_t deadline = MonoMs() + 10000;
    while (timed.stats().expired == 0 && MonoMs() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    RdmaStoreAcceptor::Stats st = timed.stats();
    EXPECT_EQ(st.expired, 1u);
    EXPECT_EQ(st.live, 1u);
    EXPECT_FALSE(client.Read(ep, 4096).ok()) << "a READ through an expired exposure";
    EXPECT_TRUE(client.Read(forever, 4096).ok());
    // Asked again on the same control connection with a grant still
    // valid: a new queue pair, exposed until that grant's end.
    ASSERT_TRUE(client.Reconnect(ep, client.fd(0), 0, Credential(clock.UnixMs() + 5000)));
    EXPECT_TRUE(client.Read(ep, 4096).ok());
    EXPECT_EQ(std::memcmp(client.local(), handler_.base() + 4096, 4096), 0);
    EXPECT_EQ(timed.stats().live, 2u);
  }
  server_.reset();
  EXPECT_EQ(timed.stats().live, 0u);
}

TEST_F(SimulatedRdmaTransportTest, AClientReadingAcrossGrantExpiriesRenewsItsQueuePair) {
  // The store exposes until each connection's grant expires (1.5 s); the
  // client makes its connection again with 1 s left, so no read fails.
  RdmaTransport::Options co;
  co.secret = kSecret;
  co.device.device_name = "sim0";
  co.exposure_renew_ms = 1000;
  auto client = RdmaTransport::Open(&sim_, co);
  ASSERT_TRUE(client.ok()) << client.status();
  std::string dst(64 << 10, '\0');
  auto h = (*client)->RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  const uint64_t end = MonoMs() + 3000;
  int reads = 0;
  for (; MonoMs() < end; ++reads) {
    const uint64_t offset = uint64_t{4096} * reads;
    Op op = Read(*h, 0, offset, dst.size());
    op.grant = Credential(UnixMs() + 1500);
    absl::Status s = (*client)->Execute({&op, 1}, MonoMs() + 5000);
    ASSERT_TRUE(s.ok()) << "read " << reads << ": " << s;
    ASSERT_EQ(std::memcmp(dst.data(), handler_.base() + offset, dst.size()), 0) << reads;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  RdmaTransport::Stats st = (*client)->stats();
  EXPECT_GE(st.renewed, 2u) << reads << " reads";
  EXPECT_EQ(st.connections, st.renewed + 1);
  EXPECT_EQ(st.ops, static_cast<uint64_t>(reads));
  EXPECT_TRUE((*client)->UnregisterMemory(*h).ok());
}

}  // namespace
}  // namespace shelf::transport::rdma
