// Runs the C API checks (c_api_checks.c, compiled as C) against a real
// cluster started here.
#include <gtest/gtest.h>

#include "testing/local_cluster.h"
#include "testing/test_paths.h"

extern "C" int shelf_c_api_checks(const char* master);

namespace shelf {
namespace {

TEST(CApiTest, EveryCheckPassesAgainstALiveCluster) {
  LocalCluster::Options o;
  o.stores = 2;
  o.bin_dir = TestBinDir();
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(shelf_c_api_checks((*cluster)->master_address().c_str()), 0)
      << "failed checks are printed above";
}

}  // namespace
}  // namespace shelf
