// Concurrency of the project's own building blocks, with no gRPC and no
// RocksDB in the way, so ThreadSanitizer can watch every access
// (tests/sanitize.sh builds this file with -fsanitize=thread):
//   - the TCP data plane: one DataServer, one pooled TcpDataClient shared by
//     many threads doing key reads, pings, rejected writes and reads out of
//     range at once, while each thread also writes and reads back its own
//     slice of the segment on a connection of its own (payload bytes are
//     ordered by the peer across the network, which TSan cannot see, so
//     one slice stays on one connection);
//   - RangeAllocator behind a mutex (it is thread-compatible), with a shadow
//     map that catches any range handed out twice;
//   - the metrics registry: updates, new children, callback gauges coming
//     and going, and renders, all at once.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/prom.h"
#include "storage/allocator.h"
#include "tests/common/memory_handler.h"
#include "transport/data_server.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {
namespace {

constexpr char kSecret[] = "concurrency-test-secret";
constexpr char kGrantKey[] = "concurrency-grant-key";
constexpr char kNode[] = "node-c";

using testing::MemoryHandler;

TEST(ConcurrencyTest, DataPlaneServesManyThreadsOnPooledConnections) {
  constexpr int kThreads = 8;
  constexpr uint64_t kSlice = 256 << 10;
  MemoryHandler handler(kThreads * kSlice, kGrantKey, kNode);
  ASSERT_TRUE(handler.ok());
  handler.AddKey("ssd-key", std::string(10000, 'k'));
  transport::DataServer::Options so;
  so.listen = HostPort{"127.0.0.1", 0};
  so.secret = kSecret;
  so.max_connections = 64;
  auto server = transport::DataServer::Start(so, &handler);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->bound().ToString();
  transport::TcpDataClient::Options co;
  co.secret = kSecret;
  co.max_idle_per_peer = 4;  // fewer than the threads: connections churn
  transport::TcpDataClient client(co);

  std::atomic<int> errors{0};
  std::atomic<uint64_t> written{0};
  auto worker = [&](int t) {
    std::mt19937_64 rng(t);
    transport::TcpDataClient own(co);
    const uint64_t base = t * kSlice;
    std::string buf(kSlice, '\0'), back(kSlice, '\0');
    for (int i = 0; i < 60; ++i) {
      uint64_t len = 1 + rng() % kSlice;
      uint64_t off = rng() % (kSlice - len + 1);
      for (uint64_t j = 0; j < len; ++j) buf[j] = static_cast<char>(rng());
      uint64_t deadline = MonoMs() + 20000;
      transport::wire::Grant g = handler.MakeGrant(t * 1000 + i, base, kSlice);
      absl::Status s = own.Write(address, g, 0, base + off, buf.data(), len, deadline);
      if (!s.ok()) {
        ADD_FAILURE() << "write: " << s;
        errors.fetch_add(1);
        continue;
      }
      written.fetch_add(len);
      s = own.Read(address, 0, base + off, len, back.data(), deadline);
      if (!s.ok() || std::memcmp(back.data(), buf.data(), len) != 0) {
        ADD_FAILURE() << "read back: " << s;
        errors.fetch_add(1);
      }
      switch (i % 4) {
        case 0:
          if (!client.Ping(address, deadline).ok()) errors.fetch_add(1);
          break;
        case 1: {
          std::string value(10000, '\0');
          if (!client.ReadKey(address, "ssd-key", value.size(), value.data(), deadline).ok() ||
              value != std::string(10000, 'k')) {
            errors.fetch_add(1);
          }
          break;
        }
        case 2: {
          // Outside the grant: rejected, and the connection is dropped.
          transport::wire::Grant other = handler.MakeGrant(1, base, kSlice / 2);
          s = client.Write(address, other, 0, base + kSlice / 2, buf.data(), 16, deadline);
          if (s.code() != absl::StatusCode::kPermissionDenied) {
            ADD_FAILURE() << "ungranted write: " << s;
            errors.fetch_add(1);
          }
          break;
        }
        default: {
          s = client.Read(address, 0, kThreads * kSlice, 1, back.data(), deadline);
          if (s.code() != absl::StatusCode::kOutOfRange) errors.fetch_add(1);
        }
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  // Meanwhile a stranger keeps knocking with the wrong secret.
  std::thread stranger([&] {
    transport::TcpDataClient::Options bad;
    bad.secret = "not-the-secret";
    for (int i = 0; i < 20; ++i) {
      transport::TcpDataClient c(bad);
      if (c.Ping(address, MonoMs() + 5000).code() != absl::StatusCode::kUnauthenticated) {
        errors.fetch_add(1);
      }
    }
  });
  for (std::thread& th : threads) th.join();
  stranger.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(handler.written(), written.load());
  (*server)->Stop();
}

TEST(ConcurrencyTest, AllocatorBehindAMutexNeverHandsOutARangeTwice) {
  constexpr uint64_t kAlign = 4096;
  constexpr uint64_t kPages = 4096;
  Mutex mu;
  storage::RangeAllocator alloc(kPages * kAlign, kAlign);  // guarded by mu
  std::vector<std::atomic<int>> owner(kPages);
  for (auto& o : owner) o.store(-1);
  std::atomic<int> overlaps{0};
  auto worker = [&](int t) {
    std::mt19937_64 rng(100 + t);
    std::vector<std::pair<uint64_t, uint64_t>> mine;
    for (int i = 0; i < 3000; ++i) {
      if (!mine.empty() && (rng() % 2 == 0 || mine.size() > 64)) {
        size_t k = rng() % mine.size();
        auto [off, size] = mine[k];
        mine.erase(mine.begin() + k);
        for (uint64_t p = off / kAlign; p < (off + size + kAlign - 1) / kAlign; ++p) {
          owner[p].store(-1);
        }
        MutexLock lock(&mu);
        ASSERT_TRUE(alloc.Free(off, size).ok());
        continue;
      }
      uint64_t size = 1 + rng() % (16 * kAlign);
      absl::StatusOr<uint64_t> off;
      {
        MutexLock lock(&mu);
        off = alloc.Allocate(size);
      }
      if (!off.ok()) continue;
      for (uint64_t p = *off / kAlign; p < (*off + size + kAlign - 1) / kAlign; ++p) {
        int expected = -1;
        if (!owner[p].compare_exchange_strong(expected, t)) overlaps.fetch_add(1);
      }
      mine.push_back({*off, size});
    }
    for (auto [off, size] : mine) {
      for (uint64_t p = off / kAlign; p < (off + size + kAlign - 1) / kAlign; ++p) {
        owner[p].store(-1);
      }
      MutexLock lock(&mu);
      ASSERT_TRUE(alloc.Free(off, size).ok());
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) threads.emplace_back(worker, t);
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  MutexLock lock(&mu);
  alloc.CheckInvariants();
  EXPECT_EQ(alloc.used(), 0u);
  EXPECT_EQ(alloc.free_extents(), 1u);
}

TEST(ConcurrencyTest, MetricsUpdateRegisterAndRenderAtOnce) {
  // common/prom.h over prometheus-cpp: updates, children added, a LazyChild
  // resolved by every thread at once, and callback gauges coming and going,
  // all while another thread renders.
  prom::Exposition registry;
  prom::Family<prom::Counter>& counters =
      prom::AddCounter(registry.registry(), "test_ops_total", "ops");
  prom::Histogram& latency =
      prom::Child(prom::AddHistogram(registry.registry(), "test_latency_seconds", "latency"), {});
  prom::LazyChild<prom::Counter> shared;
  // A child from the start: a family with none renders nothing, and the
  // renderer may run before any thread has added its own.
  prom::Child(counters, {{"thread", "main"}}).Increment();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> live{0};
  constexpr int kThreads = 6;
  constexpr int kOps = 20000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      prom::Counter& mine = prom::Child(counters, {{"thread", absl::StrCat(t)}});
      for (int i = 0; i < kOps; ++i) {
        mine.Increment();
        shared.Get(counters, {{"thread", "shared"}}).Increment();
        latency.Observe(i * 1e-6);
        if (i % 1000 == 0) {
          // Children and callbacks come and go while others render.
          prom::Child(counters, {{"thread", absl::StrCat(t, "-", i)}}).Increment();
          prom::CallbackHandle h =
              registry.AddCallbackGauge("test_live", "live", {"thread"}, [&live, t] {
                return std::vector<prom::GaugeSample>{
                    {{absl::StrCat(t)}, static_cast<double>(live.load())}};
              });
          live.fetch_add(1);
        }
      }
    });
  }
  std::thread renderer([&] {
    for (int i = 0; i < 2000 && !stop.load(); ++i) {
      std::string text = registry.Render();
      if (text.find("test_ops_total") == std::string::npos) ADD_FAILURE() << text;
    }
  });
  for (std::thread& th : threads) th.join();
  stop.store(true);
  renderer.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(prom::Child(counters, {{"thread", absl::StrCat(t)}}).Value(), kOps);
  }
  EXPECT_EQ(prom::Child(counters, {{"thread", "shared"}}).Value(), kThreads * kOps);
  EXPECT_EQ(&shared.Get(counters, {{"thread", "shared"}}),
            &prom::Child(counters, {{"thread", "shared"}}));
  std::string text = registry.Render();
  EXPECT_NE(text.find(absl::StrCat("test_latency_seconds_count ", kThreads * kOps, "\n")),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("test_live"), std::string::npos) << "handles were reset";
}

}  // namespace
}  // namespace shelf
