// The data-plane session against a real shelf-store: a relay that forwards
// a real client's handshake gets no session out of it (a frame of its own,
// a replayed one or one with an altered header closes the connection, and
// the store counts it), with header tags (the default) and with payload
// tags alike; an altered payload is caught with payload tags, and with
// header tags passes the tag (the block checksums are what catch it); a
// store that cannot prove the secret is refused by the client; peers of
// another protocol version are told so in words.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "absl/base/internal/endian.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/net.h"
#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "testing/http_probe.h"
#include "testing/local_cluster.h"
#include "transport/session.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {

namespace wire = transport::wire;

namespace {

constexpr char kSecret[] = "session-test-secret-0123456789abcdef";

double ClosedByBadTag(uint16_t port) {
  int status = 0;
  std::string resp = HttpGet(port, "/metrics", &status);
  if (status != 200) return -1;
  const std::string prefix = "shelf_store_data_connections_closed_total{rule=\"bad_tag\"}";
  for (absl::string_view line : absl::StrSplit(resp, '\n')) {
    double v = 0;
    if (absl::StartsWith(line, prefix) && absl::SimpleAtod(line.substr(prefix.size()), &v)) {
      return v;
    }
  }
  return 0;
}

// Copies one whole frame (header, extra, payload and, when `tagged`, its
// tag) from `from` to `to`, its byte at `flip` XORed with `mask` (-1: none,
// or past the frame), and returns its bytes as they came ("" on failure).
std::string Forward(int from, int to, bool tagged, int64_t flip = -1, uint8_t mask = 0x5a) {
  char head[wire::kHeaderBytes];
  if (!ReadFull(from, head, sizeof(head)).ok()) return "";
  absl::StatusOr<wire::Header> h = wire::DecodeHeader(head);
  if (!h.ok()) return "";
  std::string frame(head, sizeof(head));
  std::string rest(h->extra_len + h->length + (tagged ? wire::kTagBytes : 0), '\0');
  if (!ReadFull(from, rest.data(), rest.size()).ok()) return "";
  frame += rest;
  std::string out = frame;
  if (flip >= 0 && static_cast<uint64_t>(flip) < out.size())
    out[flip] = static_cast<char>(out[flip] ^ mask);
  if (!WriteFull(to, out.data(), out.size()).ok()) return "";
  return frame;
}

// True iff the peer closes `fd` without sending a byte.
bool ClosedWithoutAnswer(int fd) {
  char c;
  return recv(fd, &c, 1, 0) <= 0;
}

// A relay on the path between one client and the store: it forwards the
// handshake, then does what `attack` says with the client's first request
// (a PING; a READ for the attacks on the answer) or its answer.
class Relay {
 public:
  enum class Attack {
    kOwnRead,             // sends a READ of its own, with the PING's tag
    kReplay,              // sends the PING twice
    kAlterRequest,        // changes the PING's request id
    kAlterAnswerHeader,   // changes the READ answer's offset
    kAlterAnswerPayload,  // changes the READ answer's first payload byte
    kStripPayloadAsk,     // clears the client's TAG_PAYLOAD in its AUTH
  };
  Relay(const std::string& store, Attack attack) : store_(store), attack_(attack) {
    HostPort bound;
    absl::StatusOr<int> fd = TcpListen(HostPort{"127.0.0.1", 0}, &bound);
    listen_fd_ = fd.ok() ? *fd : -1;
    address_ = bound.ToString();
    thread_ = std::thread([this] { Run(); });
  }
  ~Relay() {
    Join();
    close(listen_fd_);
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  const std::string& address() const { return address_; }
  // What the store did with the relay's frame: "closed" (no answer) or
  // what it answered.
  std::string outcome() const { return outcome_; }

 private:
  void Run() {
    int client = accept(listen_fd_, nullptr, nullptr);
    absl::StatusOr<HostPort> hp = ParseHostPort(store_);
    absl::StatusOr<int> store = TcpConnect(*hp, 2000);
    if (client < 0 || !store.ok()) return;
    SetIoTimeoutMs(client, 10000);
    SetIoTimeoutMs(*store, 10000);
    // The handshake, untouched: HELLO, AUTH, the store's answer.
    const int64_t strip = attack_ == Attack::kStripPayloadAsk ? 32 /* segment_id */ : -1;
    bool ok = !Forward(*store, client, false).empty() &&
              !Forward(client, *store, false, strip, wire::kAuthTagPayload).empty() &&
              !Forward(*store, client, false).empty();
    // The client's first request (a PING), held back.
    char head[wire::kHeaderBytes + wire::kTagBytes];
    ok = ok && ReadFull(client, head, sizeof(head)).ok();
    if (!ok) {
      outcome_ = "relay failed";
    } else if (attack_ == Attack::kOwnRead) {
      // A READ of its own: it can write a header, not a tag.
      wire::Header read;
      read.op = wire::Op::kRead;
      read.request_id = 99;
      read.length = 4096;
      char frame[wire::kHeaderBytes + wire::kTagBytes] = {0};
      wire::EncodeHeader(read, frame);
      std::memcpy(frame + wire::kHeaderBytes, head + wire::kHeaderBytes, wire::kTagBytes);
      WriteFull(*store, frame, sizeof(frame)).IgnoreError();
      outcome_ = ClosedWithoutAnswer(*store) ? "closed" : "answered";
    } else if (attack_ == Attack::kAlterRequest) {
      head[8] ^= 1;  // request_id
      WriteFull(*store, head, sizeof(head)).IgnoreError();
      outcome_ = ClosedWithoutAnswer(*store) ? "closed" : "answered";
    } else if (attack_ == Attack::kAlterAnswerHeader || attack_ == Attack::kAlterAnswerPayload) {
      // The READ goes through; its answer is changed on the way back (a
      // READ answer without an error has no extra: the payload follows the
      // header).
      WriteFull(*store, head, sizeof(head)).IgnoreError();
      const int64_t at =
          attack_ == Attack::kAlterAnswerHeader ? 16 /* offset */ : wire::kHeaderBytes;
      outcome_ = Forward(*store, client, true, at).empty() ? "not answered" : "forwarded";
    } else {
      // The client's PING, twice: the first is answered, the replay is not.
      WriteFull(*store, head, sizeof(head)).IgnoreError();
      std::string answer = Forward(*store, client, true);
      WriteFull(*store, head, sizeof(head)).IgnoreError();
      outcome_ = answer.empty()                ? "first not answered"
                 : ClosedWithoutAnswer(*store) ? "closed"
                                               : "answered";
    }
    close(*store);
    close(client);
  }

  const std::string store_;
  const Attack attack_;
  int listen_fd_ = -1;
  std::string address_;
  std::string outcome_;
  std::thread thread_;
};

class DataPlaneSessionTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    o.stores = 1;
    o.dram_bytes = 16ull << 20;
    o.secret = kSecret;
    // The raw READs below test frame tags, not read grants (grant_test
    // does): the store serves them without one.
    o.store_args = {"--metrics-listen", "127.0.0.1:0", "--read-grants=false"};
    return o;
  }
  ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) override {
    ClientOptions co = ClusterFixture::ClientOptionsFor(cluster);
    co.allow_shm = false;
    return co;
  }
  // Its real port, from the ready file: --metrics-listen asks for any.
  uint16_t metrics_port() const { return cluster_->store_metrics_port(0); }
};

// With header tags (the store's default) and with payload tags (the client
// asks for them), alike.
TEST_F(DataPlaneSessionTest, RelayForwardingTheHandshakeCannotIssueReplayOrAlterFrames) {
  const double before = ClosedByBadTag(metrics_port());
  for (bool payload : {false, true}) {
    SCOPED_TRACE(payload ? "payload tags" : "header tags");
    transport::TcpDataClient::Options o;
    o.secret = kSecret;
    o.session_tag_payload = payload;
    for (Relay::Attack attack : {Relay::Attack::kOwnRead, Relay::Attack::kAlterRequest}) {
      Relay relay(cluster_->store_address(0), attack);
      transport::TcpDataClient client(o);
      // The client's PING never gets its answer: the relay held it back.
      EXPECT_FALSE(client.Ping(relay.address(), MonoMs() + 10000).ok());
      relay.Join();
      EXPECT_EQ(relay.outcome(), "closed");
    }
    {
      Relay relay(cluster_->store_address(0), Relay::Attack::kReplay);
      transport::TcpDataClient client(o);
      EXPECT_TRUE(client.Ping(relay.address(), MonoMs() + 10000).ok());
      relay.Join();
      EXPECT_EQ(relay.outcome(), "closed");
    }
    // An answer with another header fails its tag at the client.
    {
      Relay relay(cluster_->store_address(0), Relay::Attack::kAlterAnswerHeader);
      transport::TcpDataClient client(o);
      std::string buf(4096, '\0');
      absl::Status s = client.Read(relay.address(), 0, 0, buf.size(), buf.data(), MonoMs() + 10000);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      relay.Join();
      EXPECT_EQ(relay.outcome(), "forwarded");
    }
  }
  // All were counted, and the store serves real clients as before.
  EXPECT_GE(ClosedByBadTag(metrics_port()), before + 6);
  std::string block(100000, 'r');
  ASSERT_TRUE(client_->Put("after-relay", block.data(), block.size()).ok());
  std::string got;
  ASSERT_TRUE(client_->Get("after-relay", &got).ok());
  EXPECT_EQ(got, block);
}

// An altered payload: payload tags catch it; header tags do not cover it,
// and the client's block checksum is what catches it in a get.
TEST_F(DataPlaneSessionTest, AlteredPayloadIsCaughtByPayloadTagsOnly) {
  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  transport::TcpDataClient direct(o);
  std::string want(4096, '\0');
  ASSERT_TRUE(
      direct.Read(cluster_->store_address(0), 0, 0, want.size(), want.data(), MonoMs() + 10000)
          .ok());
  for (bool payload : {false, true}) {
    SCOPED_TRACE(payload ? "payload tags" : "header tags");
    o.session_tag_payload = payload;
    Relay relay(cluster_->store_address(0), Relay::Attack::kAlterAnswerPayload);
    transport::TcpDataClient client(o);
    std::string got(4096, '\0');
    absl::Status s = client.Read(relay.address(), 0, 0, got.size(), got.data(), MonoMs() + 10000);
    relay.Join();
    EXPECT_EQ(relay.outcome(), "forwarded");
    if (payload) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "tag")) << s;
    } else {
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(got[0], static_cast<char>(want[0] ^ 0x5a));
      EXPECT_EQ(got.substr(1), want.substr(1));
    }
  }
}

// A client that asks for payload tags refuses a store that does not grant
// them: a relay that clears the ask gets no header-tag session out of it
// (the store's answer, which says which it chose, is under its proof).
TEST_F(DataPlaneSessionTest, RelayCannotTurnPayloadTagsOff) {
  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  o.session_tag_payload = true;
  Relay relay(cluster_->store_address(0), Relay::Attack::kStripPayloadAsk);
  transport::TcpDataClient client(o);
  absl::Status s = client.Ping(relay.address(), MonoMs() + 10000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "did not agree")) << s;
  relay.Join();
}

// A store run with --session-tag-payload: clients that did not ask follow
// its answer, and its tags cover payloads on every connection.
class PayloadTagStoreTest : public DataPlaneSessionTest {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = DataPlaneSessionTest::ClusterOptions();
    o.store_args.push_back("--session-tag-payload");
    return o;
  }
};

TEST_F(PayloadTagStoreTest, ClientsFollowTheStoreAndAlteredPayloadsAreCaught) {
  transport::TcpDataClient::Options o;
  o.secret = kSecret;  // not asking: the store's answer decides
  {
    Relay relay(cluster_->store_address(0), Relay::Attack::kAlterAnswerPayload);
    transport::TcpDataClient client(o);
    std::string got(4096, '\0');
    absl::Status s = client.Read(relay.address(), 0, 0, got.size(), got.data(), MonoMs() + 10000);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "tag")) << s;
    relay.Join();
    EXPECT_EQ(relay.outcome(), "forwarded");
  }
  {
    Relay relay(cluster_->store_address(0), Relay::Attack::kReplay);
    transport::TcpDataClient client(o);
    EXPECT_TRUE(client.Ping(relay.address(), MonoMs() + 10000).ok());
    relay.Join();
    EXPECT_EQ(relay.outcome(), "closed");
  }
  // Puts and gets through the whole client, payloads tagged both ways.
  std::string block(300000, 'p');
  ASSERT_TRUE(client_->Put("payload-tags", block.data(), block.size()).ok());
  std::string got;
  ASSERT_TRUE(client_->Get("payload-tags", &got).ok());
  EXPECT_EQ(got, block);
}

// A listener that sends HELLO of protocol `version`, then, when it gets
// AUTH, answers OK with an incarnation and no proof.
class FakeStore {
 public:
  explicit FakeStore(uint8_t version) : version_(version) {
    HostPort bound;
    absl::StatusOr<int> fd = TcpListen(HostPort{"127.0.0.1", 0}, &bound);
    listen_fd_ = fd.ok() ? *fd : -1;
    address_ = bound.ToString();
    thread_ = std::thread([this] {
      int conn = accept(listen_fd_, nullptr, nullptr);
      if (conn < 0) return;
      SetIoTimeoutMs(conn, 5000);
      wire::Header hello;
      hello.op = wire::Op::kHello;
      hello.extra_len = wire::kNonceBytes;
      char head[wire::kHeaderBytes];
      wire::EncodeHeader(hello, head);
      head[4] = static_cast<char>(version_);
      std::string frame = std::string(head, sizeof(head)) + std::string(wire::kNonceBytes, 'n');
      WriteFull(conn, frame.data(), frame.size()).IgnoreError();
      char in[wire::kHeaderBytes + 64];
      if (ReadFull(conn, in, wire::kHeaderBytes + wire::kNonceBytes + 32).ok()) {
        wire::Header ok;
        ok.op = wire::Op::kAuth;
        ok.extra_len = 8;
        wire::EncodeHeader(ok, head);
        std::string answer = std::string(head, sizeof(head)) + std::string(8, '\0');
        WriteFull(conn, answer.data(), answer.size()).IgnoreError();
      }
      char c;
      while (recv(conn, &c, 1, 0) > 0) {
      }
      close(conn);
    });
  }
  ~FakeStore() {
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
  }
  const std::string& address() const { return address_; }

 private:
  const uint8_t version_;
  int listen_fd_ = -1;
  std::string address_;
  std::thread thread_;
};

TEST_F(DataPlaneSessionTest, ClientRefusesAStoreThatCannotProveTheSecret) {
  FakeStore fake(wire::kVersion);
  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  transport::TcpDataClient client(o);
  absl::Status s = client.Ping(fake.address(), MonoMs() + 5000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "prove")) << s;
}

TEST_F(DataPlaneSessionTest, PeersOfAnotherVersionAreToldSo) {
  // A client of this release and a store of another.
  {
    FakeStore old(1);
    transport::TcpDataClient::Options o;
    o.secret = kSecret;
    transport::TcpDataClient client(o);
    absl::Status s = client.Ping(old.address(), MonoMs() + 5000);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "protocol version 1")) << s;
  }
  // A client of version 1 and this store: its AUTH is answered, in its own
  // version, with the reason.
  absl::StatusOr<HostPort> hp = ParseHostPort(cluster_->store_address(0));
  ASSERT_TRUE(hp.ok());
  absl::StatusOr<int> fd = TcpConnect(*hp, 2000);
  ASSERT_TRUE(fd.ok());
  SetIoTimeoutMs(*fd, 5000);
  char head[wire::kHeaderBytes];
  std::string nonce(wire::kNonceBytes, '\0');
  ASSERT_TRUE(ReadFull(*fd, head, sizeof(head)).ok());
  ASSERT_TRUE(ReadFull(*fd, nonce.data(), nonce.size()).ok());
  wire::Header auth;
  auth.op = wire::Op::kAuth;
  auth.extra_len = 32;  // a version-1 AUTH: the MAC alone
  wire::EncodeHeader(auth, head);
  head[4] = 1;
  std::string frame = std::string(head, sizeof(head)) + std::string(32, 'm');
  ASSERT_TRUE(WriteFull(*fd, frame.data(), frame.size()).ok());
  ASSERT_TRUE(ReadFull(*fd, head, sizeof(head)).ok());
  EXPECT_EQ(static_cast<uint8_t>(head[4]), 1);
  head[4] = static_cast<char>(wire::kVersion);  // to decode it here
  absl::StatusOr<wire::Header> reply = wire::DecodeHeader(head);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->status, static_cast<uint16_t>(absl::StatusCode::kFailedPrecondition));
  std::string msg(reply->extra_len, '\0');
  ASSERT_TRUE(ReadFull(*fd, msg.data(), msg.size()).ok());
  EXPECT_TRUE(absl::StrContains(msg, "the client version 1")) << msg;
  close(*fd);
}

}  // namespace
}  // namespace shelf
