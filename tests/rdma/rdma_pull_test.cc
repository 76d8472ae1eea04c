// Puts the store pulls (RDMA_PULL), GPU registrations, and the bounds on
// queue pairs and registrations, on the simulated RDMA device (this machine
// has no RDMA hardware; the "GPU" memory here is host memory registered as
// MemoryKind::kGpu, which the simulated device treats as host memory at the
// same address). Client and store meet as they do in production: a real
// DataServer with an RdmaStoreAcceptor on loopback, RdmaTransport dialling
// it over real sockets, RDMA_CONNECT and RDMA_PULL on the control
// connection, the grant checked by the store's DataHandler.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <iterator>
#include <random>
#include <thread>

#include "common/clock.h"
#include "tests/common/memory_handler.h"
#include "transport/data_server.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/simulated_verbs.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf::transport::rdma {
namespace {

using transport::Kind;
using transport::MemoryKind;
using transport::Op;
using transport::OpKind;

constexpr char kSecret[] = "rdma-pull-secret";
constexpr uint64_t kSegment = 16 << 20;

// The test's store: MemoryHandler, plus a hook that runs on the store's
// connection thread after the grant verified and before the pull is posted.
class HookedHandler : public testing::MemoryHandler {
 public:
  using MemoryHandler::MemoryHandler;
  absl::Status CheckWrite(const transport::wire::Grant& grant, uint32_t segment_id, uint64_t offset,
                          uint64_t length) override {
    absl::Status s = MemoryHandler::CheckWrite(grant, segment_id, offset, length);
    if (s.ok() && on_granted) on_granted(grant.put_id);
    return s;
  }
  std::function<void(uint64_t put_id)> on_granted;
};

// A dmabuf exporter for the simulated device: hands out a descriptor (the
// simulated device only checks that it is one) and counts the exports.
class FakeDmabufExporter : public DmabufExporter {
 public:
  absl::StatusOr<DmabufRange> Export(void* addr, size_t length) override {
    exports.fetch_add(1);
    int fd = memfd_create("fake-dmabuf", MFD_CLOEXEC);
    if (fd < 0) return absl::InternalError("memfd_create failed");
    return DmabufRange{fd, 0};
  }
  std::atomic<int> exports{0};
};

std::string Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class SimulatedRdmaPullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(handler_.ok());
    std::memset(handler_.base(), 0x5a, kSegment);
    RdmaEngine::Options so;
    so.device_name = "sim1";
    auto store_engine = RdmaEngine::Open(&sim_, so);
    ASSERT_TRUE(store_engine.ok()) << store_engine.status();
    store_engine_ = std::move(*store_engine);
    acceptor_ = std::make_unique<RdmaStoreAcceptor>(store_engine_.get(), queue_pairs_max_);
    ASSERT_TRUE(acceptor_->AddSegment(0, handler_.base(), handler_.size()).ok());
    StartServer();
    OpenClient([](RdmaTransport::Options*) {});
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
  void OpenClient(const std::function<void(RdmaTransport::Options*)>& tune) {
    client_.reset();
    RdmaTransport::Options co;
    co.secret = kSecret;
    co.device.device_name = "sim0";
    co.store_pull_writes = true;
    tune(&co);
    auto client = RdmaTransport::Open(&sim_, co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  void StartServer(uint64_t io_timeout_ms = 30000) {
    server_.reset();
    DataServer::Options o;
    o.listen = HostPort{"127.0.0.1", 0};
    o.secret = kSecret;
    o.rdma = acceptor_.get();
    o.io_timeout_ms = io_timeout_ms;
    auto server = DataServer::Start(o, &handler_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    peer_.node_id = "store";
    peer_.incarnation = ++incarnation_;
    peer_.set_route(Kind::kRdma, server_->bound().ToString());
  }
  Op Write(transport::MemoryHandle h, uint64_t local_offset, uint64_t remote, uint64_t length,
           uint64_t put_id) {
    return Op{OpKind::kWrite,
              h,
              local_offset,
              &peer_,
              0,
              remote,
              length,
              transport::wire::EncodeGrant(handler_.MakeGrant(put_id, remote, length))};
  }
  // Every byte of the segment: `expect` where it says, 0x5a elsewhere.
  void ExpectSegment(const std::vector<std::pair<uint64_t, std::string>>& expect) {
    std::string want(kSegment, '\x5a');
    for (const auto& [offset, bytes] : expect) want.replace(offset, bytes.size(), bytes);
    ASSERT_EQ(std::memcmp(handler_.base(), want.data(), kSegment), 0);
  }

  uint64_t queue_pairs_max_ = 1024;
  SimulatedVerbs sim_;
  HookedHandler handler_{kSegment, "grant-key", "store"};
  std::unique_ptr<RdmaEngine> store_engine_;
  std::unique_ptr<RdmaStoreAcceptor> acceptor_;
  std::unique_ptr<DataServer> server_;
  std::unique_ptr<RdmaTransport> client_;
  transport::Peer peer_;
  uint64_t incarnation_ = 0;
};

TEST_F(SimulatedRdmaPullTest, StorePullsEachPutIntoItsGrantedRange) {
  const std::string src = Random(6 << 20, 1);
  auto h = client_->RegisterMemory(const_cast<char*>(src.data()), src.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok()) << h.status();
  // Sizes from one byte to 4 MiB, at odd offsets on both ends.
  const uint64_t sizes[] = {1, 4095, 4096, 65537, 1 << 20, 4 << 20};
  std::vector<Op> ops;
  std::vector<std::pair<uint64_t, std::string>> expect;
  uint64_t remote = 123;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const uint64_t local = (i * 7919) % (src.size() - sizes[i]);
    ops.push_back(Write(*h, local, remote, sizes[i], i + 1));
    expect.emplace_back(remote, src.substr(local, sizes[i]));
    remote += sizes[i] + 4097;
  }
  std::shared_ptr<transport::Batch> batch = client_->Submit(ops, MonoMs() + 30000);
  batch->Wait();
  ASSERT_TRUE(batch->status().ok()) << batch->status();
  ExpectSegment(expect);
  uint64_t total = 0;
  for (uint64_t n : sizes) total += n;
  // Every byte moved as an RDMA READ posted by the store; none over TCP.
  EXPECT_EQ(sim_.stats().bytes_read, total);
  EXPECT_EQ(handler_.written(), total);
  EXPECT_EQ(acceptor_->stats().pulls, std::size(sizes));
  EXPECT_EQ(client_->stats().pulls, std::size(sizes));
  EXPECT_EQ(client_->stats().pull_bytes, total);
  EXPECT_EQ(acceptor_->accepted(), 1u);
  EXPECT_TRUE(client_->UnregisterMemory(*h).ok());
}

TEST_F(SimulatedRdmaPullTest, ARefusedGrantWritesNothing) {
  const std::string src = Random(1 << 20, 2);
  auto h = client_->RegisterMemory(const_cast<char*>(src.data()), src.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  // A grant for another range, a forged MAC, and a range past its grant.
  Op elsewhere = Write(*h, 0, 0, 4096, 1);
  elsewhere.remote_offset = 8192;
  transport::wire::Grant forged = handler_.MakeGrant(2, 0, 4096);
  forged.mac[0] ^= 1;
  Op bad_mac = Write(*h, 0, 0, 4096, 2);
  bad_mac.grant = transport::wire::EncodeGrant(forged);
  Op longer = Write(*h, 0, 0, 4096, 3);
  longer.length = 8192;
  for (const Op& op : {elsewhere, bad_mac, longer}) {
    absl::Status s = client_->Execute({&op, 1}, MonoMs() + 10000);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  }
  EXPECT_EQ(sim_.stats().bytes_read, 0u);
  ExpectSegment({});
  EXPECT_EQ(client_->stats().pull_errors, 3u);
  // A good grant still goes through (on a fresh connection).
  Op good = Write(*h, 100, 4096, 4096, 4);
  ASSERT_TRUE(client_->Execute({&good, 1}, MonoMs() + 10000).ok());
  ExpectSegment({{4096, src.substr(100, 4096)}});
  EXPECT_TRUE(client_->UnregisterMemory(*h).ok());
}

TEST_F(SimulatedRdmaPullTest, WithoutStorePullWritesTheSourceIsNotReadable) {
  OpenClient([](RdmaTransport::Options* o) { o->store_pull_writes = false; });
  const std::string src = Random(1 << 20, 3);
  auto h = client_->RegisterMemory(const_cast<char*>(src.data()), src.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  Op op = Write(*h, 0, 0, 4096, 1);
  EXPECT_EQ(client_->Execute({&op, 1}, MonoMs() + 10000).code(),
            absl::StatusCode::kFailedPrecondition);
  ExpectSegment({});
  EXPECT_TRUE(client_->UnregisterMemory(*h).ok());
}

TEST_F(SimulatedRdmaPullTest, AQueuePairFailingMidPutFailsThatPutAloneAndReconnects) {
  const std::string src = Random(4 << 20, 4);
  auto h = client_->RegisterMemory(const_cast<char*>(src.data()), src.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  // The link fails after put 2's grant verified, before its pull is posted:
  // every queue pair goes to the error state (fault injection in the
  // simulated device).
  handler_.on_granted = [&](uint64_t put_id) {
    if (put_id != 2) return;
    for (uint32_t qp : sim_.LiveQpNums()) ASSERT_TRUE(sim_.ForceQpError(qp).ok());
  };
  std::vector<Op> ops = {Write(*h, 0, 0, 1 << 20, 1), Write(*h, 1 << 20, 2 << 20, 1 << 20, 2),
                         Write(*h, 2 << 20, 4 << 20, 1 << 20, 3)};
  std::shared_ptr<transport::Batch> batch = client_->Submit(ops, MonoMs() + 30000);
  batch->Wait();
  EXPECT_TRUE(batch->statuses()[0].ok()) << batch->statuses()[0];
  EXPECT_EQ(batch->statuses()[1].code(), absl::StatusCode::kUnavailable) << batch->statuses()[1];
  EXPECT_EQ(batch->statuses()[2].code(), absl::StatusCode::kUnavailable) << batch->statuses()[2];
  EXPECT_EQ(acceptor_->stats().pull_errors, 1u);
  // The failed put's range is undefined; nothing outside the granted
  // ranges moved. A retry goes through on fresh queue pairs.
  handler_.on_granted = nullptr;
  std::vector<Op> retry = {ops[1], ops[2]};
  ASSERT_TRUE(client_->Execute(retry, MonoMs() + 30000).ok());
  ExpectSegment({{0, src.substr(0, 1 << 20)},
                 {2 << 20, src.substr(1 << 20, 1 << 20)},
                 {4 << 20, src.substr(2 << 20, 1 << 20)}});
  EXPECT_EQ(acceptor_->accepted(), 2u);
  EXPECT_GE(client_->stats().dropped, 1u);
  EXPECT_TRUE(client_->UnregisterMemory(*h).ok());
}

TEST_F(SimulatedRdmaPullTest, AStoreRestartingMidPullFailsThePutAndTheRetryLands) {
  StartServer(/*io_timeout_ms=*/1000);
  const std::string src = Random(2 << 20, 5);
  auto h = client_->RegisterMemory(const_cast<char*>(src.data()), src.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  // The pull's completion never arrives: the store is stuck in it when it
  // goes down.
  sim_.DropCompletions(1);
  Op op = Write(*h, 0, 4096, 2 << 20, 1);
  absl::Status first;
  std::thread put([&] { first = client_->Execute({&op, 1}, MonoMs() + 60000); });
  while (sim_.stats().completions_dropped == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The store restarts: its server stops (the stuck pull gives up at its
  // deadline, destroying the queue pair), its memory comes back blank, and
  // it listens again under a new incarnation.
  server_.reset();
  put.join();
  EXPECT_FALSE(first.ok());
  std::memset(handler_.base(), 0x5a, kSegment);
  StartServer();
  Op again = Write(*h, 0, 4096, 2 << 20, 2);
  ASSERT_TRUE(client_->Execute({&again, 1}, MonoMs() + 30000).ok());
  ExpectSegment({{4096, src}});
  EXPECT_TRUE(client_->UnregisterMemory(*h).ok());
}

TEST_F(SimulatedRdmaPullTest, ReadsLandInGpuRegistrationsOnBothPaths) {
  std::mt19937_64 rng(6);
  for (uint64_t i = 0; i < kSegment; ++i) handler_.base()[i] = static_cast<char>(rng());
  auto exporter = std::make_shared<FakeDmabufExporter>();
  for (GpuRegistration path : {GpuRegistration::kDmabufOnly, GpuRegistration::kPeerMemoryOnly}) {
    OpenClient([&](RdmaTransport::Options* o) {
      o->device.gpu_registration = path;
      o->device.dmabuf_exporter = exporter;
    });
    const int exports_before = exporter->exports.load();
    const uint64_t dmabuf_before = sim_.stats().dmabuf_mrs_registered;
    std::string gpu(8 << 20, '\0');  // stands for device memory
    auto h = client_->RegisterMemory(gpu.data(), gpu.size(), MemoryKind::kGpu);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(client_->stats().live_gpu_regions, 1u);
    std::vector<Op> ops;
    for (uint64_t i = 0; i < 8; ++i) {
      ops.push_back(Op{OpKind::kRead, *h, i << 20, &peer_, 0, i * 1999 * 1024 + i, 1 << 20, ""});
    }
    ASSERT_TRUE(client_->Execute(ops, MonoMs() + 30000).ok());
    for (uint64_t i = 0; i < 8; ++i) {
      ASSERT_EQ(std::memcmp(gpu.data() + (i << 20), handler_.base() + i * 1999 * 1024 + i, 1 << 20),
                0)
          << i;
    }
    const bool dmabuf = path == GpuRegistration::kDmabufOnly;
    EXPECT_EQ(exporter->exports.load() - exports_before, dmabuf ? 1 : 0);
    EXPECT_EQ(sim_.stats().dmabuf_mrs_registered - dmabuf_before, dmabuf ? 1u : 0u);
    // One registration for the buffer; each read found it in the cache.
    EXPECT_EQ(client_->stats().registration_misses, 1u);
    EXPECT_EQ(client_->stats().registered_regions, 1u);
    // Released with the buffer.
    const int mrs = sim_.stats().live_mrs;
    EXPECT_TRUE(client_->UnregisterMemory(*h).ok());
    EXPECT_EQ(sim_.stats().live_mrs, mrs - 1);
    EXPECT_EQ(client_->stats().live_gpu_regions, 0u);
  }
}

TEST_F(SimulatedRdmaPullTest, GpuRegistrationsAreBoundedAndAFailedOneIsReported) {
  OpenClient([](RdmaTransport::Options* o) {
    o->gpu_regions_max = 2;
    o->device.gpu_registration = GpuRegistration::kPeerMemoryOnly;
  });
  std::vector<std::string> pool(3, std::string(1 << 20, '\0'));
  auto a = client_->RegisterMemory(pool[0].data(), pool[0].size(), MemoryKind::kGpu);
  auto b = client_->RegisterMemory(pool[1].data(), pool[1].size(), MemoryKind::kGpu);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = client_->RegisterMemory(pool[2].data(), pool[2].size(), MemoryKind::kGpu);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  // Host registrations do not count against the GPU bound.
  auto host = client_->RegisterMemory(pool[2].data(), pool[2].size(), MemoryKind::kHost);
  EXPECT_TRUE(host.ok());
  EXPECT_TRUE(client_->UnregisterMemory(*a).ok());
  // The device refusing a registration (no peer memory module, say) is the
  // device's error, and frees its slot.
  sim_.FailNext(SimulatedVerbs::Call::kRegMr, EFAULT);
  EXPECT_FALSE(client_->RegisterMemory(pool[0].data(), pool[0].size(), MemoryKind::kGpu).ok());
  auto again = client_->RegisterMemory(pool[0].data(), pool[0].size(), MemoryKind::kGpu);
  EXPECT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(client_->stats().live_gpu_regions, 2u);
  for (auto h : {*b, *host, *again}) EXPECT_TRUE(client_->UnregisterMemory(h).ok());
  EXPECT_EQ(client_->stats().live_regions, 0u);
}

TEST_F(SimulatedRdmaPullTest, QueuePairsAreBoundedOnBothEnds) {
  // Client: one store connection at most; a second store evicts the first.
  OpenClient([](RdmaTransport::Options* o) { o->connections_max = 1; });
  std::string dst(1 << 20, '\0');
  auto h = client_->RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  DataServer::Options o;
  o.listen = HostPort{"127.0.0.1", 0};
  o.secret = kSecret;
  o.rdma = acceptor_.get();
  auto second = DataServer::Start(o, &handler_);
  ASSERT_TRUE(second.ok());
  transport::Peer other = peer_;
  other.node_id = "store-b";
  other.set_route(Kind::kRdma, (*second)->bound().ToString());
  Op from_a{OpKind::kRead, *h, 0, &peer_, 0, 0, 4096, ""};
  Op from_b{OpKind::kRead, *h, 0, &other, 0, 0, 4096, ""};
  ASSERT_TRUE(client_->Execute({&from_a, 1}, MonoMs() + 10000).ok());
  ASSERT_TRUE(client_->Execute({&from_b, 1}, MonoMs() + 10000).ok());
  EXPECT_EQ(client_->stats().live_connections, 1u);
  EXPECT_EQ(client_->stats().evicted, 1u);
  // Store: the evicted connection's queue pair went with it.
  while (acceptor_->stats().live != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  // Store: one queue pair at most; a second client is refused and the
  // first keeps reading.
  EXPECT_TRUE(client_->UnregisterMemory(*h).ok());
  second->reset();
  client_.reset();
  while (acceptor_->stats().live != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  acceptor_.reset();
  server_.reset();
  acceptor_ = std::make_unique<RdmaStoreAcceptor>(store_engine_.get(), /*queue_pairs_max=*/1);
  ASSERT_TRUE(acceptor_->AddSegment(0, handler_.base(), handler_.size()).ok());
  StartServer();
  OpenClient([](RdmaTransport::Options*) {});
  RdmaTransport::Options co;
  co.secret = kSecret;
  co.device.device_name = "sim0";
  auto late = RdmaTransport::Open(&sim_, co);
  ASSERT_TRUE(late.ok());
  auto h1 = client_->RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  auto h2 = (*late)->RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  ASSERT_TRUE(h1.ok() && h2.ok());
  Op r1{OpKind::kRead, *h1, 0, &peer_, 0, 0, 4096, ""};
  Op r2{OpKind::kRead, *h2, 0, &peer_, 0, 0, 4096, ""};
  ASSERT_TRUE(client_->Execute({&r1, 1}, MonoMs() + 10000).ok());
  EXPECT_EQ((*late)->Execute({&r2, 1}, MonoMs() + 10000).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(acceptor_->stats().refused, 1u);
  EXPECT_TRUE(client_->Execute({&r1, 1}, MonoMs() + 10000).ok());
  EXPECT_TRUE((*late)->UnregisterMemory(*h2).ok());
  late->reset();
  EXPECT_TRUE(client_->UnregisterMemory(*h1).ok());
}

TEST_F(SimulatedRdmaPullTest, APullBeforeRdmaConnectOrWithABadSourceIsRefused) {
  TcpDataClient control(TcpDataClient::Options{kSecret, 5000, 0});
  absl::StatusOr<int> fd = control.Dial(peer_.route(Kind::kRdma), MonoMs() + 5000);
  ASSERT_TRUE(fd.ok()) << fd.status();
  const std::string grant = transport::wire::EncodeGrant(handler_.MakeGrant(1, 0, 4096));
  // No queue pair on this connection yet: nothing to pull with.
  EXPECT_EQ(
      control
          .RdmaPull(*fd, 0, 0, 4096, transport::wire::RdmaSource{4096, 1}, grant, MonoMs() + 5000)
          .code(),
      absl::StatusCode::kFailedPrecondition);
  // The connection stays usable: the refusal carried no payload.
  EXPECT_EQ(
      control
          .RdmaPull(*fd, 0, 0, 4096, transport::wire::RdmaSource{4096, 1}, grant, MonoMs() + 5000)
          .code(),
      absl::StatusCode::kFailedPrecondition);
  close(*fd);
  // The source's encoding round-trips; a non-zero reserved field is refused.
  std::string bytes = transport::wire::EncodeRdmaSource(
      transport::wire::RdmaSource{0x1122334455667788ull, 0xabcdef01});
  ASSERT_EQ(bytes.size(), transport::wire::kRdmaSourceBytes);
  absl::StatusOr<transport::wire::RdmaSource> back = transport::wire::DecodeRdmaSource(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->addr, 0x1122334455667788ull);
  EXPECT_EQ(back->rkey, 0xabcdef01u);
  bytes[12] = 1;
  EXPECT_FALSE(transport::wire::DecodeRdmaSource(bytes).ok());
  EXPECT_FALSE(transport::wire::DecodeRdmaSource(bytes.substr(0, 8)).ok());
  ExpectSegment({});
}

}  // namespace
}  // namespace shelf::transport::rdma
