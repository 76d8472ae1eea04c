// Loopback READ and WRITE on a real RDMA device: two endpoints of one engine
// connected to each other, one exposing a segment. Runs when
// /sys/class/infiniband lists a device and skips (with the reason) otherwise.
// SHELF_RDMA_DEVICE and SHELF_RDMA_GID_INDEX pick the device and GID index
// (RoCE v2 usually needs the index of the port's RoCE v2 GID).
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/clock.h"
#include "tests/common/memory_handler.h"
#include "transport/data_server.h"
#include "transport/rdma/ib_verbs.h"
#include "transport/rdma/rdma_engine.h"
#include "transport/rdma/rdma_transport.h"

namespace shelf::transport::rdma {
namespace {

std::vector<std::string> SysfsDevices() {
  std::vector<std::string> names;
  DIR* dir = opendir("/sys/class/infiniband");
  if (dir == nullptr) return names;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  closedir(dir);
  return names;
}

// Without a device, the real verbs report an empty list (not an error) and
// opening an engine is NOT_FOUND: hosts without RDMA fall back cleanly.
TEST(RdmaHardwareTest, NoDeviceIsNotFound) {
  if (!SysfsDevices().empty()) GTEST_SKIP() << "an RDMA device is present";
  IbVerbs verbs;
  absl::StatusOr<std::vector<std::string>> names = verbs.ListDevices();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_TRUE(names->empty());
  EXPECT_EQ(RdmaEngine::Open(&verbs, RdmaEngine::Options{}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(verbs.OpenDevice("mlx5_0").status().code(), absl::StatusCode::kNotFound);
}

TEST(RdmaHardwareTest, LoopbackWriteAndRead) {
  const std::vector<std::string> sysfs = SysfsDevices();
  if (sysfs.empty()) {
    GTEST_SKIP() << "no RDMA device: /sys/class/infiniband is missing or empty";
  }
  IbVerbs verbs;
  RdmaEngine::Options options;
  if (const char* dev = std::getenv("SHELF_RDMA_DEVICE")) options.device_name = dev;
  if (const char* gid = std::getenv("SHELF_RDMA_GID_INDEX")) {
    ASSERT_TRUE(absl::SimpleAtoi(gid, &options.gid_index)) << "SHELF_RDMA_GID_INDEX=" << gid;
  }
  absl::StatusOr<std::unique_ptr<RdmaEngine>> engine = RdmaEngine::Open(&verbs, options);
  if (!engine.ok() && engine.status().code() == absl::StatusCode::kUnavailable) {
    GTEST_SKIP() << "RDMA device present but unusable: " << engine.status();
  }
  ASSERT_TRUE(engine.ok()) << engine.status();

  constexpr size_t kBytes = 4 << 20;
  std::vector<char> segment(kBytes), local(kBytes);
  for (size_t i = 0; i < kBytes; ++i) local[i] = static_cast<char>(i * 31 + 7);
  absl::StatusOr<MemoryRegion> seg = (*engine)->RegisterMemory(
      segment.data(), kBytes, MemoryKind::kHost, MemoryAccess::kRemoteReadWrite);
  absl::StatusOr<MemoryRegion> loc =
      (*engine)->RegisterMemory(local.data(), kBytes, MemoryKind::kHost, MemoryAccess::kLocal);
  ASSERT_TRUE(seg.ok()) << seg.status();
  ASSERT_TRUE(loc.ok()) << loc.status();
  {
    RdmaEndpoint::Options exposing;
    exposing.expose = *seg;
    absl::StatusOr<std::unique_ptr<RdmaEndpoint>> server = (*engine)->CreateEndpoint(exposing);
    absl::StatusOr<std::unique_ptr<RdmaEndpoint>> client =
        (*engine)->CreateEndpoint(RdmaEndpoint::Options{});
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<std::string> server_info = (*server)->LocalInfo();
    absl::StatusOr<std::string> client_info = (*client)->LocalInfo();
    ASSERT_TRUE(server_info.ok() && client_info.ok());
    ASSERT_TRUE((*server)->Connect(*client_info).ok());
    ASSERT_TRUE((*client)->Connect(*server_info).ok());

    // Write the first half in 64 ops, read it back into the second half.
    std::vector<RdmaOp> writes, reads;
    constexpr uint64_t kOp = (kBytes / 2) / 64;
    for (uint64_t i = 0; i < 64; ++i) {
      writes.push_back(RdmaOp{RdmaOpKind::kWrite, local.data() + i * kOp, kOp, i * kOp});
      reads.push_back(RdmaOp{RdmaOpKind::kRead, local.data() + kBytes / 2 + i * kOp, kOp, i * kOp});
    }
    RdmaBatchResult w = (*client)->Execute(writes, MonoMs() + 10000);
    ASSERT_TRUE(w.status.ok()) << w.status;
    EXPECT_EQ(std::memcmp(segment.data(), local.data(), kBytes / 2), 0);
    RdmaBatchResult r = (*client)->Execute(reads, MonoMs() + 10000);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(std::memcmp(local.data() + kBytes / 2, local.data(), kBytes / 2), 0);
  }
  ASSERT_TRUE((*engine)->UnregisterMemory(*seg).ok());
  ASSERT_TRUE((*engine)->UnregisterMemory(*loc).ok());
}

// The whole backend on the device: a DataServer with an RdmaStoreAcceptor
// and an RdmaTransport reading its segment over RDMA_CONNECT on loopback.
TEST(RdmaHardwareTest, TransportReadsAStoreSegmentOnLoopback) {
  if (SysfsDevices().empty()) {
    GTEST_SKIP() << "no RDMA device: /sys/class/infiniband is missing or empty";
  }
  RdmaEngine::Options options;
  if (const char* dev = std::getenv("SHELF_RDMA_DEVICE")) options.device_name = dev;
  if (const char* gid = std::getenv("SHELF_RDMA_GID_INDEX")) {
    ASSERT_TRUE(absl::SimpleAtoi(gid, &options.gid_index)) << "SHELF_RDMA_GID_INDEX=" << gid;
  }
  IbVerbs verbs;
  absl::StatusOr<std::unique_ptr<RdmaEngine>> store_engine = RdmaEngine::Open(&verbs, options);
  if (!store_engine.ok() && store_engine.status().code() == absl::StatusCode::kUnavailable) {
    GTEST_SKIP() << "RDMA device present but unusable: " << store_engine.status();
  }
  ASSERT_TRUE(store_engine.ok()) << store_engine.status();
  testing::MemoryHandler handler(8 << 20, "grant-key", "hw-store");
  ASSERT_TRUE(handler.ok());
  for (size_t i = 0; i < handler.size(); ++i) handler.base()[i] = static_cast<char>(i * 13 + 1);
  RdmaStoreAcceptor acceptor(store_engine->get());
  ASSERT_TRUE(acceptor.AddSegment(0, handler.base(), handler.size()).ok());
  DataServer::Options so;
  so.listen = HostPort{"127.0.0.1", 0};
  so.rdma = &acceptor;
  auto server = DataServer::Start(so, &handler);
  ASSERT_TRUE(server.ok()) << server.status();
  RdmaTransport::Options co;
  co.device = options;
  auto client = RdmaTransport::Open(&verbs, co);
  ASSERT_TRUE(client.ok()) << client.status();
  transport::Peer peer;
  peer.node_id = "hw-store";
  peer.set_route(transport::Kind::kRdma, (*server)->bound().ToString());
  std::string dst(4 << 20, '\0');
  auto h = (*client)->RegisterMemory(dst.data(), dst.size(), transport::MemoryKind::kHost);
  ASSERT_TRUE(h.ok()) << h.status();
  std::vector<transport::Op> ops;
  for (uint64_t i = 0; i < 4; ++i) {
    ops.push_back({transport::OpKind::kRead, *h, i << 20, &peer, 0, (i * 2) << 20, 1 << 20, ""});
  }
  absl::Status s = (*client)->Execute(ops, MonoMs() + 5000);
  ASSERT_TRUE(s.ok()) << s;
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(std::memcmp(dst.data() + (i << 20), handler.base() + ((i * 2) << 20), 1 << 20), 0)
        << i;
  }
  EXPECT_EQ(handler.read(), 0u) << "bytes went over tcp, not rdma";
  client->reset();
  (*server)->Stop();
}

}  // namespace
}  // namespace shelf::transport::rdma
