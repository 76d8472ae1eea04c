// NativeConnector (client/native_connector.h) against a real cluster
// (shelf-master and two shelf-store processes on loopback), driven as
// LMCache's bridge drives it: submissions from several threads, one thread
// polling the eventfd and draining. Every batch completes exactly once,
// bytes round-trip, a full queue and a closed connector answer at once.
// In C++ so that the sanitizer stages run it (the Python layer over it is
// tests/python/test_lmcache.py).
#include "client/native_connector.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"

namespace shelf {
namespace {

using Completion = NativeConnector::Completion;
using Op = NativeConnector::Op;

// One cluster for the suite: a master and two stores of 128 MiB.
class NativeConnectorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LocalCluster::Options o;
    o.dram_bytes = 128ull << 20;
    o.bin_dir = TestBinDir();
    absl::StatusOr<std::unique_ptr<LocalCluster>> started = LocalCluster::Start(o);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = std::move(*started);
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  static std::unique_ptr<LocalCluster> cluster_;
};
std::unique_ptr<LocalCluster> NativeConnectorTest::cluster_;

std::unique_ptr<NativeConnector> Connect(const std::string& master, uint32_t workers,
                                         uint32_t queue_max) {
  ClientOptions co;
  co.masters = {master};
  co.timeout_ms = 20000;
  std::unique_ptr<Client> client;
  Status s = Client::Open(co, &client);
  EXPECT_TRUE(s.ok()) << s.ToString();
  NativeConnector::Options options;
  options.workers = workers;
  options.queue_max = queue_max;
  return std::make_unique<NativeConnector>(std::move(client), options);
}

// The bridge's demux thread: polls the eventfd and files completions by id.
class Demux {
 public:
  explicit Demux(NativeConnector* c) : c_(c), thread_([this] { Run(); }) {}
  ~Demux() {
    stop_ = true;
    thread_.join();
  }

  // Waits for batch `id`; fails the test when it completes twice.
  Completion Wait(uint64_t id) {
    MutexLock lock(&mu_);
    while (done_.count(id) == 0) cv_.Wait(&mu_);
    Completion c = done_[id];
    return c;
  }
  size_t duplicates() {
    MutexLock lock(&mu_);
    return duplicates_;
  }

 private:
  void Run() {
    pollfd p{c_->event_fd(), POLLIN, 0};
    while (!stop_) {
      if (poll(&p, 1, 50) <= 0) continue;
      std::vector<Completion> got = c_->Drain();
      MutexLock lock(&mu_);
      for (Completion& c : got) {
        if (!done_.emplace(c.future_id, c).second) ++duplicates_;
      }
      cv_.SignalAll();
    }
  }

  NativeConnector* const c_;
  std::atomic<bool> stop_{false};
  Mutex mu_;
  CondVar cv_;
  std::map<uint64_t, Completion> done_ ABSL_GUARDED_BY(mu_);
  size_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

std::vector<char> Chunk(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  std::mt19937 rng(seed);
  for (char& b : v) b = static_cast<char>(rng());
  return v;
}

TEST_F(NativeConnectorTest, BatchesFromManyThreadsEachCompleteOnceWithTheirBytes) {
  auto c = Connect(cluster_->master_address(), 4, 1024);
  Demux demux(c.get());
  constexpr int kThreads = 4, kBatches = 8, kKeys = 16;
  constexpr size_t kChunk = 64 << 10;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::atomic<int> mismatches{0}, failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int b = 0; b < kBatches; ++b) {
        std::vector<std::string> keys;
        std::vector<std::vector<char>> src, dst;
        std::vector<void*> out, in;
        std::vector<size_t> lengths;
        keys.reserve(kKeys);
        src.reserve(kKeys);
        dst.reserve(kKeys);
        out.reserve(kKeys);
        in.reserve(kKeys);
        lengths.reserve(kKeys);
        for (int k = 0; k < kKeys; ++k) {
          keys.push_back("nc/" + std::to_string(t) + "/" + std::to_string(b) + "/" +
                         std::to_string(k));
          src.push_back(Chunk(kChunk, static_cast<uint32_t>(t * 1000 + b * 100 + k)));
          dst.emplace_back(kChunk, '\0');
          out.push_back(src.back().data());
          in.push_back(dst.back().data());
          lengths.push_back(kChunk);
        }
        uint64_t id = c->NewFutureId();
        c->Submit(id, Op::kSet, keys, out, lengths);
        Completion set = demux.Wait(id);
        if (!set.ok || !set.results.empty()) failures++;
        id = c->NewFutureId();
        c->Submit(id, Op::kExists, keys, {}, {});
        Completion exists = demux.Wait(id);
        if (exists.results != std::vector<uint8_t>(kKeys, 1)) failures++;
        id = c->NewFutureId();
        c->Submit(id, Op::kGet, keys, in, lengths);
        Completion get = demux.Wait(id);
        if (!get.ok || get.results != std::vector<uint8_t>(kKeys, 1)) failures++;
        for (int k = 0; k < kKeys; ++k) {
          if (std::memcmp(src[k].data(), dst[k].data(), kChunk) != 0) mismatches++;
        }
        id = c->NewFutureId();
        c->Submit(id, Op::kDelete, keys, {}, {});
        Completion del = demux.Wait(id);
        if (!del.ok || del.results != std::vector<uint8_t>(kKeys, 1)) failures++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(demux.duplicates(), 0u);
}

TEST_F(NativeConnectorTest, AFullQueueAndAClosedConnectorAnswerAtOnce) {
  // One worker, one waiting batch: of ten batches of 1,024 keys submitted
  // back to back (microseconds apart, each batch a master round trip or
  // more), the queue cannot take them all.
  auto c = Connect(cluster_->master_address(), 1, 1);
  Demux demux(c.get());
  std::vector<std::string> keys(1024);
  for (size_t k = 0; k < keys.size(); ++k) keys[k] = "nc-full/" + std::to_string(k);
  // Copied beforehand, so that each Submit only moves its keys in.
  std::vector<std::vector<std::string>> batches(10, keys);
  std::vector<uint64_t> ids;
  ids.reserve(batches.size());
  for (std::vector<std::string>& batch : batches) {
    ids.push_back(c->NewFutureId());
    c->Submit(ids.back(), Op::kExists, std::move(batch), {}, {});
  }
  int refused = 0;
  for (uint64_t id : ids) {
    Completion done = demux.Wait(id);
    ASSERT_EQ(done.results.size(), keys.size());
    if (!done.ok) {
      EXPECT_NE(done.error.find("RESOURCE_EXHAUSTED"), std::string::npos) << done.error;
      refused++;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_LT(refused, 10);  // the first one runs
  c->Close();
  c->Close();  // idempotent
  uint64_t id = c->NewFutureId();
  c->Submit(id, Op::kDelete, {"nc-full/0"}, {}, {});
  Completion closed = demux.Wait(id);
  EXPECT_FALSE(closed.ok);
  EXPECT_NE(closed.error.find("closed"), std::string::npos) << closed.error;
  EXPECT_EQ(demux.duplicates(), 0u);
}

}  // namespace
}  // namespace shelf
