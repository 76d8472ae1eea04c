// The bad-input matrix (docs/security.md): each malformed or hostile input
// against a cluster with a secret, the answer it must get, and proof that
// nothing else changed (the master's objects, puts in flight, used bytes
// and every segment's extents are identical before and after, and the
// stores still serve). The table prints itself as the matrix rows.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "client/write_grant.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/net.h"
#include "server/master/rpc_limits.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/local_cluster.h"
#include "tests/fault/fault_util.h"
#include "transport/session.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {

namespace wire = transport::wire;

namespace {

using fault::BlockBytes;

constexpr char kSecret[] = "bad-input-test-secret-0123456789";
constexpr char kClosed[] = "connection closed, no reply";

std::string CodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }
std::string CodeName(grpc::StatusCode code) {
  return CodeName(static_cast<absl::StatusCode>(code));
}
std::string CodeName(StatusCode code) { return StatusCodeName(code); }

struct Case {
  std::string input;
  std::string where;
  std::string expected;
  std::function<std::string()> run;  // the observed answer
};

class BadInputTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.dram_bytes = 32ull << 20;
    o.secret = kSecret;
    o.master_args = {"--put-timeout", "1s"};
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.allow_shm = false;
    return co;
  }
  void SetUp() override {
    ClusterFixture::SetUp();
    if (HasFatalFailure()) return;
    probe_ = std::make_unique<fault::FaultProbe>(cluster_->master_address(), kSecret);
    existing_ = BlockBytes(50000, 1);
    PutOptions po;
    po.replicas = 2;
    ASSERT_TRUE(client_->Put("existing", existing_.data(), existing_.size(), po).ok());
  }

  // An authenticated raw connection to store `i` and its session, or -1.
  int RawConnection(int i, wire::Session* session) {
    absl::StatusOr<HostPort> hp = ParseHostPort(cluster_->store_address(i));
    if (!hp.ok()) return -1;
    absl::StatusOr<int> fd = TcpConnect(*hp, 2000);
    if (!fd.ok()) return -1;
    SetIoTimeoutMs(*fd, 3000);
    if (!wire::ClientHandshake(*fd, kSecret, session).ok()) {
      close(*fd);
      return -1;
    }
    return *fd;
  }

  // `bytes` and the session tag over them, as a client sends a frame (a
  // malformed or truncated frame stays so: the store reads no tag for it).
  static std::string Tagged(wire::Session* session, const std::string& bytes) {
    // Header and extra always; the payload as the session says.
    size_t meta = bytes.size();
    if (bytes.size() >= wire::kHeaderBytes) {
      meta = std::min<size_t>(meta, wire::kHeaderBytes + absl::little_endian::Load32(&bytes[36]));
    }
    session->send.Begin(bytes.size() > 5 ? static_cast<wire::Op>(bytes[5]) : wire::Op::kPing);
    session->send.Add(bytes.data(), meta);
    session->send.AddPayload(bytes.data() + meta, bytes.size() - meta);
    return bytes + session->send.Finish();
  }

  // Sends `bytes` (tagged) on a fresh authenticated connection, optionally
  // half-closes, and reports what came back: a status code name, or
  // kClosed when the store hung up without a reply.
  std::string SendRaw(const std::string& bytes, bool half_close) {
    wire::Session session;
    int fd = RawConnection(0, &session);
    if (fd < 0) return "no connection";
    std::string tagged = Tagged(&session, bytes);
    WriteFull(fd, tagged.data(), tagged.size()).IgnoreError();
    if (half_close) shutdown(fd, SHUT_WR);
    char head[wire::kHeaderBytes];
    absl::Status s = ReadFull(fd, head, sizeof(head));
    close(fd);
    if (!s.ok()) {
      return s.code() == absl::StatusCode::kDeadlineExceeded ? "no reply, connection kept open"
                                                             : kClosed;
    }
    absl::StatusOr<wire::Header> h = wire::DecodeHeader(head);
    if (!h.ok()) return "garbage reply";
    return CodeName(static_cast<absl::StatusCode>(h->status));
  }

  static std::string Frame(wire::Header h, const std::string& extra = "") {
    h.extra_len = static_cast<uint32_t>(extra.size());
    char head[wire::kHeaderBytes];
    wire::EncodeHeader(h, head);
    return std::string(head, sizeof(head)) + extra;
  }

  std::string PutStartCode(const std::string& key, uint64_t size, uint32_t replicas = 1,
                           const std::string& parent = "") {
    v1::PutStartRequest req;
    req.set_key(key);
    req.set_size(size);
    req.mutable_options()->set_replicas(replicas);
    req.set_parent_key(parent);
    v1::PutStartResponse resp;
    grpc::Status s = probe_->master()->PutStart(probe_->Context().get(), req, &resp);
    if (s.ok() && resp.grants_size() > 0) return "granted";
    return CodeName(s.error_code());
  }

  std::unique_ptr<fault::FaultProbe> probe_;
  std::string existing_;
};

std::vector<std::string> Keys(size_t n) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(absl::StrCat("k", i));
  return keys;
}

TEST_F(BadInputTest, EveryBadInputGetsItsAnswerAndChangesNothing) {
  auto* master = probe_->master();
  auto* admin = probe_->admin();
  auto ctx = [this] { return probe_->Context(); };
  const std::string big_key(257, 'k');

  // A real grant, expired by the time the matrix replays it.
  absl::StatusOr<fault::ClusterSnapshot> idle = probe_->Snapshot();
  ASSERT_TRUE(idle.ok()) << idle.status();
  const uint64_t idle_dram = idle->dram_used_bytes;
  v1::PutStartRequest granted_req;
  granted_req.set_key("grant-source");
  granted_req.set_size(4096);
  v1::PutStartResponse granted;
  ASSERT_TRUE(master->PutStart(ctx().get(), granted_req, &granted).ok());
  ASSERT_EQ(granted.grants_size(), 1);
  const wire::Grant grant = ToWireGrant(granted.grants(0));
  const std::string grant_store = granted.replicas(0).store().data_address();
  const std::string other_store = grant_store == cluster_->store_address(0)
                                      ? cluster_->store_address(1)
                                      : cluster_->store_address(0);
  // Let the grant expire and the master reclaim its put and, once the grant
  // has expired at the stores too (a skew margin later), its range, so the
  // baseline below holds nothing in flight.
  ASSERT_TRUE(probe_
                  ->WaitFor(
                      [idle_dram](const v1::StatusResponse& st) {
                        return st.puts_in_flight() == 0 && st.dram_used_bytes() == idle_dram;
                      },
                      10000)
                  .ok());
  while (UnixMs() <= grant.expires_unix_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  auto tcp = [](const char* secret) {
    transport::TcpDataClient::Options o;
    o.secret = secret;
    return std::make_unique<transport::TcpDataClient>(o);
  };
  std::string payload(4096, 'x');

  const std::vector<Case> cases = {
      {"empty key", "PutStart", "INVALID_ARGUMENT", [&] { return PutStartCode("", 100); }},
      {"empty key", "client Put / Get", "INVALID_ARGUMENT",
       [&] {
         std::string got;
         Status a = client_->Put("", "x", 1);
         Status b = client_->Get("", &got);
         return a.code() == b.code() ? CodeName(a.code()) : "mixed";
       }},
      {"257-byte key", "PutStart", "INVALID_ARGUMENT", [&] { return PutStartCode(big_key, 100); }},
      {"257-byte key", "Lookup / MatchPrefix / Remove", "INVALID_ARGUMENT",
       [&] {
         v1::LookupRequest l;
         l.add_keys("existing");
         l.add_keys(big_key);
         v1::LookupResponse lr;
         v1::MatchPrefixRequest m;
         m.add_keys(big_key);
         v1::MatchPrefixResponse mr;
         v1::RemoveRequest r;
         r.add_keys(big_key);
         v1::RemoveResponse rr;
         std::string a = CodeName(master->Lookup(ctx().get(), l, &lr).error_code());
         std::string b = CodeName(master->MatchPrefix(ctx().get(), m, &mr).error_code());
         std::string c = CodeName(master->Remove(ctx().get(), r, &rr).error_code());
         return a == b && b == c ? a : absl::StrCat(a, "/", b, "/", c);
       }},
      {"257-byte parent key", "PutStart", "INVALID_ARGUMENT",
       [&] { return PutStartCode("child", 100, 1, big_key); }},
      {"257-byte key", "READ_KEY frame", "INVALID_ARGUMENT",
       [&] {
         wire::Header h;
         h.op = wire::Op::kReadKey;
         return SendRaw(Frame(h, big_key), false);
       }},
      {"size 0", "PutStart", "INVALID_ARGUMENT", [&] { return PutStartCode("zero", 0); }},
      {"size 0", "client Put", "INVALID_ARGUMENT",
       [&] { return CodeName(client_->Put("zero", "x", 0).code()); }},
      {"huge size (1 TiB, over --block-bytes-max)", "PutStart", "INVALID_ARGUMENT",
       [&] { return PutStartCode("huge", 1ull << 40); }},
      {"replicas = 9", "PutStart", "INVALID_ARGUMENT",
       [&] { return PutStartCode("nine", 100, 9); }},
      {"unknown put id", "PutCommit", "NOT_FOUND (per id)",
       [&] {
         v1::PutCommitRequest r;
         r.add_put_ids(987654321);
         v1::PutCommitResponse resp;
         grpc::Status s = master->PutCommit(ctx().get(), r, &resp);
         if (!s.ok() || resp.statuses_size() != 1) return CodeName(s.error_code());
         return CodeName(static_cast<absl::StatusCode>(resp.statuses(0).code())) + " (per id)";
       }},
      {"unknown put id", "PutAbort", "NOT_FOUND (per id)",
       [&] {
         v1::PutAbortRequest r;
         r.add_put_ids(987654321);
         v1::PutAbortResponse resp;
         grpc::Status s = master->PutAbort(ctx().get(), r, &resp);
         if (!s.ok() || resp.statuses_size() != 1) return CodeName(s.error_code());
         return CodeName(static_cast<absl::StatusCode>(resp.statuses(0).code())) + " (per id)";
       }},
      {"expired put id (reclaimed after --put-timeout)", "PutCommit", "NOT_FOUND (per id)",
       [&] {
         v1::PutCommitRequest r;
         r.add_put_ids(grant.put_id);
         v1::PutCommitResponse resp;
         grpc::Status s = master->PutCommit(ctx().get(), r, &resp);
         if (!s.ok() || resp.statuses_size() != 1) return CodeName(s.error_code());
         return CodeName(static_cast<absl::StatusCode>(resp.statuses(0).code())) + " (per id)";
       }},
      {"replayed grant, after its expiry", "WRITE frame", "PERMISSION_DENIED",
       [&] {
         return CodeName(tcp(kSecret)
                             ->Write(grant_store, grant, grant.segment_id, grant.offset,
                                     payload.data(), payload.size(), MonoMs() + 5000)
                             .code());
       }},
      {"replayed grant, on another node", "WRITE frame", "PERMISSION_DENIED",
       [&] {
         return CodeName(tcp(kSecret)
                             ->Write(other_store, grant, grant.segment_id, grant.offset,
                                     payload.data(), payload.size(), MonoMs() + 5000)
                             .code());
       }},
      {"forged grant (MAC of zeros)", "WRITE frame", "PERMISSION_DENIED",
       [&] {
         wire::Grant g = grant;
         g.expires_unix_ms = UnixMs() + 60000;
         g.mac = std::string(32, '\0');
         return CodeName(tcp(kSecret)
                             ->Write(grant_store, g, g.segment_id, g.offset, payload.data(),
                                     payload.size(), MonoMs() + 5000)
                             .code());
       }},
      {"grant of 67 bytes", "WRITE frame", "INVALID_ARGUMENT",
       [&] {
         wire::Header h;
         h.op = wire::Op::kWrite;
         h.length = 16;
         return SendRaw(Frame(h, wire::EncodeGrant(grant).substr(1)) + std::string(16, 'x'), false);
       }},
      {"wrong secret", "gRPC (any call)", "UNAUTHENTICATED",
       [&] {
         fault::FaultProbe wrong(cluster_->master_address(), "wrong-secret-0123456789");
         return CodeName(wrong.Status().status().code());
       }},
      {"no secret", "gRPC (any call)", "UNAUTHENTICATED",
       [&] {
         fault::FaultProbe none(cluster_->master_address(), "");
         v1::LookupRequest l;
         l.add_keys("existing");
         v1::LookupResponse lr;
         return CodeName(none.master()->Lookup(none.Context().get(), l, &lr).error_code());
       }},
      {"wrong secret", "data-plane AUTH", "UNAUTHENTICATED",
       [&] {
         return CodeName(tcp("wrong-secret-0123456789")->Ping(grant_store, MonoMs() + 5000).code());
       }},
      {"truncated frame header (20 of 40 bytes)", "data plane", kClosed,
       [&] {
         wire::Header h;
         h.op = wire::Op::kPing;
         return SendRaw(Frame(h).substr(0, 20), true);
       }},
      {"truncated WRITE payload (granted, 100 of 4096 bytes)", "data plane", kClosed,
       [&] {
         // A live grant of its own, aborted afterwards: the truncated
         // write must leave nothing visible, and nothing allocated once
         // the grant has expired (an aborted put's range is not placed
         // again before then).
         absl::StatusOr<fault::ClusterSnapshot> start = probe_->Snapshot();
         if (!start.ok()) return std::string("no snapshot");
         v1::PutStartRequest req;
         req.set_key("truncated");
         req.set_size(4096);
         v1::PutStartResponse resp;
         if (!master->PutStart(ctx().get(), req, &resp).ok() || resp.grants_size() != 1) {
           return std::string("no grant");
         }
         const v1::WriteGrant& wg = resp.grants(0);
         const wire::Grant g = ToWireGrant(wg);
         wire::Header h;
         h.op = wire::Op::kWrite;
         h.segment_id = g.segment_id;
         h.offset = g.offset;
         h.length = 4096;
         std::string answer;
         if (resp.replicas(0).store().data_address() == cluster_->store_address(0)) {
           answer = SendRaw(Frame(h, wire::EncodeGrant(g)) + std::string(100, 'x'), true);
         } else {
           answer = kClosed;  // placed on the other store: the same frame, there
           wire::Session session;
           int fd = RawConnection(1, &session);
           std::string f = Tagged(&session, Frame(h, wire::EncodeGrant(g)) + std::string(100, 'x'));
           WriteFull(fd, f.data(), f.size()).IgnoreError();
           shutdown(fd, SHUT_WR);
           char head[wire::kHeaderBytes];
           if (ReadFull(fd, head, sizeof(head)).ok()) answer = "a reply";
           close(fd);
         }
         v1::PutAbortRequest abort;
         abort.add_put_ids(g.put_id);
         v1::PutAbortResponse abort_resp;
         master->PutAbort(ctx().get(), abort, &abort_resp);
         WaitFor(
             [&] {
               absl::StatusOr<fault::ClusterSnapshot> now = probe_->Snapshot();
               return now.ok() && now->ToString() == start->ToString();
             },
             15000, 50);
         return answer;
       }},
      {"truncated extra section (READ_KEY, 3 of 10 bytes)", "data plane", kClosed,
       [&] {
         wire::Header h;
         h.op = wire::Op::kReadKey;
         std::string f = Frame(h, "0123456789");
         return SendRaw(f.substr(0, f.size() - 7), true);
       }},
      {"bad magic", "data plane", kClosed,
       [&] {
         wire::Header h;
         h.magic = 0x12345678;
         return SendRaw(Frame(h), false);
       }},
      {"bad version", "data plane", kClosed,
       [&] {
         wire::Header h;
         h.version = 9;
         return SendRaw(Frame(h), false);
       }},
      {"unknown opcode (77)", "data plane", kClosed,
       [&] {
         wire::Header h;
         h.op = static_cast<wire::Op>(77);
         return SendRaw(Frame(h), false);
       }},
      {"extra section of 4097 bytes", "data plane", kClosed,
       [&] {
         wire::Header h;
         h.op = wire::Op::kReadKey;
         std::string f = Frame(h, std::string(4097, 'k'));
         return SendRaw(f, false);
       }},
      {"length over 4 GiB", "data plane", kClosed,
       [&] {
         wire::Header h;
         h.op = wire::Op::kRead;
         h.length = (1ull << 32) + 1;
         return SendRaw(Frame(h), false);
       }},
      {"READ past the segment end (offset near 2^64)", "data plane", "OUT_OF_RANGE",
       [&] {
         wire::Header h;
         h.op = wire::Op::kRead;
         h.offset = ~0ull - 10;
         h.length = 4096;
         return SendRaw(Frame(h), false);
       }},
      {"READ of an unknown segment", "data plane", "NOT_FOUND",
       [&] {
         wire::Header h;
         h.op = wire::Op::kRead;
         h.segment_id = 9;
         h.length = 16;
         return SendRaw(Frame(h), false);
       }},
      {"HELLO sent by a client", "data plane", kClosed,
       [&] {
         wire::Header h;
         h.op = wire::Op::kHello;
         return SendRaw(Frame(h, std::string(16, 'n')), false);
       }},
      {"oversized batch (1025 keys)", "Lookup / MatchPrefix / Remove", "INVALID_ARGUMENT",
       [&] {
         v1::LookupRequest l;
         v1::MatchPrefixRequest m;
         v1::RemoveRequest r;
         for (const std::string& k : Keys(1025)) {
           l.add_keys(k);
           m.add_keys(k);
           r.add_keys(k);
         }
         v1::LookupResponse lr;
         v1::MatchPrefixResponse mr;
         v1::RemoveResponse rr;
         std::string a = CodeName(master->Lookup(ctx().get(), l, &lr).error_code());
         std::string b = CodeName(master->MatchPrefix(ctx().get(), m, &mr).error_code());
         std::string c = CodeName(master->Remove(ctx().get(), r, &rr).error_code());
         return a == b && b == c ? a : absl::StrCat(a, "/", b, "/", c);
       }},
      {"oversized batch (1025 puts / ids)", "BatchPutStart / PutCommit / PutAbort",
       "INVALID_ARGUMENT",
       [&] {
         v1::BatchPutStartRequest b;
         v1::PutCommitRequest c;
         v1::PutAbortRequest a;
         for (int i = 0; i < 1025; ++i) {
           v1::PutStartRequest* p = b.add_puts();
           p->set_key(absl::StrCat("batch-", i));
           p->set_size(4096);
           c.add_put_ids(i + 1);
           a.add_put_ids(i + 1);
         }
         v1::BatchPutStartResponse br;
         v1::PutCommitResponse cr;
         v1::PutAbortResponse ar;
         std::string x = CodeName(master->BatchPutStart(ctx().get(), b, &br).error_code());
         std::string y = CodeName(master->PutCommit(ctx().get(), c, &cr).error_code());
         std::string z = CodeName(master->PutAbort(ctx().get(), a, &ar).error_code());
         return x == y && y == z ? x : absl::StrCat(x, "/", y, "/", z);
       }},
      {"oversized batch (1025 keys)", "client BatchGet / MatchPrefix", "INVALID_ARGUMENT",
       [&] {
         std::vector<std::string> values;
         std::vector<Status> statuses;
         size_t matched = 0;
         Status a = client_->BatchGet(Keys(1025), &values, &statuses);
         Status b = client_->MatchPrefix(Keys(1025), &matched);
         return a.code() == b.code() ? CodeName(a.code()) : "mixed";
       }},
      {"empty batch (0 keys)", "Lookup / BatchPutStart", "INVALID_ARGUMENT",
       [&] {
         v1::LookupResponse lr;
         v1::BatchPutStartResponse br;
         std::string a =
             CodeName(master->Lookup(ctx().get(), v1::LookupRequest(), &lr).error_code());
         std::string b = CodeName(
             master->BatchPutStart(ctx().get(), v1::BatchPutStartRequest(), &br).error_code());
         return a == b ? a : absl::StrCat(a, "/", b);
       }},
      {"store protocol version 2", "RegisterStore", "FAILED_PRECONDITION",
       [&] {
         v1::RegisterStoreRequest r;
         r.set_protocol_version(2);
         r.mutable_endpoint()->set_node_id("rogue");
         r.mutable_endpoint()->set_data_address("127.0.0.1:1");
         r.add_segments()->set_capacity_bytes(1 << 20);
         v1::RegisterStoreResponse resp;
         return CodeName(master->RegisterStore(ctx().get(), r, &resp).error_code());
       }},
      {"store with 0 segments / 129-byte node id", "RegisterStore", "INVALID_ARGUMENT",
       [&] {
         v1::RegisterStoreRequest r;
         r.set_protocol_version(1);
         r.mutable_endpoint()->set_node_id("rogue");
         r.mutable_endpoint()->set_data_address("127.0.0.1:1");
         v1::RegisterStoreResponse resp;
         std::string a = CodeName(master->RegisterStore(ctx().get(), r, &resp).error_code());
         r.mutable_endpoint()->set_node_id(std::string(129, 'n'));
         r.add_segments()->set_capacity_bytes(1 << 20);
         std::string b = CodeName(master->RegisterStore(ctx().get(), r, &resp).error_code());
         return a == b ? a : absl::StrCat(a, "/", b);
       }},
      {"heartbeat of an unknown node", "Heartbeat", "OK, reregister",
       [&] {
         v1::HeartbeatRequest h;
         h.set_node_id("never-registered");
         v1::HeartbeatResponse resp;
         grpc::Status s = master->Heartbeat(ctx().get(), h, &resp);
         return s.ok() && resp.reregister() ? std::string("OK, reregister")
                                            : CodeName(s.error_code());
       }},
      {"evict 0 bytes", "AdminService.Evict", "INVALID_ARGUMENT",
       [&] {
         v1::EvictResponse resp;
         return CodeName(admin->Evict(ctx().get(), v1::EvictRequest(), &resp).error_code());
       }},
      {"unknown node", "AdminService.Drain", "NOT_FOUND",
       [&] {
         v1::DrainRequest d;
         d.set_node("no-such-node");
         v1::DrainResponse resp;
         return CodeName(admin->Drain(ctx().get(), d, &resp).error_code());
       }},
  };

  absl::StatusOr<fault::ClusterSnapshot> before = probe_->Snapshot();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->puts_in_flight, 0u);
  std::string rows;
  for (const Case& c : cases) {
    std::string got = c.run();
    EXPECT_EQ(got, c.expected) << c.input << " at " << c.where;
    absl::StatusOr<fault::ClusterSnapshot> after = probe_->Snapshot();
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->ToString(), before->ToString())
        << c.input << " at " << c.where << " changed the cluster";
    absl::StrAppend(&rows, "| ", c.input, " | ", c.where, " | ", got,
                    " | BadInputTest.EveryBadInputGetsItsAnswerAndChangesNothing |\n");
  }
  std::printf("%s", rows.c_str());
  // The stores serve, the existing block is intact on both replicas.
  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  transport::TcpDataClient raw(o);
  for (int i = 0; i < cluster_->store_count(); ++i) {
    EXPECT_TRUE(raw.Ping(cluster_->store_address(i), MonoMs() + 5000).ok());
  }
  std::string got;
  ASSERT_TRUE(client_->Get("existing", &got).ok());
  EXPECT_TRUE(got == existing_);
}

// A block under --block-bytes-max but larger than every store's segment is
// a permanent refusal, RESOURCE_EXHAUSTED naming the largest segment: not
// UNAVAILABLE, which the client reads as "master unreachable, try the next
// one" and callers retry.
TEST_F(BadInputTest, ABlockLargerThanEverySegmentIsResourceExhausted) {
  absl::StatusOr<fault::ClusterSnapshot> before = probe_->Snapshot();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(PutStartCode("too-big", 512ull << 20), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(probe_->Snapshot()->ToString(), before->ToString());
}

// Each master method takes bodies up to its own limit (rpc_limits.h): a
// lookup or a heartbeat the size only a registration may have is refused
// with RESOURCE_EXHAUSTED before it is acted on.
TEST_F(BadInputTest, SmallCallsRefuseLargeBodies) {
  absl::StatusOr<fault::ClusterSnapshot> before = probe_->Snapshot();
  ASSERT_TRUE(before.ok());
  v1::LookupRequest lookup;
  for (int i = 0; i < 3; ++i) lookup.add_keys(std::string(master::kSmallRequestBytesMax / 2, 'k'));
  v1::LookupResponse lookup_resp;
  EXPECT_EQ(
      CodeName(
          probe_->master()->Lookup(probe_->Context().get(), lookup, &lookup_resp).error_code()),
      "RESOURCE_EXHAUSTED");
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_node_id(std::string(master::kHeartbeatBytesMax + 1, 'n'));
  v1::HeartbeatResponse heartbeat_resp;
  EXPECT_EQ(CodeName(probe_->master()
                         ->Heartbeat(probe_->Context().get(), heartbeat, &heartbeat_resp)
                         .error_code()),
            "RESOURCE_EXHAUSTED");
  EXPECT_EQ(probe_->Snapshot()->ToString(), before->ToString());
  // A lookup within its limit is answered as before.
  v1::LookupRequest small;
  small.add_keys("existing");
  EXPECT_EQ(
      CodeName(probe_->master()->Lookup(probe_->Context().get(), small, &lookup_resp).error_code()),
      "OK");
}

// The master's gRPC memory quota (--rpc-memory-max, 256 MiB by default)
// leaves room for a registration near its 64 MiB limit: it is received and
// parsed, and answered by the handler (here refusing its node id), not
// refused by the transport.
TEST_F(BadInputTest, ARegistrationNearItsLimitPassesTheDefaultMemoryQuota) {
  v1::RegisterStoreRequest r;
  r.set_protocol_version(1);
  (*r.mutable_labels())["pad"] = std::string(size_t{60} << 20, 'p');
  v1::RegisterStoreResponse resp;
  grpc::Status s = probe_->master()->RegisterStore(probe_->Context(60000).get(), r, &resp);
  EXPECT_EQ(CodeName(s.error_code()), "INVALID_ARGUMENT") << s.error_message();
}

}  // namespace
}  // namespace shelf
