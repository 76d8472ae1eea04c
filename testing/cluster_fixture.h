// ClusterFixture: the gtest fixture of tests that need a running cluster and
// a client of it. SetUp starts a LocalCluster (real shelf-master and
// shelf-store processes on loopback) from ClusterOptions() and opens client_
// with ClientOptionsFor(); every test gets a cluster of its own, stopped when
// the test ends. Override the two hooks to shape them, and SetUp to add to
// them (call ClusterFixture::SetUp() first and stop on a fatal failure):
//
//   class TieredTest : public ClusterFixture {
//    protected:
//     LocalCluster::Options ClusterOptions() override {
//       LocalCluster::Options o = ClusterFixture::ClusterOptions();
//       o.ssd_bytes = 256ull << 20;
//       return o;
//     }
//   };
//   TEST_F(TieredTest, PutThenGet) {
//     ASSERT_TRUE(client_->Put("k", "v", 1).ok());
//   }
#ifndef SHELF_TESTING_CLUSTER_FIXTURE_H_
#define SHELF_TESTING_CLUSTER_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"

namespace shelf {

class ClusterFixture : public ::testing::Test {
 protected:
  // Two stores of 64 MiB DRAM each, the binaries of this build.
  virtual LocalCluster::Options ClusterOptions() {
    LocalCluster::Options o;
    o.bin_dir = TestBinDir();
    return o;
  }

  // The cluster's master and secret, and a timeout generous enough for
  // loaded CI machines and sanitizer builds.
  virtual ClientOptions ClientOptionsFor(const LocalCluster::Options& cluster) {
    ClientOptions co;
    co.masters = {cluster_->master_address()};
    co.secret = cluster.secret;
    co.timeout_ms = 20000;
    return co;
  }

  void SetUp() override {
    cluster_options_ = ClusterOptions();
    auto started = LocalCluster::Start(cluster_options_);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
    client_ = OpenClient(ClientOptionsFor(cluster_options_));
    ASSERT_NE(client_, nullptr);
  }

  // Another client of the cluster; nullptr, and a test failure, when it
  // cannot open.
  std::unique_ptr<Client> OpenClient(const ClientOptions& options) {
    std::unique_ptr<Client> client;
    Status s = Client::Open(options, &client);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok() ? std::move(client) : nullptr;
  }

  // As ClientOptionsFor(), for tests that open clients of their own.
  ClientOptions DefaultClientOptions() { return ClientOptionsFor(cluster_options_); }

  LocalCluster::Options cluster_options_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
};

}  // namespace shelf

#endif  // SHELF_TESTING_CLUSTER_FIXTURE_H_
