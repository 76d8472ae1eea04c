// GPU staging on a simulated GPU (fake_cuda_runtime.h): how the copies
// between device memory and the bounce buffers order with an engine's
// stream and events (GpuSync), the behaviour without them, and CUDA errors
// surfacing as statuses. Runs anywhere; the real GPU counterpart is
// tests/gpu/gpu_transfer_check.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/gpu_staging.h"
#include "common/clock.h"
#include "tests/client/fake_cuda_runtime.h"

namespace shelf {
namespace {

using Ops = std::vector<std::string>;

constexpr size_t kBlockBytes = 4096;

// One engine's view: a KV block in "device memory" of device 0 holding
// 'a', an engine stream and event, and libshelf's staging on the fake.
class SimulatedGpuTest : public ::testing::Test {
 protected:
  SimulatedGpuTest() : kv_(kBlockBytes, 'a') {
    cuda_.AddDeviceMemory(kv_.data(), kv_.size(), /*device=*/0);
    engine_stream_ = cuda_.NewStream();
    engine_event_ = cuda_.NewEvent();
  }

  GpuStaging::Bounce Acquire() {
    absl::StatusOr<GpuStaging::Bounce> b = staging_->Acquire(kBlockBytes, MonoMs() + 1000);
    EXPECT_TRUE(b.ok()) << b.status();
    return *std::move(b);
  }
  // The stream libshelf created for its copies (one bounce buffer, one
  // device: exactly one).
  CudaRuntime::Stream StagingStream() const {
    EXPECT_EQ(cuda_.created_streams().size(), 1u);
    return cuda_.created_streams().empty() ? nullptr : cuda_.created_streams()[0];
  }
  std::string Name(const void* handle) const { return cuda_.Name(handle); }
  static bool All(const char* p, size_t n, char c) {
    for (size_t i = 0; i < n; ++i) {
      if (p[i] != c) return false;
    }
    return true;
  }

  FakeCudaRuntime cuda_{/*devices=*/2};
  std::vector<char> kv_;
  CudaRuntime::Stream engine_stream_ = nullptr;
  CudaRuntime::Event engine_event_ = nullptr;
  std::unique_ptr<GpuStaging> staging_ = std::make_unique<GpuStaging>(1, &cuda_);
};

// ------------------------------------------------------------------ puts

TEST_F(SimulatedGpuTest, PutCopyWaitsForTheEnginesStream) {
  // The engine's kernel writing the block is enqueued, not done, when the
  // put starts.
  cuda_.EnqueueFill(engine_stream_, kv_.data(), 'b', kBlockBytes);
  GpuStaging::Bounce b = Acquire();
  ASSERT_TRUE(
      staging_->FromDevice(0, &b, kv_.data(), kBlockBytes, GpuSync{engine_stream_, nullptr}).ok());
  EXPECT_TRUE(All(b.data(), kBlockBytes, 'b')) << "the put staged bytes the kernel had not written";
  // The record lands on the engine's stream after its write; libshelf's
  // stream waits for it before the copy reads device memory.
  const std::string lane_event = cuda_.Ops(engine_stream_).at(1).substr(7);
  EXPECT_EQ(cuda_.Ops(engine_stream_), (Ops{"fill 4096", "record " + lane_event}));
  EXPECT_EQ(cuda_.Ops(StagingStream()), (Ops{"wait " + lane_event, "copy d2h 4096"}));
  EXPECT_EQ(cuda_.Pending(StagingStream()), 0u);  // done when FromDevice returned
}

TEST_F(SimulatedGpuTest, PutCopyWaitsForTheEnginesEvent) {
  cuda_.EnqueueFill(engine_stream_, kv_.data(), 'b', kBlockBytes);
  ASSERT_TRUE(cuda_.EventRecord(engine_event_, engine_stream_).ok());
  GpuStaging::Bounce b = Acquire();
  ASSERT_TRUE(
      staging_->FromDevice(0, &b, kv_.data(), kBlockBytes, GpuSync{nullptr, engine_event_}).ok());
  EXPECT_TRUE(All(b.data(), kBlockBytes, 'b'));
  EXPECT_EQ(cuda_.Ops(StagingStream()), (Ops{"wait " + Name(engine_event_), "copy d2h 4096"}));
  // The engine's stream is not touched: the event says it all.
  EXPECT_EQ(cuda_.Ops(engine_stream_), (Ops{"fill 4096", "record " + Name(engine_event_)}));
}

TEST_F(SimulatedGpuTest, PutWithStreamAndEventWaitsForBoth) {
  CudaRuntime::Stream other = cuda_.NewStream();
  cuda_.EnqueueFill(other, kv_.data(), 'b', kBlockBytes / 2);
  ASSERT_TRUE(cuda_.EventRecord(engine_event_, other).ok());
  cuda_.EnqueueFill(engine_stream_, kv_.data() + kBlockBytes / 2, 'c', kBlockBytes / 2);
  GpuStaging::Bounce b = Acquire();
  ASSERT_TRUE(
      staging_->FromDevice(0, &b, kv_.data(), kBlockBytes, GpuSync{engine_stream_, engine_event_})
          .ok());
  EXPECT_TRUE(All(b.data(), kBlockBytes / 2, 'b'));
  EXPECT_TRUE(All(b.data() + kBlockBytes / 2, kBlockBytes / 2, 'c'));
}

TEST_F(SimulatedGpuTest, PutWithoutSyncReadsDeviceMemoryAsItIs) {
  // The default: no ordering with the engine's streams at all. An engine
  // that did not synchronize gets what device memory held: the stale 'a'.
  cuda_.EnqueueFill(engine_stream_, kv_.data(), 'b', kBlockBytes);
  GpuStaging::Bounce b = Acquire();
  ASSERT_TRUE(staging_->FromDevice(0, &b, kv_.data(), kBlockBytes).ok());
  EXPECT_TRUE(All(b.data(), kBlockBytes, 'a'));
  EXPECT_EQ(cuda_.Ops(StagingStream()), (Ops{"copy d2h 4096"}));
  EXPECT_EQ(cuda_.Ops(engine_stream_), (Ops{"fill 4096"}));
  EXPECT_EQ(cuda_.Pending(engine_stream_), 1u);
}

// ------------------------------------------------------------------ gets

TEST_F(SimulatedGpuTest, GetIsOrderedOnTheEnginesStreamAndEvent) {
  // Earlier engine work still writes the slot the get overwrites.
  cuda_.EnqueueFill(engine_stream_, kv_.data(), 'z', kBlockBytes);
  GpuStaging::Bounce b = Acquire();
  std::memset(b.data(), 'c', kBlockBytes);  // the block as read from a store
  ASSERT_TRUE(
      staging_->ToDevice(0, kv_.data(), b, kBlockBytes, GpuSync{engine_stream_, engine_event_})
          .ok());
  // Returned with the copy enqueued, not done: the host did not wait.
  EXPECT_TRUE(All(kv_.data(), kBlockBytes, 'a'));
  const std::string lane_event = cuda_.Ops(engine_stream_).at(1).substr(7);
  EXPECT_EQ(cuda_.Ops(StagingStream()),
            (Ops{"wait " + lane_event, "copy h2d 4096", "record " + lane_event,
                 "record " + Name(engine_event_)}));
  EXPECT_EQ(cuda_.Ops(engine_stream_),
            (Ops{"fill 4096", "record " + lane_event, "wait " + lane_event}));
  // The engine reads the block back on its own stream, after the call.
  std::vector<char> readback(kBlockBytes, 0);
  ASSERT_TRUE(cuda_
                  .MemcpyAsync(readback.data(), kv_.data(), kBlockBytes,
                               CudaRuntime::CopyKind::kDeviceToHost, engine_stream_)
                  .ok());
  ASSERT_TRUE(cuda_.StreamSynchronize(engine_stream_).ok());
  EXPECT_TRUE(All(readback.data(), kBlockBytes, 'c'))
      << "the engine's stream read the slot before the get's copy landed";
  EXPECT_TRUE(All(kv_.data(), kBlockBytes, 'c')) << "the get's copy ran before earlier work";
}

TEST_F(SimulatedGpuTest, GetRecordsTheEnginesEventAfterTheCopy) {
  GpuStaging::Bounce b = Acquire();
  std::memset(b.data(), 'c', kBlockBytes);
  ASSERT_TRUE(
      staging_->ToDevice(0, kv_.data(), b, kBlockBytes, GpuSync{nullptr, engine_event_}).ok());
  EXPECT_EQ(cuda_.Ops(StagingStream()).back(), "record " + Name(engine_event_));
  EXPECT_TRUE(cuda_.Ops(engine_stream_).empty());
  ASSERT_TRUE(cuda_.EventSynchronize(engine_event_).ok());
  EXPECT_TRUE(All(kv_.data(), kBlockBytes, 'c'));
}

TEST_F(SimulatedGpuTest, GetWithoutSyncIsInPlaceOnReturn) {
  GpuStaging::Bounce b = Acquire();
  std::memset(b.data(), 'c', kBlockBytes);
  ASSERT_TRUE(staging_->ToDevice(0, kv_.data(), b, kBlockBytes).ok());
  EXPECT_TRUE(All(kv_.data(), kBlockBytes, 'c'));
  EXPECT_EQ(cuda_.Ops(StagingStream()), (Ops{"copy h2d 4096"}));
  EXPECT_EQ(cuda_.Pending(StagingStream()), 0u);
}

TEST_F(SimulatedGpuTest, BounceOfAnAsyncGetIsLentAgainOnlyAfterItsCopy) {
  {
    GpuStaging::Bounce b = Acquire();
    std::memset(b.data(), 'c', kBlockBytes);
    ASSERT_TRUE(
        staging_->ToDevice(0, kv_.data(), b, kBlockBytes, GpuSync{engine_stream_, nullptr}).ok());
    EXPECT_GT(cuda_.Pending(StagingStream()), 0u);
  }
  // One buffer only: the next Acquire gets the same one, which the host
  // then overwrites; the copy still reading it must have run by then.
  GpuStaging::Bounce again = Acquire();
  EXPECT_EQ(cuda_.Pending(StagingStream()), 0u);
  EXPECT_TRUE(All(kv_.data(), kBlockBytes, 'c'));
}

TEST_F(SimulatedGpuTest, StagingRestoresTheCallersDevice) {
  ASSERT_TRUE(cuda_.SetDevice(1).ok());
  GpuStaging::Bounce b = Acquire();
  ASSERT_TRUE(
      staging_->FromDevice(0, &b, kv_.data(), kBlockBytes, GpuSync{engine_stream_, nullptr}).ok());
  EXPECT_EQ(cuda_.current_device(), 1);
}

TEST_F(SimulatedGpuTest, StreamsAndEventsAreReleased) {
  {
    GpuStaging::Bounce b = Acquire();
    std::memset(b.data(), 'c', kBlockBytes);
    ASSERT_TRUE(
        staging_->ToDevice(0, kv_.data(), b, kBlockBytes, GpuSync{engine_stream_, nullptr}).ok());
  }
  EXPECT_EQ(cuda_.live_streams(), 1u);
  EXPECT_EQ(cuda_.live_events(), 1u);
  staging_.reset();  // waits for the copy in flight, then frees
  EXPECT_EQ(cuda_.Pending(cuda_.created_streams()[0]), 0u);
  EXPECT_EQ(cuda_.live_streams(), 0u);
  EXPECT_EQ(cuda_.live_events(), 0u);
  EXPECT_EQ(cuda_.live_host_allocations(), 0u);
}

// ---------------------------------------------------------------- errors

TEST_F(SimulatedGpuTest, PutWaitFailureIsReturnedAndNothingIsCopied) {
  cuda_.FailNext(FakeCudaRuntime::Call::kStreamWaitEvent);
  GpuStaging::Bounce b = Acquire();
  absl::Status s =
      staging_->FromDevice(0, &b, kv_.data(), kBlockBytes, GpuSync{nullptr, engine_event_});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaStreamWaitEvent"), std::string::npos) << s;
  for (const std::string& op : cuda_.Ops(StagingStream())) EXPECT_NE(op.substr(0, 4), "copy");
}

TEST_F(SimulatedGpuTest, RecordOnTheEnginesStreamFailureIsReturned) {
  cuda_.FailNext(FakeCudaRuntime::Call::kEventRecord);
  GpuStaging::Bounce b = Acquire();
  absl::Status s =
      staging_->FromDevice(0, &b, kv_.data(), kBlockBytes, GpuSync{engine_stream_, nullptr});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("cudaEventRecord"), std::string::npos) << s;
}

TEST_F(SimulatedGpuTest, CopyFailuresAreReturned) {
  GpuStaging::Bounce b = Acquire();
  cuda_.FailNext(FakeCudaRuntime::Call::kMemcpyAsync);
  EXPECT_EQ(staging_->FromDevice(0, &b, kv_.data(), kBlockBytes).code(),
            absl::StatusCode::kInternal);
  cuda_.FailNext(FakeCudaRuntime::Call::kMemcpyAsync);
  EXPECT_EQ(
      staging_->ToDevice(0, kv_.data(), b, kBlockBytes, GpuSync{engine_stream_, nullptr}).code(),
      absl::StatusCode::kInternal);
  // An asynchronous failure shows when the copy is waited for.
  cuda_.FailNext(FakeCudaRuntime::Call::kStreamSynchronize);
  EXPECT_EQ(staging_->FromDevice(0, &b, kv_.data(), kBlockBytes).code(),
            absl::StatusCode::kInternal);
}

TEST_F(SimulatedGpuTest, GetFailingAfterItsCopyLeavesNoCopyInFlight) {
  // Recording the engine's event fails after the copy was enqueued: the
  // call fails, and the bounce is free to reuse at once.
  GpuStaging::Bounce b = Acquire();
  std::memset(b.data(), 'c', kBlockBytes);
  cuda_.FailNext(FakeCudaRuntime::Call::kEventRecord);  // the record after the copy
  absl::Status s =
      staging_->ToDevice(0, kv_.data(), b, kBlockBytes, GpuSync{nullptr, engine_event_});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(cuda_.Pending(StagingStream()), 0u);
}

TEST_F(SimulatedGpuTest, AsyncCopyFailureShowsOnTheNextAcquire) {
  {
    GpuStaging::Bounce b = Acquire();
    ASSERT_TRUE(
        staging_->ToDevice(0, kv_.data(), b, kBlockBytes, GpuSync{engine_stream_, nullptr}).ok());
  }
  cuda_.FailNext(FakeCudaRuntime::Call::kEventSynchronize);
  absl::StatusOr<GpuStaging::Bounce> b = staging_->Acquire(kBlockBytes, MonoMs() + 1000);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInternal);
  // The buffer went back to the pool: the next Acquire gets it.
  EXPECT_TRUE(staging_->Acquire(kBlockBytes, MonoMs() + 1000).ok());
}

TEST_F(SimulatedGpuTest, SetupFailuresAreReturned) {
  cuda_.FailNext(FakeCudaRuntime::Call::kHostAlloc);
  EXPECT_EQ(staging_->Acquire(kBlockBytes, MonoMs() + 1000).status().code(),
            absl::StatusCode::kResourceExhausted);
  GpuStaging::Bounce b = Acquire();
  cuda_.FailNext(FakeCudaRuntime::Call::kStreamCreate);
  EXPECT_EQ(staging_->FromDevice(0, &b, kv_.data(), kBlockBytes).code(),
            absl::StatusCode::kInternal);
  cuda_.FailNext(FakeCudaRuntime::Call::kEventCreate);
  EXPECT_EQ(staging_->FromDevice(0, &b, kv_.data(), kBlockBytes).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(cuda_.live_streams(), 0u);  // the half-made lane was released
  EXPECT_TRUE(staging_->FromDevice(0, &b, kv_.data(), kBlockBytes).ok());
}

TEST_F(SimulatedGpuTest, ClassifiesMemory) {
  int device = -1;
  EXPECT_TRUE(staging_->CheckDeviceMemory(kv_.data(), kv_.size(), &device).ok());
  EXPECT_EQ(device, 0);
  char host[16];
  EXPECT_EQ(staging_->CheckDeviceMemory(host, sizeof(host), &device).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(staging_->CheckDeviceMemory(kv_.data(), kv_.size() + 1, &device).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(staging_->CheckHostMemory(host).ok());
  EXPECT_EQ(staging_->CheckHostMemory(kv_.data()).code(), absl::StatusCode::kInvalidArgument);

  FakeCudaRuntime no_device(/*devices=*/0);
  GpuStaging staging(1, &no_device);
  EXPECT_EQ(staging.CheckDeviceMemory(kv_.data(), kv_.size(), &device).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(staging.CheckHostMemory(host).ok());
}

}  // namespace
}  // namespace shelf
