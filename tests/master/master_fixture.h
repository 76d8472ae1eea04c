// In-process master fixtures: a Master with fake-free registrations (a
// registration is only a request), helpers for puts and lookups. The
// master runs on a ManualClock: a test moves time with clock_.Advance(),
// so TTLs, leases and timeouts end exactly where it says, however slow the
// machine.
#ifndef SHELF_TESTS_MASTER_MASTER_FIXTURE_H_
#define SHELF_TESTS_MASTER_MASTER_FIXTURE_H_

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "common/manual_clock.h"
#include "common/mutex.h"
#include "common/prom.h"
#include "server/master/master.h"

namespace shelf::master {

class MasterFixture : public ::testing::Test {
 protected:
  // A master with options `o` on `clock` (clock_ when null).
  void Make(MasterOptions o, Clock* clock = nullptr) {
    master_.reset();  // its metric callbacks live in the old registry
    o.clock = clock != nullptr ? clock : &clock_;
    registry_ = std::make_unique<prom::Exposition>();
    master_ = std::make_unique<Master>(o, registry_.get());
  }
  // Short leases, put timeouts and TTLs, which tests end with the clock.
  static MasterOptions TestOptions() {
    MasterOptions o;
    o.lease_ms = 200;
    o.put_timeout_ms = 300;
    o.node_ttl_ms = 300;
    o.demote_wait_ms = 100;
    o.grant_skew_ms = 0;
    return o;
  }
  void SetUp() override { Make(TestOptions()); }
  void TearDown() override {
    if (master_) master_->CheckInvariants();
  }

  uint64_t Register(const std::string& id, uint64_t dram, uint64_t ssd = 0,
                    const std::string& host = "host", uint64_t incarnation = 1,
                    std::map<std::string, std::string> labels = {},
                    std::vector<v1::InventoryEntry> inventory = {}) {
    v1::RegisterStoreRequest req;
    req.set_protocol_version(1);
    req.mutable_endpoint()->set_node_id(id);
    req.mutable_endpoint()->set_data_address(id + ":7100");
    req.mutable_endpoint()->set_host_id(host);
    req.mutable_endpoint()->add_transports(v1::TRANSPORT_TCP);
    auto* seg = req.add_segments();
    seg->set_segment_id(0);
    seg->set_capacity_bytes(dram);
    req.set_ssd_capacity_bytes(ssd);
    req.set_incarnation(incarnation);
    for (auto& [k, v] : labels) (*req.mutable_labels())[k] = v;
    for (auto& e : inventory) *req.add_inventory() = e;
    v1::RegisterStoreResponse resp;
    EXPECT_TRUE(master_->RegisterStore(req, &resp).ok());
    MutexLock lock(&stores_mu_);
    orders_taken_[id] = 0;
    registration_[id] = resp.registration_id();
    return incarnation;
  }

  // A heartbeat as a store sends it: it acknowledges the orders of the
  // answers before, and takes this answer's. With `lost`, the answer
  // never reaches the store (nothing is taken).
  absl::Status Heartbeat(const std::string& id, uint64_t incarnation,
                         std::vector<v1::TierMoveResult> results, v1::HeartbeatResponse* resp,
                         bool lost = false) {
    v1::HeartbeatRequest req;
    req.set_node_id(id);
    req.set_incarnation(incarnation);
    req.set_acks_orders(true);
    {
      MutexLock lock(&stores_mu_);
      req.set_orders_acked(orders_taken_[id]);
      req.set_registration_id(registration_[id]);
    }
    for (auto& r : results) *req.add_moves() = r;
    absl::Status s = master_->Heartbeat(req, resp);
    if (s.ok() && !lost) {
      MutexLock lock(&stores_mu_);
      uint64_t& taken = orders_taken_[id];
      for (const v1::TierMove& m : resp->moves()) taken = std::max(taken, m.seq());
    }
    return s;
  }

  v1::PutStartResponse Start(const std::string& key, uint64_t size, uint32_t replicas = 1,
                             absl::Status* status = nullptr, v1::PutOptions opts = {}) {
    v1::PutStartRequest req;
    req.set_key(key);
    req.set_size(size);
    req.set_checksum(42);
    opts.set_replicas(replicas);
    *req.mutable_options() = opts;
    v1::PutStartResponse resp;
    absl::Status s = master_->PutStart(req, "client-host", "test", &resp);
    if (status != nullptr) *status = s;
    return resp;
  }

  absl::Status Commit(uint64_t put_id) {
    v1::PutCommitRequest req;
    req.add_put_ids(put_id);
    v1::PutCommitResponse resp;
    master_->PutCommit(req, "test", &resp);
    return absl::Status(static_cast<absl::StatusCode>(resp.statuses(0).code()),
                        resp.statuses(0).message());
  }

  absl::Status Put(const std::string& key, uint64_t size, uint32_t replicas = 1) {
    absl::Status s;
    v1::PutStartResponse r = Start(key, size, replicas, &s);
    if (!s.ok()) return s;
    if (r.state() != v1::PUT_STARTED) return absl::AlreadyExistsError("not started");
    return Commit(r.put_id());
  }

  // PutStart of `key` with `checksum`, replacing.
  v1::PutStartResponse StartReplace(const std::string& key, uint64_t size, uint64_t checksum,
                                    absl::Status* status = nullptr) {
    v1::PutStartRequest req;
    req.set_key(key);
    req.set_size(size);
    req.set_checksum(checksum);
    req.mutable_options()->set_replicas(1);
    req.mutable_options()->set_replace(true);
    v1::PutStartResponse resp;
    absl::Status s = master_->PutStart(req, "client-host", "test", &resp);
    if (status != nullptr) *status = s;
    return resp;
  }

  v1::ObjectLocation Lookup(const std::string& key, bool lease = true) {
    v1::LookupRequest req;
    req.add_keys(key);
    req.set_no_lease(!lease);
    v1::LookupResponse resp;
    EXPECT_TRUE(master_->Lookup(req, &resp).ok());
    return resp.objects(0);
  }

  // A lookup that takes no lease and is not an access.
  v1::ObjectLocation Peek(const std::string& key) {
    v1::LookupRequest req;
    req.add_keys(key);
    req.set_peek(true);
    v1::LookupResponse resp;
    EXPECT_TRUE(master_->Lookup(req, &resp).ok());
    return resp.objects(0);
  }

  // Asks for a promotion of `key` (an SSD block of `size` and `checksum`)
  // into `node`'s DRAM: the promotion's id, 0 when the master made none.
  uint64_t Promote(const std::string& node, uint64_t incarnation, const std::string& key,
                   uint64_t size, uint64_t checksum) {
    v1::PromoteRequest req;
    req.set_node_id(node);
    req.set_incarnation(incarnation);
    req.set_key(key);
    req.set_size(size);
    req.set_checksum(checksum);
    v1::PromoteResponse resp;
    EXPECT_TRUE(master_->Promote(req, &resp).ok());
    return resp.promote_id();
  }

  // The store `node` reports promotion `id` copied into DRAM.
  absl::Status CommitPromotion(const std::string& node, uint64_t id) {
    v1::PromoteCommitRequest commit;
    commit.set_node_id(node);
    commit.set_promote_id(id);
    commit.set_ok(true);
    return master_->PromoteCommit(commit);
  }

  // An inventory entry for a block on the store's SSD tier.
  static v1::InventoryEntry SsdEntry(const std::string& key, uint64_t size, uint64_t checksum) {
    v1::InventoryEntry e;
    e.set_key(key);
    e.set_size(size);
    e.set_checksum(checksum);
    e.set_tier(v1::TIER_SSD);
    return e;
  }

  uint64_t DramUsed() {
    v1::StatusResponse st;
    master_->Status(&st);
    return st.dram_used_bytes();
  }

  ManualClock clock_;  // outlives master_
  std::unique_ptr<prom::Exposition> registry_;
  // Threads of a test heartbeat as the same store (master_race_test).
  Mutex stores_mu_;
  // store id -> highest TierMove.seq taken
  std::map<std::string, uint64_t> orders_taken_ ABSL_GUARDED_BY(stores_mu_);
  // store id -> its registration id
  std::map<std::string, uint64_t> registration_ ABSL_GUARDED_BY(stores_mu_);
  std::unique_ptr<Master> master_;
};

}  // namespace shelf::master

#endif  // SHELF_TESTS_MASTER_MASTER_FIXTURE_H_
