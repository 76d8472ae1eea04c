// libshelf without a cluster: the thread pool, the buffer registry, the
// async future, option checks, and every misuse that must fail clearly
// before any network traffic (closed client, deadline in the past,
// unregistered buffer, range outside a buffer, GPU memory on a host path).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "client/batch_state.h"
#include "client/buffer_registry.h"
#include "client/gpu_staging.h"
#include "common/clock.h"
#include "common/sync_point.h"
#include "common/thread_pool.h"
#include "shelf/client.h"

namespace shelf {
namespace {

using std::chrono::milliseconds;

// A master address nobody listens on: gRPC connects lazily, so a client
// opens fine and only calls that reach the network fail (UNAVAILABLE).
constexpr char kNoMaster[] = "127.0.0.1:1";

std::unique_ptr<Client> OpenUnconnected(uint64_t timeout_ms = 2000) {
  ClientOptions o;
  o.masters = {kNoMaster};
  o.timeout_ms = timeout_ms;
  std::unique_ptr<Client> c;
  Status s = Client::Open(o, &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

// ------------------------------------------------------------ thread pool

TEST(ThreadPoolTest, RunsEveryQueuedTaskBeforeShutdownReturns) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2, 64);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(pool.TrySubmit([&ran] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ran.fetch_add(1);
      }));
    }
  }  // the destructor shuts down
  EXPECT_EQ(ran.load(), 50);
}

TEST(ThreadPoolTest, RefusesBeyondItsQueueAndAfterShutdown) {
  ThreadPool pool(1, 2);
  Mutex mu;
  CondVar cv;
  bool started = false, release = false;
  ASSERT_TRUE(pool.TrySubmit([&] {
    MutexLock lock(&mu);
    started = true;
    cv.SignalAll();
    while (!release) cv.Wait(&mu);
  }));
  {
    MutexLock lock(&mu);
    while (!started) cv.Wait(&mu);  // the one thread is busy, the queue empty
  }
  EXPECT_TRUE(pool.TrySubmit([] {}));
  EXPECT_TRUE(pool.TrySubmit([] {}));
  EXPECT_FALSE(pool.TrySubmit([] {})) << "queue_max is 2";
  {
    MutexLock lock(&mu);
    release = true;
    cv.SignalAll();
  }
  pool.Shutdown();
  EXPECT_FALSE(pool.TrySubmit([] {}));
}

// Tasks that come one at a time run on the thread that went idle last, not
// on each thread in turn.
TEST(ThreadPoolTest, WakesTheThreadThatWentIdleLast) {
  constexpr size_t kThreads = 4;
  ThreadPool pool(kThreads, 16);
  Mutex mu;
  CondVar cv;
  int finished = 0;
  std::map<std::thread::id, int> ran_on;
  for (int i = 0; i < 30; ++i) {
    // Every thread parked, so the pool chooses which one wakes.
    while (pool.idle_threads() < kThreads) std::this_thread::yield();
    ASSERT_TRUE(pool.TrySubmit([&] {
      MutexLock lock(&mu);
      ++ran_on[std::this_thread::get_id()];
      ++finished;
      cv.Signal();
    }));
    MutexLock lock(&mu);
    while (finished != i + 1) cv.Wait(&mu);
  }
  pool.Shutdown();
  EXPECT_EQ(ran_on.size(), 1u) << "tasks cycled through the threads";
}

TEST(ParallelForTest, CallsEachIndexOnceAndUsesHelpers) {
  ThreadPool pool(4, 16);
  std::vector<std::atomic<int>> calls(200);
  std::atomic<int> concurrent{0}, peak{0};
  ParallelFor(&pool, calls.size(), 4, [&](size_t i) {
    int now = concurrent.fetch_add(1) + 1;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    calls[i].fetch_add(1);
    concurrent.fetch_sub(1);
  });
  for (size_t i = 0; i < calls.size(); ++i) ASSERT_EQ(calls[i].load(), 1) << i;
  EXPECT_GE(peak.load(), 2) << "items never ran in parallel";
}

TEST(ParallelForTest, FinishesAloneWhenThePoolIsBusy) {
  ThreadPool pool(1, 1);
  Mutex mu;
  CondVar cv;
  bool release = false;
  ASSERT_TRUE(pool.TrySubmit([&] {
    MutexLock lock(&mu);
    while (!release) cv.Wait(&mu);
  }));
  std::atomic<int> sum{0};
  ParallelFor(&pool, 10, 4, [&](size_t i) { sum.fetch_add(static_cast<int>(i)); });
  EXPECT_EQ(sum.load(), 45);
  {
    MutexLock lock(&mu);
    release = true;
    cv.SignalAll();
  }
  pool.Shutdown();  // the task reads `release` once more, before it goes
}

// -------------------------------------------------------- buffer registry

TEST(BufferRegistryTest, PinsRangesInsideTheBufferOnly) {
  BufferRegistry reg;
  std::vector<char> mem(4096);
  absl::StatusOr<BufferHandle> h = reg.Add(mem.data(), mem.size(), false, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->valid());
  {
    absl::StatusOr<BufferRegistry::Pin> pin = reg.Acquire(*h, 1024, 3072);
    ASSERT_TRUE(pin.ok()) << pin.status();
    EXPECT_EQ(pin->data(), mem.data() + 1024);
    EXPECT_EQ(pin->length(), 3072u);
  }
  EXPECT_TRUE(reg.Acquire(*h, 4096, 0).ok()) << "an empty range at the end is inside";
  absl::StatusOr<BufferRegistry::Pin> past = reg.Acquire(*h, 1024, 3073);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(past.status().message().find("outside registered buffer"), std::string::npos)
      << past.status();
  // Overflowing offset + length is caught, not wrapped.
  EXPECT_EQ(reg.Acquire(*h, 8, SIZE_MAX).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(reg.Acquire(*h, SIZE_MAX, 8).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(BufferRegistryTest, HandlesAreNeverReusedAndUnknownOnesAreRejected) {
  BufferRegistry a, b;
  char mem[64];
  BufferHandle h1 = *a.Add(mem, sizeof(mem), false, 0);
  ASSERT_TRUE(a.Remove(h1).ok());
  BufferHandle h2 = *a.Add(mem, sizeof(mem), false, 0);
  EXPECT_NE(h1.id, h2.id);
  absl::Status stale = a.Acquire(h1, 0, 1).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stale.message().find("not registered"), std::string::npos) << stale;
  // Another registry (another client) never accepts it.
  EXPECT_EQ(b.Acquire(h2, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Remove(h1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Acquire(BufferHandle{}, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BufferRegistryTest, RemoveWaitsForPinsAndBlocksNewOnes) {
  BufferRegistry reg;
  char mem[64];
  BufferHandle h = *reg.Add(mem, sizeof(mem), false, 0);
  auto pin = std::make_unique<BufferRegistry::Pin>(*reg.Acquire(h, 0, 8));
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    EXPECT_TRUE(reg.Remove(h).ok());
    removed.store(true);
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(removed.load()) << "Remove returned while a pin was alive";
  // Once removal started, no new pin can be taken.
  for (int i = 0; i < 100 && reg.size() != 0; ++i) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_EQ(reg.Acquire(h, 0, 8).status().code(), absl::StatusCode::kInvalidArgument);
  pin.reset();
  remover.join();
  EXPECT_TRUE(removed.load());
}

TEST(BufferRegistryTest, LimitsTheNumberOfRegistrations) {
  BufferRegistry reg;
  char mem[1];
  for (size_t i = 0; i < BufferRegistry::kRegistrationsMax; ++i) {
    ASSERT_TRUE(reg.Add(mem, 1, false, 0).ok()) << i;
  }
  EXPECT_EQ(reg.Add(mem, 1, false, 0).status().code(), absl::StatusCode::kResourceExhausted);
}

// ----------------------------------------------------------------- future

TEST(BatchFutureTest, InvalidFutureIsDoneWithFailedPrecondition) {
  BatchFuture f;
  EXPECT_FALSE(f.valid());
  EXPECT_TRUE(f.Poll());
  EXPECT_TRUE(f.Wait(0));
  EXPECT_EQ(f.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(f.statuses().empty());
  EXPECT_TRUE(f.values()->empty());
}

TEST(BatchFutureTest, WaitTimesOutThenSeesCompletion) {
  auto state = std::make_shared<internal::BatchState>();
  BatchFuture f(state);
  EXPECT_FALSE(f.Poll());
  uint64_t t0 = MonoMs();
  EXPECT_FALSE(f.Wait(50));
  EXPECT_GE(MonoMs() - t0, 45u);
  std::thread worker([state] {
    std::this_thread::sleep_for(milliseconds(30));
    state->statuses = {Status(), Status(StatusCode::kNotFound, "no such key")};
    state->Finish();
  });
  EXPECT_TRUE(f.Wait(5000));
  ASSERT_EQ(f.statuses().size(), 2u);
  EXPECT_EQ(f.statuses()[1].code(), StatusCode::kNotFound);
  worker.join();
}

TEST(BatchFutureTest, DestroyingARunningFutureWaitsForIt) {
  auto state = std::make_shared<internal::BatchState>();
  std::atomic<bool> finished{false};
  std::thread worker([state, &finished] {
    std::this_thread::sleep_for(milliseconds(80));
    finished.store(true);
    state->Finish();
  });
  { BatchFuture f(state); }
  EXPECT_TRUE(finished.load()) << "the future was destroyed before its batch finished";
  worker.join();
}

// ---------------------------------------------------------------- options

TEST(ClientOptionsTest, OpenRejectsOptionsOutOfRange) {
  std::unique_ptr<Client> c;
  ClientOptions o;
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument) << "no masters";
  o.masters = {kNoMaster};
  o.transfer_threads = 0;
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument);
  o.transfer_threads = 8;
  o.async_threads = 1000;
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument);
  o.async_threads = 4;
  o.timeout_ms = 0;
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument);
  o.timeout_ms = 10;
  o.allow_tcp = o.allow_shm = false;
  Status s = Client::Open(o, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("allows no transport"), std::string::npos) << s.ToString();
  o.allow_tcp = true;
  EXPECT_TRUE(Client::Open(o, &c).ok());
  // An RDMA device that is not there: Open says which, and fails.
  o.rdma_device = "shelf-no-such-rdma-device";
  s = Client::Open(o, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shelf-no-such-rdma-device"), std::string::npos) << s.ToString();
  o.rdma_port = 0;
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument);
  o.rdma_port = 1;
  o.rdma_gid_index = -2;  // -1 is auto
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument);
  o.rdma_gid_index = -1;
  o.rdma_traffic_class = 256;
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument);
  o.rdma_traffic_class = 0;
  o.rdma_service_level = 16;
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument);
  o.rdma_service_level = 0;
  o.rdma_pkey_index = 65536;
  EXPECT_EQ(Client::Open(o, &c).code(), StatusCode::kInvalidArgument);
}

TEST(DeadlineTest, NumbersAreTimeoutsAndZeroIsTheDefault) {
  Deadline d = 250;
  EXPECT_EQ(d.kind(), Deadline::Kind::kTimeout);
  EXPECT_EQ(d.timeout_ms(), 250u);
  EXPECT_EQ(Deadline(0).kind(), Deadline::Kind::kClientDefault);
  EXPECT_EQ(Deadline::After(milliseconds(5)).kind(), Deadline::Kind::kAt);
}

// ----------------------------------------------------------------- misuse

TEST(MisuseTest, DeadlineInThePastFailsAtOnceOnEveryCall) {
  std::unique_ptr<Client> c = OpenUnconnected(/*timeout_ms=*/60000);
  const Deadline past = Deadline::At(Deadline::Clock::now() - milliseconds(1));
  const Deadline now = Deadline::After(milliseconds(0));
  std::string out;
  std::vector<std::string> values;
  std::vector<Status> statuses;
  std::vector<bool> present;
  size_t n = 0;
  char buf[16];
  PutOptions po;
  po.deadline = past;
  uint64_t t0 = MonoMs();
  std::vector<Status> results = {
      c->Get("k", &out, past),
      c->Get("k", &out, now),
      c->GetInto("k", buf, sizeof(buf), &n, past),
      c->Put("k", "v", 1, po),
      c->BatchPut({PutItem{"k", "v", 1}}, &statuses, po),
      c->BatchGet({"k"}, &values, &statuses, past),
      c->Exists({"k"}, &present, past),
      c->Remove("k", past),
      c->MatchPrefix({"k"}, &n, past),
      c->BatchGetInto({GetIntoItem{"k", BufferHandle{}, 0, 1}}, &statuses, nullptr, past),
      c->BatchPutFrom({PutFromItem{"k", BufferHandle{}, 0, 1}}, &statuses, po),
      c->BatchGetAsync({"k"}, past).status(),
      c->BatchPutAsync({PutItem{"k", "v", 1}}, po).status(),
  };
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].code(), StatusCode::kDeadlineExceeded)
        << i << ": " << results[i].ToString();
    EXPECT_NE(results[i].message().find("already passed"), std::string::npos)
        << i << ": " << results[i].ToString();
  }
  // No call waited on the unreachable master (its default deadline is 60 s).
  EXPECT_LT(MonoMs() - t0, 2000u);
}

TEST(MisuseTest, ClosedClientAnswersFailedPrecondition) {
  std::unique_ptr<Client> c = OpenUnconnected();
  char mem[64];
  BufferHandle h;
  ASSERT_TRUE(c->RegisterBuffer(mem, sizeof(mem), &h).ok());
  c->Close();
  c->Close();  // idempotent
  std::string out;
  std::vector<Status> statuses;
  size_t n = 0;
  BufferHandle h2;
  std::vector<Status> results = {
      c->Put("k", "v", 1),
      c->Get("k", &out),
      c->GetInto("k", mem, sizeof(mem), &n),
      c->GetInto("k", h, 0, 8, &n),
      c->PutFrom("k", h, 0, 8),
      c->MatchPrefix({"k"}, &n),
      c->Remove("k"),
      c->BatchGetIntoAsync({GetIntoItem{"k", h, 0, 8}}).status(),
      c->RegisterBuffer(mem, sizeof(mem), &h2),
  };
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].code(), StatusCode::kFailedPrecondition)
        << i << ": " << results[i].ToString();
    EXPECT_NE(results[i].message().find("closed"), std::string::npos) << i;
  }
  // The engine may still release its memory after Close.
  EXPECT_TRUE(c->UnregisterBuffer(h).ok());
}

TEST(MisuseTest, UnregisteredBufferAndRangesOutsideAreRejectedClearly) {
  std::unique_ptr<Client> c = OpenUnconnected();
  std::vector<char> mem(1024);
  BufferHandle h;
  ASSERT_TRUE(c->RegisterBuffer(mem.data(), mem.size(), &h).ok());
  size_t n = 0;
  // Range checks come before any network traffic.
  Status s = c->GetInto("k", h, 1000, 100, &n);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  EXPECT_NE(s.message().find("outside registered buffer"), std::string::npos) << s.ToString();
  s = c->PutFrom("k", h, 512, 513);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  // Never registered, default handle, and unregistered.
  s = c->PutFrom("k", BufferHandle{987654321}, 0, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not registered"), std::string::npos) << s.ToString();
  s = c->GetInto("k", BufferHandle{}, 0, 1, &n);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  ASSERT_TRUE(c->UnregisterBuffer(h).ok());
  s = c->GetInto("k", h, 0, 8, &n);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("already unregistered"), std::string::npos) << s.ToString();
  EXPECT_EQ(c->UnregisterBuffer(h).code(), StatusCode::kInvalidArgument);
  // A handle of another client is not this client's.
  std::unique_ptr<Client> other = OpenUnconnected();
  BufferHandle theirs;
  ASSERT_TRUE(other->RegisterBuffer(mem.data(), mem.size(), &theirs).ok());
  EXPECT_EQ(c->PutFrom("k", theirs, 0, 8).code(), StatusCode::kInvalidArgument);
  // Batches report bad buffers per item.
  std::vector<Status> statuses;
  std::vector<size_t> sizes;
  BufferHandle mine;
  ASSERT_TRUE(c->RegisterBuffer(mem.data(), mem.size(), &mine).ok());
  s = c->BatchGetInto({GetIntoItem{"a", mine, 0, 2048}, GetIntoItem{"b", theirs, 0, 8},
                       GetIntoItem{"", mine, 0, 8}},
                      &statuses, &sizes);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_EQ(statuses[0].code(), StatusCode::kOutOfRange);
  EXPECT_EQ(statuses[1].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(statuses[2].code(), StatusCode::kInvalidArgument);
}

TEST(MisuseTest, RegisterBufferRejectsBadMemory) {
  std::unique_ptr<Client> c = OpenUnconnected();
  BufferHandle h;
  char mem[8];
  EXPECT_EQ(c->RegisterBuffer(nullptr, 8, &h).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->RegisterBuffer(mem, 0, &h).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->RegisterBuffer(mem, 8, nullptr).code(), StatusCode::kInvalidArgument);
  // Host memory is never accepted as GPU memory: without a CUDA runtime the
  // library says so; with CUDA but no device, that; with a device, that the
  // memory is host memory.
  Status s = c->RegisterBuffer(mem, sizeof(mem), &h, /*gpu=*/true);
  EXPECT_FALSE(s.ok());
  if (!GpuStaging::Built()) {
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
  } else {
    EXPECT_TRUE(s.code() == StatusCode::kFailedPrecondition ||
                s.code() == StatusCode::kInvalidArgument)
        << s.ToString();
  }
  EXPECT_FALSE(s.message().empty());
}

TEST(MisuseTest, BadArgumentsAreInvalidArgument) {
  std::unique_ptr<Client> c = OpenUnconnected();
  std::string out;
  std::vector<std::string> values;
  std::vector<Status> statuses;
  size_t n = 0;
  EXPECT_EQ(c->Get("", &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Get("k", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put("k", nullptr, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put(std::string(kKeyBytesMax + 1, 'k'), "v", 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c->GetInto("k", nullptr, 8, &n).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->BatchGet({}, &values, &statuses).code(), StatusCode::kInvalidArgument);
  std::vector<std::string> many(kBatchItemsMax + 1, "k");
  EXPECT_EQ(c->MatchPrefix(many, &n).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->BatchGetAsync(many).status().code(), StatusCode::kInvalidArgument);
}

TEST(DeadlineTest, HugeTimeoutsDoNotWrapIntoThePast) {
  std::unique_ptr<Client> c = OpenUnconnected();
  std::string out;
  // UINT64_MAX as "no deadline": the call reaches the (unreachable) master.
  Status s = c->Get("k", &out, UINT64_MAX);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  s = c->BatchGetAsync({"k"}, UINT64_MAX).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

TEST(MisuseTest, UnreachableMasterIsUnavailableWithinTheDeadline) {
  std::unique_ptr<Client> c = OpenUnconnected();
  std::string out;
  uint64_t t0 = MonoMs();
  Status s = c->Get("k", &out, 1500);
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded)
      << s.ToString();
  EXPECT_LT(MonoMs() - t0, 3000u);
}

#ifdef SHELF_SYNC_POINTS  // the tests that hold async tasks at a sync point
// Holds every async task at its start until released, so tests fill the
// async threads and queue deterministically.
class AsyncGate {
 public:
  AsyncGate() {
    SyncPoint::Get()->SetCallBack("ClientImpl::AsyncTask:Start", [this](void*) {
      MutexLock lock(&mu_);
      ++arrived_;
      cv_.SignalAll();
      while (!open_) cv_.Wait(&mu_);
    });
    SyncPoint::Get()->EnableProcessing();
  }
  ~AsyncGate() {
    Open();
    SyncPoint::Get()->DisableProcessing();
    SyncPoint::Get()->ClearAll();
  }
  void WaitArrived(int n) {
    MutexLock lock(&mu_);
    while (arrived_ < n) cv_.Wait(&mu_);
  }
  void Open() {
    MutexLock lock(&mu_);
    open_ = true;
    cv_.SignalAll();
  }

 private:
  Mutex mu_;
  CondVar cv_;  // arrived_ or open_ changed
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(AsyncTest, FullQueueAnswersResourceExhaustedAndEveryFutureEnds) {
  ClientOptions o;
  o.masters = {kNoMaster};
  o.async_threads = 1;
  o.async_queue_max = 1;
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::Open(o, &c).ok());
  AsyncGate gate;
  BatchFuture running = c->BatchGetAsync({"a"});
  gate.WaitArrived(1);  // the one async thread holds it
  BatchFuture queued = c->BatchGetAsync({"b"});
  BatchFuture refused = c->BatchGetAsync({"c"});
  ASSERT_TRUE(refused.Poll());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("async_queue_max"), std::string::npos);
  EXPECT_FALSE(running.Poll());
  EXPECT_FALSE(queued.Wait(20));
  gate.Open();
  EXPECT_TRUE(running.Wait(10000));
  EXPECT_TRUE(queued.Wait(10000));
  // Both ran against the unreachable master.
  EXPECT_FALSE(running.status().ok());
  EXPECT_NE(running.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(queued.status().code(), StatusCode::kResourceExhausted);
}

TEST(AsyncTest, CloseFinishesQueuedCallsWithFailedPrecondition) {
  ClientOptions o;
  o.masters = {kNoMaster};
  o.async_threads = 1;
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::Open(o, &c).ok());
  AsyncGate gate;
  BatchFuture running = c->BatchGetAsync({"a"});
  gate.WaitArrived(1);
  BatchFuture queued = c->BatchGetAsync({"b"});
  c->Close();
  gate.Open();
  EXPECT_EQ(queued.status().code(), StatusCode::kFailedPrecondition) << queued.status().ToString();
  EXPECT_EQ(running.status().code(), StatusCode::kFailedPrecondition)
      << "a call that had not reached the network yet sees the close";
  EXPECT_EQ(c->BatchGetAsync({"c"}).status().code(), StatusCode::kFailedPrecondition);
}

#endif  // SHELF_SYNC_POINTS

TEST(AsyncTest, DestroyingTheClientWaitsForItsAsyncCalls) {
  std::unique_ptr<Client> c = OpenUnconnected(/*timeout_ms=*/300);
  std::vector<BatchFuture> futures;
  futures.reserve(8);
  for (int i = 0; i < 8; ++i) futures.push_back(c->BatchGetAsync({"a"}));
  c.reset();
  for (BatchFuture& f : futures) {
    EXPECT_TRUE(f.Poll());
    EXPECT_FALSE(f.status().ok());
  }
}

}  // namespace
}  // namespace shelf
