// libshelf against a real cluster (shelf-master and two shelf-store
// processes on loopback): registered buffers and the zero-copy calls, the
// asynchronous batches, parallel remote reads, deadlines and failover.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "shelf/client.h"
#include "shelf/keys.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"

namespace shelf {
namespace {

using std::chrono::milliseconds;

void Fill(char* p, size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
  }
}

std::string Block(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  Fill(s.data(), n, seed);
  return s;
}

std::unique_ptr<LocalCluster> StartCluster(int stores) {
  LocalCluster::Options o;
  o.stores = stores;
  o.dram_bytes = 128ull << 20;
  o.bin_dir = TestBinDir();
  auto c = LocalCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::unique_ptr<Client> OpenClient(const std::string& master, bool allow_shm = true,
                                   uint32_t transfer_threads = 8) {
  ClientOptions co;
  co.masters = {master};
  co.timeout_ms = 20000;
  co.allow_shm = allow_shm;
  co.transfer_threads = transfer_threads;
  std::unique_ptr<Client> c;
  Status s = Client::Open(co, &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

// One cluster for the suite: every test uses its own keys.
class ClientClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = StartCluster(2).release(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    client_ = OpenClient(cluster_->master_address());
    ASSERT_NE(client_, nullptr);
  }
  static LocalCluster* cluster_;
  std::unique_ptr<Client> client_;
};
LocalCluster* ClientClusterTest::cluster_ = nullptr;

TEST_F(ClientClusterTest, ZeroCopyPutFromAndGetIntoRoundTrip) {
  constexpr size_t kBlock = 256 << 10;
  constexpr size_t kSlots = 8;
  std::vector<char> src(kSlots * kBlock), dst(kSlots * kBlock, 0);
  Fill(src.data(), src.size(), 11);
  BufferHandle in, out;
  ASSERT_TRUE(client_->RegisterBuffer(src.data(), src.size(), &in).ok());
  ASSERT_TRUE(client_->RegisterBuffer(dst.data(), dst.size(), &out).ok());
  for (size_t i = 0; i < kSlots; ++i) {
    Status s = client_->PutFrom("zc/" + std::to_string(i), in, i * kBlock, kBlock);
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  // Read them back into reversed slots.
  for (size_t i = 0; i < kSlots; ++i) {
    size_t size = 0;
    size_t slot = kSlots - 1 - i;
    Status s = client_->GetInto("zc/" + std::to_string(i), out, slot * kBlock, kBlock, &size);
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    EXPECT_EQ(size, kBlock);
    EXPECT_EQ(std::memcmp(dst.data() + slot * kBlock, src.data() + i * kBlock, kBlock), 0) << i;
  }
  // Same host: the bytes came through shared memory.
  EXPECT_GE(client_->stats().bytes_loaded_shm, kSlots * kBlock);
  // A TCP-only client reads the same bytes into its registered memory.
  std::unique_ptr<Client> tcp = OpenClient(cluster_->master_address(), /*allow_shm=*/false);
  std::vector<char> tdst(kBlock);
  BufferHandle th;
  ASSERT_TRUE(tcp->RegisterBuffer(tdst.data(), tdst.size(), &th).ok());
  size_t size = 0;
  ASSERT_TRUE(tcp->GetInto("zc/3", th, 0, kBlock, &size).ok());
  EXPECT_EQ(std::memcmp(tdst.data(), src.data() + 3 * kBlock, kBlock), 0);
  EXPECT_EQ(tcp->stats().bytes_loaded_tcp, kBlock);
  EXPECT_TRUE(client_->UnregisterBuffer(in).ok());
  EXPECT_TRUE(client_->UnregisterBuffer(out).ok());
}

// A block read across pieces, as an engine's K and V segments lie apart:
// straight out of the store's segment over shared memory, through scratch
// over TCP; misses, blocks larger than their pieces and bad pieces fail
// their item alone.
TEST_F(ClientClusterTest, BatchGetIntoPiecesScattersEachBlockInOrder) {
  constexpr size_t kBlock = 96 << 10;
  constexpr size_t kKeys = 6;
  std::vector<std::vector<char>> blocks(kKeys, std::vector<char>(kBlock));
  std::vector<PutItem> puts;
  for (size_t i = 0; i < kKeys; ++i) {
    Fill(blocks[i].data(), kBlock, 40 + static_cast<int>(i));
    puts.push_back(PutItem{"pieces/" + std::to_string(i), blocks[i].data(), kBlock});
  }
  std::vector<Status> put_statuses;
  ASSERT_TRUE(client_->BatchPut(puts, &put_statuses).ok());
  for (const Status& st : put_statuses) ASSERT_TRUE(st.ok()) << st.ToString();

  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    std::unique_ptr<Client> reader = OpenClient(cluster_->master_address(), shm);
    // Each key's halves land far apart, the second piece larger than the
    // rest of the block: its tail stays as it was.
    std::vector<char> k_side(kKeys * kBlock, 0), v_side(kKeys * (kBlock + 100), 'x');
    std::vector<PiecesItem> items(kKeys);
    for (size_t i = 0; i < kKeys; ++i) {
      items[i].key = "pieces/" + std::to_string(i);
      items[i].pieces = {{k_side.data() + i * kBlock, kBlock / 2},
                         {v_side.data() + i * (kBlock + 100), kBlock / 2 + 100}};
    }
    std::vector<Status> statuses;
    std::vector<size_t> sizes;
    ASSERT_TRUE(reader->BatchGetIntoPieces(items, &statuses, &sizes).ok());
    for (size_t i = 0; i < kKeys; ++i) {
      ASSERT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].ToString();
      EXPECT_EQ(sizes[i], kBlock);
      EXPECT_EQ(std::memcmp(k_side.data() + i * kBlock, blocks[i].data(), kBlock / 2), 0) << i;
      EXPECT_EQ(std::memcmp(v_side.data() + i * (kBlock + 100), blocks[i].data() + kBlock / 2,
                            kBlock / 2),
                0)
          << i;
      EXPECT_EQ(v_side[i * (kBlock + 100) + kBlock / 2], 'x') << "the tail is kept";
    }
    const ClientStats st = reader->stats();
    EXPECT_EQ(st.bytes_loaded, kKeys * kBlock);
    EXPECT_EQ(shm ? st.bytes_loaded_shm : st.bytes_loaded_tcp, kKeys * kBlock);

    // A miss, pieces too small (nothing written), a null piece, no pieces.
    std::vector<char> small(kBlock / 4, 'y');
    std::vector<PiecesItem> bad(4);
    bad[0].key = "pieces/none";
    bad[0].pieces = {{small.data(), small.size()}};
    bad[1].key = "pieces/0";
    bad[1].pieces = {{small.data(), small.size() / 2}, {small.data() + small.size() / 2, 1}};
    bad[2].key = "pieces/1";
    bad[2].pieces = {{nullptr, 16}};
    bad[3].key = "pieces/2";
    ASSERT_TRUE(reader->BatchGetIntoPieces(bad, &statuses, &sizes).ok());
    EXPECT_EQ(statuses[0].code(), StatusCode::kNotFound);
    EXPECT_EQ(statuses[1].code(), StatusCode::kOutOfRange) << statuses[1].ToString();
    EXPECT_EQ(sizes[1], kBlock);
    EXPECT_EQ(std::count(small.begin(), small.end(), 'y'), static_cast<long>(small.size()));
    EXPECT_EQ(statuses[2].code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(statuses[3].code(), StatusCode::kInvalidArgument);
  }
}

// A batch that names a key twice puts it once: with replace, its last
// value, as if the puts ran in order; without, its first (content keys).
TEST_F(ClientClusterTest, ABatchOfReplacesKeepsTheLastValueOfARepeatedKey) {
  const std::string v1(4096, '1'), v2(4096, '2'), v3(4096, '3');
  std::vector<PutItem> items = {{"twice", v1.data(), v1.size()}, {"twice", v2.data(), v2.size()}};
  std::vector<Status> statuses;
  PutOptions replace;
  replace.replace = true;
  ASSERT_TRUE(client_->BatchPut(items, &statuses, replace).ok());
  for (const Status& st : statuses) EXPECT_TRUE(st.ok()) << st.ToString();
  std::string got;
  ASSERT_TRUE(client_->Get("twice", &got).ok());
  EXPECT_EQ(got, v2);
  items = {{"twice", v3.data(), v3.size()}, {"twice", v1.data(), v1.size()}};
  ASSERT_TRUE(client_->BatchPut(items, &statuses).ok());  // exists: kept
  ASSERT_TRUE(client_->Get("twice", &got).ok());
  EXPECT_EQ(got, v2);
}

TEST_F(ClientClusterTest, BufferTooSmallIsOutOfRangeAndTouchesNothing) {
  std::string data = Block(64 << 10, 3);
  ASSERT_TRUE(client_->Put("small/64k", data.data(), data.size()).ok());
  std::vector<char> mem(96 << 10, '\x5a');
  BufferHandle h;
  ASSERT_TRUE(client_->RegisterBuffer(mem.data(), mem.size(), &h).ok());
  size_t size = 0;
  Status s = client_->GetInto("small/64k", h, 1024, 32 << 10, &size);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  EXPECT_NE(s.message().find("does not fit"), std::string::npos) << s.ToString();
  EXPECT_EQ(size, data.size()) << "the size is reported so the caller can retry";
  for (char c : mem) ASSERT_EQ(c, '\x5a') << "a block that does not fit must not be written";
  // The same with unregistered memory.
  char tiny[100];
  s = client_->GetInto("small/64k", tiny, sizeof(tiny), &size);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  // And it fits with the right capacity.
  ASSERT_TRUE(client_->GetInto("small/64k", h, 1024, 64 << 10, &size).ok());
  EXPECT_EQ(std::memcmp(mem.data() + 1024, data.data(), data.size()), 0);
  EXPECT_EQ(mem[1023], '\x5a');
  EXPECT_EQ(mem[1024 + data.size()], '\x5a');
  // A miss through a registered buffer is NOT_FOUND.
  EXPECT_EQ(client_->GetInto("small/absent", h, 0, 8, &size).code(), StatusCode::kNotFound);
}

TEST_F(ClientClusterTest, BatchGetReadsRemoteBlocksInParallel) {
  constexpr size_t kBlocks = 32;
  constexpr size_t kBlock = 1 << 20;
  std::vector<std::string> data;
  std::vector<PutItem> items;
  std::vector<std::string> keys;
  for (size_t i = 0; i < kBlocks; ++i) {
    data.push_back(Block(kBlock, 100 + static_cast<uint32_t>(i)));
    keys.push_back("par/" + std::to_string(i));
  }
  for (size_t i = 0; i < kBlocks; ++i) items.push_back({keys[i], data[i].data(), kBlock});
  std::vector<Status> statuses;
  ASSERT_TRUE(client_->BatchPut(items, &statuses).ok());
  for (size_t i = 0; i < kBlocks; ++i) ASSERT_TRUE(statuses[i].ok()) << statuses[i].ToString();

  // Over TCP, serially (one transfer thread) and in parallel (eight).
  double ms[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    std::unique_ptr<Client> tcp =
        OpenClient(cluster_->master_address(), /*allow_shm=*/false, run == 0 ? 1 : 8);
    std::vector<std::string> values;
    ASSERT_TRUE(tcp->BatchGet(keys, &values, &statuses).ok());  // warms the pool
    uint64_t t0 = MonoUs();
    Status s = tcp->BatchGet(keys, &values, &statuses);
    ms[run] = (MonoUs() - t0) / 1000.0;
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (size_t i = 0; i < kBlocks; ++i) {
      ASSERT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].ToString();
      ASSERT_TRUE(values[i] == data[i]) << "block " << i << " differs";
    }
    EXPECT_EQ(tcp->stats().bytes_loaded_tcp, 2 * kBlocks * kBlock);
  }
  // Timing is only reported: the machine running the test may have one core.
  std::printf("BatchGet of %zu x 1 MiB over tcp: %.1f ms serial, %.1f ms parallel\n", kBlocks,
              ms[0], ms[1]);
  // A batch refused whole leaves no per-item statuses behind, not the
  // last call's (all OK) for a caller reusing its vectors.
  std::vector<std::string> values;
  keys.push_back(std::string(kKeyBytesMax + 1, 'k'));
  EXPECT_EQ(client_->BatchGet(keys, &values, &statuses).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(statuses.empty());
}

// Single gets from many threads at once, from a client with nothing
// cached: their lookups go to the master together (call_coalescer.h), and
// each get still answers for its own key: its bytes, NOT_FOUND for a key
// never put, the same bytes to every thread reading a shared key.
TEST_F(ClientClusterTest, ConcurrentSingleGetsEachAnswerForTheirOwnKey) {
  constexpr int kThreads = 8, kKeysEach = 24;
  constexpr size_t kBlock = 64 << 10;
  std::vector<std::string> keys, data;
  std::vector<PutItem> items;
  for (int i = 0; i < kThreads * kKeysEach; ++i) {
    keys.push_back("concurrent-get/" + std::to_string(i));
    data.push_back(Block(kBlock, 500 + static_cast<uint32_t>(i)));
  }
  const std::string shared_key = "concurrent-get/shared";
  const std::string shared = Block(kBlock, 499);
  for (size_t i = 0; i < keys.size(); ++i) items.push_back({keys[i], data[i].data(), kBlock});
  items.push_back({shared_key, shared.data(), kBlock});
  std::vector<Status> statuses;
  ASSERT_TRUE(client_->BatchPut(items, &statuses).ok());
  for (const Status& st : statuses) ASSERT_TRUE(st.ok()) << st.ToString();

  std::unique_ptr<Client> reader = OpenClient(cluster_->master_address());
  ASSERT_NE(reader, nullptr);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string value;
      for (int k = 0; k < kKeysEach; ++k) {
        const int i = t * kKeysEach + k;
        Status s = reader->Get(keys[i], &value);
        if (!s.ok() || value != data[i]) wrong.fetch_add(1);
        s = reader->Get(shared_key, &value);
        if (!s.ok() || value != shared) wrong.fetch_add(1);
        s = reader->Get("concurrent-get/never-put/" + std::to_string(i), &value);
        if (s.code() != StatusCode::kNotFound) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  // How many went together depends on the scheduler: reported, and each
  // read's lookup is counted once, sent or joined.
  const ClientStats st = reader->stats();
  std::printf("%d single gets from %d threads: %llu lookups sent, %llu joined another's\n",
              3 * kThreads * kKeysEach, kThreads, static_cast<unsigned long long>(st.read_lookups),
              static_cast<unsigned long long>(st.read_lookups_joined));
  EXPECT_EQ(st.read_lookups + st.read_lookups_joined,
            static_cast<uint64_t>(kThreads * kKeysEach * 2 + kThreads * kKeysEach) -
                st.location_cache_hits);
}

// Single puts from many threads through one client go to the cluster
// together, as batches (call_coalescer.h), and each put still answers for
// its own block: every key reads back its own bytes, and a key all threads
// put at once is stored once, whole.
TEST_F(ClientClusterTest, ConcurrentSinglePutsEachCommitTheirOwnBlock) {
  constexpr int kThreads = 8, kKeysEach = 16;
  constexpr size_t kBlock = 64 << 10;
  std::vector<std::string> keys, data;
  for (int i = 0; i < kThreads * kKeysEach; ++i) {
    keys.push_back("concurrent-put/" + std::to_string(i));
    data.push_back(Block(kBlock, 700 + static_cast<uint32_t>(i)));
  }
  const std::string shared_key = "concurrent-put/shared";
  const std::string shared = Block(kBlock, 699);
  std::unique_ptr<Client> writer = OpenClient(cluster_->master_address());
  ASSERT_NE(writer, nullptr);
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeysEach; ++k) {
        const int i = t * kKeysEach + k;
        if (!writer->Put(keys[i], data[i].data(), kBlock).ok()) failed.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  // Each put went in a batch, its own or another's; how many went together
  // depends on the scheduler: reported.
  const ClientStats st = writer->stats();
  std::printf("%d single puts from %d threads: %llu batches, %llu joined another's\n",
              kThreads * kKeysEach, kThreads, static_cast<unsigned long long>(st.put_calls),
              static_cast<unsigned long long>(st.put_calls_joined));
  EXPECT_EQ(st.put_calls + st.put_calls_joined, static_cast<uint64_t>(kThreads * kKeysEach));
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      if (!client_->Put(shared_key, shared.data(), kBlock).ok()) failed.fetch_add(1);
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  std::string got;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(client_->Get(keys[i], &got).ok()) << keys[i];
    EXPECT_TRUE(got == data[i]) << keys[i] << " reads another block's bytes";
  }
  ASSERT_TRUE(client_->Get(shared_key, &got).ok());
  EXPECT_TRUE(got == shared);
}

// BatchGetAtMost takes no memory past its bound: items whose blocks would
// take the batch's values over it fail with RESOURCE_EXHAUSTED, empty;
// the rest read as BatchGet reads them. With the location cache warm too
// (a cached item is claimed once, then read again from the master's
// answer only if its cached read failed).
TEST_F(ClientClusterTest, BatchGetAtMostHoldsNoMoreThanItsBound) {
  constexpr size_t kBlock = 256 << 10;
  const std::string data = Block(kBlock, 7);
  ASSERT_TRUE(client_->Put("atmost/k", data.data(), kBlock).ok());
  const std::vector<std::string> keys = {"atmost/k", "atmost/absent", "atmost/k", "atmost/k"};
  for (int pass = 0; pass < 2; ++pass) {  // the second with the cache warm
    for (uint64_t bound :
         {uint64_t{0}, uint64_t{3 * kBlock}, uint64_t{2 * kBlock + 1}, uint64_t{kBlock - 1}}) {
      SCOPED_TRACE(testing::Message() << "pass " << pass << ", bound " << bound);
      std::vector<std::string> values;
      std::vector<Status> statuses;
      ASSERT_TRUE(client_->BatchGetAtMost(keys, bound, &values, &statuses).ok());
      ASSERT_EQ(statuses.size(), keys.size());
      EXPECT_EQ(statuses[1].code(), StatusCode::kNotFound);
      const size_t fit = bound == 0 ? 3 : std::min<size_t>(3, bound / kBlock);
      size_t ok = 0, refused = 0;
      for (size_t i : {size_t{0}, size_t{2}, size_t{3}}) {
        if (statuses[i].ok()) {
          ++ok;
          EXPECT_TRUE(values[i] == data);
        } else {
          ++refused;
          EXPECT_EQ(statuses[i].code(), StatusCode::kResourceExhausted) << statuses[i].ToString();
          EXPECT_TRUE(values[i].empty());
        }
      }
      EXPECT_EQ(ok, fit);
      EXPECT_EQ(refused, 3 - fit);
    }
  }
}

TEST_F(ClientClusterTest, AsyncBatchesOverlapWithTheCaller) {
  constexpr size_t kBlocks = 16;
  constexpr size_t kBlock = 128 << 10;
  std::vector<char> src(kBlocks * kBlock), dst(kBlocks * kBlock, 0);
  Fill(src.data(), src.size(), 21);
  BufferHandle in, out;
  ASSERT_TRUE(client_->RegisterBuffer(src.data(), src.size(), &in).ok());
  ASSERT_TRUE(client_->RegisterBuffer(dst.data(), dst.size(), &out).ok());
  std::vector<PutFromItem> puts;
  std::vector<GetIntoItem> gets;
  for (size_t i = 0; i < kBlocks; ++i) {
    std::string key = "async/" + std::to_string(i);
    puts.push_back({key, in, i * kBlock, kBlock});
    gets.push_back({key, out, i * kBlock, kBlock});
  }
  BatchFuture put = client_->BatchPutFromAsync(puts);
  // The caller is free while the batch runs.
  uint64_t spins = 0;
  while (!put.Poll()) ++spins;
  ASSERT_TRUE(put.status().ok()) << put.status().ToString();
  ASSERT_EQ(put.statuses().size(), kBlocks);
  for (const Status& s : put.statuses()) ASSERT_TRUE(s.ok()) << s.ToString();

  BatchFuture get = client_->BatchGetIntoAsync(gets);
  // Waiting with a timeout either finishes or says it has not.
  bool done = get.Wait(30000);
  ASSERT_TRUE(done);
  ASSERT_TRUE(get.status().ok()) << get.status().ToString();
  for (size_t i = 0; i < kBlocks; ++i) {
    EXPECT_TRUE(get.statuses()[i].ok()) << get.statuses()[i].ToString();
    EXPECT_EQ(get.sizes()[i], kBlock);
  }
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);

  // Owned-value forms.
  std::string a = Block(5000, 1), b = Block(7000, 2);
  BatchFuture p2 = client_->BatchPutAsync(
      {PutItem{"async/a", a.data(), a.size()}, PutItem{"async/b", b.data(), b.size()}});
  ASSERT_TRUE(p2.status().ok());
  BatchFuture g2 = client_->BatchGetAsync({"async/a", "async/missing", "async/b"});
  ASSERT_TRUE(g2.status().ok());
  std::vector<std::string> values = std::move(*g2.values());
  EXPECT_TRUE(values[0] == a);
  EXPECT_EQ(g2.statuses()[1].code(), StatusCode::kNotFound);
  EXPECT_TRUE(values[2] == b);
  std::printf("polled %llu times while an async put ran\n", static_cast<unsigned long long>(spins));
}

TEST_F(ClientClusterTest, UnregisterWaitsForAnAsyncBatchUsingTheBuffer) {
  constexpr size_t kBlock = 1 << 20;
  std::vector<std::string> keys;
  std::string data = Block(kBlock, 31);
  for (int i = 0; i < 8; ++i) {
    keys.push_back("unreg/" + std::to_string(i));
    ASSERT_TRUE(client_->Put(keys.back(), data.data(), data.size()).ok());
  }
  std::vector<char> mem(8 * kBlock);
  BufferHandle h;
  ASSERT_TRUE(client_->RegisterBuffer(mem.data(), mem.size(), &h).ok());
  std::vector<GetIntoItem> gets;
  gets.reserve(8);
  for (int i = 0; i < 8; ++i) gets.push_back({keys[i], h, i * kBlock, kBlock});
  BatchFuture f = client_->BatchGetIntoAsync(gets);
  ASSERT_TRUE(client_->UnregisterBuffer(h).ok());
  // Unregister returned: the batch no longer touches the memory.
  EXPECT_TRUE(f.Poll());
  ASSERT_TRUE(f.status().ok());
  for (const Status& s : f.statuses()) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(std::memcmp(mem.data() + 7 * kBlock, data.data(), kBlock), 0);
}

TEST_F(ClientClusterTest, BatchPutFromRepeatedAndExistingKeys) {
  std::vector<char> mem(size_t{3} * 4096);
  Fill(mem.data(), mem.size(), 41);
  BufferHandle h;
  ASSERT_TRUE(client_->RegisterBuffer(mem.data(), mem.size(), &h).ok());
  ASSERT_TRUE(client_->PutFrom("dup/existing", h, 0, 4096).ok());
  std::vector<Status> statuses;
  Status s = client_->BatchPutFrom(
      {PutFromItem{"dup/x", h, 4096, 4096}, PutFromItem{"dup/x", h, 4096, 4096},
       PutFromItem{"dup/existing", h, 0, 4096}, PutFromItem{"dup/bad", h, 8192, 8192}},
      &statuses);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(statuses[0].ok()) << statuses[0].ToString();
  EXPECT_TRUE(statuses[1].ok()) << statuses[1].ToString();
  EXPECT_TRUE(statuses[2].ok()) << "ALREADY_EXISTS is success: " << statuses[2].ToString();
  EXPECT_EQ(statuses[3].code(), StatusCode::kOutOfRange);
  std::string got;
  ASSERT_TRUE(client_->Get("dup/x", &got).ok());
  EXPECT_EQ(std::memcmp(got.data(), mem.data() + 4096, 4096), 0);
}

TEST_F(ClientClusterTest, BatchRemoveReportsEachKeyAndRefusesBadBatchesWhole) {
  std::string data = Block(4096, 47);
  for (const char* k : {"brm/a", "brm/b", "brm/keep"}) {
    ASSERT_TRUE(client_->Put(k, data.data(), data.size()).ok());
  }
  std::vector<Status> statuses;
  // A bad batch removes nothing: an empty key, no keys, too many keys.
  EXPECT_EQ(client_->BatchRemove({"brm/keep", ""}, &statuses).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->BatchRemove({}, &statuses).code(), StatusCode::kInvalidArgument);
  std::vector<std::string> too_many(kBatchItemsMax + 1, "brm/keep");
  EXPECT_EQ(client_->BatchRemove(too_many, &statuses).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->BatchRemove({"brm/keep"}, nullptr).code(), StatusCode::kInvalidArgument);

  Status s = client_->BatchRemove({"brm/a", "brm/absent", "brm/b", "brm/a"}, &statuses);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(statuses.size(), 4u);
  EXPECT_TRUE(statuses[0].ok()) << statuses[0].ToString();
  EXPECT_EQ(statuses[1].code(), StatusCode::kNotFound);
  EXPECT_TRUE(statuses[2].ok()) << statuses[2].ToString();
  EXPECT_EQ(statuses[3].code(), StatusCode::kNotFound) << "the second removal of a key";
  std::vector<bool> present;
  ASSERT_TRUE(client_->Exists({"brm/a", "brm/b", "brm/keep"}, &present).ok());
  EXPECT_FALSE(present[0]);
  EXPECT_FALSE(present[1]);
  EXPECT_TRUE(present[2]) << "keys of the refused batches are still there";

  // A full batch in one call.
  std::vector<std::string> keys;
  std::vector<PutItem> items;
  keys.reserve(kBatchItemsMax);
  items.reserve(kBatchItemsMax);
  for (size_t i = 0; i < kBatchItemsMax; ++i) keys.push_back("brm/many/" + std::to_string(i));
  for (const std::string& k : keys) items.push_back(PutItem{k, data.data(), 64});
  std::vector<Status> put_statuses;
  ASSERT_TRUE(client_->BatchPut(items, &put_statuses).ok());
  ASSERT_TRUE(client_->BatchRemove(keys, &statuses).ok());
  ASSERT_EQ(statuses.size(), kBatchItemsMax);
  for (size_t i = 0; i < kBatchItemsMax; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].ToString();
  }
  ASSERT_TRUE(client_->Exists(keys, &present).ok());
  EXPECT_EQ(std::count(present.begin(), present.end(), true), 0);
}

TEST_F(ClientClusterTest, DeadlinesAgainstALiveCluster) {
  std::string data = Block(4096, 51);
  ASSERT_TRUE(client_->Put("dl/a", data.data(), data.size()).ok());
  std::string got;
  EXPECT_EQ(client_->Get("dl/a", &got, Deadline::After(milliseconds(-5))).code(),
            StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(got.empty());
  ASSERT_TRUE(client_->Get("dl/a", &got, Deadline::After(milliseconds(10000))).ok());
  EXPECT_TRUE(got == data);
  ASSERT_TRUE(client_->Get("dl/a", &got, 10000).ok());
  PutOptions po;
  po.deadline = Deadline::At(Deadline::Clock::now() - milliseconds(1));
  EXPECT_EQ(client_->Put("dl/b", data.data(), data.size(), po).code(),
            StatusCode::kDeadlineExceeded);
  std::vector<bool> present;
  ASSERT_TRUE(client_->Exists({"dl/b"}, &present).ok());
  EXPECT_FALSE(present[0]) << "a put refused for its deadline left nothing behind";
}

TEST_F(ClientClusterTest, ContentKeysPrefixMatchAndLoad) {
  KeyNamespace ns;
  ns.model = "test/model";
  ns.dtype = "bf16";
  ns.kv_layout = "paged_nhd";
  ns.chunk_tokens = 16;
  KeyBuilder kb(ns);
  std::vector<uint32_t> tokens(size_t{16} * 6);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 + 1);
  std::vector<std::string> keys = kb.BlockKeys(tokens);
  ASSERT_EQ(keys.size(), 6u);
  std::vector<std::string> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(Block(8192, 60 + i));
    ASSERT_TRUE(client_->Put(keys[i], blocks[i].data(), blocks[i].size()).ok());
  }
  size_t matched = 0;
  ASSERT_TRUE(client_->MatchPrefix(keys, &matched).ok());
  EXPECT_EQ(matched, 4u);
  std::vector<char> pool(size_t{6} * 8192);
  BufferHandle h;
  ASSERT_TRUE(client_->RegisterBuffer(pool.data(), pool.size(), &h).ok());
  std::vector<GetIntoItem> loads;
  for (size_t i = 0; i < matched; ++i) loads.push_back({keys[i], h, i * 8192, 8192});
  std::vector<Status> statuses;
  std::vector<size_t> sizes;
  ASSERT_TRUE(client_->BatchGetInto(loads, &statuses, &sizes).ok());
  for (size_t i = 0; i < matched; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].ToString();
    EXPECT_EQ(std::memcmp(pool.data() + i * 8192, blocks[i].data(), 8192), 0) << i;
  }
}

TEST(ClientFailoverTest, ZeroCopyGetFallsOverToAnotherReplica) {
  std::unique_ptr<LocalCluster> cluster = StartCluster(2);
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = OpenClient(cluster->master_address(), /*allow_shm=*/false);
  std::string data = Block(300 << 10, 71);
  PutOptions po;
  po.replicas = 2;
  ASSERT_TRUE(client->Put("fo/a", data.data(), data.size(), po).ok());
  cluster->KillStore(0);
  std::vector<char> mem(data.size());
  BufferHandle h;
  ASSERT_TRUE(client->RegisterBuffer(mem.data(), mem.size(), &h).ok());
  size_t size = 0;
  Status s = client->GetInto("fo/a", h, 0, mem.size(), &size, 20000);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(std::memcmp(mem.data(), data.data(), data.size()), 0);
}

}  // namespace
}  // namespace shelf
