#include "server/store/store.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/check.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/net.h"
#include "shelf/limits.h"
#include "transport/shm_board.h"
#include "transport/wire.h"

namespace shelf::store {
namespace {

// Fault injection for tests: SHELF_FAULT_LOSE_HEARTBEAT_ANSWERS names
// order kinds (DEMOTE,DROP_SSD,RECORD,FORGET); the first answer that
// carries an order of each is dropped, as an answer the master sent but a
// call that timed out never got. Unset in production. Called from the
// heartbeat loop only.
bool LoseAnswerForTest(const v1::HeartbeatResponse& resp) {
  static const char* spec = std::getenv("SHELF_FAULT_LOSE_HEARTBEAT_ANSWERS");
  if (spec == nullptr) return false;
  static absl::flat_hash_set<std::string> left = absl::StrSplit(spec, ',', absl::SkipEmpty());
  for (const v1::TierMove& m : resp.moves()) {
    if (left.erase(v1::TierMove::Kind_Name(m.kind())) > 0) return true;
  }
  return false;
}

}  // namespace

void Store::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_.store(true);
    if (board_ != nullptr) board_->TrustUntil(0);
  }
  stop_cv_.SignalAll();
}

absl::StatusOr<transport::DataHandler::Region> Store::Segment(uint32_t id) {
  if (id >= SegmentCount()) return absl::NotFoundError(absl::StrCat("no segment ", id));
  return Region{segment_->data() + id * SegmentBytes(), SegmentBytes()};
}

absl::Status Store::CheckNotDropping(absl::string_view key) {
  MutexLock lock(&mu_);
  if (ssd_drops_pending_.contains(key)) {
    return absl::NotFoundError("the master dropped this key's SSD copy");
  }
  return absl::OkStatus();
}

absl::Status Store::ReadKey(absl::string_view key, std::string* out) {
  if (ssd_ == nullptr) return absl::NotFoundError("this store has no SSD tier");
  absl::Status s = CheckNotDropping(key);
  if (s.ok()) {
    prom::ScopedTimer timer(metrics_.ssd_read_seconds);
    s = ssd_->Get(std::string(key), out);
  }
  if (s.ok()) s = CheckNotDropping(key);
  if (s.ok()) metrics_.read_ssd_tcp.Increment(out->size());
  if (s.code() == absl::StatusCode::kDataLoss) metrics_.checksum_failures.Increment();
  uint64_t size = 0, checksum = 0;
  if (s.ok() && options_.promote_on_hit && ssd_->Info(std::string(key), &size, &checksum)) {
    MutexLock lock(&mu_);
    if (promotions_.size() < kPromotionsMax) {
      promotions_.push_back(Promotion{std::string(key), *out, checksum});
      moves_cv_.Signal();
    }
  }
  return s;
}

absl::Status Store::ReadKeyInto(absl::string_view key, char* buf, uint64_t capacity,
                                uint64_t* size) {
  if (ssd_ == nullptr) return absl::NotFoundError("this store has no SSD tier");
  const std::string k(key);
  absl::Status s = CheckNotDropping(key);
  if (s.ok()) {
    prom::ScopedTimer timer(metrics_.ssd_read_seconds);
    s = ssd_->GetInto(k, buf, capacity, size);
  }
  if (s.ok()) s = CheckNotDropping(key);
  if (s.ok()) metrics_.read_ssd_tcp.Increment(static_cast<double>(*size));
  if (s.code() == absl::StatusCode::kDataLoss) metrics_.checksum_failures.Increment();
  uint64_t have = 0, checksum = 0;
  if (s.ok() && options_.promote_on_hit && ssd_->Info(k, &have, &checksum)) {
    MutexLock lock(&mu_);
    if (promotions_.size() < kPromotionsMax) {
      promotions_.push_back(Promotion{k, std::string(buf, *size), checksum});
      moves_cv_.Signal();
    }
  }
  return s;
}

absl::StatusOr<transport::DataHandler::Region> Store::DramKey(absl::string_view key,
                                                              uint64_t generation) {
  MutexLock lock(&mu_);
  auto k = dram_by_key_.find(key);
  if (k == dram_by_key_.end()) return absl::NotFoundError("no DRAM record of the key");
  const Record& r = dram_records_.at(k->second);
  if (generation != 0 && r.generation != 0 && generation != r.generation) {
    return absl::FailedPreconditionError(
        absl::StrCat("the key was replaced: generation ", r.generation, ", not ", generation));
  }
  if (!InDram(k->second, r.size)) return absl::NotFoundError("record outside segment");
  // The record follows the master's notices, which lag: its range may
  // hold a newer put's block already (range_owners.h).
  if (!owners_.CheckRead(k->second, r.size, transport::wire::KeyDigest(key)).ok()) {
    return absl::NotFoundError("the record's range holds another block now");
  }
  return Region{segment_->data() + k->second, r.size};
}

v1::MasterService::Stub* Store::Master(std::string* address) {
  *address = locator_->Current();
  if (address->empty()) return nullptr;  // etcd names no leader yet
  MutexLock lock(&stubs_mu_);
  auto& stub = stubs_[*address];
  if (stub == nullptr) {
    auto channel = MakeChannel(*address, options_.tls);
    if (!channel.ok()) return nullptr;
    stub = v1::MasterService::NewStub(*channel);
  }
  return stub.get();
}

void Store::MasterFailed(const std::string& address, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable &&
      status.code() != absl::StatusCode::kDeadlineExceeded) {
    return;
  }
  // Another master may lead now. The registration stands all the same:
  // a leader that does not know this store says so in its answer (a newer
  // term, or `reregister`), and a heartbeat answer lost on its way loses
  // no order (orders come again until acknowledged). Registering again
  // after every timeout would cost a full inventory, and the master's
  // record of the store's pins and writers.
  locator_->Failed(address, status);
}

absl::Status Store::Register() {
  // While the registration is in flight, grant checks that fail wait for
  // its answer (AwaitRegistration).
  struct InFlight {
    explicit InFlight(Store* s) : store(s) {
      MutexLock lock(&store->mu_);
      store->registering_ = true;
    }
    ~InFlight() {
      MutexLock lock(&store->mu_);
      store->registering_ = false;
      store->registered_cv_.SignalAll();
    }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    Store* const store;
  } in_flight(this);
  v1::RegisterStoreRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::StoreEndpoint* ep = req.mutable_endpoint();
  ep->set_node_id(node_id_);
  ep->set_data_address(data_address_);
  ep->set_host_id(HostId());
  ep->add_transports(v1::TRANSPORT_TCP);
  if (shm_server_ != nullptr) {
    ep->set_shm_socket(shm_server_->path());
    ep->add_transports(v1::TRANSPORT_SHM);
  }
  if (rdma_ != nullptr) ep->add_transports(v1::TRANSPORT_RDMA);
  for (const auto& [k, v] : options_.labels) (*req.mutable_labels())[k] = v;
  for (uint32_t i = 0; i < SegmentCount(); ++i) {
    v1::SegmentInfo* seg = req.add_segments();
    seg->set_segment_id(i);
    seg->set_capacity_bytes(SegmentBytes());
    seg->set_tier(v1::TIER_DRAM);
    MutexLock lock(&mu_);
    if (i < arena_tenants_.size() && arena_tenants_[i].has_value()) {
      seg->set_bound(true);
      seg->set_tenant(*arena_tenants_[i]);
    }
  }
  req.set_incarnation(incarnation_);
  // The master numbers this store's ranges on from the highest it has
  // taken, so a write it grants next is newer than every claim here.
  req.set_range_seq_floor(owners_.max_seq());
  {
    // DRAM contents the master told us about, checked against their bytes:
    // a range overwritten since (a reused range, a write in flight) fails
    // its checksum and is not reported.
    MutexLock lock(&mu_);
    for (auto it = dram_records_.begin(); it != dram_records_.end();) {
      const Record& r = it->second;
      if (!InDram(it->first, r.size) ||
          BlockChecksum(segment_->data() + it->first, r.size) != r.checksum) {
        it = EraseRecordLocked(it);
        continue;
      }
      v1::InventoryEntry* inv = req.add_inventory();
      inv->set_key(r.key);
      inv->set_size(r.size);
      inv->set_checksum(r.checksum);
      inv->set_tier(v1::TIER_DRAM);
      inv->set_segment_id(SegmentOf(it->first));
      inv->set_offset(OffsetOf(it->first));
      inv->set_generation(r.generation);
      ++it;
    }
  }
  if (ssd_ != nullptr) {
    req.set_ssd_capacity_bytes(ssd_->capacity_bytes());
    // Not the blocks a DROP_SSD waits for: the master removed them (the
    // drops run all the same, below).
    absl::flat_hash_set<std::string> dropping;
    {
      MutexLock lock(&mu_);
      for (const auto& [key, count] : ssd_drops_pending_) dropping.insert(key);
    }
    for (const storage::SsdTier::Entry& e : ssd_->Inventory()) {
      if (dropping.contains(e.key)) continue;
      v1::InventoryEntry* inv = req.add_inventory();
      inv->set_key(e.key);
      inv->set_size(e.size);
      inv->set_checksum(e.checksum);
      inv->set_tier(v1::TIER_SSD);
    }
  }
  v1::RegisterStoreResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token_, options_.rpc_timeout_ms * 4);
  std::string address;
  v1::MasterService::Stub* master = Master(&address);
  if (master == nullptr) return absl::UnavailableError("no leading master known yet");
  absl::Status s = FromGrpc(master->RegisterStore(&ctx, req, &resp));
  if (!s.ok()) {
    MasterFailed(address, s);
    return s;
  }
  // A new term is taken only from the master etcd's leader key names with
  // that term: a process that answers with a huge term would otherwise fence
  // out the real leader (docs/security.md, "etcd").
  if (resp.term() > MaxTerm()) {
    if (absl::Status v = locator_->VerifyLeader(address, resp.term()); !v.ok()) {
      SHELF_LOG(WARNING) << "master's term refused" << Kv("master", address)
                         << Kv("term", resp.term()) << Kv("error", v.message());
      locator_->Failed(address, absl::UnavailableError("term refused"));
      return v;
    }
  }
  {
    MutexLock lock(&mu_);
    if (resp.term() < max_term_) {
      // Fencing: a master of an older term answered (a deposed leader).
      return absl::UnavailableError(
          absl::StrCat("master answered with term ", resp.term(), " older than ", max_term_));
    }
    max_term_ = resp.term();
    grant_key_ = resp.grant_key();
    grant_mac_ = std::make_shared<const HmacKey>(grant_key_);
    grant_term_ = resp.term();
    heartbeat_interval_ms_ = std::max<uint64_t>(50, resp.heartbeat_interval_ms());
    node_ttl_ms_ = resp.node_ttl_ms();
    // The new registration's inventory supersedes the demotion reports;
    // the drops' reports still say their keys are gone.
    results_.erase(std::remove_if(results_.begin(), results_.end(),
                                  [](const v1::TierMoveResult& r) {
                                    return r.kind() != v1::TierMove::DROP_SSD;
                                  }),
                   results_.end());
    orders_taken_ = 0;  // this registration's orders are numbered anew
    registration_id_ = resp.registration_id();
    // So do the orders, but for the drops: their blocks were removed, and
    // the inventory did not list them.
    std::deque<v1::TierMove> drops;
    for (v1::TierMove& m : moves_) {
      if (m.kind() == v1::TierMove::DROP_SSD) drops.push_back(std::move(m));
    }
    moves_ = std::move(drops);
    promotions_.clear();
  }
  registered_.store(true);
  SHELF_LOG(INFO) << "registered with master" << Kv("master", address) << Kv("node", node_id_)
                  << Kv("ssd_blocks", req.inventory_size());
  return absl::OkStatus();
}

void Store::SyncRun(std::vector<v1::TierMoveResult>* run, Demoted* demoted, uint64_t* unsynced) {
  std::vector<v1::TierMoveResult> taken;
  taken.swap(*run);
  Demoted forget;
  forget.swap(*demoted);
  if (*unsynced == 0 || ssd_ == nullptr) {
    // Nothing written to SSD (failed demotions only, or none): reported as
    // they are, with no sync (a run of drops alone never waits for one).
    if (taken.empty()) return;
    MutexLock lock(&mu_);
    for (v1::TierMoveResult& r : taken) results_.push_back(std::move(r));
    stop_cv_.SignalAll();
    return;
  }
  *unsynced = 0;
  // Fault injection for crash tests (unset in production):
  //   before-sync: a run of two or more demotions has executed and is not
  //     durable yet; the store waits long enough for any report of them to
  //     reach the master, then dies;
  //   after-write: the store dies once its first demotions are durable,
  //     before the master hears of them.
  static const char* kill_point = std::getenv("SHELF_FAULT_KILL_IN_DEMOTION");
  uint64_t executed = demotions_unsynced_;
  demotions_unsynced_ = 0;
  if (kill_point != nullptr && std::strcmp(kill_point, "before-sync") == 0 && executed >= 2) {
    uint64_t wait_ms;
    {
      MutexLock lock(&mu_);
      wait_ms = 4 * heartbeat_interval_ms_ + 500;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    raise(SIGKILL);
  }
  {
    // At most kSyncsAhead runs syncing: the mover writes the next run
    // while they flush, but reports do not fall further behind.
    MutexLock lock(&mu_);
    while (syncs_running_ >= kSyncsAhead) syncs_cv_.Wait(&mu_);
    ++syncs_running_;
  }
  // The run is reported once SsdTier says its writes are durable; the
  // tier's sync thread runs this, in the order the runs were cut.
  ssd_->SyncAsync([this, taken = std::move(taken), forget = std::move(forget),
                   executed](const absl::Status& s) mutable {
    if (kill_point != nullptr && std::strcmp(kill_point, "after-write") == 0 && executed > 0) {
      raise(SIGKILL);
    }
    if (!s.ok()) {
      // Not durable: the master must keep the DRAM copies.
      SHELF_LOG(ERROR) << "SSD tier sync failed; demotions and drops reported as failed"
                       << Kv("error", s.message());
      for (v1::TierMoveResult& r : taken) {
        if (!r.ok()) continue;
        r.set_ok(false);
        r.set_error(absl::StrCat("SSD tier sync: ", s.message()));
      }
    }
    MutexLock lock(&mu_);
    if (s.ok()) {
      // On SSD for good: the DRAM copies are the master's to free.
      for (const auto& [key, offset] : forget) {
        auto rec = dram_records_.find(offset);
        if (rec != dram_records_.end() && rec->second.key == key) EraseRecordLocked(rec);
      }
    }
    for (v1::TierMoveResult& r : taken) results_.push_back(std::move(r));
    --syncs_running_;
    syncs_cv_.SignalAll();
    // Durable now: the heartbeat loop reports them without waiting out
    // its short sleep, and the master frees their DRAM for writers.
    stop_cv_.SignalAll();
  });
}

v1::TierMoveResult Store::Execute(const v1::TierMove& move) {
  v1::TierMoveResult result;
  result.set_move_id(move.move_id());
  result.set_key(move.key());
  result.set_generation(move.generation());
  result.set_kind(move.kind());
  if (move.kind() == v1::TierMove::DEMOTE) result.set_keep_dram(move.keep_dram());
  absl::Status s;
  switch (move.kind()) {
    case v1::TierMove::DEMOTE:
      if (ssd_ == nullptr) {
        s = absl::FailedPreconditionError("no SSD tier");
      } else if (uint64_t at = 0; !ToGlobal(move.segment_id(), move.offset(), move.size(), &at)) {
        s = absl::OutOfRangeError("demotion range outside the segment");
      } else {
        // The checksum is verified before writing: a block that was
        // corrupted in DRAM is reported, not written. Written straight from
        // the segment (PutInPlace, no copy) unless copied (below): only this
        // store writes it (clients map it read-only), and the range stays
        // this block's until the master frees it on this demotion's report,
        // which follows the sync. A remove during the demotion can free it
        // sooner; the bytes a reuse leaves on SSD then fail their
        // checksum when read, and are those of a removed key.
        prom::ScopedTimer timer(metrics_.ssd_write_seconds);
        // Fault injection for crash tests: SHELF_FAULT_KILL_IN_DEMOTION=
        // before-write kills the store before its first demotion writes
        // (after-write: see SyncRun). Unset in production.
        static const char* kill_point = std::getenv("SHELF_FAULT_KILL_IN_DEMOTION");
        if (kill_point != nullptr && std::strcmp(kill_point, "before-write") == 0) raise(SIGKILL);
        // From a copy where the segment's pages would cut the writes small
        // (demote_copy_min_): the copy goes to a hugepage buffer.
        const char* block = segment_->data() + at;
        const bool copy = move.size() >= demote_copy_min_;
        s = copy ? ssd_->Put(move.key(), block, move.size(), move.checksum())
                 : ssd_->PutInPlace(move.key(), block, move.size(), move.checksum());
        if (s.ok() && copy) metrics_.demotion_copies.Increment();
        if (s.ok()) {
          // Its DRAM record goes once the write is durable (SyncRun),
          // unless the order keeps the DRAM copy (keep_dram).
          metrics_.written_ssd_local.Increment(move.size());
          metrics_.demotions_ok.Increment();
        } else {
          metrics_.demotions_failed.Increment();
          if (s.code() == absl::StatusCode::kDataLoss) metrics_.checksum_failures.Increment();
        }
      }
      break;
    case v1::TierMove::DROP_SSD:
      return std::move(ExecuteDrops({move}).front());
    case v1::TierMove::VERIFY:
      s = VerifyReplica(move);
      if (!s.ok()) {
        SHELF_LOG(WARNING) << "replica reported corrupt: verified" << Kv("error", s.message());
      }
      break;
    default:
      s = absl::InvalidArgumentError("unknown tier move");
  }
  result.set_ok(s.ok());
  if (!s.ok()) result.set_error(std::string(s.message()));
  return result;
}

absl::Status Store::VerifyReplica(const v1::TierMove& move) {
  if (move.tier() == v1::TIER_DRAM) {
    uint64_t at = 0;
    if (!ToGlobal(move.segment_id(), move.offset(), move.size(), &at)) {
      return absl::DataLossError("corrupt: the replica's range is outside the segment");
    }
    // Clients map the segment read-only: what is read here is what they
    // read.
    if (BlockChecksum(segment_->data() + at, move.size()) != move.checksum()) {
      metrics_.checksum_failures.Increment();
      return absl::DataLossError("corrupt: the DRAM bytes do not match their checksum");
    }
    return absl::OkStatus();
  }
  if (ssd_ == nullptr) return absl::DataLossError("corrupt: no SSD tier holds it");
  std::string bytes;
  absl::Status s = ssd_->Get(move.key(), &bytes);
  if (s.code() == absl::StatusCode::kNotFound || s.code() == absl::StatusCode::kDataLoss) {
    return absl::DataLossError(absl::StrCat("corrupt: ", s.message()));
  }
  if (!s.ok()) return s;  // not checked: the master keeps the replica
  if (bytes.size() != move.size() || BlockChecksum(bytes.data(), bytes.size()) != move.checksum()) {
    metrics_.checksum_failures.Increment();
    return absl::DataLossError("corrupt: the SSD bytes do not match their checksum");
  }
  return absl::OkStatus();
}

std::vector<v1::TierMoveResult> Store::ExecuteDrops(const std::vector<v1::TierMove>& drops) {
  // Fault injection for tests: SHELF_FAULT_DELAY_SSD_DROP_MS holds drops
  // back that long (or until the store stops), as a mover busy with
  // demotions would. Unset in production.
  static const char* delay = std::getenv("SHELF_FAULT_DELAY_SSD_DROP_MS");
  if (delay != nullptr) {
    MutexLock lock(&mu_);
    const uint64_t until = clock_->NowMs() + std::strtoull(delay, nullptr, 10);
    while (!stopping_.load() && WaitBefore(&stop_cv_, until)) {
    }
  }
  std::vector<std::string> keys;
  keys.reserve(drops.size());
  for (const v1::TierMove& m : drops) keys.push_back(m.key());
  const absl::Status s = ssd_ == nullptr ? absl::OkStatus() : ssd_->DeleteMany(keys);
  std::vector<v1::TierMoveResult> results(drops.size());
  MutexLock lock(&mu_);
  for (size_t i = 0; i < drops.size(); ++i) {
    const v1::TierMove& m = drops[i];
    auto it = ssd_drops_pending_.find(m.key());
    if (it != ssd_drops_pending_.end() && --it->second == 0) ssd_drops_pending_.erase(it);
    v1::TierMoveResult& r = results[i];
    r.set_move_id(m.move_id());
    r.set_key(m.key());
    r.set_generation(m.generation());
    r.set_kind(m.kind());
    r.set_ok(s.ok());
    if (!s.ok()) r.set_error(std::string(s.message()));
  }
  return results;
}

absl::Status Store::HeartbeatOnce(bool* more_work) {
  v1::HeartbeatRequest req;
  req.set_node_id(node_id_);
  req.set_incarnation(incarnation_);
  req.set_dram_used_bytes(0);
  {
    // Long-poll only when idle: with moves queued or results to report,
    // come back quickly instead.
    MutexLock lock(&mu_);
    bool idle = moves_.empty() && !moving_ && syncs_running_ == 0 && results_.empty();
    req.set_wait_for_orders_ms(idle ? static_cast<uint32_t>(heartbeat_interval_ms_) : 0);
    req.set_acks_orders(true);
    req.set_orders_acked(orders_taken_);
    req.set_registration_id(registration_id_);
  }
  if (ssd_ != nullptr) {
    req.set_ssd_used_bytes(ssd_->used_bytes());
    req.set_ssd_capacity_bytes(ssd_->capacity_bytes());
  }
  std::vector<v1::TierMoveResult> sent;
  {
    MutexLock lock(&mu_);
    size_t bytes = 0, n = 0;
    while (n < results_.size() && bytes < kReportBytesMax) bytes += results_[n++].ByteSizeLong();
    sent.assign(std::make_move_iterator(results_.begin()),
                std::make_move_iterator(results_.begin() + static_cast<ptrdiff_t>(n)));
    results_.erase(results_.begin(), results_.begin() + static_cast<ptrdiff_t>(n));
  }
  for (const auto& r : sent) *req.add_moves() = r;
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token_, options_.rpc_timeout_ms);
  std::string address;
  v1::MasterService::Stub* master = Master(&address);
  absl::Status s = master == nullptr ? absl::UnavailableError("no leading master known yet")
                                     : FromGrpc(master->Heartbeat(&ctx, req, &resp));
  if (s.ok() && LoseAnswerForTest(resp)) s = absl::DeadlineExceededError("answer lost (fault)");
  if (!s.ok()) {
    if (master != nullptr) MasterFailed(address, s);
    // Not delivered: report again next time.
    MutexLock lock(&mu_);
    results_.insert(results_.begin(), sent.begin(), sent.end());
    return s;
  }
  MutexLock lock(&mu_);
  if (resp.term() != max_term_) {
    // Older: a deposed leader. Newer: a term this store has not registered
    // under (and so not checked against etcd): register again first.
    // Either way the leader has not heard the reports.
    results_.insert(results_.begin(), sent.begin(), sent.end());
    if (resp.term() > max_term_) registered_.store(false);
    return absl::UnavailableError(absl::StrCat("heartbeat answered by term ", resp.term(),
                                               ", registered under ", max_term_, ": ignored"));
  }
  if (resp.reregister()) {
    // The drops' reports outlive the registration (Register keeps them).
    for (v1::TierMoveResult& r : sent) {
      if (r.kind() == v1::TierMove::DROP_SSD) results_.push_back(std::move(r));
    }
    registered_.store(false);
    return absl::OkStatus();
  }
  // An answer holds every order the master has not seen acknowledged,
  // lowest number first: those taken from an earlier answer (whose
  // acknowledgement was lost) are skipped.
  const uint64_t taken_before = orders_taken_;
  for (const v1::TierMove& m : resp.moves()) {
    if (m.seq() != 0) {
      if (m.seq() <= taken_before) continue;
      orders_taken_ = std::max(orders_taken_, m.seq());
    }
    if (m.term() != 0 && m.term() < max_term_) continue;  // an older term's order
    if (m.kind() == v1::TierMove::RECORD || m.kind() == v1::TierMove::FORGET) {
      NoteLocked(m);
    } else {
      if (m.kind() == v1::TierMove::DROP_SSD) ++ssd_drops_pending_[m.key()];
      moves_.push_back(m);
    }
  }
  // A call that did not long-poll (work was under way) is followed at once
  // by one that does: the master holds that one until its next orders, so
  // a demotion ordered meanwhile starts then, not a whole interval later
  // (writers wait for the room it frees).
  // So is a long poll the master ended early with orders or notices: it
  // does so as soon as it has them, so the next may come at once (sleeping
  // out the interval would hold the next commits' notices that long).
  *more_work = !moves_.empty() || moving_ || syncs_running_ > 0 || !results_.empty() ||
               req.wait_for_orders_ms() == 0 || resp.moves_size() > 0;
  moves_cv_.Signal();
  return absl::OkStatus();
}

void Store::NoteLocked(const v1::TierMove& notice) {
  uint64_t start = 0;
  if (!ToGlobal(notice.segment_id(), notice.offset(), notice.size(), &start)) return;
  if (notice.kind() == v1::TierMove::FORGET) {
    auto it = dram_records_.find(start);
    if (it != dram_records_.end() && it->second.key == notice.key()) EraseRecordLocked(it);
    return;
  }
  if (arenas_ > 0) {
    // The arena's first block names its tenant for good (SegmentInfo).
    arena_tenants_.resize(arenas_);
    std::optional<std::string>& tenant = arena_tenants_[SegmentOf(start)];
    if (!tenant.has_value()) {
      const size_t slash = notice.key().find('/');
      tenant = slash == std::string::npos ? std::string() : notice.key().substr(0, slash);
    }
  }
  // RECORD: drop any record overlapping the new block's range.
  uint64_t end = start + notice.size();
  auto it = dram_records_.lower_bound(start);
  if (it != dram_records_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size > start) it = prev;
  }
  while (it != dram_records_.end() && it->first < end) it = EraseRecordLocked(it);
  // One record per key: an older range of the same key (a promotion's, a
  // replace whose FORGET has not come yet) is no longer its current copy.
  if (auto k = dram_by_key_.find(notice.key()); k != dram_by_key_.end()) {
    EraseRecordLocked(dram_records_.find(k->second));
  }
  auto [rec, inserted] = dram_records_.emplace(
      start, Record{notice.key(), notice.size(), notice.checksum(), notice.generation()});
  SHELF_CHECK(inserted);
  dram_by_key_[rec->second.key] = start;
  // On the board only with a generation: a reader's tag names one.
  if (notice.generation() != 0) {
    owners_.Publish(start, notice.size(), transport::wire::KeyDigest(notice.key()),
                    transport::KeyBoardTag(notice.key(), notice.generation()));
  }
}

std::map<uint64_t, Store::Record>::iterator Store::EraseRecordLocked(
    std::map<uint64_t, Record>::iterator it) {
  auto k = dram_by_key_.find(it->second.key);
  if (k != dram_by_key_.end() && k->second == it->first) dram_by_key_.erase(k);
  owners_.Unpublish(it->first);
  return dram_records_.erase(it);
}

bool Store::WaitBefore(CondVar* cv, uint64_t deadline_ms) {
  const uint64_t now = clock_->NowMs();
  if (now >= deadline_ms) return false;
  cv->WaitFor(&mu_, std::chrono::milliseconds(deadline_ms - now));
  return true;
}

void Store::MoverLoop() {
  // Holds mu_ but while a move, a sync or a promotion runs: each releases
  // it (Unlock) and takes it back (Lock) before the loop reads moves_ again.
  mu_.Lock();
  while (!stopping_.load()) {
    const uint64_t deadline = clock_->NowMs() + 100;
    while (moves_.empty() && promotions_.empty() && !stopping_.load() &&
           WaitBefore(&moves_cv_, deadline)) {
    }
    // A run of moves is reported only once what it wrote to SSD is
    // durable (SsdTier::SyncAsync): the master frees a demoted block's DRAM
    // range on the report, so the SSD copy must survive a crash by then.
    // Runs are cut at kSyncBytes so reports keep flowing under load; the
    // next run's writes start while the last one syncs (SyncRun).
    //
    // `run` holds the demotions executed since the last cut; they reach
    // results_ (and so the next heartbeat) only once synced. So do the
    // drops (their deletes are durable at that sync too), reported only to
    // a master that numbers its orders: it then knows the key is gone even
    // if this store dies before its next registration. An older master
    // would take the report for a demotion's. A drop counts as one byte
    // to sync: a run of drops alone syncs once, when the queue runs out.
    std::vector<v1::TierMoveResult> run;
    Demoted demoted;
    uint64_t unsynced = 0;
    while (!moves_.empty() && !stopping_.load()) {
      // One move, or a run of SSD drops: the tier deletes them with one
      // index write (a full SSD tier drops a block for each demotion).
      std::vector<v1::TierMove> batch;
      do {
        batch.push_back(std::move(moves_.front()));
        moves_.pop_front();
      } while (batch.front().kind() == v1::TierMove::DROP_SSD && !moves_.empty() &&
               moves_.front().kind() == v1::TierMove::DROP_SSD && batch.size() < kDropBatchMax);
      moving_ = true;
      mu_.Unlock();
      std::vector<v1::TierMoveResult> results;
      if (batch.front().kind() == v1::TierMove::DROP_SSD) {
        results = ExecuteDrops(batch);
      } else {
        results.push_back(Execute(batch.front()));
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        const v1::TierMove& m = batch[i];
        v1::TierMoveResult& result = results[i];
        if (m.kind() == v1::TierMove::DEMOTE) {
          if (result.ok()) {
            unsynced += m.size();
            ++demotions_unsynced_;
            // Records are keyed by the offset in the whole segment; an
            // order names its arena and the offset in it.
            // A demotion that keeps the DRAM copy keeps its record too.
            uint64_t at = 0;
            if (!m.keep_dram() && ToGlobal(m.segment_id(), m.offset(), m.size(), &at)) {
              demoted.emplace_back(m.key(), at);
            }
          }
          run.push_back(std::move(result));
        } else if (m.kind() == v1::TierMove::DROP_SSD && m.seq() != 0) {
          if (result.ok()) ++unsynced;
          run.push_back(std::move(result));
        } else if (m.kind() == v1::TierMove::VERIFY) {
          // Nothing to sync: reported with the next heartbeat.
          MutexLock report(&mu_);
          results_.push_back(std::move(result));
          stop_cv_.SignalAll();
        }
      }
      bool last = false;
      {
        MutexLock peek(&mu_);
        last = moves_.empty();
      }
      bool flush = last || unsynced == 0 || unsynced >= kSyncBytes || run.size() >= kRunResultsMax;
      if (flush) SyncRun(&run, &demoted, &unsynced);
      mu_.Lock();
      moving_ = false;
    }
    if (!run.empty()) {
      // Stopping with demotions executed but not synced: make them durable
      // and report them, so the master hears of what is on SSD.
      mu_.Unlock();
      SyncRun(&run, &demoted, &unsynced);
      mu_.Lock();
    }
    // Master orders first; promotions are best effort.
    if (moves_.empty() && !promotions_.empty() && registered_.load()) {
      Promotion p = std::move(promotions_.front());
      promotions_.pop_front();
      mu_.Unlock();
      Promote(p);
      mu_.Lock();
    }
  }
  // The syncs under way report before the store goes.
  while (syncs_running_ > 0) syncs_cv_.Wait(&mu_);
  mu_.Unlock();
}

void Store::Promote(const Promotion& p) {
  v1::PromoteRequest req;
  req.set_node_id(node_id_);
  req.set_incarnation(incarnation_);
  req.set_key(p.key);
  req.set_size(p.data.size());
  req.set_checksum(p.checksum);
  v1::PromoteResponse resp;
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token_, options_.rpc_timeout_ms);
    std::string address;
    v1::MasterService::Stub* master = Master(&address);
    if (master == nullptr || !master->Promote(&ctx, req, &resp).ok() || resp.promote_id() == 0) {
      return;
    }
  }
  uint64_t at = 0;
  bool ok = ToGlobal(resp.segment_id(), resp.offset(), p.data.size(), &at);
  // The copy claims its range as a put's write does (range_owners.h).
  ok = ok &&
       owners_.BeginWrite(at, p.data.size(), resp.range_seq(), transport::wire::KeyDigest(p.key))
           .ok();
  if (ok) {
    std::memcpy(segment_->data() + at, p.data.data(), p.data.size());
    owners_.EndWrite(at, resp.range_seq());
  }
  v1::PromoteCommitRequest commit;
  commit.set_node_id(node_id_);
  commit.set_promote_id(resp.promote_id());
  commit.set_ok(ok);
  v1::PromoteCommitResponse unused;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token_, options_.rpc_timeout_ms);
  std::string address;
  v1::MasterService::Stub* master = Master(&address);
  if (master != nullptr && master->PromoteCommit(&ctx, commit, &unused).ok() && ok) {
    metrics_.promotions.Increment();
    v1::TierMove note;
    note.set_kind(v1::TierMove::RECORD);
    note.set_key(p.key);
    note.set_segment_id(resp.segment_id());
    note.set_offset(resp.offset());
    note.set_size(p.data.size());
    note.set_checksum(p.checksum);
    // Its generation, so that READ_KEY tells it from a later commit of the
    // key (an older master sends 0: unknown).
    note.set_generation(resp.generation());
    MutexLock lock(&mu_);
    NoteLocked(note);
  }
}

void Store::TrustBoard(uint64_t heard_after_mono_ms) {
  if (board_ == nullptr) return;
  MutexLock lock(&mu_);  // ordered with Stop's
  if (!stopping_.load()) board_->TrustUntil(heard_after_mono_ms + node_ttl_ms_);
}

void Store::Run() {
  std::thread mover([this] { MoverLoop(); });
  // A new leader named in etcd ends the wait below at once: after the old
  // leader died, the backoff would otherwise hold the store up to 2 s past
  // the election, and the new leader's recovery waits for every store.
  locator_->SetListener([this] {
    MutexLock lock(&mu_);
    ++leader_changes_;
    stop_cv_.SignalAll();
  });
  uint64_t backoff_ms = 100;
  std::mt19937_64 rng(incarnation_);
  uint64_t last_error_log = 0;
  while (!stopping_.load()) {
    absl::Status s;
    bool more = false;
    uint64_t started = clock_->NowMs();
    const uint64_t started_mono_ms = MonoMs();
    if (!registered_.load()) {
      s = Register();
      // The first heartbeat follows at once (it long-polls): orders for a
      // new registration, such as the demotions that make room for its
      // first writers, reach the store as they are made, not a heartbeat
      // interval later while those writers wait.
      more = true;
    } else {
      s = HeartbeatOnce(&more);
    }
    uint64_t sleep_ms;
    if (s.ok()) {
      backoff_ms = 100;
      // The master heard this store after started_mono_ms: it declares the
      // store dead no sooner than a node TTL after that, and only then may
      // place its keys anew.
      if (registered_.load()) TrustBoard(started_mono_ms);
      MutexLock lock(&mu_);
      // The master holds a heartbeat while it has no orders (long poll),
      // so sleep only what is left of the interval.
      uint64_t took = clock_->NowMs() - started;
      sleep_ms = more ? 10 : (took >= heartbeat_interval_ms_ ? 0 : heartbeat_interval_ms_ - took);
      if (!registered_.load()) sleep_ms = 0;
    } else {
      if (clock_->NowMs() - last_error_log > 5000) {
        SHELF_LOG(WARNING) << "master unreachable" << Kv("master", locator_->Current())
                           << Kv("error", s.message());
        last_error_log = clock_->NowMs();
      }
      // Bounded exponential backoff with jitter.
      sleep_ms = backoff_ms / 2 + rng() % (backoff_ms / 2 + 1);
      backoff_ms = std::min<uint64_t>(backoff_ms * 2, 2000);
    }
    MutexLock lock(&mu_);
    uint64_t changes = leader_changes_;
    // Results to report end a short sleep at once (not a backoff: a master
    // that failed would be called in a loop).
    const bool report_early = s.ok() && more;
    const uint64_t deadline = clock_->NowMs() + sleep_ms;
    while (!stopping_.load() && leader_changes_ == changes &&
           !(report_early && !results_.empty()) && WaitBefore(&stop_cv_, deadline)) {
    }
    if (leader_changes_ != changes) backoff_ms = 100;
  }
  locator_->SetListener(nullptr);
  moves_cv_.SignalAll();
  mover.join();
}

}  // namespace shelf::store
