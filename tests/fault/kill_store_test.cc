// kill -9 of a store in the middle of a mixed put/get load, with two
// replicas per block: every get of a committed block still answers the
// writer's exact bytes (the other replica serves it), puts that raced the
// death fail cleanly or succeed, and the master declares the node dead.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/fault/fault_util.h"

namespace shelf {
namespace {

using fault::BlockBytes;

// At most 1500 blocks of 68 KiB on average, two replicas each: 200 MiB,
// well under the 512 MiB of DRAM that two surviving stores hold.
constexpr uint64_t kBlocksMax = 1500;

struct Committed {
  std::string key;
  size_t size;
  uint64_t seed;
};

// The load: writers add blocks (two replicas), readers check random
// committed blocks. Every failure of a get is recorded with its reason.
class MixedLoad {
 public:
  MixedLoad(Client* shm_client, Client* tcp_client) : clients_{shm_client, tcp_client} {}

  void Run(int threads, uint64_t until_ms) {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([this, t, until_ms] { Worker(t, until_ms); });
    }
    for (std::thread& th : pool) th.join();
  }

  std::vector<Committed> committed() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return committed_;
  }
  std::vector<std::string> get_failures() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return get_failures_;
  }
  uint64_t gets_ok() const { return gets_ok_.load(); }
  uint64_t puts_ok() const { return puts_ok_.load(); }
  uint64_t puts_failed() const { return puts_failed_.load(); }
  void set_after_kill() { after_kill_.store(true); }

 private:
  void Worker(int t, uint64_t until_ms) {
    std::mt19937_64 rng(1000 + t);
    Client* client = clients_[t % 2];
    PutOptions po;
    po.replicas = 2;
    for (uint64_t i = 0; MonoMs() < until_ms && i < 100000; ++i) {
      // Bounded, so the survivors never need to evict (a miss must mean a
      // lost replica, not a full segment).
      // Half the blocks before the kill, so puts after it always remain
      // to be done, however fast the first half went.
      uint64_t cap = after_kill_.load() ? kBlocksMax : kBlocksMax / 2;
      bool put = (rng() % 3 == 0 && puts_ok_.load() < cap) || committed().empty();
      if (put) {
        uint64_t seed = (static_cast<uint64_t>(t) << 32) | i;
        size_t size = 4096 + rng() % (128 << 10);
        std::string key = absl::StrCat("load-", t, "-", i);
        std::string data = BlockBytes(size, seed);
        Status s = client->Put(key, data.data(), data.size(), po);
        if (s.ok()) {
          puts_ok_.fetch_add(1);
          MutexLock lock(&mu_);
          committed_.push_back({key, size, seed});
        } else {
          puts_failed_.fetch_add(1);
        }
        continue;
      }
      Committed c;
      {
        MutexLock lock(&mu_);
        c = committed_[rng() % committed_.size()];
      }
      std::string got;
      Status s = client->Get(c.key, &got, 5000);
      std::string why;
      if (!s.ok()) {
        why = s.ToString();
      } else if (got != BlockBytes(c.size, c.seed)) {
        why = "WRONG BYTES";
      }
      if (why.empty()) {
        gets_ok_.fetch_add(1);
      } else {
        MutexLock lock(&mu_);
        get_failures_.push_back(absl::StrCat(c.key, " via ", t % 2 == 0 ? "shm" : "tcp",
                                             " client at ", MonoMs(), ": ", why));
      }
    }
  }

  Client* clients_[2];
  Mutex mu_;
  std::vector<Committed> committed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> get_failures_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> gets_ok_{0}, puts_ok_{0}, puts_failed_{0};
  std::atomic<bool> after_kill_{false};
};

TEST(KillStoreTest, NoFailedGetForABlockWithASurvivingReplica) {
  LocalCluster::Options o;
  o.stores = 3;
  o.dram_bytes = 256ull << 20;  // no eviction: every committed block stays
  o.bin_dir = TestBinDir();
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions co;
  co.masters = {(*cluster)->master_address()};
  co.timeout_ms = 10000;
  std::unique_ptr<Client> shm_client, tcp_client;
  ASSERT_TRUE(Client::Open(co, &shm_client).ok());
  co.allow_shm = false;
  ASSERT_TRUE(Client::Open(co, &tcp_client).ok());

  MixedLoad load(shm_client.get(), tcp_client.get());
  uint64_t start = MonoMs();
  std::thread runner([&] { load.Run(4, start + 9000); });
  // Let the load build up, then kill a store without warning. The load
  // keeps running through the master's TTL window (it still lists the dead
  // store) and after it.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  size_t committed_at_kill = load.committed().size();
  (*cluster)->KillStore(0);
  uint64_t killed_at = MonoMs();
  load.set_after_kill();
  runner.join();

  std::vector<std::string> failures = load.get_failures();
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed gets (store killed at " << killed_at
                                << "), first: " << failures.front();
  EXPECT_GT(committed_at_kill, 10u);
  EXPECT_GT(load.gets_ok(), 100u);
  // Puts recover once the master knows: more committed after the kill.
  EXPECT_GT(load.committed().size(), committed_at_kill);
  ASSERT_TRUE((*cluster)->WaitForLiveNodes(2, 10000).ok());

  // Every block committed, before or after the kill, reads back exactly
  // through both transports.
  std::vector<Committed> all = load.committed();
  int bad = 0;
  for (const Committed& c : all) {
    for (Client* client : {shm_client.get(), tcp_client.get()}) {
      std::string got;
      Status s = client->Get(c.key, &got, 5000);
      if (!s.ok() || got != BlockBytes(c.size, c.seed)) {
        if (++bad < 5) ADD_FAILURE() << c.key << ": " << s.ToString();
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << all.size() << " committed blocks";
  std::printf(
      "kill -9 under load: %zu blocks committed (%zu before the kill), %llu gets ok, "
      "%llu puts failed around the death\n",
      all.size(), committed_at_kill, static_cast<unsigned long long>(load.gets_ok()),
      static_cast<unsigned long long>(load.puts_failed()));
}

}  // namespace
}  // namespace shelf

namespace shelf {
namespace {

// A client that used a store through shared memory before the store was
// killed and restarted (same --run-dir, so the same socket path) must
// write the restarted store's segment, not the dead one's.
//
// ShmAttachments (transport/shm.h) caches mappings by socket path; after a
// restart the segment id and size match the dead store's (id 0, same
// --dram-size), so only the store's incarnation, which the master hands
// out with every replica, tells the mappings apart. Were the stale one
// used, the put's bytes would land in the dead store's memfd and every
// other reader would get DATA_LOSS (or wrong bytes without verification).
TEST(KillStoreTest, SharedMemoryClientWritesTheRestartedStoreNotTheDeadOne) {
  LocalCluster::Options o;
  o.stores = 1;
  o.dram_bytes = 32ull << 20;
  o.bin_dir = TestBinDir();
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  ClientOptions co;
  co.masters = {c.master_address()};
  co.timeout_ms = 5000;
  std::unique_ptr<Client> shm_client, tcp_client;
  ASSERT_TRUE(Client::Open(co, &shm_client).ok());
  co.allow_shm = false;
  ASSERT_TRUE(Client::Open(co, &tcp_client).ok());
  std::string before = BlockBytes(64 << 10, 1);
  ASSERT_TRUE(shm_client->Put("before", before.data(), before.size()).ok());
  std::string got;
  ASSERT_TRUE(shm_client->Get("before", &got).ok());
  ASSERT_GT(shm_client->stats().bytes_loaded_shm, 0u) << "the client did not use shm";

  c.KillStore(0);
  ASSERT_TRUE(c.RestartStore(0).ok());
  fault::FaultProbe probe(c.master_address(), "");
  ASSERT_TRUE(probe
                  .WaitFor(
                      [&](const v1::StatusResponse& st) {
                        return st.nodes_size() == 1 && st.nodes(0).state() == v1::NODE_LIVE &&
                               st.nodes(0).address() == c.store_address(0);
                      },
                      15000)
                  .ok());
  std::string after = BlockBytes(64 << 10, 2);
  Status s = shm_client->Put("after", after.data(), after.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = tcp_client->Get("after", &got);
  ASSERT_TRUE(s.ok()) << "another reader cannot read the block: " << s.ToString();
  EXPECT_TRUE(got == after);
}

}  // namespace
}  // namespace shelf
