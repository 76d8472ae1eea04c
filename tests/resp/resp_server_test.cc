// shelf-resp's server in this process, in front of a real cluster (real
// shelf-master and shelf-store processes): many connections at once, each
// pipelining SETs and GETs of its own keys while others connect and drop
// halfway through a pipeline. Every reply is checked, in order. The suite
// runs this under ThreadSanitizer too (tests/sanitize.sh), which sees the
// event loop, the worker pool and each connection's queue race or not.
#include "server/resp/resp_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/net.h"
#include "server/resp/resp_commands.h"
#include "server/resp/resp_value.h"
#include "testing/cluster_fixture.h"
#include "testing/wait_for.h"
#include "transport/tcp_client.h"

namespace shelf::resp {
namespace {

// A blocking RESP client on one socket: commands out, replies in.
class Conn {
 public:
  explicit Conn(const std::string& address) {
    absl::StatusOr<HostPort> hp = ParseHostPort(address);
    EXPECT_TRUE(hp.ok()) << hp.status();
    if (!hp.ok()) return;
    absl::StatusOr<int> fd = TcpConnect(*hp, /*timeout_ms=*/10000);
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (fd.ok()) fd_ = *fd;
  }
  ~Conn() {
    if (fd_ >= 0) close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool ok() const { return fd_ >= 0; }

  bool ShrinkReceiveBuffer(int bytes) {
    return setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) == 0;
  }

  static std::string Encode(const std::vector<std::string>& args) {
    std::string out = absl::StrCat("*", args.size(), "\r\n");
    for (const std::string& a : args) absl::StrAppend(&out, "$", a.size(), "\r\n", a, "\r\n");
    return out;
  }

  bool Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // One reply: "+OK", "-ERR ...", ":5", a bulk string's bytes, or "(nil)";
  // "(eof)" when the connection ended first.
  std::string Reply() {
    std::string line;
    if (!Line(&line)) return "(eof)";
    if (line.empty()) return "(bad)";
    if (line[0] != '$') return line;
    int64_t len = 0;
    if (!absl::SimpleAtoi(line.substr(1), &len)) return "(bad)";
    if (len < 0) return "(nil)";
    std::string value;
    if (!Bytes(static_cast<size_t>(len) + 2, &value)) return "(eof)";
    value.resize(static_cast<size_t>(len));
    return value;
  }

 private:
  bool Fill() {
    char buf[64 << 10];
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  bool Line(std::string* line) {
    for (;;) {
      size_t end = in_.find("\r\n");
      if (end != std::string::npos) {
        *line = in_.substr(0, end);
        in_.erase(0, end + 2);
        return true;
      }
      if (!Fill()) return false;
    }
  }
  bool Bytes(size_t n, std::string* out) {
    while (in_.size() < n) {
      if (!Fill()) return false;
    }
    *out = in_.substr(0, n);
    in_.erase(0, n);
    return true;
  }

  int fd_ = -1;
  std::string in_;
};

class RespServerTest : public ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    if (HasFatalFailure()) return;
    stats_ = std::make_unique<ServerStats>();
    handler_ = std::make_unique<CommandHandler>(client_.get(), CommandOptions{}, stats_.get());
    RespServerOptions o;
    o.listen = "127.0.0.1:0";
    o.threads = 4;
    auto server = RespServer::Start(o, handler_.get(), stats_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    runner_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Stop();
      runner_.join();
    }
    server_.reset();
    handler_.reset();
  }

  // Some store records block `key` of `size` bytes (its values carry the
  // trailer byte): the master's notice of its commit has arrived.
  bool StoresRecord(const std::string& key, size_t size) {
    transport::TcpDataClient raw{transport::TcpDataClient::Options{}};
    return WaitFor(
        [&] {
          for (int i = 0; i < cluster_->store_count(); ++i) {
            if (raw.CheckKey(cluster_->store_address(i), key, size, 0, MonoMs() + 5000).ok()) {
              return true;
            }
          }
          return false;
        },
        10000);
  }

  std::unique_ptr<ServerStats> stats_;
  std::unique_ptr<CommandHandler> handler_;
  std::unique_ptr<RespServer> server_;
  std::thread runner_;
};

// Each of 6 connections pipelines 24 SETs then 24 GETs (and one GET of a
// key nobody wrote) of its own keys, 4 rounds; two more connections keep
// sending half a pipeline and hanging up. Every reply comes back, in
// order, with the bytes that connection wrote.
TEST_F(RespServerTest, ConcurrentPipelinesEachGetTheirOwnRepliesInOrder) {
  constexpr int kWriters = 6, kRounds = 4, kKeys = 24;
  std::atomic<bool> writers_done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(kWriters + 2);
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      Conn c(server_->address());
      if (!c.ok()) {
        failures.fetch_add(1);
        return;
      }
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::string> values(kKeys);
        std::string sets, gets;
        for (int k = 0; k < kKeys; ++k) {
          values[k].resize(1 + rng() % 8192);
          for (char& ch : values[k]) ch = static_cast<char>(rng());
          std::string key = absl::StrCat("t", t, "-r", round, "-k", k);
          sets += Conn::Encode({"SET", key, values[k]});
          gets += Conn::Encode({"GET", key});
        }
        gets += Conn::Encode({"GET", absl::StrCat("t", t, "-r", round, "-never")});
        if (!c.Send(sets)) {
          failures.fetch_add(1);
          return;
        }
        for (int k = 0; k < kKeys; ++k) {
          std::string reply = c.Reply();
          if (reply != "+OK") {
            ADD_FAILURE() << "SET " << t << "/" << round << "/" << k << ": " << reply;
            failures.fetch_add(1);
          }
        }
        if (!c.Send(gets)) {
          failures.fetch_add(1);
          return;
        }
        for (int k = 0; k < kKeys; ++k) {
          if (c.Reply() != values[k]) {
            ADD_FAILURE() << "GET " << t << "/" << round << "/" << k << " answered other bytes";
            failures.fetch_add(1);
          }
        }
        std::string miss = c.Reply();
        if (miss != "(nil)") {
          ADD_FAILURE() << "GET of a key never written: " << miss;
          failures.fetch_add(1);
        }
      }
    });
  }
  std::atomic<int> dropped{0};
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      while (!writers_done.load()) {
        Conn c(server_->address());
        if (!c.ok()) continue;
        std::string pipeline =
            Conn::Encode({"SET", absl::StrCat("drop", t), std::string(4096, 'x')});
        pipeline += Conn::Encode({"GET", absl::StrCat("drop", t)});
        pipeline += Conn::Encode({"PING"});
        c.Send(pipeline.substr(0, pipeline.size() / 2 + static_cast<size_t>(t)));
        dropped.fetch_add(1);
      }  // closed with half a command unread
    });
  }
  for (int t = 0; t < kWriters; ++t) threads[t].join();
  writers_done.store(true);
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(dropped.load(), 0);

  // The server still answers a fresh connection.
  Conn after(server_->address());
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(after.Send(Conn::Encode({"PING"})));
  EXPECT_EQ(after.Reply(), "+PONG");
}

// Random bytes of `n`, from `seed`.
std::string RandomValue(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string v(n, '\0');
  for (char& ch : v) ch = static_cast<char>(rng());
  return v;
}

// Large SET values are read from the socket into their argument. Values
// over the event loop's bound (--max-loop-get-bytes) are leased and come
// from where they lie in the store's mapped segment, sent by the worker
// itself; a pipeline mixing them with misses and a repeat (a location
// the client cached: copied) still answers in order, byte for byte.
TEST_F(RespServerTest, GetsSendValuesFromWhereTheyLieInOrder) {
  static_assert((5 << 20) > CommandOptions::kLoopGetBytesMaxDefault);
  const std::vector<std::string> values = {RandomValue(5 << 20, 1), RandomValue(6 << 20, 2),
                                           RandomValue(100, 3)};
  Conn c(server_->address());
  ASSERT_TRUE(c.ok());
  std::string sets;
  for (size_t i = 0; i < values.size(); ++i) {
    sets += Conn::Encode({"SET", absl::StrCat("v", i), values[i]});
  }
  const double received_before = stats_->direct_received_bytes.Value();
  ASSERT_TRUE(c.Send(sets));
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(c.Reply(), "+OK");
  // The large values' bytes past the first read of each were read from
  // the socket straight into their argument (checked below, byte for
  // byte, by the GETs).
  EXPECT_GT(stats_->direct_received_bytes.Value() - received_before, 0);
  const double in_place_before = stats_->values_in_place.Value();
  const double direct_before = stats_->direct_sent_bytes.Value();

  // One GET alone, then a pipeline: v1, a miss, v2, v0 again, v1 again.
  ASSERT_TRUE(c.Send(Conn::Encode({"GET", "v0"})));
  EXPECT_TRUE(c.Reply() == values[0]) << "GET v0 answered other bytes";
  std::string gets = Conn::Encode({"GET", "v1"}) + Conn::Encode({"GET", "never"}) +
                     Conn::Encode({"GET", "v2"}) + Conn::Encode({"GET", "v0"}) +
                     Conn::Encode({"GET", "v1"});
  ASSERT_TRUE(c.Send(gets));
  EXPECT_TRUE(c.Reply() == values[1]) << "GET v1 answered other bytes";
  EXPECT_EQ(c.Reply(), "(nil)");
  EXPECT_TRUE(c.Reply() == values[2]) << "GET v2 answered other bytes";
  EXPECT_TRUE(c.Reply() == values[0]) << "GET v0 again answered other bytes";
  EXPECT_TRUE(c.Reply() == values[1]) << "GET v1 again answered other bytes";
  ASSERT_TRUE(c.Send(Conn::Encode({"PING"})));
  EXPECT_EQ(c.Reply(), "+PONG");

  // v0, v1, v2 were each read once under a fresh lease, in place; the
  // worker sent at least the single GET's reply itself.
  EXPECT_GE(stats_->values_in_place.Value() - in_place_before, 3);
  EXPECT_GE(stats_->direct_sent_bytes.Value() - direct_before, values[0].size());

  // MGET: one array, nil for the miss. The keys read before have their
  // locations cached: the small value (twice) is read from there, the
  // store's key board vouching for it, whatever the batch's size; the
  // large ones (5 and 6 MiB) are leased anew and read in place, as
  // BatchGetViews reads every block of 256 KiB or more.
  ASSERT_TRUE(StoresRecord("v2", values[2].size() + 1));  // the board follows the records
  const uint64_t board_before = client_->stats().location_cache_board_reads;
  const double mget_in_place_before = stats_->values_in_place.Value();
  ASSERT_TRUE(c.Send(Conn::Encode({"MGET", "v2", "v0", "never", "v1", "v2"})));
  EXPECT_EQ(c.Reply(), "*5");
  EXPECT_TRUE(c.Reply() == values[2]) << "MGET v2 answered other bytes";
  EXPECT_TRUE(c.Reply() == values[0]) << "MGET v0 answered other bytes";
  EXPECT_EQ(c.Reply(), "(nil)");
  EXPECT_TRUE(c.Reply() == values[1]) << "MGET v1 answered other bytes";
  EXPECT_TRUE(c.Reply() == values[2]) << "MGET v2 again answered other bytes";
  EXPECT_EQ(client_->stats().location_cache_board_reads - board_before, 2u);
  EXPECT_EQ(stats_->values_in_place.Value() - mget_in_place_before, 2);
}

// A key the gateway read before has its location cached, which the store's
// key board vouches for: its GETs run on the event loop, with no worker.
// A pipeline mixing them with a SET, a miss and keys not yet read answers
// in order; a key another client replaced is read anew, never stale.
TEST_F(RespServerTest, CachedGetsRunOnTheEventLoopInOrder) {
  const std::string a = RandomValue(64 << 10, 4), b = RandomValue(200 << 10, 5);
  Conn c(server_->address());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.Send(Conn::Encode({"SET", "loop-a", a}) + Conn::Encode({"SET", "loop-b", b})));
  ASSERT_EQ(c.Reply(), "+OK");
  ASSERT_EQ(c.Reply(), "+OK");
  // The stores record a commit when the master's notice reaches them (up
  // to a heartbeat later); their boards vouch for a block from then on.
  ASSERT_TRUE(StoresRecord("loop-a", a.size() + 1));
  ASSERT_TRUE(StoresRecord("loop-b", b.size() + 1));
  // First reads: the master's answers, under leases, by a worker.
  ASSERT_TRUE(c.Send(Conn::Encode({"GET", "loop-a"}) + Conn::Encode({"GET", "loop-b"})));
  ASSERT_TRUE(c.Reply() == a);
  ASSERT_TRUE(c.Reply() == b);

  // One at a time: each GET after the first finds no worker on the
  // connection (the first may, still finishing the reads above).
  const double loop_before = stats_->loop_gets.Value();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(c.Send(Conn::Encode({"GET", i % 2 == 0 ? "loop-a" : "loop-b"})));
    ASSERT_TRUE(c.Reply() == (i % 2 == 0 ? a : b)) << "GET " << i << " answered other bytes";
  }
  EXPECT_GE(stats_->loop_gets.Value() - loop_before, 10);

  // A pipeline: loop-able GETs first, then a SET, a miss, the new key and
  // loop-b again, all answered in order.
  const std::string fresh = RandomValue(1000, 6);
  ASSERT_TRUE(c.Send(Conn::Encode({"GET", "loop-b"}) + Conn::Encode({"GET", "loop-a"}) +
                     Conn::Encode({"SET", "loop-c", fresh}) + Conn::Encode({"GET", "never"}) +
                     Conn::Encode({"GET", "loop-c"}) + Conn::Encode({"GET", "loop-b"})));
  EXPECT_TRUE(c.Reply() == b);
  EXPECT_TRUE(c.Reply() == a);
  EXPECT_EQ(c.Reply(), "+OK");
  EXPECT_EQ(c.Reply(), "(nil)");
  EXPECT_TRUE(c.Reply() == fresh);
  EXPECT_TRUE(c.Reply() == b);

  // Another client replaces loop-a (another size, so the store's record of
  // the new block tells its notice has arrived): the board no longer
  // vouches for the cached location, and the GET reads the new value.
  ClientOptions co = ClientOptionsFor(cluster_options_);
  std::unique_ptr<Client> other = OpenClient(co);
  ASSERT_NE(other, nullptr);
  std::string replaced = RandomValue(80 << 10, 7);
  const std::string want = replaced;
  EncodeValue(&replaced);
  ASSERT_TRUE(other->Remove("loop-a").ok());
  ASSERT_TRUE(other->Put("loop-a", replaced.data(), replaced.size()).ok());
  ASSERT_TRUE(StoresRecord("loop-a", replaced.size()));
  ASSERT_TRUE(c.Send(Conn::Encode({"GET", "loop-a"})));
  EXPECT_TRUE(c.Reply() == want) << "GET loop-a answered the replaced value";
}

// A cached value of up to --max-loop-get-bytes (4 MiB by default) is
// copied out of the store's memory and sent by the event loop, with no
// lease and no worker; one byte more and its GETs go to a worker, which
// leases it and sends it from where it lies. Either is answered whole.
TEST_F(RespServerTest, TheEventLoopServesCachedValuesUpToItsBound) {
  const size_t bound = CommandOptions{}.loop_get_bytes_max;
  ASSERT_EQ(bound, CommandOptions::kLoopGetBytesMaxDefault);
  const std::string at = RandomValue(bound, 21), over = RandomValue(bound + 1, 22);
  Conn c(server_->address());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(
      c.Send(Conn::Encode({"SET", "bound-at", at}) + Conn::Encode({"SET", "bound-over", over})));
  ASSERT_EQ(c.Reply(), "+OK");
  ASSERT_EQ(c.Reply(), "+OK");
  // The boards vouch for the commits once the stores record them; the
  // gateway's client cached both locations from the SETs' commits.
  ASSERT_TRUE(StoresRecord("bound-at", at.size() + 1));
  ASSERT_TRUE(StoresRecord("bound-over", over.size() + 1));

  constexpr int kGets = 10;
  const double loop_before = stats_->loop_gets.Value();
  const double in_place_before = stats_->values_in_place.Value();
  for (int i = 0; i < kGets; ++i) {
    ASSERT_TRUE(c.Send(Conn::Encode({"GET", "bound-at"})));
    ASSERT_TRUE(c.Reply() == at) << "GET " << i << " of bound-at answered other bytes";
  }
  // The loop counts a GET after sending its reply: a PING, read after
  // those GETs, is answered after their counts.
  auto settle = [&c] {
    ASSERT_TRUE(c.Send(Conn::Encode({"PING"})));
    ASSERT_EQ(c.Reply(), "+PONG");
  };
  settle();
  // One at a time: each GET after the first finds no worker on the
  // connection (the first may, still sending the last SET's reply).
  EXPECT_GE(stats_->loop_gets.Value() - loop_before, kGets - 1);
  EXPECT_EQ(stats_->values_in_place.Value(), in_place_before);

  const double loop_between = stats_->loop_gets.Value();
  for (int i = 0; i < kGets; ++i) {
    ASSERT_TRUE(c.Send(Conn::Encode({"GET", "bound-over"})));
    ASSERT_TRUE(c.Reply() == over) << "GET " << i << " of bound-over answered other bytes";
  }
  settle();
  EXPECT_EQ(stats_->loop_gets.Value(), loop_between);
  EXPECT_EQ(stats_->values_in_place.Value() - in_place_before, kGets);
}

// The event loop writes the replies of the GETs it serves to the socket
// itself, from its copies, when nothing of the connection's waits to be
// sent: no reply of a client that reads each before it asks again is
// queued, whichever thread served it (a worker sends from where the value
// lies). A value this small fits any socket buffer at once. The server
// counts a reply after sending it, so the counts are awaited.
TEST_F(RespServerTest, EventLoopGetsSendTheirRepliesWithoutQueueing) {
  const std::string v = RandomValue(1000, 8);
  Conn c(server_->address());
  ASSERT_TRUE(c.ok());
  const double direct_before = stats_->direct_sent_bytes.Value();
  // The SET's reply is sent by the worker that ran it (nothing else of the
  // connection waits to be sent), counted with the GETs' below.
  ASSERT_TRUE(c.Send(Conn::Encode({"SET", "direct-small", v})));
  ASSERT_EQ(c.Reply(), "+OK");
  ASSERT_TRUE(StoresRecord("direct-small", v.size() + 1));
  const double loop_before = stats_->loop_gets.Value();
  const size_t reply_bytes = std::string("$1000\r\n").size() + v.size() + 2;
  constexpr int kGets = 20;
  for (int i = 0; i < kGets; ++i) {
    ASSERT_TRUE(c.Send(Conn::Encode({"GET", "direct-small"})));
    ASSERT_TRUE(c.Reply() == v) << "GET " << i << " answered other bytes";
  }
  auto direct = [&] { return stats_->direct_sent_bytes.Value() - direct_before; };
  const size_t ok_bytes = std::string("+OK\r\n").size();
  EXPECT_TRUE(WaitFor([&] { return direct() == 1.0 * (kGets * reply_bytes + ok_bytes); }, 5000, 5))
      << direct() << " bytes sent directly, of " << kGets * reply_bytes + ok_bytes;
  EXPECT_GE(stats_->loop_gets.Value() - loop_before, kGets / 2);
}

// SET values of 64 KiB and more are read into the value arena, the shared
// memory the same-host store copies a put from: none of their bytes goes
// through the client's staging memory, single SETs and a pipelined run
// alike, where a smaller value's does (the stores here are on this host).
// Every value reads back whole, and the arena has all its room back.
TEST_F(RespServerTest, LargeSetValuesArePutFromTheValueArena) {
  const std::string small = RandomValue(RespParser::kDirectBulkBytesMin - 1, 11);
  std::vector<std::string> large = {RandomValue(RespParser::kDirectBulkBytesMin, 12),
                                    RandomValue(1 << 20, 13)};
  std::string run;
  for (int i = 0; i < 8; ++i) {
    large.push_back(RandomValue(100000 + i, 20 + i));
    run += Conn::Encode({"SET", absl::StrCat("arena", large.size() - 1), large.back()});
  }
  Conn c(server_->address());
  ASSERT_TRUE(c.ok());
  const double placed_before = stats_->placed_values.Value();
  const uint64_t staged_before = client_->stats().bytes_staged_shm;
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.Send(Conn::Encode({"SET", absl::StrCat("arena", i), large[i]})));
    ASSERT_EQ(c.Reply(), "+OK");
  }
  ASSERT_TRUE(c.Send(run));
  for (int i = 0; i < 8; ++i) ASSERT_EQ(c.Reply(), "+OK") << "pipelined SET " << i;
  EXPECT_EQ(stats_->placed_values.Value() - placed_before, 1.0 * large.size());
  EXPECT_EQ(client_->stats().bytes_staged_shm, staged_before)
      << "a placed value was copied into staging memory";
  ASSERT_TRUE(c.Send(Conn::Encode({"SET", "arena-small", small})));
  ASSERT_EQ(c.Reply(), "+OK");
  EXPECT_EQ(client_->stats().bytes_staged_shm - staged_before, small.size() + 1)
      << "the small value's put did not go through staging memory: no same-host store?";
  EXPECT_EQ(stats_->placed_values.Value() - placed_before, 1.0 * large.size());

  for (size_t i = 0; i < large.size(); ++i) {
    ASSERT_TRUE(c.Send(Conn::Encode({"GET", absl::StrCat("arena", i)})));
    EXPECT_TRUE(c.Reply() == large[i]) << "GET arena" << i << " answered other bytes";
  }
  ASSERT_TRUE(c.Send(Conn::Encode({"GET", "arena-small"})));
  EXPECT_TRUE(c.Reply() == small);
}

// A client that asks for a large value and does not read for a while gets
// all of it: the worker sends what the socket takes in time and queues the
// rest, copied while the value is still leased. A client that hangs up in
// the middle of a value leaves the server serving others.
TEST_F(RespServerTest, ASlowOrVanishingReaderGetsWholeValuesOrNothing) {
  const std::string big = RandomValue(16 << 20, 4);
  {
    Conn c(server_->address());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.Send(Conn::Encode({"SET", "big", big})));
    ASSERT_EQ(c.Reply(), "+OK");
  }
  const double cut_before = stats_->direct_cut.Value();
  {
    // The client reads nothing until the worker has given up waiting: a
    // receive buffer of 64 KiB and the server's send buffer (a few MiB at
    // most) cannot hold 16 MiB, so the cut comes, however slowly the
    // worker gets to the GET.
    Conn slow(server_->address());
    ASSERT_TRUE(slow.ok());
    ASSERT_TRUE(slow.ShrinkReceiveBuffer(64 << 10));
    ASSERT_TRUE(slow.Send(Conn::Encode({"GET", "big"}) + Conn::Encode({"PING"})));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (stats_->direct_cut.Value() == cut_before && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_GE(stats_->direct_cut.Value() - cut_before, 1);
    EXPECT_TRUE(slow.Reply() == big) << "a slow reader got other bytes";
    EXPECT_EQ(slow.Reply(), "+PONG");
  }
  for (int i = 0; i < 8; ++i) {
    Conn gone(server_->address());
    ASSERT_TRUE(gone.ok());
    ASSERT_TRUE(gone.Send(Conn::Encode({"GET", "big"})));
    std::this_thread::sleep_for(std::chrono::milliseconds(i));
  }  // closed with most of the value unread
  Conn after(server_->address());
  ASSERT_TRUE(after.ok());
  ASSERT_TRUE(after.Send(Conn::Encode({"GET", "big"})));
  EXPECT_TRUE(after.Reply() == big) << "GET after the hang-ups answered other bytes";
}

}  // namespace
}  // namespace shelf::resp
