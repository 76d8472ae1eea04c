// LeaderElection against a real etcd on loopback: handover on resign, on a
// crash and on a partition (with the fencing order checked), etcd going
// away for longer and for shorter than the lease TTL, an overwritten leader
// key repaired by the leader or a standby, and the helpers that find the
// leader.
#include "coord/election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "coord/master_locator.h"
#include "tests/coord/etcd_harness.h"

namespace shelf::coord {
namespace {

using testing::EtcdProcess;
using testing::TcpProxy;

constexpr int64_t kTtlS = 2;  // etcd's minimum with its default timing

// What every candidate reported, in the order it happened.
struct Event {
  std::string who;
  enum Kind { kElected, kLost, kHealth } kind;
  int64_t term = 0;            // kElected
  absl::Status health;         // kHealth
  bool rival_leading = false;  // kElected: the rival's is_leader() at that moment
  uint64_t at_ms = 0;
};

class Recorder {
 public:
  void Add(Event e) {
    e.at_ms = MonoMs();
    MutexLock lock(&mu_);
    events_.push_back(std::move(e));
    cv_.SignalAll();
  }
  // The first event after `from` (an index) that `match` accepts, waiting
  // up to `timeout_ms`.
  template <typename Match>
  std::optional<Event> WaitFor(size_t from, uint64_t timeout_ms, Match match) {
    std::optional<Event> found;
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (size_t i = from; i < events_.size(); ++i) {
        if (match(events_[i])) {
          found = events_[i];
          return true;
        }
      }
      return false;
    };
    MutexLock lock(&mu_);
    cv_.WaitFor(&mu_, std::chrono::milliseconds(timeout_ms), done);
    return found;
  }
  size_t size() {
    MutexLock lock(&mu_);
    return events_.size();
  }
  int Count(const std::string& who, Event::Kind kind) {
    MutexLock lock(&mu_);
    int n = 0;
    for (const Event& e : events_) n += e.who == who && e.kind == kind;
    return n;
  }

 private:
  Mutex mu_;
  CondVar cv_;  // an event was added
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
};

auto Elected(const std::string& who) {
  return [who](const Event& e) { return e.who == who && e.kind == Event::kElected; };
}
auto Lost(const std::string& who) {
  return [who](const Event& e) { return e.who == who && e.kind == Event::kLost; };
}
auto Health(const std::string& who, bool ok) {
  return [who, ok](const Event& e) {
    return e.who == who && e.kind == Event::kHealth && e.health.ok() == ok;
  };
}

// One candidate: a LeaderElection whose callbacks feed the recorder.
class Candidate {
 public:
  Candidate(std::string name, EtcdClient* client, const std::string& cluster, Recorder* recorder,
            int64_t ttl_s = kTtlS)
      : name_(std::move(name)) {
    ElectionOptions options;
    options.cluster = cluster;
    options.address = address();
    options.lease_ttl_s = ttl_s;
    options.on_elected = [this, recorder](int64_t term) {
      Event e{name_, Event::kElected};
      e.term = term;
      LeaderElection* rival = rival_.load();
      e.rival_leading = rival != nullptr && rival->is_leader();
      recorder->Add(e);
    };
    options.on_lost = [this, recorder] { recorder->Add(Event{name_, Event::kLost}); };
    options.on_health = [this, recorder](const absl::Status& s) {
      Event e{name_, Event::kHealth};
      e.health = s;
      recorder->Add(e);
    };
    election_ = std::make_unique<LeaderElection>(client, options);
  }

  LeaderElection& election() { return *election_; }
  std::string address() const { return name_ + ".example:7000"; }
  // Its on_elected records whether `rival` believed it led at that moment.
  void set_rival(Candidate* rival) { rival_ = rival->election_.get(); }

 private:
  const std::string name_;
  std::atomic<LeaderElection*> rival_{nullptr};
  std::unique_ptr<LeaderElection> election_;
};

class ElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = EtcdProcess::Start();
    if (absl::IsNotFound(etcd.status())) GTEST_SKIP() << "no etcd binary";
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
    auto client = EtcdClient::Connect(etcd_->endpoint());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    cluster_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  // Starts `c` and waits until it leads; its term.
  int64_t StartLeader(Candidate* c, const std::string& name) {
    size_t from = recorder_.size();
    EXPECT_TRUE(c->election().Start().ok());
    auto e = recorder_.WaitFor(from, 5000, Elected(name));
    EXPECT_TRUE(e.has_value()) << name << " was not elected";
    return e ? e->term : 0;
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::string cluster_;
  Recorder recorder_;
};

TEST_F(ElectionTest, ResignHandsOverAtOnce) {
  Candidate a("a", client_.get(), cluster_, &recorder_);
  Candidate b("b", client_.get(), cluster_, &recorder_);
  b.set_rival(&a);
  int64_t term_a = StartLeader(&a, "a");
  ASSERT_GT(term_a, 0);
  ASSERT_TRUE(b.election().Start().ok());

  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(recorder_.Count("b", Event::kElected), 0);
  EXPECT_TRUE(a.election().is_leader());
  EXPECT_EQ(a.election().term(), term_a);
  EXPECT_FALSE(b.election().is_leader());
  EXPECT_EQ(b.election().term(), 0);

  auto leader = LeaderElection::GetLeader(client_.get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->address, a.address());
  EXPECT_EQ(leader->term, term_a);
  EXPECT_NE(leader->lease_id, 0);

  Mutex seen_mu;
  CondVar seen_cv;
  std::vector<std::optional<LeaderInfo>> seen;
  auto watch =
      LeaderElection::WatchLeader(client_.get(), cluster_, [&](const std::optional<LeaderInfo>& l) {
        MutexLock lock(&seen_mu);
        seen.push_back(l);
        seen_cv.SignalAll();
      });
  ASSERT_TRUE(watch.ok()) << watch.status();

  size_t from = recorder_.size();
  uint64_t t0 = MonoMs();
  ASSERT_TRUE(a.election().Resign().ok());
  // on_lost ran before Resign returned, so before anyone else could win.
  EXPECT_EQ(recorder_.Count("a", Event::kLost), 1);
  EXPECT_FALSE(a.election().is_leader());
  auto b_elected = recorder_.WaitFor(from, 3000, Elected("b"));
  ASSERT_TRUE(b_elected.has_value());
  EXPECT_GT(b_elected->term, term_a);
  EXPECT_FALSE(b_elected->rival_leading);
  // Woken by the delete, not by a lease running out.
  EXPECT_LT(b_elected->at_ms - t0, 1500u);
  EXPECT_TRUE(b.election().is_leader());

  leader = LeaderElection::GetLeader(client_.get(), cluster_);
  ASSERT_TRUE(leader.ok());
  EXPECT_EQ(leader->address, b.address());
  EXPECT_EQ(leader->term, b_elected->term);

  {
    MutexLock lock(&seen_mu);
    auto b_seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(seen_mu) {
      return !seen.empty() && seen.back().has_value() && seen.back()->address == b.address();
    };
    seen_cv.WaitFor(&seen_mu, std::chrono::milliseconds(3000), b_seen);
    ASSERT_GE(seen.size(), 2u);
    ASSERT_TRUE(seen.front().has_value());
    EXPECT_EQ(seen.front()->address, a.address());
    EXPECT_EQ(seen.back()->address, b.address());
    EXPECT_EQ(seen.back()->term, b_elected->term);
  }

  ASSERT_TRUE(b.election().Resign().ok());
  EXPECT_TRUE(absl::IsNotFound(LeaderElection::GetLeader(client_.get(), cluster_).status()));
  (*watch)->Cancel();
}

// A store's locator follows the leader key: a new leader is known, and the
// listener told, as soon as etcd names it (the store then retries at once
// instead of sleeping out its backoff).
TEST_F(ElectionTest, MasterLocatorFollowsANewLeaderAndTellsItsListener) {
  Candidate a("a", client_.get(), cluster_, &recorder_);
  Candidate b("b", client_.get(), cluster_, &recorder_);
  ASSERT_GT(StartLeader(&a, "a"), 0);
  auto locator =
      coord::MasterLocator::Create(absl::StrCat("etcd://", etcd_->endpoint(), "/", cluster_));
  ASSERT_TRUE(locator.ok()) << locator.status();
  EXPECT_EQ((*locator)->Current(), a.address());
  Mutex mu;
  CondVar cv;
  int told = 0;
  (*locator)->SetListener([&] {
    MutexLock lock(&mu);
    ++told;
    cv.SignalAll();
  });
  ASSERT_TRUE(b.election().Start().ok());
  size_t from = recorder_.size();
  ASSERT_TRUE(a.election().Resign().ok());
  ASSERT_TRUE(recorder_.WaitFor(from, 3000, Elected("b")).has_value());
  {
    MutexLock lock(&mu);
    auto was_told = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return told > 0; };
    EXPECT_TRUE(cv.WaitFor(&mu, std::chrono::milliseconds(3000), was_told))
        << "the listener was not told of the new leader";
  }
  // Current() follows the watch, with no failure reported to it.
  EXPECT_EQ((*locator)->Current(), b.address());
  (*locator)->SetListener(nullptr);
  ASSERT_TRUE(b.election().Resign().ok());
}

TEST_F(ElectionTest, CrashedLeaderIsReplacedAfterItsTtl) {
  Candidate a("a", client_.get(), cluster_, &recorder_);
  Candidate b("b", client_.get(), cluster_, &recorder_);
  int64_t term_a = StartLeader(&a, "a");
  ASSERT_TRUE(b.election().Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  // As a crash: no resign, no revoke; the key stays until the lease expires.
  size_t from = recorder_.size();
  uint64_t t0 = MonoMs();
  a.election().Stop();
  ASSERT_TRUE(LeaderElection::GetLeader(client_.get(), cluster_).ok());
  auto b_elected = recorder_.WaitFor(from, kTtlS * 1000 + 3000, Elected("b"));
  ASSERT_TRUE(b_elected.has_value());
  EXPECT_GT(b_elected->term, term_a);
  uint64_t took = b_elected->at_ms - t0;
  // The last refresh was at most ttl/3 before the stop.
  EXPECT_GE(took, static_cast<uint64_t>(kTtlS) * 1000 * 2 / 3 - 100);
  EXPECT_LE(took, static_cast<uint64_t>(kTtlS) * 1000 + 2500);
  EXPECT_EQ(LeaderElection::GetLeader(client_.get(), cluster_)->address, b.address());
}

// Someone puts over the leader key (no lease, another address): the leader
// ends its term, deletes the overwritten key and is elected again under a
// new term, with an intact key.
TEST_F(ElectionTest, LeaderRepairsItsOverwrittenKey) {
  Candidate a("a", client_.get(), cluster_, &recorder_);
  int64_t term_a = StartLeader(&a, "a");
  ASSERT_GT(term_a, 0);
  size_t from = recorder_.size();
  ASSERT_TRUE(client_->Put(LeaderElection::LeaderKey(cluster_), "intruder.example:1").ok());

  ASSERT_TRUE(recorder_.WaitFor(from, 30000, Lost("a")).has_value());
  auto again = recorder_.WaitFor(from, 30000, Elected("a"));
  ASSERT_TRUE(again.has_value()) << "a was not elected again";
  EXPECT_GT(again->term, term_a);
  auto leader = LeaderElection::GetLeader(client_.get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_TRUE(leader->intact);
  EXPECT_EQ(leader->address, a.address());
  EXPECT_EQ(leader->term, again->term);
  EXPECT_EQ(a.election().term(), again->term);

  // Overwritten with the leader's own value and lease: still a write after
  // the election, still repaired.
  from = recorder_.size();
  ASSERT_TRUE(
      client_->Put(LeaderElection::LeaderKey(cluster_), a.address(), leader->lease_id).ok());
  auto third = recorder_.WaitFor(from, 30000, Elected("a"));
  ASSERT_TRUE(third.has_value());
  EXPECT_GT(third->term, again->term);
  leader = LeaderElection::GetLeader(client_.get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_TRUE(leader->intact);
  ASSERT_TRUE(a.election().Resign().ok());
}

// The leader crashes and its key is put over without a lease, so it would
// never expire: the standby deletes it after one TTL and is elected.
TEST_F(ElectionTest, StandbyRepairsAnOverwrittenKeyOfACrashedLeader) {
  Candidate a("a", client_.get(), cluster_, &recorder_);
  Candidate b("b", client_.get(), cluster_, &recorder_);
  int64_t term_a = StartLeader(&a, "a");
  ASSERT_TRUE(b.election().Start().ok());
  size_t from = recorder_.size();
  a.election().Stop();  // a crash: the key stays
  ASSERT_TRUE(client_->Put(LeaderElection::LeaderKey(cluster_), "intruder.example:1").ok());

  auto b_elected = recorder_.WaitFor(from, 60000, Elected("b"));
  ASSERT_TRUE(b_elected.has_value()) << "the standby did not repair the key";
  EXPECT_GT(b_elected->term, term_a);
  auto leader = LeaderElection::GetLeader(client_.get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_TRUE(leader->intact);
  EXPECT_EQ(leader->address, b.address());
  ASSERT_TRUE(b.election().Resign().ok());
}

TEST_F(ElectionTest, PartitionedLeaderStepsDownBeforeAnotherIsElected) {
  auto proxy = TcpProxy::Start(etcd_->client_port());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  auto via_proxy = EtcdClient::Connect("127.0.0.1:" + std::to_string((*proxy)->port()));
  ASSERT_TRUE(via_proxy.ok());
  Candidate a("a", via_proxy->get(), cluster_, &recorder_);
  Candidate b("b", client_.get(), cluster_, &recorder_);
  b.set_rival(&a);
  int64_t term_a = StartLeader(&a, "a");
  ASSERT_TRUE(b.election().Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  size_t from = recorder_.size();
  uint64_t t0 = MonoMs();
  (*proxy)->Cut();
  // a notices the failing refreshes, then gives up at its local deadline.
  EXPECT_TRUE(recorder_.WaitFor(from, kTtlS * 1000, Health("a", false)).has_value());
  auto a_lost = recorder_.WaitFor(from, kTtlS * 1000 + 1000, Lost("a"));
  ASSERT_TRUE(a_lost.has_value());
  EXPECT_LE(a_lost->at_ms - t0, static_cast<uint64_t>(kTtlS) * 1000 + 500);
  auto b_elected = recorder_.WaitFor(from, kTtlS * 1000 + 3000, Elected("b"));
  ASSERT_TRUE(b_elected.has_value());
  EXPECT_GT(b_elected->term, term_a);
  // Fencing: when b took over, a no longer believed it led.
  EXPECT_FALSE(b_elected->rival_leading);
  EXPECT_FALSE(a.election().is_leader());

  // Healed, a stands by behind b.
  (*proxy)->Heal();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(recorder_.Count("a", Event::kElected), 1);
  EXPECT_TRUE(b.election().is_leader());
  auto leader = LeaderElection::GetLeader(via_proxy->get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->address, b.address());
  a.election().Stop();  // before the proxy goes
}

TEST_F(ElectionTest, EtcdOutageLongerThanTtlDeposesThenElectionResumes) {
  Candidate a("a", client_.get(), cluster_, &recorder_);
  Candidate b("b", client_.get(), cluster_, &recorder_);
  int64_t term_a = StartLeader(&a, "a");
  ASSERT_TRUE(b.election().Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  size_t from = recorder_.size();
  uint64_t t0 = MonoMs();
  etcd_->Kill();
  EXPECT_TRUE(recorder_.WaitFor(from, kTtlS * 1000, Health("a", false)).has_value());
  auto a_lost = recorder_.WaitFor(from, kTtlS * 1000 + 1000, Lost("a"));
  ASSERT_TRUE(a_lost.has_value()) << "the leader kept leading without etcd";
  EXPECT_LE(a_lost->at_ms - t0, static_cast<uint64_t>(kTtlS) * 1000 + 500);
  EXPECT_FALSE(a.election().is_leader());
  EXPECT_FALSE(b.election().is_leader());

  ASSERT_TRUE(etcd_->Restart().ok());
  auto next =
      recorder_.WaitFor(from, 10000, [](const Event& e) { return e.kind == Event::kElected; });
  ASSERT_TRUE(next.has_value()) << "nobody was elected after etcd returned";
  EXPECT_GT(next->term, term_a);
  auto leader = LeaderElection::GetLeader(client_.get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->term, next->term);
  EXPECT_EQ(leader->address, next->who + ".example:7000");
  EXPECT_NE(a.election().is_leader(), b.election().is_leader());
}

TEST_F(ElectionTest, EtcdOutageShorterThanTtlKeepsTheLeader) {
  constexpr int64_t kLongTtlS = 6;
  Candidate a("a", client_.get(), cluster_, &recorder_, kLongTtlS);
  int64_t term_a = StartLeader(&a, "a");

  size_t from = recorder_.size();
  etcd_->Kill();
  // A refresh is due every ttl/3.
  ASSERT_TRUE(recorder_.WaitFor(from, kLongTtlS * 1000 / 3 + 1000, Health("a", false)).has_value());
  ASSERT_TRUE(etcd_->Restart().ok());
  ASSERT_TRUE(recorder_.WaitFor(from, 4000, Health("a", true)).has_value())
      << "lease refresh did not recover";
  EXPECT_EQ(recorder_.Count("a", Event::kLost), 0);
  EXPECT_TRUE(a.election().is_leader());
  EXPECT_EQ(a.election().term(), term_a);
  auto leader = LeaderElection::GetLeader(client_.get(), cluster_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->term, term_a);
}

}  // namespace
}  // namespace shelf::coord
