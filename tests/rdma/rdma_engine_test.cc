// RdmaEngine's device options against the simulated device: the choice and
// checking of the GID, traffic class, service level and P_Key index reaching
// the queue pairs, the READ depth each end negotiates with the other, and
// protection domains.
//
// Engine "client" on sim0 initiates; engine "store" on sim1 exposes a
// segment, as in production.
#include "transport/rdma/rdma_engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/rdma/connection_info.h"
#include "transport/rdma/simulated_verbs.h"

namespace shelf::transport::rdma {
namespace {

constexpr size_t kBytes = 1 << 20;
constexpr uint64_t kDeadlineMs = 5000;

bool Contains(const absl::Status& s, const std::string& what) {
  return s.message().find(what) != absl::string_view::npos;
}

SimulatedGid Gid(uint8_t first, uint8_t second, GidType type) {
  SimulatedGid g;
  g.gid[0] = first;
  g.gid[1] = second;
  g.type = type;
  return g;
}

// Two engines on one simulated fabric, a store segment and a client buffer,
// and one connected pair of endpoints.
class Pair {
 public:
  explicit Pair(SimulatedVerbs::Options sim_options) : sim_(std::move(sim_options)) {}
  ~Pair() {
    client_ep_.reset();
    store_ep_.reset();
    client_.reset();
    store_.reset();
  }

  absl::Status Open(RdmaEngine::Options client_options, RdmaEngine::Options store_options) {
    client_options.device_name = "sim0";
    store_options.device_name = "sim1";
    absl::StatusOr<std::unique_ptr<RdmaEngine>> client = RdmaEngine::Open(&sim_, client_options);
    if (!client.ok()) return client.status();
    client_ = *std::move(client);
    absl::StatusOr<std::unique_ptr<RdmaEngine>> store = RdmaEngine::Open(&sim_, store_options);
    if (!store.ok()) return store.status();
    store_ = *std::move(store);
    segment_.assign(kBytes, 7);
    local_.assign(kBytes, 0);
    absl::StatusOr<MemoryRegion> seg = store_->RegisterMemory(
        segment_.data(), segment_.size(), MemoryKind::kHost, MemoryAccess::kRemoteRead);
    if (!seg.ok()) return seg.status();
    absl::StatusOr<MemoryRegion> loc = client_->RegisterMemory(
        local_.data(), local_.size(), MemoryKind::kHost, MemoryAccess::kLocal);
    if (!loc.ok()) return loc.status();
    RdmaEndpoint::Options exposing;
    exposing.expose = *seg;
    absl::StatusOr<std::unique_ptr<RdmaEndpoint>> s = store_->CreateEndpoint(exposing);
    if (!s.ok()) return s.status();
    store_ep_ = *std::move(s);
    absl::StatusOr<std::unique_ptr<RdmaEndpoint>> c = client_->CreateEndpoint({});
    if (!c.ok()) return c.status();
    client_ep_ = *std::move(c);
    return absl::OkStatus();
  }

  // The handshake as the store's acceptor does it: the store connects to the
  // client's info first, then answers with its own.
  absl::Status Connect() {
    absl::StatusOr<std::string> client_info = client_ep_->LocalInfo();
    if (!client_info.ok()) return client_info.status();
    if (absl::Status s = store_ep_->Connect(*client_info); !s.ok()) return s;
    absl::StatusOr<std::string> store_info = store_ep_->LocalInfo();
    if (!store_info.ok()) return store_info.status();
    return client_ep_->Connect(*store_info);
  }

  absl::Status Read() {
    return client_ep_
        ->Execute({RdmaOp{RdmaOpKind::kRead, local_.data(), 4096, 0}}, MonoMs() + kDeadlineMs)
        .status;
  }

  SimulatedVerbs sim_;
  std::unique_ptr<RdmaEngine> client_, store_;
  std::vector<char> segment_, local_;
  std::unique_ptr<RdmaEndpoint> client_ep_, store_ep_;
};

TEST(RdmaEngineSimulatedTest, AllZeroGidFailsOpenNamingDevicePortAndIndex) {
  // Index 5 of the default table is unused: it reads as all zero.
  SimulatedVerbs sim;
  RdmaEngine::Options options;
  options.device_name = "sim0";
  options.gid_index = 5;
  absl::StatusOr<std::unique_ptr<RdmaEngine>> engine = RdmaEngine::Open(&sim, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition) << engine.status();
  EXPECT_TRUE(Contains(engine.status(), "RDMA device sim0 port 1 GID index 5")) << engine.status();
  EXPECT_TRUE(Contains(engine.status(), "all zero")) << engine.status();
  // Past the table: the device's error, with the same coordinates.
  options.gid_index = 20;
  engine = RdmaEngine::Open(&sim, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_TRUE(Contains(engine.status(), "RDMA device sim0 port 1 GID index 20")) << engine.status();
  EXPECT_EQ(sim.stats().live_contexts, 0);
}

TEST(RdmaEngineSimulatedTest, AutoGidIsTheFirstRoutableRoceV2Entry) {
  // Default table: 0 v1 link-local, 1 v2 link-local, 2 v1 IPv4, 3 v2 IPv4.
  Pair pair(SimulatedVerbs::Options{});
  ASSERT_TRUE(pair.Open({}, {}).ok());
  EXPECT_EQ(pair.client_->gid_index(), 3);
  EXPECT_EQ(pair.store_->gid_index(), 3);
  ASSERT_TRUE(pair.Connect().ok());
  ASSERT_TRUE(pair.Read().ok());
  absl::StatusOr<SimulatedVerbs::QpAttributes> qp = pair.sim_.QpAttrs(pair.client_ep_->qp_num());
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_TRUE(qp->is_global);
  EXPECT_EQ(qp->sgid_index, 3);
}

TEST(RdmaEngineSimulatedTest, AutoGidTakesLinkLocalRoceV2WhenThereIsNoOther) {
  SimulatedVerbs::Options sim_options;
  sim_options.gids = {Gid(0xfe, 0x80, GidType::kRoceV1), Gid(0xfe, 0x80, GidType::kRoceV2)};
  Pair pair(sim_options);
  ASSERT_TRUE(pair.Open({}, {}).ok());
  EXPECT_EQ(pair.client_->gid_index(), 1);
  ASSERT_TRUE(pair.Connect().ok());
  EXPECT_TRUE(pair.Read().ok());
}

TEST(RdmaEngineSimulatedTest, AutoGidOnInfiniBandIsIndexZero) {
  SimulatedVerbs::Options sim_options;
  sim_options.link_layer = IBV_LINK_LAYER_INFINIBAND;
  sim_options.gids = {Gid(0xfe, 0x80, GidType::kInfiniBand), Gid(0xfe, 0x80, GidType::kInfiniBand)};
  Pair pair(sim_options);
  ASSERT_TRUE(pair.Open({}, {}).ok());
  EXPECT_EQ(pair.client_->gid_index(), 0);
  ASSERT_TRUE(pair.Connect().ok());
  EXPECT_TRUE(pair.Read().ok());
}

TEST(RdmaEngineSimulatedTest, AutoGidWithoutRoceV2FailsAndAnExplicitIndexIsHonoured) {
  SimulatedVerbs::Options sim_options;
  sim_options.gids = {Gid(0xfe, 0x80, GidType::kRoceV1), Gid(0x20, 0x01, GidType::kRoceV1)};
  {
    SimulatedVerbs sim(sim_options);
    RdmaEngine::Options options;
    options.device_name = "sim0";
    absl::StatusOr<std::unique_ptr<RdmaEngine>> engine = RdmaEngine::Open(&sim, options);
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(engine.status(), "sim0 port 1: no RoCE v2 GID")) << engine.status();
  }
  // A RoCE v1 fabric works when its index is given.
  RdmaEngine::Options v1;
  v1.gid_index = 1;
  Pair pair(sim_options);
  ASSERT_TRUE(pair.Open(v1, v1).ok());
  EXPECT_EQ(pair.client_->gid_index(), 1);
  ASSERT_TRUE(pair.Connect().ok());
  EXPECT_TRUE(pair.Read().ok());
  EXPECT_EQ(pair.sim_.QpAttrs(pair.client_ep_->qp_num())->sgid_index, 1);
}

TEST(RdmaEngineSimulatedTest, ExplicitGidIndexIsHonouredOverAuto) {
  // Index 0 (RoCE v1) on both ends: honoured, and the two talk.
  RdmaEngine::Options zero;
  zero.gid_index = 0;
  Pair pair(SimulatedVerbs::Options{});
  ASSERT_TRUE(pair.Open(zero, zero).ok());
  EXPECT_EQ(pair.client_->gid_index(), 0);
  ASSERT_TRUE(pair.Connect().ok());
  EXPECT_TRUE(pair.Read().ok());
  // One end on RoCE v1, the other on auto (RoCE v2): the ends cannot talk,
  // as on hardware.
  Pair mixed(SimulatedVerbs::Options{});
  ASSERT_TRUE(mixed.Open(zero, {}).ok());
  ASSERT_TRUE(mixed.Connect().ok());
  EXPECT_EQ(mixed.Read().code(), absl::StatusCode::kUnavailable);
}

TEST(RdmaEngineSimulatedTest, OptionsOutOfRangeAreInvalid) {
  SimulatedVerbs sim;
  auto code = [&sim](RdmaEngine::Options options) {
    options.device_name = "sim0";
    return RdmaEngine::Open(&sim, options).status().code();
  };
  RdmaEngine::Options o;
  o.gid_index = 256;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  o.gid_index = -2;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  o = {};
  o.traffic_class = 256;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  o = {};
  o.service_level = 16;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  o = {};
  o.pkey_index = 2;  // the simulated P_Key table has 2 entries
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  o.pkey_index = -1;
  EXPECT_EQ(code(o), absl::StatusCode::kInvalidArgument);
  o = {};
  o.traffic_class = 255;
  o.service_level = 15;
  o.pkey_index = 1;
  EXPECT_EQ(code(o), absl::StatusCode::kOk);
  EXPECT_EQ(sim.stats().live_contexts, 0);
}

TEST(RdmaEngineSimulatedTest, TrafficClassServiceLevelAndPkeyIndexReachTheQueuePairs) {
  RdmaEngine::Options client;
  client.traffic_class = 106;  // DSCP 26, ECN-capable
  client.service_level = 3;
  client.pkey_index = 1;
  RdmaEngine::Options store;
  store.traffic_class = 104;
  store.service_level = 5;
  Pair pair(SimulatedVerbs::Options{});
  ASSERT_TRUE(pair.Open(client, store).ok());
  ASSERT_TRUE(pair.Connect().ok());
  ASSERT_TRUE(pair.Read().ok());
  absl::StatusOr<SimulatedVerbs::QpAttributes> c = pair.sim_.QpAttrs(pair.client_ep_->qp_num());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->traffic_class, 106);
  EXPECT_EQ(c->service_level, 3);
  EXPECT_EQ(c->pkey_index, 1);
  absl::StatusOr<SimulatedVerbs::QpAttributes> s = pair.sim_.QpAttrs(pair.store_ep_->qp_num());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->traffic_class, 104);
  EXPECT_EQ(s->service_level, 5);
  EXPECT_EQ(s->pkey_index, 0);
}

TEST(RdmaEngineSimulatedTest, ReadDepthIsTheInitiatorsOrTheRespondersWhicheverIsLess) {
  // The store's device holds 4 outstanding READs, the client's 16: the client
  // may have 4 outstanding. Issuing 16 would have the store refuse READs.
  SimulatedVerbs::Options sim_options;
  sim_options.max_qp_rd_atom_of = {{"sim1", 4}};
  Pair pair(sim_options);
  ASSERT_TRUE(pair.Open({}, {}).ok());
  ASSERT_TRUE(pair.Connect().ok());
  EXPECT_EQ(pair.client_ep_->rd_atomic(), std::make_pair(uint8_t{4}, uint8_t{4}));
  EXPECT_EQ(pair.store_ep_->rd_atomic(), std::make_pair(uint8_t{4}, uint8_t{4}));
  absl::Status read = pair.Read();
  EXPECT_TRUE(read.ok()) << read;
  absl::StatusOr<SimulatedVerbs::QpAttributes> c = pair.sim_.QpAttrs(pair.client_ep_->qp_num());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_rd_atomic, 4);
  EXPECT_EQ(c->max_dest_rd_atomic, 4);

  // The other way round: the client's device is the shallow one.
  SimulatedVerbs::Options shallow_client;
  shallow_client.max_qp_rd_atom_of = {{"sim0", 2}};
  Pair other(shallow_client);
  ASSERT_TRUE(other.Open({}, {}).ok());
  ASSERT_TRUE(other.Connect().ok());
  EXPECT_EQ(other.client_ep_->rd_atomic(), std::make_pair(uint8_t{2}, uint8_t{2}));
  EXPECT_EQ(other.store_ep_->rd_atomic(), std::make_pair(uint8_t{2}, uint8_t{2}));
  EXPECT_TRUE(other.Read().ok());
}

TEST(RdmaEngineSimulatedTest, DepthsTravelInConnectionInfo) {
  SimulatedVerbs::Options sim_options;
  sim_options.max_qp_rd_atom_of = {{"sim0", 8}, {"sim1", 40}};
  Pair pair(sim_options);
  ASSERT_TRUE(pair.Open({}, {}).ok());
  absl::StatusOr<ConnectionInfo> client = DecodeConnectionInfo(*pair.client_ep_->LocalInfo());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->version, kConnectionInfoVersion);
  EXPECT_EQ(client->rd_atomic_responder, 8);
  EXPECT_EQ(client->rd_atomic_initiator, 8);
  absl::StatusOr<ConnectionInfo> store = DecodeConnectionInfo(*pair.store_ep_->LocalInfo());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->rd_atomic_responder, 16);  // capped at what the backend asks for
}

TEST(RdmaEngineSimulatedTest, VersionOnePeerIsAnsweredInVersionOne) {
  // A client from before depths were exchanged: its info is version 1, and
  // it could not decode a version 2 answer.
  Pair pair(SimulatedVerbs::Options{});
  ASSERT_TRUE(pair.Open({}, {}).ok());
  absl::StatusOr<ConnectionInfo> client = DecodeConnectionInfo(*pair.client_ep_->LocalInfo());
  ASSERT_TRUE(client.ok());
  client->version = 1;
  ASSERT_TRUE(pair.store_ep_->Connect(EncodeConnectionInfo(*client)).ok());
  absl::StatusOr<std::string> answer = pair.store_ep_->LocalInfo();
  ASSERT_TRUE(answer.ok());
  absl::StatusOr<ConnectionInfo> store = DecodeConnectionInfo(*answer);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(store->version, 1);
  EXPECT_EQ(store->rd_atomic_responder, 0);
  // Without depths from the peer, each end uses its own device's, as before.
  EXPECT_EQ(pair.store_ep_->rd_atomic(), std::make_pair(uint8_t{16}, uint8_t{16}));
  ASSERT_TRUE(pair.client_ep_->Connect(*answer).ok());
  EXPECT_EQ(pair.client_ep_->rd_atomic(), std::make_pair(uint8_t{16}, uint8_t{16}));
  EXPECT_TRUE(pair.Read().ok());
}

TEST(RdmaEngineSimulatedTest, ProtectionDomainsKeepTheirMemoryAndEndpointsApart) {
  SimulatedVerbs sim;
  RdmaEngine::Options o;
  o.device_name = "sim1";
  o.domains_max = 2;
  auto engine = RdmaEngine::Open(&sim, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ(sim.stats().live_pds, 1u);  // the default domain
  absl::StatusOr<uint32_t> own = (*engine)->NewDomain();
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_NE(*own, kDefaultDomain);
  EXPECT_EQ(sim.stats().live_pds, 2u);
  EXPECT_EQ((*engine)->NewDomain().status().code(), absl::StatusCode::kResourceExhausted);

  std::vector<char> mem(kBytes, 1);
  absl::StatusOr<MemoryRegion> region = (*engine)->RegisterMemory(
      mem.data(), mem.size(), MemoryKind::kHost, MemoryAccess::kRemoteRead, *own);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->domain, *own);
  // Its own domain's cache knows it; the default domain's does not, and
  // registers the range anew (another MR, another rkey).
  EXPECT_TRUE((*engine)->FindMemory(mem.data(), 4096, *own).has_value());
  EXPECT_FALSE((*engine)->FindMemory(mem.data(), 4096).has_value());
  absl::StatusOr<MemoryRegion> again = (*engine)->RegisterMemory(
      mem.data(), mem.size(), MemoryKind::kHost, MemoryAccess::kRemoteRead);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->rkey, region->rkey);
  EXPECT_EQ((*engine)->registration_stats(*own).live_regions, 1u);
  EXPECT_EQ((*engine)->registration_stats().misses, 1u);
  EXPECT_EQ((*engine)
                ->RegisterMemory(mem.data(), 4096, MemoryKind::kHost, MemoryAccess::kLocal, 7)
                .status()
                .code(),
            absl::StatusCode::kNotFound);

  // An endpoint exposes only a region of its own domain.
  RdmaEndpoint::Options exposing;
  exposing.expose = *region;
  EXPECT_EQ((*engine)->CreateEndpoint(exposing).status().code(),
            absl::StatusCode::kInvalidArgument);
  exposing.domain = 7;
  EXPECT_EQ((*engine)->CreateEndpoint(exposing).status().code(),
            absl::StatusCode::kInvalidArgument);
  exposing.domain = *own;
  absl::StatusOr<std::unique_ptr<RdmaEndpoint>> ep = (*engine)->CreateEndpoint(exposing);
  ASSERT_TRUE(ep.ok()) << ep.status();
  ep->reset();

  EXPECT_TRUE((*engine)->UnregisterMemory(*region).ok());
  EXPECT_TRUE((*engine)->UnregisterMemory(*again).ok());
  EXPECT_EQ((*engine)->registration_stats(*own).live_regions, 0u);
  engine->reset();
  SimulatedVerbs::Stats st = sim.stats();
  EXPECT_EQ(st.live_pds + st.live_mrs + st.live_qps + st.live_cqs + st.live_contexts, 0u);
}

}  // namespace
}  // namespace shelf::transport::rdma
