// The attack of one regex on the master (docs/security.md, "Patterns"),
// against a real master and real stores: a pattern that makes a
// backtracking matcher take time exponential in the key (`^(a|a)*$` over a
// key of a's that ends in another byte). With std::regex under the
// master's exclusive lock a 27-byte key froze the master for seconds and
// both stores were declared dead; this key is 64 bytes. The call must come
// back, the master must serve others meanwhile, and no store may die.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "shelf/client.h"
#include "testing/cluster_fixture.h"
#include "tests/fault/fault_util.h"

namespace shelf {
namespace {

constexpr char kEvil[] = "^(a|a)*$";

class RegexDosTest : public ClusterFixture {
 protected:
  LocalCluster::Options ClusterOptions() override {
    LocalCluster::Options o = ClusterFixture::ClusterOptions();
    // Stores die after 3 s of silence: a master frozen that long by one
    // call loses them.
    o.master_args = {"--node-ttl", "3s"};
    return o;
  }

  // Every store the master knows is live.
  void ExpectStoresLive() {
    fault::FaultProbe probe(cluster_->master_address(), "");
    absl::StatusOr<v1::StatusResponse> st = probe.Status();
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_EQ(st->nodes_size(), cluster_->store_count());
    for (const v1::NodeStatus& n : st->nodes()) {
      EXPECT_EQ(n.state(), v1::NODE_LIVE) << n.node_id();
    }
  }
};

TEST_F(RegexDosTest, ABacktrackingPatternNeitherStopsTheMasterNorKillsItsStores) {
  const std::string victim = std::string(64, 'a') + "!";
  const std::string block(4096, 'x');
  ASSERT_TRUE(client_->Put(victim, block.data(), block.size()).ok());
  ASSERT_TRUE(client_->Put("other", block.data(), block.size()).ok());

  // Puts and gets go on while the pattern runs over the index, which
  // holds far more keys than this in a real cluster.
  std::atomic<bool> done{false};
  std::atomic<int> served{0}, failed{0};
  std::thread traffic([&] {
    std::unique_ptr<Client> other = OpenClient(ClientOptionsFor(cluster_options_));
    for (int i = 0; !done.load() || i < 20; ++i) {
      const std::string key = "t/" + std::to_string(i);
      std::string back;
      PutOptions options;
      options.deadline = Deadline(10000);
      Status put = other->Put(key, block.data(), block.size(), options);
      Status get = put.ok() ? other->Get(key, &back, Deadline(10000)) : put;
      (get.ok() && back == block ? served : failed).fetch_add(1);
    }
  });
  // Joined however the test ends (a failed ASSERT returns early).
  struct Joiner {
    std::atomic<bool>* done;
    std::thread* thread;
    ~Joiner() {
      *done = true;
      if (thread->joinable()) thread->join();
    }
  } joiner{&done, &traffic};
  for (int round = 0; round < 20; ++round) {
    uint64_t removed = 99;
    Status s =
        client_->RemoveMatching(kEvil, &removed, /*regex=*/true, /*force=*/false, Deadline(30000));
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(removed, 0u);  // the key ends in '!': no match
    std::vector<std::string> keys;
    std::string next;
    s = client_->ListKeys("", kEvil, 10, &keys, &next, /*regex=*/true, Deadline(30000));
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(keys.empty());
  }
  done = true;
  traffic.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(served.load(), 20);
  ExpectStoresLive();

  // The same shape, matching: removed, and nothing else with it.
  uint64_t removed = 0;
  ASSERT_TRUE(client_->RemoveMatching("^(a|a)*!$", &removed, true, false, Deadline(30000)).ok());
  EXPECT_EQ(removed, 1u);
  std::string back;
  EXPECT_EQ(client_->Get(victim, &back).code(), StatusCode::kNotFound);
  EXPECT_TRUE(client_->Get("other", &back).ok());
}

}  // namespace
}  // namespace shelf
