// Grants nobody else can mint, against real processes started with a
// secret: reads need the read grant of a lookup, for that key, range, store
// incarnation and time; write grants verify only under the key the master
// drew for that store incarnation; a live node id cannot be taken over; a
// replica readers report corrupt leaves the index; same-host SSD reads
// through shared memory need their read grant as well. Every refusal
// changes nothing.
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "client/write_grant.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/local_cluster.h"
#include "testing/wait_for.h"
#include "tests/fault/fault_util.h"
#include "transport/shm.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {

namespace wire = transport::wire;

namespace {

using fault::BlockBytes;

constexpr char kSecret[] = "grant-test-secret-0123456789abcdef";
constexpr uint64_t kReadGrantMs = 3000;

class GrantTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.dram_bytes = 32ull << 20;
    o.secret = kSecret;
    o.master_args = {"--read-grant-ttl", absl::StrCat(kReadGrantMs, "ms")};
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.allow_shm = false;  // reads over TCP, where the store checks grants
    return co;
  }
  void SetUp() override {
    ClusterFixture::SetUp();
    if (HasFatalFailure()) return;
    probe_ = std::make_unique<fault::FaultProbe>(cluster_->master_address(), kSecret);
    transport::TcpDataClient::Options o;
    o.secret = kSecret;
    raw_ = std::make_unique<transport::TcpDataClient>(o);
  }

  std::string Snapshot() {
    absl::StatusOr<fault::ClusterSnapshot> s = probe_->Snapshot();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->ToString() : "";
  }

  v1::ObjectLocation Lookup(const std::string& key) {
    v1::LookupRequest req;
    req.add_keys(key);
    req.set_no_lease(true);
    v1::LookupResponse resp;
    grpc::Status s = probe_->master()->Lookup(probe_->Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.objects_size() == 1 ? resp.objects(0) : v1::ObjectLocation();
  }

  // Writes `data` to replica 0 of `put` over raw TCP under its grant, and
  // commits the put.
  void WriteAndCommit(const v1::PutStartResponse& put, const std::string& data) {
    const v1::Replica& r = put.replicas(0);
    ASSERT_TRUE(raw_->Write(r.store().data_address(), ToWire(put.grants(0)), r.segment_id(),
                            r.offset(), data.data(), data.size(), MonoMs() + 5000)
                    .ok());
    v1::PutCommitRequest commit;
    commit.add_put_ids(put.put_id());
    v1::PutCommitResponse commit_resp;
    ASSERT_TRUE(probe_->master()->PutCommit(probe_->Context().get(), commit, &commit_resp).ok());
    ASSERT_EQ(commit_resp.statuses(0).code(), 0);
  }

  // Reads replica 0 of `loc` over raw TCP under `credential`.
  absl::Status RawRead(const v1::ObjectLocation& loc, const std::string& credential,
                       std::string* out) {
    const v1::Replica& r = loc.replicas(0);
    out->assign(loc.size(), '\0');
    return raw_->Read(r.store().data_address(), r.segment_id(), r.offset(), loc.size(), out->data(),
                      MonoMs() + 5000, credential);
  }

  static wire::Grant ToWire(const v1::WriteGrant& g) { return ToWireGrant(g); }

  v1::PutStartResponse StartPut(const std::string& key, const std::string& data) {
    v1::PutStartRequest req;
    req.set_key(key);
    req.set_size(data.size());
    req.set_checksum(BlockChecksum(data.data(), data.size()));
    v1::PutStartResponse resp;
    grpc::Status s = probe_->master()->PutStart(probe_->Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.state(), v1::PUT_STARTED);
    return resp;
  }

  std::unique_ptr<fault::FaultProbe> probe_;
  std::unique_ptr<transport::TcpDataClient> raw_;
};

TEST_F(GrantTest, ReadsNeedTheReadGrantOfThatKeyRangeStoreAndTime) {
  const std::string a = BlockBytes(64 << 10, 1), b = BlockBytes(64 << 10, 2);
  ASSERT_TRUE(client_->Put("a", a.data(), a.size()).ok());
  ASSERT_TRUE(client_->Put("b", b.data(), b.size()).ok());
  const std::string before = Snapshot();
  v1::ObjectLocation la = Lookup("a"), lb = Lookup("b");
  ASSERT_TRUE(la.found() && lb.found());
  ASSERT_EQ(la.replicas(0).read_grant().size(), wire::kReadGrantBytes);
  const std::string cred_a = la.replicas(0).read_grant() + "a";
  const std::string store_a = la.replicas(0).store().data_address();
  std::string got;

  // No grant: READ, READ_KEY and its check-only form are refused.
  EXPECT_EQ(RawRead(la, "", &got).code(), absl::StatusCode::kPermissionDenied);
  got.assign(a.size(), '\0');
  EXPECT_EQ(raw_->ReadKey(store_a, "a", a.size(), got.data(), MonoMs() + 5000).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(raw_->CheckKey(store_a, "a", a.size(), 0, MonoMs() + 5000).code(),
            absl::StatusCode::kPermissionDenied);
  // A forged MAC; a grant with its range widened or its expiry extended.
  std::string forged = cred_a;
  forged[wire::kReadGrantBytes - 1] ^= 1;
  EXPECT_EQ(RawRead(la, forged, &got).code(), absl::StatusCode::kPermissionDenied);
  absl::string_view key;
  wire::ReadGrant g = *wire::DecodeReadCredential(cred_a, &key);
  wire::ReadGrant widened = g;
  widened.offset = 0;
  widened.length = 32ull << 20;
  EXPECT_EQ(RawRead(la, wire::EncodeReadGrant(widened) + "a", &got).code(),
            absl::StatusCode::kPermissionDenied);
  wire::ReadGrant extended = g;
  extended.expires_unix_ms += uint64_t{3600} * 1000;
  EXPECT_EQ(RawRead(la, wire::EncodeReadGrant(extended) + "a", &got).code(),
            absl::StatusCode::kPermissionDenied);
  // a's grant for b: b's range, b's key, READ_KEY of b.
  if (lb.replicas(0).store().data_address() == store_a) {
    EXPECT_EQ(RawRead(lb, cred_a, &got).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(RawRead(la, la.replicas(0).read_grant() + "b", &got).code(),
            absl::StatusCode::kPermissionDenied);
  got.assign(b.size(), '\0');
  EXPECT_EQ(raw_->ReadKey(store_a, "b", b.size(), got.data(), MonoMs() + 5000, 0,
                          la.replicas(0).read_grant())
                .code(),
            absl::StatusCode::kPermissionDenied);
  // a's grant on the other store.
  const std::string other = cluster_->store_address(0) == store_a ? cluster_->store_address(1)
                                                                  : cluster_->store_address(0);
  got.assign(a.size(), '\0');
  EXPECT_EQ(raw_->Read(other, la.replicas(0).segment_id(), la.replicas(0).offset(), a.size(),
                       got.data(), MonoMs() + 5000, cred_a)
                .code(),
            absl::StatusCode::kPermissionDenied);

  // The right grant: READ (whole and a part of the range) and READ_KEY.
  ASSERT_TRUE(RawRead(la, cred_a, &got).ok());
  EXPECT_TRUE(got == a);
  std::string part(4096, '\0');
  EXPECT_TRUE(raw_->Read(store_a, la.replicas(0).segment_id(), la.replicas(0).offset() + 4096, 4096,
                         part.data(), MonoMs() + 5000, cred_a)
                  .ok());
  EXPECT_EQ(part, a.substr(4096, 4096));

  // Replayed after it expired.
  std::this_thread::sleep_for(std::chrono::milliseconds(
      std::max<int64_t>(0, static_cast<int64_t>(g.expires_unix_ms - UnixMs())) + 300));
  EXPECT_EQ(RawRead(la, cred_a, &got).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Snapshot(), before);
  // The client library passes fresh grants on every read path.
  ASSERT_TRUE(client_->Get("a", &got).ok());
  EXPECT_TRUE(got == a);
  ASSERT_TRUE(client_->Get("a", &got).ok());  // a cached location, its grant renewed
  EXPECT_TRUE(got == a);
  std::vector<std::string> keys = {"a", "b"};
  std::vector<std::string> values;
  std::vector<Status> statuses;
  ASSERT_TRUE(client_->BatchGet(keys, &values, &statuses).ok());
  ASSERT_EQ(values.size(), 2u);
  EXPECT_TRUE(statuses[0].ok() && statuses[1].ok());
  EXPECT_TRUE(values[0] == a && values[1] == b);
}

TEST_F(GrantTest, WriteGrantsVerifyOnlyUnderTheKeyOfThatStoreIncarnation) {
  const std::string data = BlockBytes(64 << 10, 3);
  v1::PutStartResponse put = StartPut("w", data);
  ASSERT_EQ(put.replicas_size(), 1);
  const v1::Replica& r = put.replicas(0);
  const std::string store = r.store().data_address();
  const uint64_t deadline = MonoMs() + 5000;

  // Registering as a new node hands out that node's key only: a grant
  // signed with it for another store is refused.
  v1::RegisterStoreRequest reg;
  reg.set_protocol_version(1);
  reg.set_incarnation(77);
  reg.mutable_endpoint()->set_node_id("rogue");
  reg.mutable_endpoint()->set_data_address("127.0.0.1:1");
  v1::SegmentInfo* seg = reg.add_segments();
  seg->set_capacity_bytes(1 << 20);
  v1::RegisterStoreResponse reg_resp;
  ASSERT_TRUE(probe_->master()->RegisterStore(probe_->Context().get(), reg, &reg_resp).ok());
  ASSERT_EQ(reg_resp.grant_key().size(), 32u);
  wire::Grant forged = ToWire(put.grants(0));
  forged.mac = wire::GrantMac(
      reg_resp.grant_key(),
      wire::GrantScope{r.store().node_id(), r.store().incarnation(), reg_resp.term()}, forged);
  std::string evil = BlockBytes(data.size(), 666);
  EXPECT_EQ(
      raw_->Write(store, forged, r.segment_id(), r.offset(), evil.data(), evil.size(), deadline)
          .code(),
      absl::StatusCode::kPermissionDenied);
  // The real grant works.
  ASSERT_TRUE(raw_->Write(store, ToWire(put.grants(0)), r.segment_id(), r.offset(), data.data(),
                          data.size(), deadline)
                  .ok());

  // The store restarts: its new incarnation has a new key, and the old
  // grant (still within its put's deadline) no longer verifies.
  int index = cluster_->store_address(0) == store ? 0 : 1;
  cluster_->KillStore(index);
  ASSERT_TRUE(cluster_->RestartStore(index).ok());
  const std::string restarted = cluster_->store_address(index);
  ASSERT_TRUE(probe_
                  ->WaitFor(
                      [&](const v1::StatusResponse& st) {
                        for (const v1::NodeStatus& n : st.nodes()) {
                          if (n.address() == restarted && n.state() == v1::NODE_LIVE) return true;
                        }
                        return false;
                      },
                      30000)
                  .ok());
  absl::Status s = raw_->Write(restarted, ToWire(put.grants(0)), r.segment_id(), r.offset(),
                               evil.data(), evil.size(), MonoMs() + 5000);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

TEST_F(GrantTest, ALiveNodeIdCannotBeTakenOverByAnotherIncarnation) {
  const std::string data = BlockBytes(64 << 10, 4);
  Status put = client_->Put("kept", data.data(), data.size());
  ASSERT_TRUE(put.ok()) << put.ToString();
  v1::ObjectLocation loc = Lookup("kept");
  ASSERT_TRUE(loc.found());
  const v1::StoreEndpoint& live = loc.replicas(0).store();
  const std::string before = Snapshot();
  v1::RegisterStoreRequest reg;
  reg.set_protocol_version(1);
  reg.set_incarnation(live.incarnation() + 1);
  *reg.mutable_endpoint() = live;
  reg.mutable_endpoint()->set_data_address("127.0.0.1:1");
  reg.add_segments()->set_capacity_bytes(1 << 20);
  v1::InventoryEntry* e = reg.add_inventory();
  e->set_key("planted");
  e->set_size(4096);
  e->set_tier(v1::TIER_DRAM);
  v1::RegisterStoreResponse reg_resp;
  grpc::Status s = probe_->master()->RegisterStore(probe_->Context().get(), reg, &reg_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
  EXPECT_TRUE(reg_resp.grant_key().empty());
  EXPECT_EQ(Snapshot(), before);
  EXPECT_FALSE(Lookup("planted").found());
  std::string got;
  ASSERT_TRUE(client_->Get("kept", &got).ok());
  EXPECT_TRUE(got == data);
}

TEST_F(GrantTest, PutIdsAreRandomAndAForeignOrUnknownIdChangesNothing) {
  const std::string data = BlockBytes(4096, 5);
  v1::PutStartResponse p1 = StartPut("p1", data);
  v1::PutStartResponse p2 = StartPut("p2", data);
  EXPECT_NE(p1.put_id() + 1, p2.put_id()) << "put ids look sequential";
  const std::string before = Snapshot();
  for (uint64_t guess : {p2.put_id() + 1, p2.put_id() - 1, p1.put_id() ^ 1}) {
    v1::PutCommitRequest commit;
    commit.add_put_ids(guess);
    v1::PutCommitResponse resp;
    ASSERT_TRUE(probe_->master()->PutCommit(probe_->Context().get(), commit, &resp).ok());
    EXPECT_EQ(resp.statuses(0).code(), static_cast<int>(absl::StatusCode::kNotFound));
    v1::PutAbortRequest abort;
    abort.add_put_ids(guess);
    v1::PutAbortResponse aresp;
    ASSERT_TRUE(probe_->master()->PutAbort(probe_->Context().get(), abort, &aresp).ok());
    EXPECT_EQ(aresp.statuses(0).code(), static_cast<int>(absl::StatusCode::kNotFound));
  }
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(GrantTest, AReplicaReportedCorruptLeavesTheIndex) {
  const std::string data = BlockBytes(64 << 10, 6);
  v1::PutStartResponse put = StartPut("rotten", data);
  const v1::Replica& r = put.replicas(0);
  const std::string store = r.store().data_address();
  ASSERT_NO_FATAL_FAILURE(WriteAndCommit(put, data));
  v1::ObjectLocation loc = Lookup("rotten");
  ASSERT_TRUE(loc.found());

  // Reports without the replica's grant, or with another key's, are refused.
  const std::string before = Snapshot();
  v1::ReportDataLossRequest report;
  report.set_key("rotten");
  *report.mutable_replica() = loc.replicas(0);
  report.mutable_replica()->clear_read_grant();
  v1::ReportDataLossResponse report_resp;
  EXPECT_EQ(
      probe_->master()->ReportDataLoss(probe_->Context().get(), report, &report_resp).error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(client_->Put("fresh", data.data(), data.size()).ok());
  v1::ObjectLocation fresh = Lookup("fresh");
  const std::string with_fresh = Snapshot();
  *report.mutable_replica() = loc.replicas(0);
  report.mutable_replica()->set_read_grant(fresh.replicas(0).read_grant());
  EXPECT_EQ(
      probe_->master()->ReportDataLoss(probe_->Context().get(), report, &report_resp).error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Snapshot(), with_fresh);
  EXPECT_NE(before, with_fresh);

  // The bytes go bad (the put's live grant replayed, a documented limit):
  // the reader gets DATA_LOSS, reports the replica, and it leaves the index.
  std::string evil = BlockBytes(data.size(), 666);
  ASSERT_TRUE(raw_->Write(store, ToWire(put.grants(0)), r.segment_id(), r.offset(), evil.data(),
                          evil.size(), MonoMs() + 5000)
                  .ok());
  std::string got;
  Status s = client_->Get("rotten", &got);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  // The store checks the bytes against the checksum, finds them bad, and
  // the master drops the replica on its answer.
  EXPECT_TRUE(WaitFor([&] { return !Lookup("rotten").found(); }, 20000));
  EXPECT_EQ(client_->Get("rotten", &got).code(), StatusCode::kNotFound);
}

// A read across pieces from a store on this host checks the block in the
// store's segment before it copies anything: bad bytes (a replayed live
// grant, as above) are DATA_LOSS, reported, and none reach the pieces.
TEST_F(GrantTest, APiecesReadOnThisHostChecksTheBytesBeforeCopying) {
  const std::string data = BlockBytes(64 << 10, 7);
  v1::PutStartResponse put = StartPut("rotten-pieces", data);
  const v1::Replica& r = put.replicas(0);
  const std::string store = r.store().data_address();
  ASSERT_NO_FATAL_FAILURE(WriteAndCommit(put, data));

  ClientOptions co = DefaultClientOptions();
  co.allow_shm = true;
  std::unique_ptr<Client> shm = OpenClient(co);
  ASSERT_NE(shm, nullptr);
  std::string half_a(data.size() / 2, 'a'), half_b(data.size() / 2, 'b');
  std::vector<PiecesItem> items(1);
  items[0].key = "rotten-pieces";
  items[0].pieces = {{half_a.data(), half_a.size()}, {half_b.data(), half_b.size()}};
  std::vector<Status> statuses;
  std::vector<size_t> sizes;
  ASSERT_TRUE(shm->BatchGetIntoPieces(items, &statuses, &sizes).ok());
  ASSERT_TRUE(statuses[0].ok()) << statuses[0].ToString();
  EXPECT_EQ(half_a + half_b, data);
  EXPECT_EQ(shm->stats().bytes_loaded_shm, data.size());

  std::string evil = BlockBytes(data.size(), 667);
  ASSERT_TRUE(raw_->Write(store, ToWire(put.grants(0)), r.segment_id(), r.offset(), evil.data(),
                          evil.size(), MonoMs() + 5000)
                  .ok());
  half_a.assign(half_a.size(), 'a');
  half_b.assign(half_b.size(), 'b');
  ASSERT_TRUE(shm->BatchGetIntoPieces(items, &statuses, &sizes).ok());
  EXPECT_EQ(statuses[0].code(), StatusCode::kDataLoss) << statuses[0].ToString();
  EXPECT_EQ(half_a, std::string(half_a.size(), 'a'));
  EXPECT_EQ(half_b, std::string(half_b.size(), 'b'));
  EXPECT_GE(shm->stats().checksum_mismatches, 1u);
  EXPECT_TRUE(WaitFor([&] { return !Lookup("rotten-pieces").found(); }, 20000));
}

// Same-host SSD reads through the store's shared segment
// (transport/shm_write.h) need the read grant too: the store checks it as
// for READ_KEY over TCP.
class GrantSsdShmTest : public GrantTest {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = GrantTest::ClusterOptions();
    o.stores = 1;
    o.dram_bytes = 16ull << 20;
    o.ssd_bytes = 64ull << 20;
    o.master_args = {};  // grants of the default lifetime
    o.store_args = {"--shm-ssd-window=4MiB"};
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = GrantTest::ClientOptionsFor(cluster);
    co.allow_shm = true;  // shared memory allowed
    return co;
  }

  // Puts `key` and has the admin evict the store's DRAM: its location once
  // its one replica is on the SSD tier.
  v1::ObjectLocation PutOnSsd(const std::string& key, const std::string& value) {
    EXPECT_TRUE(client_->Put(key, value.data(), value.size()).ok());
    v1::EvictRequest evict;
    evict.set_bytes(16ull << 20);
    v1::EvictResponse evicted;
    EXPECT_TRUE(probe_->admin()->Evict(probe_->Context().get(), evict, &evicted).ok());
    v1::ObjectLocation loc;
    EXPECT_TRUE(WaitFor(
        [&] {
          loc = Lookup(key);
          return loc.found() && loc.replicas_size() == 1 && loc.replicas(0).tier() == v1::TIER_SSD;
        },
        30000));
    return loc;
  }

  // Reads `key` (of loc's size) through the shared segment of loc's store
  // under `grant`, as the client library does, into *got.
  absl::Status ShmRead(const v1::ObjectLocation& loc, const std::string& key,
                       const std::string& grant, std::string* got) {
    got->clear();
    const v1::StoreEndpoint& store = loc.replicas(0).store();
    absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m =
        attachments_.Get(store.shm_socket(), store.incarnation());
    if (!m.ok()) return m.status();
    transport::ShmMapping& map = **m;
    return attachments_.ReadSsd(
        map, key, loc.size(), grant, 0, [&](uint32_t segment_id, uint64_t offset, uint64_t length) {
          if (segment_id != map.segment_id || offset > map.size || length > map.size - offset) {
            return absl::OutOfRangeError("outside the mapping");
          }
          got->assign(map.base + offset, length);
          return absl::OkStatus();
        });
  }

  transport::ShmAttachments attachments_{kSecret};
};

TEST_F(GrantSsdShmTest, ShmSsdReadsNeedTheReadGrantOfThatKey) {
  const std::string s = BlockBytes(256 << 10, 4);
  ASSERT_TRUE(client_->Put("t", s.data(), s.size()).ok());
  const v1::ObjectLocation loc = PutOnSsd("s", s);
  ASSERT_TRUE(loc.found());
  const std::string& grant = loc.replicas(0).read_grant();
  ASSERT_EQ(grant.size(), wire::kReadGrantBytes);
  ASSERT_FALSE(loc.replicas(0).store().shm_socket().empty());
  // No grant, a forged one, one for another key: refused, nothing copied.
  std::string got;
  EXPECT_EQ(ShmRead(loc, "s", "", &got).code(), absl::StatusCode::kPermissionDenied);
  std::string forged = grant;
  forged.back() ^= 1;
  EXPECT_EQ(ShmRead(loc, "s", forged, &got).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ShmRead(loc, "t", grant, &got).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(got.empty());
  // Its own grant: served.
  absl::Status good = ShmRead(loc, "s", grant, &got);
  ASSERT_TRUE(good.ok()) << good;
  EXPECT_TRUE(got == s);
  // The client library sends the grant: its read comes through shared memory.
  const ClientStats before = client_->stats();
  std::string value;
  ASSERT_TRUE(client_->Get("s", &value).ok());
  EXPECT_TRUE(value == s);
  const ClientStats after = client_->stats();
  EXPECT_EQ(after.bytes_loaded_shm - before.bytes_loaded_shm, s.size());
  EXPECT_EQ(after.bytes_loaded_tcp - before.bytes_loaded_tcp, 0u);
}

// An SSD replica's grant names no DRAM range: it reads its own key by
// READ_KEY and nothing by range. (Minted as segment 0, [0, size), it once
// read the first bytes of the store's DRAM, another tenant's block there.)
TEST_F(GrantSsdShmTest, AnSsdReplicasGrantReadsNoDramRange) {
  const std::string t = BlockBytes(256 << 10, 6), s = BlockBytes(256 << 10, 7);
  const v1::ObjectLocation loc = PutOnSsd("s", s);
  ASSERT_TRUE(loc.found());
  ASSERT_TRUE(client_->Put("t", t.data(), t.size()).ok());  // in DRAM now
  const std::string& grant = loc.replicas(0).read_grant();
  const std::string& store = loc.replicas(0).store().data_address();
  std::string got(s.size(), '\0');
  EXPECT_EQ(raw_->Read(store, 0, 0, s.size(), got.data(), MonoMs() + 5000, grant + "s").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(raw_->Read(store, wire::kReadGrantNoRange, 0, s.size(), got.data(), MonoMs() + 5000,
                          grant + "s")
                   .ok());  // no such segment either
  ASSERT_TRUE(raw_->ReadKey(store, "s", s.size(), got.data(), MonoMs() + 5000, 0, grant).ok());
  EXPECT_TRUE(got == s);
}

// A store run with --read-grants=false checks none on this path either.
class NoReadGrantsSsdShmTest : public GrantSsdShmTest {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = GrantSsdShmTest::ClusterOptions();
    o.store_args.push_back("--read-grants=false");
    return o;
  }
};

TEST_F(NoReadGrantsSsdShmTest, ShmSsdReadsNeedNoGrant) {
  const std::string s = BlockBytes(256 << 10, 5);
  const v1::ObjectLocation loc = PutOnSsd("s", s);
  ASSERT_TRUE(loc.found());
  std::string got;
  absl::Status read = ShmRead(loc, "s", "", &got);
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_TRUE(got == s);
}

}  // namespace
}  // namespace shelf
