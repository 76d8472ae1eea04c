// The replay's cache simulations (tools/bench/cache_sim.h): what each keeps,
// where its victims go, and that a hit is the leading run of a request.
#include "tools/bench/cache_sim.h"

#include <gtest/gtest.h>

#include <vector>

namespace shelf::bench {
namespace {

using Ids = std::vector<uint64_t>;

TEST(LruSimTest, AHitIsTheLeadingRunPresent) {
  LruSim lru(8, 0);
  EXPECT_EQ(lru.Request({1, 2, 3}), 0u);
  EXPECT_EQ(lru.Request({1, 2, 3}), 3u);
  EXPECT_EQ(lru.Request({1, 9, 3}), 1u);  // 9 is missing: 3 does not count
}

TEST(LruSimTest, DramOnlyDropsTheLeastRecentlyUsed) {
  LruSim lru(2, 0);
  lru.Request({1});
  lru.Request({2});
  lru.Request({1});  // 2 is now the least recently used
  lru.Request({3});
  EXPECT_EQ(lru.Request({1}), 1u);
  EXPECT_EQ(lru.Request({2}), 0u);
}

TEST(LruSimTest, DramVictimsMoveToSsdAndSsdVictimsGo) {
  LruSim lru(1, 2);
  lru.Request({1});
  lru.Request({2});  // 1 to SSD
  lru.Request({3});  // 2 to SSD
  EXPECT_EQ(lru.Request({1}), 1u);
  lru.Request({4});  // 3 to SSD, 2 (SSD's least recent) goes
  EXPECT_EQ(lru.Request({2}), 0u);
}

TEST(S3FifoSimTest, ABlockReadOnceLeavesDramForAGhost) {
  S3FifoSim s3(10, 0);  // probation 1 block, main 9
  s3.Request({1});
  s3.Request({2});                 // 1, never read again, leaves probation
  EXPECT_EQ(s3.Request({1}), 0u);  // a miss: but remembered, so admitted to main
  s3.Request({3});
  s3.Request({4});
  EXPECT_EQ(s3.Request({1}), 1u);
}

TEST(S3FifoSimTest, ABlockReadAgainInProbationReachesMain) {
  S3FifoSim s3(10, 0);
  s3.Request({5});
  EXPECT_EQ(s3.Request({5}), 1u);  // read while in probation
  s3.Request({6});                 // 5 moves on to main
  s3.Request({7});
  EXPECT_EQ(s3.Request({5}), 1u);
}

TEST(S3FifoSimTest, ProbationVictimsMoveToSsd) {
  S3FifoSim s3(10, 4);
  s3.Request({1});
  s3.Request({2});  // 1 leaves probation for SSD
  EXPECT_EQ(s3.Request({1}), 1u);
  EXPECT_EQ(s3.Request({1}), 1u);  // SSD hits stay on SSD, as in LruSim
}

TEST(S3FifoSimTest, MainReinsertsWhatWasReadBeforeItEvicts) {
  S3FifoSim s3(3, 0);  // probation 1, main 2
  for (uint64_t id : {2, 3}) {
    s3.Request({id});
    s3.Request({id});  // read in probation: on to main with the next block
  }
  s3.Request({10});  // 3 joins 2 in main; 10 waits in probation
  s3.Request({2});   // 2, the older in main, is read there
  s3.Request({20});
  s3.Request({20});
  s3.Request({21});  // 20 reaches main: 2 is first out but was read, so 3 goes
  EXPECT_EQ(s3.Request({3}), 0u);
  EXPECT_EQ(s3.Request({2}), 1u);
}

}  // namespace
}  // namespace shelf::bench
