// transport::Engine, TCP and shared-memory backends, against a real
// DataServer and ShmServer on loopback: block round trips (striped and not),
// per-op statuses in a mixed batch, grants, deadlines against a silent peer,
// a peer that dies halfway through a payload, and registration errors. And
// the DataServer alone: write payloads bounded by their grant, stale
// key reads, pooled connections to a restarted server.
#include "transport/engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/net.h"
#include "tests/common/memory_handler.h"
#include "transport/data_server.h"
#include "transport/data_tls.h"
#include "transport/shm.h"
#include "transport/shm_engine.h"
#include "transport/tcp_client.h"
#include "transport/tcp_engine.h"
#include "transport/wire.h"

namespace shelf::transport {
namespace {

constexpr char kSecret[] = "engine-test-secret";
constexpr char kGrantKey[] = "engine-test-grant-key";
constexpr char kNode[] = "node-e";
constexpr uint64_t kSegment = 64ull << 20;

std::string Pattern(uint64_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<uint64_t>(8, n - i));
  }
  return s;
}

class TcpEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(handler_.ok());
    DataServer::Options so;
    so.listen = HostPort{"127.0.0.1", 0};
    so.secret = kSecret;
    auto server = DataServer::Start(so, &handler_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    peer_.node_id = kNode;
    peer_.set_route(Kind::kTcp, server_->bound().ToString());
  }

  std::string Grant(uint64_t put_id, uint64_t offset, uint64_t length) {
    return transport::wire::EncodeGrant(handler_.MakeGrant(put_id, offset, length));
  }
  Op Read(MemoryHandle h, uint64_t local_offset, uint64_t remote, uint64_t length) {
    return Op{OpKind::kRead, h, local_offset, &peer_, 0, remote, length, ""};
  }
  Op Write(MemoryHandle h, uint64_t local_offset, uint64_t remote, uint64_t length,
           std::string grant) {
    return Op{OpKind::kWrite, h, local_offset, &peer_, 0, remote, length, std::move(grant)};
  }

  testing::MemoryHandler handler_{kSegment, kGrantKey, kNode};
  std::unique_ptr<DataServer> server_;
  Peer peer_;
};

TEST_F(TcpEngineTest, BlocksRoundTripStripedAndNot) {
  TcpEngine::Options o;
  o.secret = kSecret;
  TcpEngine engine(o);
  EXPECT_EQ(engine.StripesFor(64 << 10), 1u);
  EXPECT_EQ(engine.StripesFor(1 << 20), 1u);
  EXPECT_EQ(engine.StripesFor(5 << 20), 2u);
  EXPECT_EQ(engine.StripesFor(16 << 20), 4u);
  EXPECT_EQ(engine.StripesFor(1ull << 30), 4u);
  for (uint64_t size :
       {uint64_t{1}, uint64_t{64} << 10, uint64_t{5} << 20 | 13, uint64_t{16} << 20}) {
    SCOPED_TRACE(size);
    std::string src = Pattern(size, size);
    std::string dst(size, '\0');
    auto hs = engine.RegisterMemory(src.data(), size, MemoryKind::kHost);
    auto hd = engine.RegisterMemory(dst.data(), size, MemoryKind::kHost);
    ASSERT_TRUE(hs.ok() && hd.ok());
    const uint64_t remote = 4096 + size % 4096;
    const uint64_t writes_before = handler_.written();
    Op w = Write(*hs, 0, remote, size, Grant(size, remote, size));
    ASSERT_TRUE(engine.Execute({&w, 1}, MonoMs() + 20000).ok());
    // Every byte went over the wire once, whatever the striping.
    EXPECT_EQ(handler_.written() - writes_before, size);
    ASSERT_EQ(std::memcmp(handler_.base() + remote, src.data(), size), 0);
    Op r = Read(*hd, 0, remote, size);
    std::shared_ptr<Batch> batch = engine.Submit({&r, 1}, MonoMs() + 20000);
    batch->Wait();
    EXPECT_TRUE(batch->Poll());
    ASSERT_TRUE(batch->status().ok()) << batch->status();
    EXPECT_EQ(dst, src);
    EXPECT_TRUE(engine.UnregisterMemory(*hs).ok());
    EXPECT_TRUE(engine.UnregisterMemory(*hd).ok());
  }
}

TEST_F(TcpEngineTest, EachOpOfAMixedBatchGetsItsOwnStatus) {
  TcpEngine::Options o;
  o.secret = kSecret;
  TcpEngine engine(o);
  std::string buf = Pattern(8 << 20, 7);
  auto h = engine.RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  Peer nowhere;  // offers no tcp route
  nowhere.node_id = "node-x";
  std::vector<Op> ops = {
      Write(*h, 0, 0, 1 << 20, Grant(1, 0, 1 << 20)),                    // 0 ok
      Read(*h, 0, kSegment - 10, 100),                                   // 1 outside the segment
      Read(*h + 1000, 0, 0, 10),                                         // 2 unregistered memory
      Read(*h, buf.size() - 5, 0, 10),                                   // 3 local range too long
      Read(*h, 0, 0, 0),                                                 // 4 empty
      Write(*h, 0, 2 << 20, 4096, ""),                                   // 5 no grant
      Write(*h, 0, 3 << 20, 8192, Grant(2, 3 << 20, 4096)),              // 6 grant too small
      Write(*h, 1 << 20, 4 << 20, 6 << 20, Grant(3, 4 << 20, 6 << 20)),  // 7 ok, striped
      Op{OpKind::kRead, *h, 0, &nowhere, 0, 0, 10, ""},                  // 8 unreachable
      Write(*h, 0, 12 << 20, 6 << 20, Grant(4, 12 << 20, 5 << 20)),  // 9 striped, one stripe bad
  };
  std::shared_ptr<Batch> batch = engine.Submit(ops, MonoMs() + 20000);
  batch->Wait();
  const std::vector<absl::Status>& st = batch->statuses();
  ASSERT_EQ(st.size(), ops.size());
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_EQ(st[1].code(), absl::StatusCode::kOutOfRange) << st[1];
  EXPECT_EQ(st[2].code(), absl::StatusCode::kInvalidArgument) << st[2];
  EXPECT_EQ(st[3].code(), absl::StatusCode::kOutOfRange) << st[3];
  EXPECT_EQ(st[4].code(), absl::StatusCode::kInvalidArgument) << st[4];
  EXPECT_EQ(st[5].code(), absl::StatusCode::kInvalidArgument) << st[5];
  EXPECT_EQ(st[6].code(), absl::StatusCode::kPermissionDenied) << st[6];
  EXPECT_TRUE(st[7].ok()) << st[7];
  EXPECT_EQ(st[8].code(), absl::StatusCode::kUnavailable) << st[8];
  EXPECT_EQ(st[9].code(), absl::StatusCode::kPermissionDenied) << st[9];
  EXPECT_EQ(batch->status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(std::memcmp(handler_.base(), buf.data(), 1 << 20), 0);
  EXPECT_EQ(std::memcmp(handler_.base() + (4 << 20), buf.data() + (1 << 20), 6 << 20), 0);
  // The refused write wrote nothing.
  EXPECT_EQ(handler_.base()[3 << 20], 0);
  // The striped write whose grant ends early: its stripes inside the grant
  // may land, the last one (past the grant) never does.
  EXPECT_EQ(std::string(handler_.base() + (17 << 20), 1 << 20), std::string(1 << 20, '\0'));
}

TEST_F(TcpEngineTest, PipelinedRunsOfSmallOpsKeepEachOpsStatus) {
  TcpEngine::Options o;
  o.secret = kSecret;
  TcpEngine engine(o);
  EXPECT_EQ(engine.StripesFor(64 << 10), 1u);
  constexpr uint64_t kBlock = 64 << 10;
  constexpr int kOps = 24;
  std::string src = Pattern(kBlock * kOps, 11), dst(kBlock * kOps, '\0');
  auto hs = engine.RegisterMemory(src.data(), src.size(), MemoryKind::kHost);
  auto hd = engine.RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  ASSERT_TRUE(hs.ok() && hd.ok());
  // Writes: op 5's grant is for another range (refused: the store closes
  // the connection mid-run), op 9 has none; every other write lands.
  std::vector<Op> writes;
  for (int i = 0; i < kOps; ++i) {
    const uint64_t remote = 1000000 + i * kBlock;
    std::string grant = i == 5 ? Grant(i, 0, kBlock) : i == 9 ? "" : Grant(i, remote, kBlock);
    writes.push_back(Write(*hs, i * kBlock, remote, kBlock, grant));
  }
  std::shared_ptr<Batch> batch = engine.Submit(writes, MonoMs() + 20000);
  batch->Wait();
  for (int i = 0; i < kOps; ++i) {
    absl::StatusCode want = i == 5   ? absl::StatusCode::kPermissionDenied
                            : i == 9 ? absl::StatusCode::kInvalidArgument
                                     : absl::StatusCode::kOk;
    EXPECT_EQ(batch->statuses()[i].code(), want) << i << ": " << batch->statuses()[i];
  }
  // Reads: op 7 is outside the segment (the store answers it and the
  // stream stays in step); the others read what was written.
  std::vector<Op> reads;
  reads.reserve(kOps);
  for (int i = 0; i < kOps; ++i) {
    reads.push_back(Read(*hd, i * kBlock, i == 7 ? kSegment : 1000000 + i * kBlock, kBlock));
  }
  batch = engine.Submit(reads, MonoMs() + 20000);
  batch->Wait();
  for (int i = 0; i < kOps; ++i) {
    const absl::Status& s = batch->statuses()[i];
    if (i == 7) {
      EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
      continue;
    }
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    if (i == 5 || i == 9) continue;  // never written
    EXPECT_EQ(std::memcmp(dst.data() + i * kBlock, src.data() + i * kBlock, kBlock), 0) << i;
  }
}

TEST_F(TcpEngineTest, RegistrationErrors) {
  TcpEngine engine(TcpEngine::Options{});
  char byte = 0;
  EXPECT_EQ(engine.RegisterMemory(nullptr, 10, MemoryKind::kHost).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.RegisterMemory(&byte, 0, MemoryKind::kHost).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.RegisterMemory(&byte, 1, MemoryKind::kGpu).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(engine.UnregisterMemory(12345).code(), absl::StatusCode::kNotFound);
  auto h = engine.RegisterMemory(&byte, 1, MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(engine.UnregisterMemory(*h).ok());
  EXPECT_EQ(engine.UnregisterMemory(*h).code(), absl::StatusCode::kNotFound);
}

TEST_F(TcpEngineTest, WrongSecretFailsEveryOp) {
  TcpEngine::Options o;
  o.secret = "not-the-secret";
  TcpEngine engine(o);
  std::string buf(4096, 'x');
  auto h = engine.RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  std::vector<Op> ops = {Read(*h, 0, 0, 4096), Write(*h, 0, 0, 4096, Grant(1, 0, 4096))};
  std::shared_ptr<Batch> batch = engine.Submit(ops, MonoMs() + 5000);
  batch->Wait();
  for (const absl::Status& s : batch->statuses()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  }
  EXPECT_EQ(handler_.written(), 0u);
}

// A DataServer over a 1 MiB MemoryHandler holding block "k" (1000 bytes
// of 'v') in its "SSD tier", on an open cluster (no secret).
class DataServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(handler_.ok());
    handler_.AddKey("k", std::string(1000, 'v'));
    options_.listen = HostPort{"127.0.0.1", 0};
    Start();
    options_.listen = server_->bound();  // a restart comes back here
  }
  void Start() {
    auto server = DataServer::Start(options_, &handler_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::string address() const { return server_->bound().ToString(); }

  testing::MemoryHandler handler_{1 << 20, kGrantKey, kNode};
  DataServer::Options options_;
  std::unique_ptr<DataServer> server_;
};

// A WRITE frame whose payload trickles in past its grant's expiry: the
// store takes no byte after it (the master may have given the range to
// another put by then) and closes the connection without an answer.
TEST_F(DataServerTest, NoByteOfAWriteLandsAfterItsGrantExpires) {
  absl::StatusOr<int> fd = TcpConnect(server_->bound(), 2000);
  ASSERT_TRUE(fd.ok()) << fd.status();
  transport::wire::Session session;
  ASSERT_TRUE(transport::wire::ClientHandshake(*fd, "", &session).ok());
  constexpr uint64_t kHalf = 32 << 10;
  // Valid for 1.5 s: time enough, on a loaded machine, for the store to
  // check it and take the first half.
  const std::string extra = transport::wire::EncodeGrant(handler_.MakeGrant(1, 0, 2 * kHalf, 1500));
  transport::wire::Header h;
  h.op = transport::wire::Op::kWrite;
  h.request_id = 1;
  h.length = 2 * kHalf;
  h.extra_len = static_cast<uint32_t>(extra.size());
  char head[transport::wire::kHeaderBytes];
  transport::wire::EncodeHeader(h, head);
  const std::string first(kHalf, 'a'), rest(kHalf, 'b');
  ASSERT_TRUE(WriteFull(*fd, head, sizeof(head)).ok());
  ASSERT_TRUE(WriteFull(*fd, extra.data(), extra.size()).ok());
  ASSERT_TRUE(WriteFull(*fd, first.data(), first.size()).ok());
  usleep(2500 * 1000);  // the grant expired a second ago
  (void)WriteFull(*fd, rest.data(), rest.size());
  char c;
  EXPECT_LE(recv(*fd, &c, 1, 0), 0) << "answered a write past its grant";
  close(*fd);
  EXPECT_EQ(std::string(handler_.base(), kHalf), first);
  EXPECT_EQ(std::string(handler_.base() + kHalf, kHalf).find('b'), std::string::npos);
}

// An SSD block of another size than the reader expects is another commit
// of the key (replaced since its lookup), not corruption: the reader is
// told FAILED_PRECONDITION (and asks the master again), never DATA_LOSS,
// which would make it report a good replica as lost.
TEST_F(DataServerTest, ABlockOfAnotherSizeIsStaleNotLost) {
  TcpDataClient client(TcpDataClient::Options{});
  std::string dst(4096, '\0');
  for (uint64_t length : {500, 2000}) {
    absl::Status s = client.ReadKey(address(), "k", length, dst.data(), MonoMs() + 5000);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << length << ": " << s;
  }
  EXPECT_TRUE(client.ReadKey(address(), "k", 1000, dst.data(), MonoMs() + 5000).ok());
  EXPECT_EQ(dst.substr(0, 1000), std::string(1000, 'v'));
}

// A store that restarts at the same address leaves the client's pooled
// connections closed: the next read takes a fresh one, not a dead one.
TEST_F(DataServerTest, PooledConnectionsToARestartedStoreAreNotUsed) {
  TcpDataClient client(TcpDataClient::Options{});
  std::string dst(1000, '\0');
  ASSERT_TRUE(client.ReadKey(address(), "k", 1000, dst.data(), MonoMs() + 5000).ok());
  server_.reset();  // its connections close
  Start();
  usleep(50 * 1000);  // the close reaches the client's socket
  absl::Status s = client.ReadKey(address(), "k", 1000, dst.data(), MonoMs() + 5000);
  EXPECT_TRUE(s.ok()) << s;
}

// A listener that speaks the handshake and then misbehaves: `silent` never
// answers a request; otherwise it answers a READ with a header promising
// the payload, sends half of it and closes the connection. The first
// `answered` requests of a connection get a whole answer first.
class BadPeer {
 public:
  explicit BadPeer(bool silent, int answered = 0) : silent_(silent), answered_(answered) {
    HostPort bound;
    absl::StatusOr<int> fd = TcpListen(HostPort{"127.0.0.1", 0}, &bound);
    if (fd.ok()) listen_fd_ = *fd;
    address_ = bound.ToString();
    thread_ = std::thread([this] { Loop(); });
  }
  ~BadPeer() {
    stopping_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
  }
  const std::string& address() const { return address_; }

 private:
  void Loop() {
    while (!stopping_) {
      int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      char head[transport::wire::kHeaderBytes];
      transport::wire::Header hello;
      hello.op = transport::wire::Op::kHello;
      hello.extra_len = transport::wire::kNonceBytes;
      transport::wire::EncodeHeader(hello, head);
      std::string nonce(transport::wire::kNonceBytes, 'n');
      (void)WriteFull(fd, head, sizeof(head));
      (void)WriteFull(fd, nonce.data(), nonce.size());
      absl::StatusOr<transport::wire::Header> auth = ReadFrame(fd);
      if (auth.ok()) {
        // OK, with no proof (an open cluster), incarnation 0, no node id.
        transport::wire::Header ok;
        ok.op = transport::wire::Op::kAuth;
        ok.request_id = auth->request_id;
        ok.extra_len = 8;
        transport::wire::EncodeHeader(ok, head);
        (void)WriteFull(fd, head, sizeof(head));
        (void)WriteFull(fd, std::string(8, '\0').data(), 8);
        absl::StatusOr<transport::wire::Header> req = ReadFrame(fd);
        for (int i = 0; i < answered_ && req.ok(); ++i) {
          Answer(fd, *req, std::string(req->length, 'w'));
          req = ReadFrame(fd);
        }
        if (req.ok() && silent_) {
          while (!stopping_) usleep(10000);
        } else if (req.ok()) {
          Answer(fd, *req, std::string(req->length / 2, 'h'));
        }
      }
      close(fd);
    }
  }
  // An OK header promising req.length bytes, then `payload` (all of them,
  // or fewer).
  static void Answer(int fd, const transport::wire::Header& req, const std::string& payload) {
    char head[transport::wire::kHeaderBytes];
    transport::wire::Header resp;
    resp.op = req.op;
    resp.request_id = req.request_id;
    resp.length = req.length;
    transport::wire::EncodeHeader(resp, head);
    (void)WriteFull(fd, head, sizeof(head));
    (void)WriteFull(fd, payload.data(), payload.size());
  }
  static absl::StatusOr<transport::wire::Header> ReadFrame(int fd) {
    char head[transport::wire::kHeaderBytes];
    if (absl::Status s = ReadFull(fd, head, sizeof(head)); !s.ok()) return s;
    absl::StatusOr<transport::wire::Header> h = transport::wire::DecodeHeader(head);
    if (!h.ok()) return h;
    std::string extra(h->extra_len, '\0');
    if (absl::Status s = ReadFull(fd, extra.data(), extra.size()); !s.ok()) return s;
    return h;
  }

  const bool silent_;
  const int answered_;
  int listen_fd_ = -1;
  std::string address_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// An engine, 1 MiB of registered memory, and a BadPeer to read from.
struct BadPeerRig {
  explicit BadPeerRig(bool silent, int answered = 0)
      : server(silent, answered), engine(TcpEngine::Options{}) {
    peer.node_id = silent ? "silent" : "dying";
    peer.set_route(Kind::kTcp, server.address());
    handle = *engine.RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost);
  }
  BadPeer server;
  Peer peer;
  TcpEngine engine;
  std::string buf = std::string(1 << 20, '\0');
  MemoryHandle handle = 0;
};

TEST(TcpEngineFaultTest, SilentPeerFailsTheOpAtItsDeadline) {
  BadPeerRig rig(/*silent=*/true);
  Op op{OpKind::kRead, rig.handle, 0, &rig.peer, 0, 0, rig.buf.size(), ""};
  uint64_t start = MonoMs();
  absl::Status s = rig.engine.Execute({&op, 1}, start + 300);
  uint64_t took = MonoMs() - start;
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.code() == absl::StatusCode::kDeadlineExceeded ||
              s.code() == absl::StatusCode::kUnavailable)
      << s;
  EXPECT_LT(took, 5000u) << "the op outlived its deadline by far";
}

// The client leaves a pooled connection's socket timeouts alone while a
// new deadline is about as far as the last one; a much nearer one must
// still be set, or the op would wait out the earlier, longer timeout.
TEST(TcpEngineFaultTest, AConnectionArmedForALongDeadlineHoldsALaterShortOne) {
  BadPeerRig rig(/*silent=*/true, /*answered=*/1);
  Op op{OpKind::kRead, rig.handle, 0, &rig.peer, 0, 0, 4096, ""};
  ASSERT_TRUE(rig.engine.Execute({&op, 1}, MonoMs() + 20000).ok());
  EXPECT_EQ(rig.buf.substr(0, 4096), std::string(4096, 'w'));
  uint64_t start = MonoMs();
  absl::Status s = rig.engine.Execute({&op, 1}, start + 300);
  uint64_t took = MonoMs() - start;
  EXPECT_FALSE(s.ok());
  EXPECT_LT(took, 5000u) << "the op waited out the first op's timeout: " << s;
}

TEST(TcpEngineFaultTest, PeerDyingHalfwayThroughAPayloadFailsTheOp) {
  BadPeerRig rig(/*silent=*/false);
  Op op{OpKind::kRead, rig.handle, 0, &rig.peer, 0, 0, rig.buf.size(), ""};
  absl::Status s = rig.engine.Execute({&op, 1}, MonoMs() + 5000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  // A pipelined run: the first answer breaks off, every op of the run fails.
  std::vector<Op> run;
  for (uint64_t i = 0; i < 4; ++i) {
    run.push_back({OpKind::kRead, rig.handle, i << 16, &rig.peer, 0, 0, 1 << 16, ""});
  }
  std::shared_ptr<Batch> batch = rig.engine.Submit(run, MonoMs() + 5000);
  batch->Wait();
  for (const absl::Status& st : batch->statuses()) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  }
}

class ShmEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(handler_.ok());
    socket_ = absl::StrCat(::testing::TempDir(), "/engine-test-", getpid(), ".sock");
    auto server =
        ShmServer::Start(socket_, handler_.memfd(), 0, handler_.size(), kSecret, {}, &handler_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    peer_.node_id = kNode;
    peer_.host_id = HostId();
    peer_.incarnation = 1;
    peer_.set_route(Kind::kShm, socket_);
  }

  testing::MemoryHandler handler_{4 << 20, kGrantKey, kNode};
  std::string socket_;
  std::unique_ptr<ShmServer> server_;
  Peer peer_;
};

TEST_F(ShmEngineTest, ReadsAndWritesAreCopiesOfTheMappedSegment) {
  ShmEngine engine(kSecret);
  EXPECT_TRUE(engine.Reaches(peer_));
  std::string src = Pattern(1 << 20, 3), dst(1 << 20, '\0');
  auto hs = engine.RegisterMemory(src.data(), src.size(), MemoryKind::kHost);
  auto hd = engine.RegisterMemory(dst.data(), dst.size(), MemoryKind::kHost);
  ASSERT_TRUE(hs.ok() && hd.ok());
  // A write is copied in by the store, under the grant.
  const std::string grant = transport::wire::EncodeGrant(handler_.MakeGrant(1, 8192, src.size()));
  std::vector<Op> ops = {{OpKind::kWrite, *hs, 0, &peer_, 0, 8192, src.size(), grant}};
  ASSERT_TRUE(engine.Execute(ops, MonoMs() + 10000).ok());
  EXPECT_EQ(std::memcmp(handler_.base() + 8192, src.data(), src.size()), 0);
  EXPECT_EQ(handler_.written(), src.size());
  // Without a grant, or past it: the store's verdict, nothing written.
  const std::string before(handler_.base(), 8192);
  ops = {{OpKind::kWrite, *hs, 0, &peer_, 0, 0, 4096, ""},
         {OpKind::kWrite, *hs, 0, &peer_, 0, 0, 4096, grant}};
  std::shared_ptr<Batch> refused = engine.Submit(ops, MonoMs() + 10000);
  refused->Wait();
  EXPECT_EQ(refused->statuses()[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused->statuses()[1].code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(std::string(handler_.base(), 8192), before);
  ops = {{OpKind::kRead, *hd, 0, &peer_, 0, 8192, dst.size(), ""}};
  ASSERT_TRUE(engine.Execute(ops, MonoMs() + 1000).ok());
  EXPECT_EQ(dst, src);

  // Not the mapped segment, or past its end: UNAVAILABLE (the caller moves
  // to another transport), nothing copied.
  std::memset(dst.data(), 0, dst.size());
  ops = {{OpKind::kRead, *hd, 0, &peer_, 7, 0, 16, ""},
         {OpKind::kRead, *hd, 0, &peer_, 0, (4 << 20) - 8, 16, ""}};
  std::shared_ptr<Batch> batch = engine.Submit(ops, MonoMs() + 1000);
  batch->Wait();
  EXPECT_EQ(batch->statuses()[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(batch->statuses()[1].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(dst, std::string(dst.size(), '\0'));
}

// Whether each 4 KiB page of [p, +bytes) is mapped in this process's page
// tables now (/proc/self/pagemap, bit 63).
std::vector<bool> PagesPresent(const char* p, uint64_t bytes) {
  std::vector<bool> present;
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return present;
  for (uint64_t at = 0; at < bytes; at += 4096) {
    uint64_t entry = 0;
    const off_t where = static_cast<off_t>(reinterpret_cast<uintptr_t>(p + at) / 4096 * 8);
    if (pread(fd, &entry, sizeof(entry), where) != sizeof(entry)) break;
    present.push_back((entry >> 63) != 0);
  }
  close(fd);
  return present;
}

// A segment is read through once in the background after it is mapped, up
// to the bound: its pages are in this process's page tables before any
// read asks for them, and none past the bound.
TEST_F(ShmEngineTest, AMappedSegmentIsReadThroughUpToTheBound) {
  constexpr uint64_t kWarm = 3 << 20;  // of the 4 MiB segment
  ShmAttachments attachments(kSecret, -1, kWarm);
  absl::StatusOr<std::shared_ptr<ShmMapping>> m = attachments.Get(socket_, 1);
  ASSERT_TRUE(m.ok()) << m.status();
  attachments.WaitWarm();
  EXPECT_EQ(attachments.warmed_bytes(), kWarm);
  const std::vector<bool> present = PagesPresent((*m)->base, (*m)->size);
  ASSERT_EQ(present.size(), (*m)->size / 4096) << "/proc/self/pagemap unreadable";
  size_t warm = 0, past = 0;
  for (size_t i = 0; i < present.size(); ++i) (i < kWarm / 4096 ? warm : past) += present[i];
  EXPECT_EQ(warm, kWarm / 4096);
  EXPECT_EQ(past, 0u) << "pages past the bound were touched";

  // Off (0): nothing read through.
  ShmAttachments cold(kSecret, -1, 0);
  ASSERT_TRUE(cold.Get(socket_, 1).ok());
  cold.WaitWarm();
  EXPECT_EQ(cold.warmed_bytes(), 0u);
}

// Threads that ask for a store's segment together share one attach: one
// handshake, one mapping, one read-through, where each used to map the
// segment and the last mapping replaced the others.
TEST_F(ShmEngineTest, ThreadsAttachingAtOnceShareOneMapping) {
  constexpr int kThreads = 8;
  ShmAttachments attachments(kSecret, -1, 4 << 20);
  std::atomic<int> ready{0};
  std::vector<absl::StatusOr<std::shared_ptr<ShmMapping>>> got(kThreads,
                                                               absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      got[i] = attachments.Get(socket_, 1);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status();
    EXPECT_EQ(got[i]->get(), got[0]->get()) << "thread " << i << " has a mapping of its own";
  }
  attachments.WaitWarm();
  EXPECT_EQ(attachments.warmed_bytes(), (*got[0])->size) << "the segment was read through twice";
}

// A mapping whose owner is gone is not walked; the warmer stops with its
// owner.
TEST(MappingWarmer, AMappingDroppedBeforeItsWalkIsSkipped) {
  std::vector<char> bytes(1 << 20);
  MappingWarmer warmer(bytes.size());
  std::weak_ptr<const void> gone;
  {
    auto keep = std::make_shared<int>(0);
    gone = keep;
  }
  warmer.Add(gone, bytes.data(), bytes.size());
  warmer.WaitIdle();
  EXPECT_EQ(warmer.warmed_bytes(), 0u);
  auto keep = std::make_shared<int>(0);
  warmer.Add(keep, bytes.data(), bytes.size());
  warmer.WaitIdle();
  EXPECT_EQ(warmer.warmed_bytes(), bytes.size());
}

// A block staged from private memory of 512 KiB or more goes as 256 KiB
// requests under its grant, so the store copies one while the client
// stages the next; each op still gets one status, and a piece its grant
// does not cover fails that op alone.
TEST_F(ShmEngineTest, LargeStagedWritesGoInPiecesEachOpWithOneStatus) {
  ShmEngine engine(kSecret);
  constexpr uint64_t kKiB = 1024, kMiB = 1024 * kKiB;
  const uint64_t sizes[] = {512 * kKiB, 512 * kKiB + 1, 4 * kKiB, kMiB};
  const uint64_t at[] = {0, kMiB, 2 * kMiB, 3 * kMiB};
  std::string src = Pattern(4 * kMiB, 5);
  auto hs = engine.RegisterMemory(src.data(), src.size(), MemoryKind::kHost);
  ASSERT_TRUE(hs.ok());
  std::vector<Op> ops;
  for (int i = 0; i < 4; ++i) {
    // The last op's grant covers 768 KiB of its 1 MiB: its fourth piece
    // is refused.
    const uint64_t granted = i == 3 ? 768 * kKiB : sizes[i];
    ops.push_back({OpKind::kWrite, *hs, at[i], &peer_, 0, at[i], sizes[i],
                   transport::wire::EncodeGrant(handler_.MakeGrant(1, at[i], granted))});
  }
  const uint64_t writes_before = handler_.writes();
  std::shared_ptr<Batch> batch = engine.Submit(ops, MonoMs() + 10000);
  batch->Wait();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(batch->statuses()[i].ok()) << i << ": " << batch->statuses()[i];
    EXPECT_EQ(std::memcmp(handler_.base() + at[i], src.data() + at[i], sizes[i]), 0) << i;
  }
  EXPECT_EQ(batch->statuses()[3].code(), absl::StatusCode::kPermissionDenied)
      << batch->statuses()[3];
  // 2 + 3 + 1 requests, and the last op's three granted pieces.
  EXPECT_EQ(handler_.writes() - writes_before, 9u);
}

TEST_F(ShmEngineTest, ReachesOnlyAStoreOnThisHostThatOffersShm) {
  ShmEngine engine(kSecret);
  Peer other_host = peer_;
  other_host.host_id = "another-host";
  EXPECT_FALSE(engine.Reaches(other_host));
  Peer no_shm = peer_;
  no_shm.set_route(Kind::kShm, "");
  EXPECT_FALSE(engine.Reaches(no_shm));
  std::string buf(64, '\0');
  auto h = engine.RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  Op op{OpKind::kRead, *h, 0, &other_host, 0, 0, 64, ""};
  EXPECT_EQ(engine.Execute({&op, 1}, MonoMs() + 1000).code(), absl::StatusCode::kUnavailable);
}

TEST_F(ShmEngineTest, WrongSecretIsRefused) {
  ShmEngine engine("wrong");
  std::string buf(64, '\0');
  auto h = engine.RegisterMemory(buf.data(), buf.size(), MemoryKind::kHost);
  ASSERT_TRUE(h.ok());
  Op op{OpKind::kRead, *h, 0, &peer_, 0, 0, 64, ""};
  absl::Status s = engine.Execute({&op, 1}, MonoMs() + 1000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("secret"), absl::string_view::npos) << s;
}

// StreamWritev sends every piece it is given, however many: a caller with
// more than a frame's few (a pipeline of commands) once lost all past the
// eighth without an error.
TEST(StreamWritevTest, SendsEveryPieceOfALongVector) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  timeval tv{5, 0};  // what was never sent fails the read, not the test's timeout
  setsockopt(fds[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  constexpr int kPieces = 64;
  std::vector<std::string> pieces;
  pieces.reserve(kPieces);
  std::vector<iovec> iov;
  std::string want;
  for (int i = 0; i < kPieces; ++i) pieces.push_back(Pattern(1000 + i, i));
  for (const std::string& p : pieces) {
    iov.push_back({const_cast<char*>(p.data()), p.size()});
    want += p;
  }
  std::string got(want.size(), '\0');
  std::thread reader([&] { EXPECT_TRUE(ReadFull(fds[1], got.data(), got.size()).ok()); });
  EXPECT_TRUE(transport::wire::StreamWritev(fds[0], nullptr, iov.data(), kPieces).ok());
  reader.join();
  EXPECT_TRUE(got == want);
  // Nothing more was sent than the pieces.
  char extra;
  EXPECT_EQ(recv(fds[1], &extra, 1, MSG_DONTWAIT), -1);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace shelf::transport
