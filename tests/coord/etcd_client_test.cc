// EtcdClient against a real etcd on loopback: key-value calls, the
// create-if-absent transaction, leases and their keepalive, watches, and
// moving past a dead endpoint.
#include "coord/etcd_client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/net.h"
#include "tests/coord/etcd_harness.h"

namespace shelf::coord {
namespace {

using testing::EtcdProcess;

class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto etcd = EtcdProcess::Start();
    if (absl::IsNotFound(etcd.status())) return;  // each test skips
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd).release();
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }

  void SetUp() override {
    if (etcd_ == nullptr) GTEST_SKIP() << "no etcd binary";
    auto client = EtcdClient::Connect(etcd_->endpoint());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    // Keys of one test never meet another's.
    prefix_ = std::string("/test/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }

  std::string Key(const std::string& name) const { return prefix_ + name; }

  // Polls until Get(key) is NOT_FOUND; the time it took, or -1.
  int64_t WaitAbsentMs(const std::string& key, uint64_t timeout_ms) {
    uint64_t start = MonoMs();
    while (MonoMs() - start < timeout_ms) {
      if (absl::IsNotFound(client_->Get(key).status())) return MonoMs() - start;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

  static EtcdProcess* etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
};

EtcdProcess* EtcdClientTest::etcd_ = nullptr;

// Collects watch events; waits for a count.
class EventSink {
 public:
  WatchOptions Options(bool prefix, int64_t start_revision) {
    WatchOptions options;
    options.prefix = prefix;
    options.start_revision = start_revision;
    options.on_events = [this](const std::vector<WatchEvent>& events, int64_t) {
      MutexLock lock(&mu_);
      for (const WatchEvent& e : events) events_.push_back(e);
      cv_.SignalAll();
    };
    return options;
  }
  std::vector<WatchEvent> WaitFor(size_t count, uint64_t timeout_ms) {
    MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return events_.size() >= count; };
    cv_.WaitFor(&mu_, std::chrono::milliseconds(timeout_ms), enough);
    return events_;
  }
  size_t size() {
    MutexLock lock(&mu_);
    return events_.size();
  }

 private:
  Mutex mu_;
  CondVar cv_;  // events were added
  std::vector<WatchEvent> events_ ABSL_GUARDED_BY(mu_);
};

TEST_F(EtcdClientTest, PutGetDelete) {
  auto rev1 = client_->Put(Key("a"), "one");
  ASSERT_TRUE(rev1.ok()) << rev1.status();
  auto kv = client_->Get(Key("a"));
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->key, Key("a"));
  EXPECT_EQ(kv->value, "one");
  EXPECT_EQ(kv->version, 1);
  EXPECT_EQ(kv->create_revision, *rev1);
  EXPECT_EQ(kv->mod_revision, *rev1);
  EXPECT_EQ(kv->lease, 0);

  auto rev2 = client_->Put(Key("a"), "two");
  ASSERT_TRUE(rev2.ok());
  EXPECT_GT(*rev2, *rev1);
  kv = client_->Get(Key("a"));
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->value, "two");
  EXPECT_EQ(kv->version, 2);
  EXPECT_EQ(kv->create_revision, *rev1);
  EXPECT_EQ(kv->mod_revision, *rev2);

  // Binary-safe keys and values; a prefix read returns keys in order.
  std::string binary("v\0\xff", 3);
  ASSERT_TRUE(client_->Put(Key("c"), binary).ok());
  ASSERT_TRUE(client_->Put(Key("b"), "bee").ok());
  ASSERT_TRUE(client_->Put(prefix_.substr(0, prefix_.size() - 1) + "x", "outside").ok());
  auto all = client_->GetPrefix(prefix_);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->kvs.size(), 3u);
  EXPECT_EQ(all->kvs[0].key, Key("a"));
  EXPECT_EQ(all->kvs[1].key, Key("b"));
  EXPECT_EQ(all->kvs[2].key, Key("c"));
  EXPECT_EQ(all->kvs[2].value, binary);
  EXPECT_GE(all->revision, all->kvs[2].mod_revision);

  auto deleted = client_->Delete(Key("a"));
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 1);
  EXPECT_TRUE(absl::IsNotFound(client_->Get(Key("a")).status()));
  deleted = client_->Delete(Key("a"));
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 0);

  deleted = client_->DeletePrefix(prefix_);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 2);
  EXPECT_TRUE(client_->GetPrefix(prefix_)->kvs.empty());
  EXPECT_TRUE(client_->Get(prefix_.substr(0, prefix_.size() - 1) + "x").ok());
}

TEST_F(EtcdClientTest, CreateIfAbsentCreatesOnce) {
  auto first = client_->CreateIfAbsent(Key("k"), "first", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  EXPECT_EQ(first->kv.value, "first");
  EXPECT_EQ(first->kv.create_revision, first->revision);

  auto second = client_->CreateIfAbsent(Key("k"), "second", 0);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->kv.value, "first");
  EXPECT_EQ(second->kv.create_revision, first->kv.create_revision);
  EXPECT_EQ(client_->Get(Key("k"))->value, "first");

  // Only the key of that creation is deleted.
  auto wrong = client_->DeleteIfCreateRevision(Key("k"), first->kv.create_revision + 1000);
  ASSERT_TRUE(wrong.ok());
  EXPECT_FALSE(*wrong);
  auto right = client_->DeleteIfCreateRevision(Key("k"), first->kv.create_revision);
  ASSERT_TRUE(right.ok());
  EXPECT_TRUE(*right);

  auto again = client_->CreateIfAbsent(Key("k"), "third", 0);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->created);
  EXPECT_GT(again->kv.create_revision, first->kv.create_revision);
}

// The guarded delete of an overwritten leader key: only the version read
// is deleted, never one written after it.
TEST_F(EtcdClientTest, DeleteIfModRevisionDeletesOnlyTheVersionRead) {
  ASSERT_TRUE(client_->Put(Key("m"), "one").ok());
  auto first = client_->Get(Key("m"));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(client_->Put(Key("m"), "two").ok());
  auto stale = client_->DeleteIfModRevision(Key("m"), first->mod_revision);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_FALSE(*stale);
  auto second = client_->Get(Key("m"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->value, "two");
  auto current = client_->DeleteIfModRevision(Key("m"), second->mod_revision);
  ASSERT_TRUE(current.ok()) << current.status();
  EXPECT_TRUE(*current);
  EXPECT_TRUE(absl::IsNotFound(client_->Get(Key("m")).status()));
  auto absent = client_->DeleteIfModRevision(Key("m"), second->mod_revision);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(*absent);
}

TEST_F(EtcdClientTest, CreateIfAbsentRecognisesItsOwnLease) {
  auto lease = client_->LeaseGrant(10);
  ASSERT_TRUE(lease.ok()) << lease.status();
  auto first = client_->CreateIfAbsent(Key("k"), "me", lease->id);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->created);
  // As a retry after a lost answer would: the key carries our lease.
  auto retry = client_->CreateIfAbsent(Key("k"), "me", lease->id);
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->created);
  EXPECT_EQ(retry->kv.create_revision, first->kv.create_revision);
  EXPECT_TRUE(client_->LeaseRevoke(lease->id).ok());
}

TEST_F(EtcdClientTest, LeaseExpiryRemovesKey) {
  uint64_t start = MonoMs();
  auto lease = client_->LeaseGrant(1);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_GE(lease->ttl_s, 1);  // etcd raises it to its minimum (2 s by default)
  EXPECT_GE(lease->granted_mono_ms, start);
  ASSERT_TRUE(client_->Put(Key("eph"), "x", lease->id).ok());
  EXPECT_EQ(client_->Get(Key("eph"))->lease, lease->id);

  int64_t gone_ms = WaitAbsentMs(Key("eph"), lease->ttl_s * 1000 + 3000);
  ASSERT_GE(gone_ms, 0) << "key outlived its lease";
  // Not before the TTL, counted from the grant.
  EXPECT_GE(MonoMs() - lease->granted_mono_ms, static_cast<uint64_t>(lease->ttl_s) * 1000 - 100);
  EXPECT_TRUE(absl::IsNotFound(client_->LeaseRevoke(lease->id)));
  EXPECT_TRUE(absl::IsNotFound(client_->Put(Key("eph"), "y", lease->id).status()));
}

TEST_F(EtcdClientTest, KeepAliveKeepsKeyAndStopLetsItExpire) {
  auto lease = client_->LeaseGrant(2);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->Put(Key("kept"), "x", lease->id).ok());
  std::atomic<int> lost{0};
  KeepAliveCallbacks callbacks;
  callbacks.on_lost = [&](const absl::Status&) { ++lost; };
  auto keepalive = client_->KeepAlive(*lease, callbacks);
  ASSERT_TRUE(keepalive.ok()) << keepalive.status();
  EXPECT_EQ((*keepalive)->lease_id(), lease->id);

  // Well past the TTL, the key is still there.
  std::this_thread::sleep_for(std::chrono::milliseconds(lease->ttl_s * 1000 + 1000));
  EXPECT_TRUE(client_->Get(Key("kept")).ok());
  EXPECT_TRUE((*keepalive)->alive());
  EXPECT_GT((*keepalive)->expiry_mono_ms(), MonoMs());
  EXPECT_EQ(lost.load(), 0);

  // Stopping does not revoke: the key lingers, then expires.
  (*keepalive)->Stop();
  EXPECT_TRUE(client_->Get(Key("kept")).ok());
  EXPECT_GE(WaitAbsentMs(Key("kept"), lease->ttl_s * 1000 + 3000), 0);
  EXPECT_EQ(lost.load(), 0);  // no callback after Stop()
}

TEST_F(EtcdClientTest, KeepAliveReportsRevokedLease) {
  auto lease = client_->LeaseGrant(5);
  ASSERT_TRUE(lease.ok()) << lease.status();
  Mutex mu;
  CondVar cv;
  absl::Status lost_why = absl::OkStatus();
  bool lost = false;
  KeepAliveCallbacks callbacks;
  callbacks.on_lost = [&](const absl::Status& why) {
    MutexLock lock(&mu);
    lost = true;
    lost_why = why;
    cv.SignalAll();
  };
  auto keepalive = client_->KeepAlive(*lease, callbacks);
  ASSERT_TRUE(keepalive.ok());
  ASSERT_TRUE(client_->Put(Key("k"), "x", lease->id).ok());
  ASSERT_TRUE(client_->LeaseRevoke(lease->id).ok());
  EXPECT_TRUE(absl::IsNotFound(client_->Get(Key("k")).status()));  // revoke deletes at once
  // The next refresh (within ttl/3) learns the lease is gone.
  MutexLock lock(&mu);
  cv.WaitFor(&mu, std::chrono::milliseconds(lease->ttl_s * 1000), [&] { return lost; });
  ASSERT_TRUE(lost);
  EXPECT_TRUE(absl::IsNotFound(lost_why)) << lost_why;
  EXPECT_FALSE((*keepalive)->alive());
}

TEST_F(EtcdClientTest, WatchSeesPutAndDelete) {
  EventSink sink;
  auto watch = client_->Watch(prefix_, sink.Options(/*prefix=*/true, /*start_revision=*/0));
  ASSERT_TRUE(watch.ok()) << watch.status();
  auto rev_a = client_->Put(Key("a"), "1");
  ASSERT_TRUE(rev_a.ok());
  ASSERT_TRUE(client_->Put(Key("b"), "2").ok());
  auto rev_del = client_->Delete(Key("a"));
  ASSERT_TRUE(rev_del.ok());
  ASSERT_TRUE(client_->Put("/elsewhere/" + prefix_, "not watched").ok());

  std::vector<WatchEvent> events = sink.WaitFor(3, 5000);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[0].kv.key, Key("a"));
  EXPECT_EQ(events[0].kv.value, "1");
  EXPECT_EQ(events[0].kv.mod_revision, *rev_a);
  EXPECT_EQ(events[1].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[1].kv.key, Key("b"));
  EXPECT_EQ(events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(events[2].kv.key, Key("a"));
  EXPECT_GT(events[2].kv.mod_revision, events[1].kv.mod_revision);

  // Nothing arrives after Cancel().
  (*watch)->Cancel();
  ASSERT_TRUE(client_->Put(Key("c"), "3").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(sink.size(), 3u);
}

TEST_F(EtcdClientTest, WatchFromRevisionReplaysHistory) {
  auto r1 = client_->Put(Key("k"), "v1");
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE(client_->Put(Key("k"), "v2").ok());
  ASSERT_TRUE(client_->Put(Key("other"), "x").ok());  // single-key watch ignores it
  EventSink sink;
  auto watch = client_->Watch(Key("k"), sink.Options(/*prefix=*/false, *r1));
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(client_->Put(Key("k"), "v3").ok());
  std::vector<WatchEvent> events = sink.WaitFor(3, 5000);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kv.value, "v1");
  EXPECT_EQ(events[1].kv.value, "v2");
  EXPECT_EQ(events[2].kv.value, "v3");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(sink.size(), 3u);
}

TEST_F(EtcdClientTest, MovesPastDeadEndpoint) {
  // A port nothing listens on any more comes first in the list.
  HostPort bound;
  auto fd = TcpListen(HostPort{"127.0.0.1", 0}, &bound);
  ASSERT_TRUE(fd.ok());
  close(*fd);
  EtcdOptions options;
  options.call_timeout_ms = 1000;
  auto client = EtcdClient::Connect(
      "127.0.0.1:" + std::to_string(bound.port) + "," + etcd_->endpoint(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_EQ((*client)->endpoints().size(), 2u);
  ASSERT_TRUE((*client)->Put(Key("k"), "v").ok());
  auto kv = (*client)->Get(Key("k"));
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->value, "v");

  // With no live endpoint, calls fail within their budget.
  options.attempts_max = 2;
  options.call_timeout_ms = 300;
  auto none = EtcdClient::Connect("127.0.0.1:" + std::to_string(bound.port), options);
  ASSERT_TRUE(none.ok());
  uint64_t start = MonoMs();
  absl::Status s = (*none)->Get(Key("k")).status();
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(MonoMs() - start, 3000u);
  EXPECT_NE(std::string(s.message()).find(std::to_string(bound.port)), std::string::npos) << s;
}

}  // namespace
}  // namespace shelf::coord
