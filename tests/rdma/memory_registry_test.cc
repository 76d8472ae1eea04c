// MemoryRegistry against the simulated device: the registration cache (one
// MR per range, lookup by containment, reference counts, access levels) and
// the GPU registration paths, with a simulated dmabuf exporter standing in
// for the GPU driver (this machine has no GPU).
#include "transport/rdma/memory_registry.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "transport/rdma/simulated_verbs.h"

namespace shelf::transport::rdma {
namespace {

// Hands out a real fd (of /dev/null) so that the registry's close() is
// exercised; the simulated device registers the range as host memory.
class SimulatedDmabufExporter : public DmabufExporter {
 public:
  absl::StatusOr<DmabufRange> Export(void* addr, size_t length) override {
    ++calls;
    if (fail) return absl::UnimplementedError("simulated: no dmabuf support");
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::InternalError("open /dev/null");
    return DmabufRange{fd, 0};
  }
  int calls = 0;
  bool fail = false;
};

class SimulatedMemoryRegistryTest : public ::testing::Test {
 protected:
  SimulatedMemoryRegistryTest() {
    ctx_ = *sim_.OpenDevice("sim0");
    pd_ = *sim_.AllocPd(ctx_);
  }
  ~SimulatedMemoryRegistryTest() override {
    EXPECT_TRUE(sim_.DeallocPd(pd_).ok());  // fails if the registry leaked an MR
    EXPECT_TRUE(sim_.CloseDevice(ctx_).ok());
  }

  MemoryRegistry::Options Options(GpuRegistration gpu = GpuRegistration::kAuto) {
    MemoryRegistry::Options o;
    o.gpu = gpu;
    o.exporter = &exporter_;
    return o;
  }

  SimulatedVerbs sim_;
  SimulatedDmabufExporter exporter_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::vector<char> buf_ = std::vector<char>(1 << 20);
};

TEST_F(SimulatedMemoryRegistryTest, SameOrContainedRangeHitsTheCache) {
  MemoryRegistry registry(&sim_, pd_, Options());
  absl::StatusOr<MemoryRegion> whole =
      registry.Register(buf_.data(), buf_.size(), MemoryKind::kHost, MemoryAccess::kLocal);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->path, RegistrationPath::kHost);
  absl::StatusOr<MemoryRegion> again =
      registry.Register(buf_.data(), buf_.size(), MemoryKind::kHost, MemoryAccess::kLocal);
  absl::StatusOr<MemoryRegion> inner =
      registry.Register(buf_.data() + 4096, 100, MemoryKind::kHost, MemoryAccess::kLocal);
  ASSERT_TRUE(again.ok() && inner.ok());
  EXPECT_EQ(again->id, whole->id);
  EXPECT_EQ(inner->id, whole->id);
  EXPECT_EQ(inner->lkey, whole->lkey);
  EXPECT_EQ(registry.stats().hits, 2u);
  EXPECT_EQ(registry.stats().misses, 1u);
  EXPECT_EQ(sim_.stats().mrs_registered, 1u);

  // Three references: the MR goes with the third Unregister.
  ASSERT_TRUE(registry.Unregister(whole->id).ok());
  ASSERT_TRUE(registry.Unregister(whole->id).ok());
  EXPECT_EQ(sim_.stats().live_mrs, 1);
  ASSERT_TRUE(registry.Unregister(whole->id).ok());
  EXPECT_EQ(sim_.stats().live_mrs, 0);
  EXPECT_EQ(registry.Unregister(whole->id).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(registry.Find(buf_.data(), 1).has_value());
}

TEST_F(SimulatedMemoryRegistryTest, FindReturnsTheRegionContainingTheRange) {
  MemoryRegistry registry(&sim_, pd_, Options());
  MemoryRegion low = *registry.Register(buf_.data(), 4096, MemoryKind::kHost, MemoryAccess::kLocal);
  MemoryRegion high =
      *registry.Register(buf_.data() + 8192, 4096, MemoryKind::kHost, MemoryAccess::kLocal);
  ASSERT_NE(low.id, high.id);
  EXPECT_EQ(registry.Find(buf_.data() + 10, 100)->id, low.id);
  EXPECT_EQ(registry.Find(buf_.data() + 8192 + 4000, 96)->id, high.id);
  EXPECT_FALSE(registry.Find(buf_.data() + 4000, 200).has_value());  // straddles the end
  EXPECT_FALSE(registry.Find(buf_.data() + 5000, 1).has_value());    // the gap
  // A range that straddles two regions registers a third, overlapping one;
  // both old regions stay findable.
  MemoryRegion span =
      *registry.Register(buf_.data() + 2048, 8192, MemoryKind::kHost, MemoryAccess::kLocal);
  EXPECT_EQ(registry.stats().misses, 3u);
  EXPECT_EQ(registry.Find(buf_.data() + 4000, 200)->id, span.id);
  EXPECT_TRUE(registry.Find(buf_.data() + 10, 100).has_value());
  EXPECT_TRUE(registry.IsLive(low));
  ASSERT_TRUE(registry.Unregister(low.id).ok());
  EXPECT_FALSE(registry.IsLive(low));
  EXPECT_FALSE(registry.Find(buf_.data() + 10, 100).has_value());
  // The registry's destructor deregisters what is left.
}

TEST_F(SimulatedMemoryRegistryTest, LocalRegionDoesNotSatisfyRemoteAccess) {
  MemoryRegistry registry(&sim_, pd_, Options());
  MemoryRegion local =
      *registry.Register(buf_.data(), buf_.size(), MemoryKind::kHost, MemoryAccess::kLocal);
  MemoryRegion remote = *registry.Register(buf_.data(), buf_.size(), MemoryKind::kHost,
                                           MemoryAccess::kRemoteReadWrite);
  EXPECT_NE(local.id, remote.id);
  EXPECT_EQ(remote.access, MemoryAccess::kRemoteReadWrite);
  // But a remote-access region satisfies a later local request.
  MemoryRegion again =
      *registry.Register(buf_.data() + 64, 64, MemoryKind::kHost, MemoryAccess::kLocal);
  EXPECT_TRUE(again.id == local.id || again.id == remote.id);
  EXPECT_EQ(registry.stats().misses, 2u);
}

TEST_F(SimulatedMemoryRegistryTest, RejectsBadRangesAndEnforcesTheLimit) {
  MemoryRegistry::Options o = Options();
  o.regions_max = 2;
  MemoryRegistry registry(&sim_, pd_, o);
  EXPECT_EQ(registry.Register(nullptr, 10, MemoryKind::kHost, MemoryAccess::kLocal).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      registry.Register(buf_.data(), 0, MemoryKind::kHost, MemoryAccess::kLocal).status().code(),
      absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.Register(buf_.data(), 10, MemoryKind::kHost, MemoryAccess::kLocal).ok());
  ASSERT_TRUE(
      registry.Register(buf_.data() + 100, 10, MemoryKind::kHost, MemoryAccess::kLocal).ok());
  EXPECT_EQ(registry.Register(buf_.data() + 200, 10, MemoryKind::kHost, MemoryAccess::kLocal)
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  sim_.FailNext(SimulatedVerbs::Call::kRegMr, ENOMEM);
  MemoryRegistry other(&sim_, pd_, Options());
  EXPECT_EQ(
      other.Register(buf_.data(), 10, MemoryKind::kHost, MemoryAccess::kLocal).status().code(),
      absl::StatusCode::kResourceExhausted);
}

TEST_F(SimulatedMemoryRegistryTest, GpuMemoryPrefersDmabuf) {
  MemoryRegistry registry(&sim_, pd_, Options());
  absl::StatusOr<MemoryRegion> r =
      registry.Register(buf_.data(), buf_.size(), MemoryKind::kGpu, MemoryAccess::kLocal);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, RegistrationPath::kGpuDmabuf);
  EXPECT_EQ(exporter_.calls, 1);
  EXPECT_EQ(sim_.stats().dmabuf_mrs_registered, 1u);
  // GPU and host registrations of one range are distinct cache entries.
  MemoryRegion host =
      *registry.Register(buf_.data(), buf_.size(), MemoryKind::kHost, MemoryAccess::kLocal);
  EXPECT_NE(host.id, r->id);
}

TEST_F(SimulatedMemoryRegistryTest, GpuMemoryFallsBackToPeerMemory) {
  exporter_.fail = true;
  MemoryRegistry registry(&sim_, pd_, Options());
  absl::StatusOr<MemoryRegion> r =
      registry.Register(buf_.data(), buf_.size(), MemoryKind::kGpu, MemoryAccess::kLocal);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, RegistrationPath::kGpuPeerMemory);
  EXPECT_EQ(registry.stats().dmabuf_fallbacks, 1u);
  EXPECT_EQ(sim_.stats().dmabuf_mrs_registered, 0u);

  // A failing device registration of the dmabuf also falls back.
  exporter_.fail = false;
  sim_.FailNext(SimulatedVerbs::Call::kRegDmabufMr, EOPNOTSUPP);
  r = registry.Register(buf_.data() + (1 << 19), 4096, MemoryKind::kGpu,
                        MemoryAccess::kRemoteReadWrite);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, RegistrationPath::kGpuPeerMemory);
}

TEST_F(SimulatedMemoryRegistryTest, GpuPathPolicies) {
  exporter_.fail = true;
  MemoryRegistry dmabuf_only(&sim_, pd_, Options(GpuRegistration::kDmabufOnly));
  EXPECT_EQ(dmabuf_only.Register(buf_.data(), 4096, MemoryKind::kGpu, MemoryAccess::kLocal)
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
  exporter_.fail = false;
  exporter_.calls = 0;
  MemoryRegistry peer_only(&sim_, pd_, Options(GpuRegistration::kPeerMemoryOnly));
  absl::StatusOr<MemoryRegion> r =
      peer_only.Register(buf_.data(), 4096, MemoryKind::kGpu, MemoryAccess::kLocal);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, RegistrationPath::kGpuPeerMemory);
  EXPECT_EQ(exporter_.calls, 0);
  // Both paths failing reports both reasons.
  exporter_.fail = true;
  MemoryRegistry automatic(&sim_, pd_, Options());
  sim_.FailNext(SimulatedVerbs::Call::kRegMr, EFAULT);
  absl::StatusOr<MemoryRegion> bad =
      automatic.Register(buf_.data(), 4096, MemoryKind::kGpu, MemoryAccess::kLocal);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dmabuf"), absl::string_view::npos);
  EXPECT_NE(bad.status().message().find("peer memory"), absl::string_view::npos);
}

}  // namespace
}  // namespace shelf::transport::rdma
