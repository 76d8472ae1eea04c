// libshelf over rdma end to end, on the simulated RDMA device and a fake
// CUDA runtime (this machine has neither an RDMA NIC nor a GPU): a real
// shelf-master process, a store running in this process (the simulated
// device is in-process, so its RDMA side must be too) with its real data
// server, and a Client opened on the simulated device. Checks that
// RegisterBuffer registers GPU buffers with the device and that gets into
// them land there directly (no staging), that puts are pulled by the store
// under their grants, that a GPU buffer the device will not take is staged
// and counted, that registrations go with their buffers, and that gets from
// a store of arenas outlive the read grants their queue pairs were made
// with.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/testing_hooks.h"
#include "server/store/store.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/client/fake_cuda_runtime.h"
#include "transport/rdma/simulated_verbs.h"

namespace shelf {
namespace {

constexpr char kSecret[] = "client-rdma-simulated-secret";

std::string Block(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class ClientRdmaSimulatedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.stores = 0;
    o.secret = kSecret;
    o.bin_dir = TestBinDir();
    o.master_args = master_args_;
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    store::StoreOptions so;
    so.master = cluster_->master_address();
    so.listen = "127.0.0.1:0";
    so.dram_size = 64ull << 20;
    so.secret = kSecret;
    so.hugepages = false;
    so.shm = false;  // same host: the client would use shared memory
    so.rdma_device = "sim1";
    so.rdma_verbs = &sim_;
    so.shm_arena_bytes = arena_bytes_;
    auto store = store::Store::Start(so);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    store_thread_ = std::thread([this] { store_->Run(); });
    while (!store_->registered()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    internal::SetDevicesForTesting(&sim_, &cuda_);
  }
  void TearDown() override {
    internal::SetDevicesForTesting(nullptr, nullptr);
    if (store_ != nullptr) store_->Stop();
    if (store_thread_.joinable()) store_thread_.join();
    store_.reset();
    cluster_.reset();
    transport::rdma::SimulatedVerbs::Stats s = sim_.stats();
    EXPECT_EQ(s.live_contexts + s.live_pds + s.live_mrs + s.live_cqs + s.live_qps, 0)
        << "simulated objects leaked";
  }
  std::unique_ptr<Client> Open(uint32_t gpu_registrations_max = 64) {
    ClientOptions co;
    co.masters = {cluster_->master_address()};
    co.secret = kSecret;
    co.timeout_ms = 20000;
    co.allow_shm = false;
    co.rdma_device = "sim0";
    co.rdma_store_pull_puts = true;
    co.rdma_gpu_registrations_max = gpu_registrations_max;
    co.location_cache_entries = location_cache_entries_;
    std::unique_ptr<Client> c;
    Status s = Client::Open(co, &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }

  uint64_t arena_bytes_ = 0;  // StoreOptions::shm_arena_bytes
  std::vector<std::string> master_args_;
  size_t location_cache_entries_ = ClientOptions().location_cache_entries;
  transport::rdma::SimulatedVerbs sim_;
  FakeCudaRuntime cuda_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<store::Store> store_;
  std::thread store_thread_;
};

TEST_F(ClientRdmaSimulatedTest, GpuGetsLandDirectlyAndPutsArePulledByTheStore) {
  std::unique_ptr<Client> client = Open();
  ASSERT_NE(client, nullptr);
  const size_t kBlock = 1 << 20;
  // Puts from host memory: pulled by the store over rdma.
  std::vector<std::string> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(Block(kBlock - size_t{977} * i, i + 1));
    ASSERT_TRUE(client->Put("k" + std::to_string(i), blocks[i].data(), blocks[i].size()).ok());
  }
  uint64_t total = 0;
  for (const std::string& b : blocks) total += b.size();
  EXPECT_EQ(client->stats().bytes_stored_rdma, total);
  EXPECT_EQ(client->stats().bytes_stored_tcp, 0u);

  // A "GPU" pool registered once; gets land in it over rdma, unstaged.
  std::vector<char> pool(4 * kBlock, 0);
  cuda_.AddDeviceMemory(pool.data(), pool.size(), 0);
  BufferHandle gpu;
  ASSERT_TRUE(client->RegisterBuffer(pool.data(), pool.size(), &gpu, /*gpu=*/true).ok());
  EXPECT_EQ(client->stats().gpu_rdma_registration_failures, 0u);
  EXPECT_EQ(client->stats().rdma_registered_buffers, 1u);
  const uint64_t mrs_before = sim_.stats().mrs_registered;
  for (int i = 0; i < 4; ++i) {
    size_t got = 0;
    ASSERT_TRUE(client->GetInto("k" + std::to_string(i), gpu, i * kBlock, kBlock, &got).ok());
    ASSERT_EQ(got, blocks[i].size());
    ASSERT_EQ(std::memcmp(pool.data() + i * kBlock, blocks[i].data(), got), 0) << i;
  }
  ClientStats st = client->stats();
  EXPECT_EQ(st.bytes_loaded_gpu_direct, total);
  EXPECT_EQ(st.bytes_loaded_rdma, total);
  EXPECT_EQ(st.bytes_loaded_tcp, 0u);
  EXPECT_EQ(st.bytes_staged_gpu, 0u);  // nothing inbound went through a bounce buffer
  // The checksum's read-back is counted for what it is.
  EXPECT_EQ(st.bytes_gpu_direct_checked, total);
  // The buffer's registration answered every read: no new MR.
  EXPECT_EQ(sim_.stats().mrs_registered, mrs_before);

  // A put from the GPU pool: staged out to host memory, then pulled.
  ASSERT_TRUE(client->PutFrom("from-gpu", gpu, 0, kBlock).ok());
  EXPECT_EQ(client->stats().bytes_stored_rdma, total + kBlock);
  std::string back;
  ASSERT_TRUE(client->Get("from-gpu", &back).ok());
  EXPECT_EQ(back, blocks[0]);

  ASSERT_TRUE(client->UnregisterBuffer(gpu).ok());
  EXPECT_EQ(client->stats().rdma_registered_buffers, 0u);
}

TEST_F(ClientRdmaSimulatedTest, AGpuDirectGetWaitsForTheCallersStream) {
  std::unique_ptr<Client> client = Open();
  ASSERT_NE(client, nullptr);
  const std::string block = Block(1 << 20, 11);
  ASSERT_TRUE(client->Put("ordered", block.data(), block.size()).ok());
  std::vector<char> pool(1 << 20, 0);
  cuda_.AddDeviceMemory(pool.data(), pool.size(), 0);
  BufferHandle gpu;
  ASSERT_TRUE(client->RegisterBuffer(pool.data(), pool.size(), &gpu, /*gpu=*/true).ok());
  // The engine's stream still has a kernel queued that writes the buffer
  // (the fake runtime runs it only when something waits for the stream).
  // The get must land after it, and the event it gives must mark the get.
  CudaRuntime::Stream engine = cuda_.NewStream();
  CudaRuntime::Event done = nullptr;
  ASSERT_TRUE(cuda_.EventCreate(&done).ok());
  cuda_.EnqueueFill(engine, pool.data(), 'x', pool.size());
  size_t got = 0;
  ASSERT_TRUE(
      client->GetInto("ordered", gpu, 0, pool.size(), &got, Deadline(), GpuSync{engine, done})
          .ok());
  ASSERT_TRUE(cuda_.StreamSynchronize(engine).ok());
  ASSERT_EQ(got, block.size());
  EXPECT_EQ(std::memcmp(pool.data(), block.data(), got), 0) << "the queued fill ran after the get";
  EXPECT_EQ(client->stats().bytes_loaded_gpu_direct, block.size());
  EXPECT_EQ(client->stats().bytes_staged_gpu, 0u);
  cuda_.EventDestroy(done);
  ASSERT_TRUE(client->UnregisterBuffer(gpu).ok());
}

TEST_F(ClientRdmaSimulatedTest, AGpuBufferTheDeviceRefusesIsStagedAndCounted) {
  std::unique_ptr<Client> client = Open(/*gpu_registrations_max=*/0);
  ASSERT_NE(client, nullptr);
  const std::string block = Block(300000, 9);
  ASSERT_TRUE(client->Put("staged", block.data(), block.size()).ok());
  std::vector<char> pool(1 << 20, 0);
  cuda_.AddDeviceMemory(pool.data(), pool.size(), 0);
  BufferHandle gpu;
  ASSERT_TRUE(client->RegisterBuffer(pool.data(), pool.size(), &gpu, /*gpu=*/true).ok());
  EXPECT_EQ(client->stats().gpu_rdma_registration_failures, 1u);
  EXPECT_EQ(client->stats().rdma_registered_buffers, 0u);
  size_t got = 0;
  ASSERT_TRUE(client->GetInto("staged", gpu, 4096, pool.size() - 4096, &got).ok());
  ASSERT_EQ(got, block.size());
  EXPECT_EQ(std::memcmp(pool.data() + 4096, block.data(), got), 0);
  ClientStats st = client->stats();
  EXPECT_EQ(st.bytes_loaded_gpu_direct, 0u);
  EXPECT_EQ(st.bytes_staged_gpu, block.size());
  EXPECT_EQ(st.bytes_loaded_rdma, block.size());  // into the bounce buffer
  ASSERT_TRUE(client->UnregisterBuffer(gpu).ok());
}

// A batch get into GPU memory staged through bounce buffers: the items'
// copies run on several staging streams at once, and the one event the
// caller gives must mark all of them, not the last one recorded. (The
// simulated GPU runs a stream only when something waits for it: waiting on
// an event runs the stream it was last recorded on, up to that record.)
TEST_F(ClientRdmaSimulatedTest, ABatchGetsEventMarksEveryItemsCopy) {
  std::unique_ptr<Client> client = Open(/*gpu_registrations_max=*/0);
  ASSERT_NE(client, nullptr);
  constexpr int kItems = 8;
  const size_t kBlock = 256 << 10;
  std::vector<std::string> blocks;
  for (int i = 0; i < kItems; ++i) {
    blocks.push_back(Block(kBlock, 70 + i));
    ASSERT_TRUE(client->Put("batch" + std::to_string(i), blocks[i].data(), kBlock).ok());
  }
  std::vector<char> pool(kItems * kBlock, 0);
  cuda_.AddDeviceMemory(pool.data(), pool.size(), 0);
  BufferHandle gpu;
  ASSERT_TRUE(client->RegisterBuffer(pool.data(), pool.size(), &gpu, /*gpu=*/true).ok());
  std::vector<GetIntoItem> items;
  items.reserve(kItems);
  for (int i = 0; i < kItems; ++i) {
    items.push_back(GetIntoItem{"batch" + std::to_string(i), gpu, i * kBlock, kBlock});
  }
  CudaRuntime::Stream engine = cuda_.NewStream();
  // The items overlap as the client's transfer threads take them up, which
  // varies: several rounds, so that some do.
  constexpr int kRounds = 6;
  for (int round = 0; round < 2 * kRounds; ++round) {
    const bool with_stream = round % 2 == 1;
    SCOPED_TRACE(absl::StrCat(with_stream ? "stream and event" : "event only", ", round ", round));
    std::fill(pool.begin(), pool.end(), 0);
    CudaRuntime::Event done = nullptr;
    ASSERT_TRUE(cuda_.EventCreate(&done).ok());
    std::vector<Status> statuses;
    ASSERT_TRUE(client
                    ->BatchGetInto(items, &statuses, nullptr, Deadline(),
                                   GpuSync{with_stream ? engine : nullptr, done})
                    .ok());
    for (int i = 0; i < kItems; ++i) ASSERT_TRUE(statuses[i].ok()) << i << statuses[i].ToString();
    ASSERT_TRUE(cuda_.EventSynchronize(done).ok());
    for (int i = 0; i < kItems; ++i) {
      ASSERT_EQ(std::memcmp(pool.data() + i * kBlock, blocks[i].data(), kBlock), 0)
          << "item " << i << " was not in place when the batch's event completed";
    }
    cuda_.EventDestroy(done);
  }
  EXPECT_EQ(client->stats().bytes_staged_gpu, size_t{2} * kRounds * kItems * kBlock);
  ASSERT_TRUE(client->UnregisterBuffer(gpu).ok());
}

// A store of arenas (--shm-arena): one memory region per arena, and blocks
// in several arenas read and pulled over rdma with the right bytes.
class ClientRdmaArenasTest : public ClientRdmaSimulatedTest {
 protected:
  ClientRdmaArenasTest() { arena_bytes_ = 16ull << 20; }  // 4 arenas of the 64 MiB
};

TEST_F(ClientRdmaArenasTest, BlocksInSeveralArenasMoveOverRdma) {
  std::unique_ptr<Client> client = Open();
  ASSERT_NE(client, nullptr);
  const size_t kBlock = 3 << 20;  // 5 to an arena: 8 blocks fill two
  std::vector<std::string> blocks;
  uint64_t total = 0;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(Block(kBlock - size_t{4096} * i, 40 + i));
    total += blocks.back().size();
    ASSERT_TRUE(client->Put("a" + std::to_string(i), blocks[i].data(), blocks[i].size()).ok());
  }
  EXPECT_EQ(client->stats().bytes_stored_rdma, total);
  for (int i = 0; i < 8; ++i) {
    std::string got;
    ASSERT_TRUE(client->Get("a" + std::to_string(i), &got).ok()) << i;
    ASSERT_TRUE(got == blocks[i]) << i;
  }
  ClientStats st = client->stats();
  EXPECT_EQ(st.bytes_loaded_rdma, total);
  EXPECT_EQ(st.bytes_loaded_tcp, 0u);
}

// Read grants of 3 s: the store exposes an arena to a client's queue pair
// until the grant it was made with expires, and tears the pair down then.
// The client makes its connection again, with a newer grant, before that:
// gets across many grant lifetimes never fail and never leave rdma (no
// location cache: a cached read is checked over tcp; each get looks its
// block up and gets a fresh grant).
class ClientRdmaShortGrantsTest : public ClientRdmaArenasTest {
 protected:
  ClientRdmaShortGrantsTest() {
    master_args_ = {"--read-grant-ttl", "3000ms"};
    location_cache_entries_ = 0;
  }
};

TEST_F(ClientRdmaShortGrantsTest, GetsAcrossGrantExpiriesNeverFail) {
  std::unique_ptr<Client> client = Open();
  ASSERT_NE(client, nullptr);
  std::vector<std::string> blocks;
  uint64_t block_bytes = 0;
  for (int i = 0; i < 2; ++i) {
    blocks.push_back(Block((1 << 20) - 4096 * i, 70 + i));
    block_bytes += blocks.back().size();
    ASSERT_TRUE(client->Put("g" + std::to_string(i), blocks[i].data(), blocks[i].size()).ok());
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(7000);
  uint64_t rounds = 0;
  for (; std::chrono::steady_clock::now() < end; ++rounds) {
    for (int i = 0; i < 2; ++i) {
      std::string got;
      Status s = client->Get("g" + std::to_string(i), &got);
      ASSERT_TRUE(s.ok()) << "round " << rounds << ", block " << i << ": " << s.ToString();
      ASSERT_TRUE(got == blocks[i]) << rounds;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ClientStats st = client->stats();
  EXPECT_EQ(st.bytes_loaded_rdma, rounds * block_bytes);
  EXPECT_EQ(st.bytes_loaded_tcp, 0u);
}

}  // namespace
}  // namespace shelf
