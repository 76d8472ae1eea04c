// TcpDataClient against a real DataServer on loopback, in this process:
// what its read-ahead and its unchecked reuse of idle connections must
// keep. A key read is one send and one receive on each side
// (transport::wire::ReadAhead), and a pooled connection is taken without asking the
// socket whether the store closed it, so a read that finds it closed goes
// again on a new one.
#include "transport/tcp_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "tests/common/memory_handler.h"
#include "transport/data_server.h"
#include "transport/wire.h"

namespace shelf::transport {
namespace {

constexpr char kSecret[] = "tcp-client-test-secret";
constexpr char kGrantKey[] = "tcp-client-grant-key";
constexpr char kNode[] = "node-t";
constexpr uint64_t kSegment = 1 << 20;

using testing::MemoryHandler;

class TcpClientTest : public ::testing::Test {
 protected:
  void Start(uint64_t idle_timeout_ms) {
    handler_ = std::make_unique<MemoryHandler>(kSegment, kGrantKey, kNode);
    ASSERT_TRUE(handler_->ok());
    value_.resize(64 << 10);
    for (size_t i = 0; i < value_.size(); ++i) value_[i] = static_cast<char>(i * 31 + 7);
    handler_->AddKey("block", value_);
    DataServer::Options so;
    so.listen = HostPort{"127.0.0.1", 0};
    so.secret = kSecret;
    so.idle_timeout_ms = idle_timeout_ms;
    auto server = DataServer::Start(so, handler_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = server_->bound().ToString();
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
  }
  TcpDataClient::Options ClientOptions() {
    TcpDataClient::Options co;
    co.secret = kSecret;
    co.max_idle_per_peer = 1;  // every call after the first reuses one connection
    return co;
  }

  std::unique_ptr<MemoryHandler> handler_;
  std::unique_ptr<DataServer> server_;
  std::string address_;
  std::string value_;
};

// Errors with text, blocks, pings and pipelined reads, one after another on
// one connection: whatever a read took ahead (an error's text landed where
// a block was expected, a tag, the start of the next answer) is the next
// answer's, and the stream never slips.
TEST_F(TcpClientTest, AnswersOfEveryShapeFollowEachOtherOnOneConnection) {
  Start(/*idle_timeout_ms=*/600000);
  TcpDataClient client(ClientOptions());
  for (int round = 0; round < 3; ++round) {
    std::string got(value_.size(), '\0');
    ASSERT_TRUE(client.ReadKey(address_, "block", got.size(), got.data(), MonoMs() + 10000).ok());
    EXPECT_EQ(got, value_);
    // The answer is an error with text, read where the block was expected:
    // the destination is left as it was (another op of a batch may be
    // writing from it).
    const std::string before(got.size(), static_cast<char>('a' + round));
    got = before;
    absl::Status s = client.Read(address_, 0, kSegment, got.size(), got.data(), MonoMs() + 10000);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
    EXPECT_NE(s.message().find("outside segment"), std::string::npos) << s;
    s = client.ReadKey(address_, "no-such-key", got.size(), got.data(), MonoMs() + 10000);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    s = client.ReadKey(address_, "no-such-key", 100, got.data(), MonoMs() + 10000);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_TRUE(got == before) << "a failed read wrote into its destination";
    ASSERT_TRUE(client.Ping(address_, MonoMs() + 10000).ok());
    std::string a(1000, '\0'), b(70000, '\0');
    std::vector<TcpDataClient::ReadRequest> reads(2);
    reads[0] = {0, 100, a.size(), a.data(), {}};
    reads[1] = {0, 5000, b.size(), b.data(), {}};
    std::vector<absl::Status> statuses;
    client.ReadMany(address_, reads, MonoMs() + 10000, &statuses);
    ASSERT_EQ(statuses.size(), 2u);
    EXPECT_TRUE(statuses[0].ok()) << statuses[0];
    EXPECT_TRUE(statuses[1].ok()) << statuses[1];
    EXPECT_EQ(a, std::string(handler_->base() + 100, a.size()));
    EXPECT_EQ(b, std::string(handler_->base() + 5000, b.size()));
  }
}

// The store closes connections idle for 100 ms. A read on the pooled one
// (taken without a check) finds it closed before any answer and goes again
// on a new connection: the caller sees the block, not the closed socket.
TEST_F(TcpClientTest, AReadOnAConnectionTheStoreClosedGoesAgainOnANewOne) {
  Start(/*idle_timeout_ms=*/100);
  TcpDataClient client(ClientOptions());
  std::string got(value_.size(), '\0');
  ASSERT_TRUE(client.ReadKey(address_, "block", got.size(), got.data(), MonoMs() + 10000).ok());
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // closed idle by the store
    got.assign(got.size(), '\0');
    absl::Status s = client.ReadKey(address_, "block", got.size(), got.data(), MonoMs() + 10000);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(got, value_);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    std::string part(4096, '\0');
    s = client.Read(address_, 0, 0, part.size(), part.data(), MonoMs() + 10000);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(part, std::string(handler_->base(), part.size()));
  }
}

}  // namespace
}  // namespace shelf::transport
