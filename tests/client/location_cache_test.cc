// The client's location cache against a real cluster (shelf-master and one
// shelf-store on loopback): a get of a known block skips the master, and a
// cached location never returns a removed or replaced block once the store
// has the master's notices (docs/client.md, "Cached reads").
#include "client/location_cache.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "testing/wait_for.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {

namespace wire = transport::wire;

namespace {

std::string Block(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return s;
}

class LocationCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { StartCluster({}); }
  static void StartCluster(std::vector<std::string> store_args) {
    LocalCluster::Options o;
    o.stores = 1;
    o.dram_bytes = 64ull << 20;
    o.bin_dir = TestBinDir();
    o.store_args = std::move(store_args);
    auto c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }

  static std::unique_ptr<Client> Open(bool allow_shm, size_t cache_entries = 65536) {
    ClientOptions co;
    co.masters = {cluster_->master_address()};
    co.timeout_ms = 20000;
    co.allow_shm = allow_shm;
    co.location_cache_entries = cache_entries;
    std::unique_ptr<Client> c;
    Status s = Client::Open(co, &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }
  // The store's DRAM record of `key` is of `size` bytes: its notices from
  // the master (which lag commits and removes by up to a heartbeat) have
  // arrived.
  static bool StoreRecords(const std::string& key, size_t size) {
    return raw_.CheckKey(cluster_->store_address(0), key, size, 0, MonoMs() + 5000).ok();
  }
  static LocalCluster* cluster_;
  static transport::TcpDataClient raw_;
};
LocalCluster* LocationCacheTest::cluster_ = nullptr;
transport::TcpDataClient LocationCacheTest::raw_{transport::TcpDataClient::Options{}};

TEST_F(LocationCacheTest, WarmGetsSkipTheMasterOverShmAndTcp) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    const std::string key = shm ? "warm-shm" : "warm-tcp";
    const std::string value = Block(256 << 10, shm ? 1 : 2);
    auto c = Open(shm);
    ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
    ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
    std::string got;
    // Over shared memory, a hit: the commit answered the location. Over
    // TCP, a miss: the master's answer, cached.
    ASSERT_TRUE(c->Get(key, &got).ok());
    EXPECT_EQ(got, value);
    EXPECT_EQ(c->stats().location_cache_misses, shm ? 0u : 1u);
    EXPECT_EQ(c->stats().location_cache_entries, 1u);
    // A stopped master answers nothing: these gets can only come from the
    // store.
    cluster_->master_process()->Signal(SIGSTOP);
    for (int i = 0; i < 5; ++i) {
      got.clear();
      Status s = c->Get(key, &got, Deadline::After(std::chrono::milliseconds(3000)));
      EXPECT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(got, value);
    }
    cluster_->master_process()->Signal(SIGCONT);
    ClientStats st = c->stats();
    EXPECT_EQ(st.location_cache_hits, shm ? 6u : 5u);
    EXPECT_EQ(st.location_cache_fallbacks, 0u);
    EXPECT_EQ(st.location_cache_board_reads, shm ? 6u : 0u);  // the store's key board
    EXPECT_EQ(shm ? st.bytes_loaded_shm : st.bytes_loaded_tcp, 6 * value.size());
    EXPECT_NE(c->MetricsText().find(
                  absl::StrCat("shelf_client_location_cache_total{result=\"hit\"} ", shm ? 6 : 5)),
              std::string::npos)
        << c->MetricsText();
  }
}

// The store's key board vouches for a same-host cached block by itself:
// with the master and the store both stopped, warm gets still read it.
TEST_F(LocationCacheTest, WarmSameHostGetsAskNeitherMasterNorStore) {
  const std::string key = "warm-board";
  const std::string value = Block(128 << 10, 11);
  auto c = Open(true);
  ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  std::string got;
  // Hits: the commit answered the location, and the board, mapped with the
  // segment when the put attached it, vouches for the block.
  ASSERT_TRUE(c->Get(key, &got).ok());
  ASSERT_TRUE(c->Get(key, &got).ok());
  ASSERT_EQ(c->stats().location_cache_board_reads, 2u);
  cluster_->master_process()->Signal(SIGSTOP);
  cluster_->store_process(0)->Signal(SIGSTOP);
  for (int i = 0; i < 5; ++i) {
    got.clear();
    Status s = c->Get(key, &got, Deadline::After(std::chrono::milliseconds(3000)));
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(got, value);
  }
  cluster_->store_process(0)->Signal(SIGCONT);
  cluster_->master_process()->Signal(SIGCONT);
  ClientStats st = c->stats();
  EXPECT_EQ(st.location_cache_board_reads, 7u);
  EXPECT_EQ(st.location_cache_hits, 7u);
  EXPECT_EQ(st.location_cache_fallbacks, 0u);
  // Replaced by another client: the board no longer marks the old block,
  // and the get goes back to the master for the new one.
  auto b = Open(true);
  const std::string replaced = Block(160 << 10, 12);
  ASSERT_TRUE(b->Remove(key).ok());
  ASSERT_TRUE(b->Put(key, replaced.data(), replaced.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, replaced.size()); }, 10000));
  ASSERT_TRUE(c->Get(key, &got).ok());
  EXPECT_TRUE(got == replaced);
  EXPECT_EQ(c->stats().location_cache_fallbacks, 1u);
}

TEST_F(LocationCacheTest, ReplacedKeyReadsTheNewValue) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    const std::string key = shm ? "replace-shm" : "replace-tcp";
    const std::string old_value = Block(64 << 10, 3);
    const std::string new_value = Block(80 << 10, 4);
    auto a = Open(shm);
    auto b = Open(shm);
    ASSERT_TRUE(a->Put(key, old_value.data(), old_value.size()).ok());
    ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, old_value.size()); }, 10000));
    std::string got;
    ASSERT_TRUE(a->Get(key, &got).ok());
    ASSERT_TRUE(a->Get(key, &got).ok());
    // A holds the old location, from its commit over shared memory (two
    // hits), else from the first get's lookup (a miss, then a hit).
    const uint64_t hits = shm ? 2 : 1;
    ASSERT_EQ(a->stats().location_cache_hits, hits);
    // B replaces the key (Mooncake's upsert, RESP's SET): remove, then put.
    ASSERT_TRUE(b->Remove(key).ok());
    ASSERT_TRUE(b->Put(key, new_value.data(), new_value.size()).ok());
    ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, new_value.size()); }, 10000));
    got.clear();
    ASSERT_TRUE(a->Get(key, &got).ok());
    EXPECT_EQ(got, new_value);
    EXPECT_EQ(a->stats().location_cache_fallbacks, 1u);
    // The new location is cached and read without the master.
    ASSERT_TRUE(a->Get(key, &got).ok());
    EXPECT_EQ(got, new_value);
    EXPECT_EQ(a->stats().location_cache_hits, hits + 1);
  }
}

TEST_F(LocationCacheTest, ReplaceWithSameSizeIsCaughtByTheStoreOrTheChecksum) {
  const std::string key = "replace-same-size";
  const std::string v1 = Block(64 << 10, 5), v2 = Block(64 << 10, 6);
  auto a = Open(/*allow_shm=*/false);
  auto b = Open(/*allow_shm=*/false);
  ASSERT_TRUE(a->Put(key, v1.data(), v1.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, v1.size()); }, 10000));
  std::string got;
  ASSERT_TRUE(a->Get(key, &got).ok());
  ASSERT_TRUE(b->Remove(key).ok());
  ASSERT_TRUE(WaitFor([&] { return !StoreRecords(key, v1.size()); }, 10000));
  ASSERT_TRUE(b->Put(key, v2.data(), v2.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, v2.size()); }, 10000));
  ASSERT_TRUE(a->Get(key, &got).ok());
  EXPECT_EQ(got, v2);
  EXPECT_EQ(a->stats().location_cache_fallbacks, 1u);
}

TEST_F(LocationCacheTest, RemovedKeyIsNotFound) {
  const std::string key = "removed";
  const std::string value = Block(32 << 10, 7);
  auto a = Open(true);
  auto b = Open(true);
  ASSERT_TRUE(a->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  std::string got;
  ASSERT_TRUE(a->Get(key, &got).ok());
  ASSERT_TRUE(b->Remove(key).ok());
  ASSERT_TRUE(WaitFor([&] { return !StoreRecords(key, value.size()); }, 10000));
  EXPECT_EQ(a->Get(key, &got).code(), StatusCode::kNotFound);
  ClientStats st = a->stats();
  EXPECT_EQ(st.location_cache_fallbacks, 1u);
  EXPECT_EQ(st.location_cache_entries, 0u);
}

TEST_F(LocationCacheTest, ReadKeyChecksTheGeneration) {
  const std::string key = "generation";
  const std::string value = Block(16 << 10, 8);
  auto c = Open(false);
  ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  std::string buf(value.size(), '\0');
  const std::string& store = cluster_->store_address(0);
  // Generation 0: any. A DRAM block is served by key.
  ASSERT_TRUE(raw_.ReadKey(store, key, buf.size(), buf.data(), MonoMs() + 5000, 0).ok());
  EXPECT_EQ(buf, value);
  // Another generation: the key was replaced since.
  EXPECT_EQ(raw_.ReadKey(store, key, buf.size(), buf.data(), MonoMs() + 5000, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(raw_.CheckKey(store, key, buf.size(), 1, MonoMs() + 5000).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(raw_.ReadKey(store, "no-such-key", 8, buf.data(), MonoMs() + 5000, 0).code(),
            absl::StatusCode::kNotFound);
}

// A same-host cached read copies while its check travels
// (TcpDataClient::CheckKeyWhile): the copy must run exactly once whatever
// the store answers, and also when there is no store to ask.
TEST_F(LocationCacheTest, CheckKeyWhileRunsItsWorkOnceWhateverTheAnswer) {
  const std::string key = "check-while";
  const std::string value = Block(8 << 10, 9);
  auto c = Open(false);
  ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  const std::string& store = cluster_->store_address(0);
  int runs = 0;
  auto work = [&] { ++runs; };
  EXPECT_TRUE(raw_.CheckKeyWhile(store, key, value.size(), 0, MonoMs() + 5000, {}, work).ok());
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(raw_.CheckKeyWhile(store, key, value.size(), 1, MonoMs() + 5000, {}, work).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(raw_.CheckKeyWhile(store, "no-such-key", 8, 0, MonoMs() + 5000, {}, work).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(runs, 3);
  // Nobody listens there (a port held bound but not listening, so no one
  // else can take it meanwhile): the check fails, the work still runs.
  int held = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string nobody = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  EXPECT_EQ(raw_.CheckKeyWhile(nobody, key, value.size(), 0, MonoMs() + 5000, {}, work).code(),
            absl::StatusCode::kUnavailable);
  close(held);
  EXPECT_EQ(runs, 4);
  // The connection stays usable after each answer: a plain check still works.
  EXPECT_TRUE(raw_.CheckKey(store, key, value.size(), 0, MonoMs() + 5000).ok());
}

// The check of a same-host cached read names the range the client copies
// from: a record of the key at another range fails it, whatever the
// generation asked (0, unknown, matches any record's).
TEST_F(LocationCacheTest, CheckKeyAtRangeRefusesAnotherRange) {
  const std::string key = "at-range";
  const std::string value = Block(8 << 10, 10);
  auto c = Open(false);
  ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  auto channel = MakeChannel(cluster_->master_address(), TlsFiles{});
  ASSERT_TRUE(channel.ok());
  auto stub = v1::MasterService::NewStub(*channel);
  v1::LookupRequest req;
  req.add_keys(key);
  req.set_no_lease(true);
  v1::LookupResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->Lookup(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.objects_size(), 1);
  const v1::ObjectLocation& loc = resp.objects(0);
  ASSERT_TRUE(loc.found());
  ASSERT_GT(loc.generation(), 0u);
  const v1::Replica& r = loc.replicas(0);
  const std::string& store = cluster_->store_address(0);
  const uint64_t deadline = MonoMs() + 5000;
  EXPECT_TRUE(raw_.CheckKey(store, key, value.size(), loc.generation(), deadline, {},
                            wire::KeyRange{r.segment_id(), r.offset()})
                  .ok());
  for (uint64_t generation : {loc.generation(), uint64_t{0}}) {
    EXPECT_EQ(raw_.CheckKey(store, key, value.size(), generation, deadline, {},
                            wire::KeyRange{r.segment_id(), r.offset() + 4096})
                  .code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(raw_.CheckKey(store, key, value.size(), generation, deadline, {},
                            wire::KeyRange{r.segment_id() + 1000, r.offset()})
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  }
  // The unchecked form is unchanged.
  EXPECT_TRUE(raw_.CheckKey(store, key, value.size(), 0, deadline).ok());
}

// A one-store cluster with an SSD tier, and what its tests do to it.
class SsdClusterTest : public ::testing::Test {
 protected:
  // Starts the cluster, with `env` (NAME=VALUE) set for its processes.
  void Start(std::vector<std::string> store_args, const char* env = nullptr) {
    // The store gets `env` only by inheriting it (LocalCluster passes no
    // environment): set here and cleared below on the test's thread, before
    // the test starts threads of its own; this process does not read it.
    // NOLINTNEXTLINE(concurrency-mt-unsafe): see above
    if (env != nullptr) putenv(const_cast<char*>(env));
    LocalCluster::Options o;
    o.stores = 1;
    o.dram_bytes = kDramBytes;
    o.ssd_bytes = 128ull << 20;
    o.bin_dir = TestBinDir();
    o.store_args = std::move(store_args);
    auto c = LocalCluster::Start(o);
    // NOLINTNEXTLINE(concurrency-mt-unsafe): as above
    if (env != nullptr) unsetenv(std::string(env, std::strchr(env, '=')).c_str());
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto channel = MakeChannel(cluster_->master_address(), TlsFiles{});
    ASSERT_TRUE(channel.ok());
    master_ = v1::MasterService::NewStub(*channel);
    admin_ = v1::AdminService::NewStub(*channel);
  }
  std::unique_ptr<Client> Open() {
    ClientOptions co;
    co.masters = {cluster_->master_address()};
    co.timeout_ms = 20000;
    std::unique_ptr<Client> c;
    Status s = Client::Open(co, &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }
  v1::ObjectLocation Locate(const std::string& key) {
    grpc::ClientContext ctx;
    v1::LookupRequest req;
    req.add_keys(key);
    req.set_no_lease(true);
    v1::LookupResponse resp;
    if (!master_->Lookup(&ctx, req, &resp).ok() || resp.objects_size() != 1) return {};
    return resp.objects(0);
  }
  // The admin evicts the store's DRAM; true once `key` is on SSD alone.
  bool EvictToSsd(const std::string& key) {
    grpc::ClientContext ctx;
    v1::EvictRequest evict;
    evict.set_bytes(kDramBytes);
    v1::EvictResponse evicted;
    if (!admin_->Evict(&ctx, evict, &evicted).ok()) return false;
    return WaitFor(
        [&] {
          v1::ObjectLocation loc = Locate(key);
          return loc.replicas_size() == 1 && loc.replicas(0).tier() == v1::TIER_SSD;
        },
        30000);
  }

  static constexpr uint64_t kDramBytes = 32ull << 20;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::MasterService::Stub> master_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  transport::TcpDataClient raw_{transport::TcpDataClient::Options{}};
};

// A cached read of an SSD copy that the master dropped (its key removed)
// is a miss from the moment the store has the drop order, not only once its
// mover gets to it: the mover here holds each drop back a minute (fault
// injection), as one busy with demotions would.
TEST_F(SsdClusterTest, AnSsdCopyTheMasterDroppedIsNotServedWhileItsDropWaits) {
  Start({}, "SHELF_FAULT_DELAY_SSD_DROP_MS=60000");
  std::unique_ptr<Client> writer = Open(), reader = Open();
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  const std::string key = "dropped-from-ssd";
  const std::string value = Block(256 << 10, 11);
  ASSERT_TRUE(writer->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(EvictToSsd(key));
  std::string got;
  ASSERT_TRUE(reader->Get(key, &got).ok());  // the reader caches the SSD copy
  ASSERT_TRUE(got == value);
  ASSERT_TRUE(reader->Get(key, &got).ok());
  ASSERT_EQ(reader->stats().location_cache_hits, 1u);

  ASSERT_TRUE(writer->Remove(key).ok());  // the master orders the copy dropped
  // The store refuses the key once the order is there (a read by key, as
  // a cached read makes, and not from the cache).
  std::string buf(value.size(), '\0');
  EXPECT_TRUE(WaitFor(
      [&] {
        return raw_.ReadKey(cluster_->store_address(0), key, buf.size(), buf.data(),
                            MonoMs() + 5000)
                   .code() == absl::StatusCode::kNotFound;
      },
      10000));
  got.clear();
  Status s = reader->Get(key, &got);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_TRUE(got.empty());
}

// A block promoted from SSD back into DRAM (--promote-on-hit) is recorded
// with its commit's generation, so READ_KEY tells it from another commit of
// the key: a record of generation 0 matched any.
TEST_F(SsdClusterTest, APromotedBlockIsRecordedWithItsGeneration) {
  Start({"--promote-on-hit"});
  std::unique_ptr<Client> c = Open();
  ASSERT_NE(c, nullptr);
  const std::string key = "promoted";
  const std::string value = Block(256 << 10, 12);
  ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
  const uint64_t generation = Locate(key).generation();
  ASSERT_NE(generation, 0u);
  ASSERT_TRUE(EvictToSsd(key));
  std::string got;
  ASSERT_TRUE(c->Get(key, &got).ok());  // an SSD hit: the store promotes it
  ASSERT_TRUE(got == value);
  ASSERT_TRUE(WaitFor(
      [&] {
        const v1::ObjectLocation loc = Locate(key);
        for (const v1::Replica& r : loc.replicas()) {
          if (r.tier() == v1::TIER_DRAM) return true;
        }
        return false;
      },
      30000));
  const std::string& store = cluster_->store_address(0);
  ASSERT_TRUE(WaitFor(
      [&] { return raw_.CheckKey(store, key, value.size(), generation, MonoMs() + 5000).ok(); },
      10000));
  EXPECT_EQ(raw_.CheckKey(store, key, value.size(), generation + 2, MonoMs() + 5000).code(),
            absl::StatusCode::kFailedPrecondition);
}

// A location of unknown generation (a master that rebuilt the block from
// an SSD inventory) is not cached, and forgets an older answer's entry.
TEST(LocationCacheGeneration, ALocationOfUnknownGenerationIsNotCached) {
  LocationCache cache(16);
  v1::ObjectLocation loc;
  loc.set_key("k");
  loc.set_found(true);
  loc.set_generation(7);
  loc.add_replicas()->set_offset(4096);
  v1::ObjectLocation out;
  cache.Put(loc, cache.Stamp());
  ASSERT_TRUE(cache.Get("k", &out, UnixMs()));
  loc.set_generation(0);
  cache.Put(loc, cache.Stamp());
  EXPECT_FALSE(cache.Get("k", &out, UnixMs()));
  EXPECT_EQ(cache.size(), 0u);
}

// A get that asked the master before this client's own remove or put
// finished must not bring the old location back into the cache.
TEST(LocationCacheStamp, ALookupThatRacedWithAnEraseCachesNothing) {
  LocationCache cache(16);
  v1::ObjectLocation loc;
  loc.set_key("k");
  loc.set_found(true);
  loc.set_generation(1);
  loc.add_replicas()->set_offset(4096);
  v1::ObjectLocation out;

  uint64_t before = cache.Stamp();
  cache.Erase("k");  // this client's remove or put of "k" returned
  cache.Put(loc, before);
  EXPECT_FALSE(cache.Get("k", &out, UnixMs()));

  // Another key's erase costs at most a miss; a stamp taken after the
  // erase caches again.
  cache.Put(loc, cache.Stamp());
  ASSERT_TRUE(cache.Get("k", &out, UnixMs()));
  EXPECT_EQ(out.generation(), 1u);

  before = cache.Stamp();
  cache.Clear();
  cache.Put(loc, before);
  EXPECT_EQ(cache.size(), 0u);
}

// Every block of one commit is kept, though keys of one batch share
// stripes (400 keys over 4096 stripes: about 19 pairs share one); a
// stripe changed by anything else since the stamp still keeps its keys
// out, and a key the commit names twice is kept by neither.
TEST(LocationCacheStamp, EveryBlockOfOneCommitIsKept) {
  LocationCache cache(1024);
  std::vector<std::string> names;
  std::vector<v1::ObjectLocation> locs(400);
  for (size_t i = 0; i < locs.size(); ++i) {
    names.push_back(absl::StrCat("batch-", i));
    locs[i].set_key(names.back());
    locs[i].set_found(true);
    locs[i].set_generation(1);
    locs[i].add_replicas()->set_offset(4096 * i);
  }
  std::vector<const std::string*> keys;
  std::vector<const v1::ObjectLocation*> located;
  for (size_t i = 0; i < locs.size(); ++i) {
    keys.push_back(&names[i]);
    located.push_back(&locs[i]);
  }
  cache.PutCommitted(keys, located, cache.Stamp());
  v1::ObjectLocation out;
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE(cache.Get(names[i], &out, UnixMs())) << names[i];
    EXPECT_EQ(out.replicas(0).offset(), 4096 * i);
  }

  // Erased after the stamp (by a remove of this client, say): not kept.
  const uint64_t stamp = cache.Stamp();
  cache.Erase(names[0]);
  cache.PutCommitted({keys[0], keys[1]}, {located[0], located[1]}, stamp);
  EXPECT_FALSE(cache.Get(names[0], &out, UnixMs()));

  // Named twice in one commit: which location is the last is unknown.
  cache.PutCommitted({keys[2], keys[2]}, {located[2], located[2]}, cache.Stamp());
  EXPECT_FALSE(cache.Get(names[2], &out, UnixMs()));
  EXPECT_TRUE(cache.Get(names[3], &out, UnixMs()));
}

// An entry keeps its read grant, and is not used once the grant is about
// to run out: the get asks the master, which mints a fresh one.
TEST(LocationCacheGrant, AnEntryWhoseGrantRunsOutIsDropped) {
  LocationCache cache(16);
  v1::ObjectLocation loc;
  loc.set_key("k");
  loc.set_found(true);
  loc.set_generation(1);
  wire::ReadGrant g;
  g.expires_unix_ms = 100000;
  g.mac = std::string(32, 'm');
  loc.add_replicas()->set_read_grant(wire::EncodeReadGrant(g));
  cache.Put(loc, cache.Stamp());
  v1::ObjectLocation out;
  ASSERT_TRUE(cache.Get("k", &out, 100000 - LocationCache::kGrantMarginMs - 1));
  EXPECT_EQ(out.replicas(0).read_grant(), loc.replicas(0).read_grant());
  EXPECT_EQ(LocationCache::GrantExpiry(out.replicas(0)), 100000u);
  EXPECT_FALSE(cache.Get("k", &out, 100000 - LocationCache::kGrantMarginMs + 1));
  EXPECT_EQ(cache.size(), 0u);
}

// This client's own replace (remove, put) is read back at once: the get
// does not wait for the store to hear of it.
TEST_F(LocationCacheTest, OwnReplaceIsReadBackAtOnce) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    const std::string key = shm ? "own-replace-shm" : "own-replace-tcp";
    auto a = Open(shm);
    std::string got;
    for (uint32_t round = 0; round < 4; ++round) {
      // Same size every other round: only the generation tells them apart.
      const std::string value = Block((64 << 10) + (round / 2) * 4096, 20 + round);
      if (round > 0) {
        ASSERT_TRUE(a->Remove(key).ok());
      }
      ASSERT_TRUE(a->Put(key, value.data(), value.size()).ok());
      ASSERT_TRUE(a->Get(key, &got).ok());
      ASSERT_EQ(got, value) << "round " << round;
      ASSERT_TRUE(a->Get(key, &got).ok());
      ASSERT_EQ(got, value) << "round " << round;
    }
    // Another client removes the key; this one puts it again without a
    // remove of its own. Its cached location names the old block, which
    // the store may still hold (its notices lag): the put must drop it.
    auto b = Open(shm);
    const ClientStats before = a->stats();
    const std::string value = Block(64 << 10, 30);
    ASSERT_TRUE(b->Remove(key).ok());
    ASSERT_TRUE(a->Put(key, value.data(), value.size()).ok());
    ASSERT_TRUE(a->Get(key, &got).ok());
    EXPECT_EQ(got, value);
    // Over TCP the put left nothing cached: the get asked the master. Over
    // shared memory the cache holds the commit's location, read through the
    // board or, until the store records it, through the master.
    if (!shm) {
      EXPECT_EQ(a->stats().location_cache_misses, before.location_cache_misses + 1);
    }
  }
}

// A put on this host leaves its block's location in the cache, from the
// commit's answer: once the store records the commit, the block reads back
// through the key board with the master stopped, and no read asks for it.
TEST_F(LocationCacheTest, OwnPutsReadBackWithoutALookup) {
  const std::string key = "own-put-board";
  const std::string value = Block(64 << 10, 41);
  auto c = Open(true);
  ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
  EXPECT_EQ(c->stats().location_cache_entries, 1u);
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  cluster_->master_process()->Signal(SIGSTOP);
  std::string got;
  Status s = c->Get(key, &got, Deadline::After(std::chrono::milliseconds(3000)));
  cluster_->master_process()->Signal(SIGCONT);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(got == value);
  ClientStats st = c->stats();
  EXPECT_EQ(st.location_cache_misses, 0u);
  EXPECT_EQ(st.location_cache_hits, 1u);
  EXPECT_EQ(st.location_cache_board_reads, 1u);
  // Replaced by another client: the board stops vouching for the old block
  // once the store records the new one, and the get reads the new value.
  auto b = Open(true);
  const std::string replaced = Block(68 << 10, 42);
  PutOptions replace;
  replace.replace = true;
  ASSERT_TRUE(b->Put(key, replaced.data(), replaced.size(), replace).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, replaced.size()); }, 10000));
  ASSERT_TRUE(c->Get(key, &got).ok());
  EXPECT_TRUE(got == replaced);
  EXPECT_EQ(c->stats().location_cache_fallbacks, 1u);
  // Read right after its put, before the store can have recorded it: the
  // board does not vouch yet, and the get asks the master.
  const std::string fresh = Block(64 << 10, 43);
  ASSERT_TRUE(c->Put("own-put-fresh", fresh.data(), fresh.size()).ok());
  ASSERT_TRUE(c->Get("own-put-fresh", &got).ok());
  EXPECT_TRUE(got == fresh);
  // A client without shared memory keeps nothing of its puts: its cached
  // reads would ask the store over TCP, a round trip of their own.
  auto t = Open(false);
  ASSERT_TRUE(t->Put("own-put-tcp", fresh.data(), fresh.size()).ok());
  EXPECT_EQ(t->stats().location_cache_entries, 0u);
}

// What BatchGetViews hands over for one key: its status, a copy of its
// bytes, and whether they lay in the store's segment.
struct OneView {
  Status status;
  std::string bytes;
  bool in_place = false;
};
OneView ViewOf(Client* c, const std::string& key) {
  OneView v;
  Status s = c->BatchGetViews({key}, [&](const std::vector<BlockView>& views, uint64_t) {
    v.status = views[0].status;
    if (views[0].status.ok()) v.bytes.assign(views[0].data, views[0].size);
    v.in_place = views[0].in_place;
  });
  if (!s.ok()) v.status = s;
  return v;
}

// A block viewed in place twice in a short while is hot: the client keeps
// the second view's lease and views the block under it again with no round
// trip (the master stopped), while the store's key board marks the commit.
// A replace by another client ends that once the store records it; this
// client's own replace or remove ends it at once.
TEST_F(LocationCacheTest, HotBlocksAreViewedInPlaceUnderAKeptLease) {
  const std::string key = "hot-in-place";
  const std::string value = Block(1 << 20, 51);
  auto c = Open(true);
  ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  for (int i = 0; i < 2; ++i) {  // each a lookup: the second lease is kept
    OneView v = ViewOf(c.get(), key);
    ASSERT_TRUE(v.status.ok()) << v.status.ToString();
    EXPECT_TRUE(v.in_place);
    EXPECT_TRUE(v.bytes == value);
  }
  EXPECT_EQ(c->stats().read_lookups, 2u);
  EXPECT_EQ(c->stats().views_on_kept_leases, 0u);
  cluster_->master_process()->Signal(SIGSTOP);
  OneView kept = ViewOf(c.get(), key);
  OneView again = ViewOf(c.get(), key);
  cluster_->master_process()->Signal(SIGCONT);
  for (const OneView* v : {&kept, &again}) {
    ASSERT_TRUE(v->status.ok()) << v->status.ToString();
    EXPECT_TRUE(v->in_place);
    EXPECT_TRUE(v->bytes == value);
  }
  EXPECT_EQ(c->stats().views_on_kept_leases, 2u);
  EXPECT_EQ(c->stats().read_lookups, 2u);

  // Replaced by another client: once the store records the new commit, the
  // board no longer marks the old one, and the view asks the master.
  auto b = Open(true);
  const std::string replaced = Block((1 << 20) + 4096, 52);
  PutOptions replace;
  replace.replace = true;
  ASSERT_TRUE(b->Put(key, replaced.data(), replaced.size(), replace).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, replaced.size()); }, 10000));
  OneView v = ViewOf(c.get(), key);
  ASSERT_TRUE(v.status.ok()) << v.status.ToString();
  EXPECT_TRUE(v.bytes == replaced);
  v = ViewOf(c.get(), key);  // hot again: kept
  ASSERT_TRUE(v.bytes == replaced);
  const uint64_t on_kept = c->stats().views_on_kept_leases;
  ASSERT_TRUE(ViewOf(c.get(), key).bytes == replaced);
  EXPECT_EQ(c->stats().views_on_kept_leases, on_kept + 1);

  // This client's own replace, then its remove: the next view sees each at
  // once, without waiting for the store.
  ASSERT_TRUE(c->Put(key, value.data(), value.size(), replace).ok());
  v = ViewOf(c.get(), key);
  ASSERT_TRUE(v.status.ok()) << v.status.ToString();
  EXPECT_TRUE(v.bytes == value);
  ASSERT_TRUE(ViewOf(c.get(), key).bytes == value);  // kept again
  ASSERT_TRUE(c->Remove(key).ok());
  EXPECT_EQ(ViewOf(c.get(), key).status.code(), StatusCode::kNotFound);
}

// A store started with --shm-key-board=false keeps no board: same-host
// cached reads ask it (READ_KEY's check-only form) and still never return
// a replaced block.
class LocationCacheNoBoardTest : public LocationCacheTest {
 protected:
  static void SetUpTestSuite() { StartCluster({"--shm-key-board=false"}); }
};

TEST_F(LocationCacheNoBoardTest, SameHostCachedReadsAskTheStore) {
  const std::string key = "no-board";
  const std::string value = Block(64 << 10, 13), replaced = Block(80 << 10, 14);
  auto a = Open(true);
  auto b = Open(true);
  ASSERT_TRUE(a->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  std::string got;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(a->Get(key, &got).ok());
    EXPECT_EQ(got, value);
  }
  EXPECT_EQ(a->stats().location_cache_hits, 2u);
  EXPECT_EQ(a->stats().location_cache_board_reads, 0u);
  EXPECT_EQ(a->stats().bytes_loaded_shm, 3 * value.size());
  ASSERT_TRUE(b->Remove(key).ok());
  ASSERT_TRUE(b->Put(key, replaced.data(), replaced.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, replaced.size()); }, 10000));
  ASSERT_TRUE(a->Get(key, &got).ok());
  EXPECT_TRUE(got == replaced);
  EXPECT_EQ(a->stats().location_cache_fallbacks, 1u);
}

// A store killed (kill -9) leaves its board and segment mapped in the
// client, with its blocks' last marks in place. They count for nothing
// once the board's trust has run out, a node TTL after the store's last
// answered heartbeat, which is before the master declares the store dead:
// a cached get then goes to the store and the master, which no longer
// hold the block, and is never served from the dead store's memory.
class LocationCacheDeadStoreTest : public LocationCacheTest {
 protected:
  static void SetUpTestSuite() { StartCluster({}); }
};

TEST_F(LocationCacheDeadStoreTest, ADeadStoresBoardVouchesForNothing) {
  const std::string key = "dead-board";
  const std::string value = Block(64 << 10, 15);
  auto c = Open(true);
  ASSERT_TRUE(c->Put(key, value.data(), value.size()).ok());
  ASSERT_TRUE(WaitFor([&] { return StoreRecords(key, value.size()); }, 10000));
  std::string got;
  ASSERT_TRUE(c->Get(key, &got).ok());
  ASSERT_EQ(c->stats().location_cache_board_reads, 1u);
  cluster_->KillStore(0);
  ASSERT_TRUE(cluster_->WaitForLiveNodes(0, 20000).ok());
  got.clear();
  Status s = c->Get(key, &got, Deadline::After(std::chrono::milliseconds(5000)));
  EXPECT_FALSE(s.ok()) << "read " << got.size() << " bytes from a dead store's memory";
  EXPECT_EQ(c->stats().location_cache_board_reads, 1u);
}

TEST_F(LocationCacheTest, CacheOffAndBounds) {
  auto off = Open(true, 0);
  const std::string value = Block(4096, 9);
  ASSERT_TRUE(off->Put("off", value.data(), value.size()).ok());
  std::string got;
  ASSERT_TRUE(off->Get("off", &got).ok());
  ASSERT_TRUE(off->Get("off", &got).ok());
  ClientStats st = off->stats();
  EXPECT_EQ(st.location_cache_hits + st.location_cache_misses + st.location_cache_entries, 0u);

  // At most two entries: the least recently used goes.
  auto small = Open(true, 2);
  std::vector<std::string> keys = {"lru-a", "lru-b", "lru-c"};
  for (const std::string& k : keys) ASSERT_TRUE(small->Put(k, value.data(), value.size()).ok());
  for (const std::string& k : keys) ASSERT_TRUE(small->Get(k, &got).ok());
  EXPECT_EQ(small->stats().location_cache_entries, 2u);

  ClientOptions bad;
  bad.masters = {cluster_->master_address()};
  bad.location_cache_entries = size_t{1} << 40;
  std::unique_ptr<Client> c;
  Status s = Client::Open(bad, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("location_cache_entries"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shelf
