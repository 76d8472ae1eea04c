// Fuzzes the master's request handling in process (server/master/master.h):
// the input is a program of calls (RegisterStore with inventories,
// Heartbeat with move results, PutStart/Commit/Abort, Lookup, MatchPrefix,
// Remove, Promote, Evict, Pin, Drain, Stat, Tick), with keys, node ids and
// sizes drawn from small sets so that calls collide, plus raw protobuf
// requests parsed from the bytes. After every call the master's own
// CheckInvariants runs (it aborts on a violation), and answers are checked
// against the API's promises (limits answer INVALID_ARGUMENT, a lookup
// answers one location per key, ...).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/prom.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/shelf.pb.h"
#include "server/master/master.h"
#include "tests/fuzz/fuzz_input.h"

namespace shelf {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "master_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

// SHELF_FUZZ_TRACE=1 prints every call and its answer (to read a crash).
bool Tracing() {
  static const bool on = std::getenv("SHELF_FUZZ_TRACE") != nullptr;
  return on;
}

void Trace(const char* call, const google::protobuf::Message& req, const absl::Status& s) {
  if (Tracing()) {
    std::fprintf(stderr, "%s {%s} -> %s\n", call, req.ShortDebugString().c_str(),
                 s.ToString().c_str());
  }
}

class Program {
 public:
  explicit Program(fuzz::FuzzInput& in) : in_(in) {
    master::MasterOptions o;
    // 0 makes the time-based work of Tick (expiry, liveness) happen at the
    // next tick; a minute keeps it from ever happening within one input.
    o.node_ttl_ms = in_.Bool() ? 0 : 60000;
    o.heartbeat_interval_ms = 1;
    o.put_timeout_ms = in_.Bool() ? 0 : 60000;
    o.lease_ms = in_.Bool() ? 0 : 60000;
    o.demote_wait_ms = 0;  // never block the fuzzer
    o.block_bytes_max = 1 << 20;
    o.evict_high = 0.9;
    o.evict_low = 0.5;
    master_ = std::make_unique<master::Master>(o, &registry_);
  }

  void Run() {
    for (int step = 0; step < 200 && !in_.empty(); ++step) {
      Step();
      master_->CheckInvariants();
    }
    master_->Tick();
    master_->CheckInvariants();
  }

 private:
  std::string Key() {
    switch (in_.Pick(16)) {
      case 0:
        return "";
      case 1:
        return std::string(256 + in_.Pick(2), 'k');
      case 2:
        return in_.Bytes(in_.Pick(8));
      default:
        return std::string(1, static_cast<char>('a' + in_.Pick(6)));
    }
  }
  std::string NodeId() {
    switch (in_.Pick(12)) {
      case 0:
        return "";
      case 1:
        return std::string(128 + in_.Pick(2), 'n');
      default:
        return "n" + std::to_string(in_.Pick(4));
    }
  }
  uint64_t Size() {
    static const uint64_t kSizes[] = {0, 1, 4095, 4096, 4097, 65536, 1 << 20, (1 << 20) + 1};
    return in_.Pick(6) == 0 ? in_.U64() : kSizes[in_.Pick(8)];
  }
  uint64_t Capacity() {
    static const uint64_t kCaps[] = {0, 4095, 4096, 16384, 65536, 1 << 20, 4 << 20};
    return in_.Pick(8) == 0 ? in_.U64() : kCaps[in_.Pick(7)];
  }
  uint64_t PutId() {
    if (!put_ids_.empty() && in_.Pick(4) != 0) return put_ids_[in_.Pick(put_ids_.size())];
    return in_.Pick(8);
  }

  void Register() {
    v1::RegisterStoreRequest req;
    req.set_protocol_version(in_.Pick(8) == 0 ? in_.U8() : 1);
    std::string id = NodeId();
    v1::StoreEndpoint* ep = req.mutable_endpoint();
    ep->set_node_id(id);
    ep->set_data_address(in_.Pick(8) == 0 ? "" : "127.0.0.1:1");
    ep->set_host_id("host" + std::to_string(in_.Pick(2)));
    if (in_.Bool()) (*req.mutable_labels())["zone"] = std::to_string(in_.Pick(3));
    int segments = in_.Pick(4);
    for (int i = 0; i < segments; ++i) {
      v1::SegmentInfo* s = req.add_segments();
      s->set_segment_id(in_.Pick(3));
      s->set_capacity_bytes(Capacity());
    }
    req.set_ssd_capacity_bytes(in_.Bool() ? Capacity() : 0);
    int entries = in_.Pick(5);
    for (int i = 0; i < entries; ++i) {
      v1::InventoryEntry* e = req.add_inventory();
      e->set_key(Key());
      e->set_size(Size());
      e->set_checksum(in_.Pick(3));
      e->set_tier(static_cast<v1::Tier>(in_.Pick(4)));
      e->set_segment_id(in_.Pick(3));
      e->set_offset(in_.Pick(4) == 0 ? in_.U64() : 4096ull * in_.Pick(300));
    }
    uint64_t incarnation = 1 + in_.Pick(3);
    req.set_incarnation(incarnation);
    v1::RegisterStoreResponse resp;
    absl::Status s = master_->RegisterStore(req, &resp);
    Trace("RegisterStore", req, s);
    if (s.ok()) {
      incarnations_[id] = incarnation;
      Check(!resp.grant_key().empty(), "registration hands out the grant key");
    }
  }

  void Heartbeat() {
    v1::HeartbeatRequest req;
    std::string id = NodeId();
    req.set_node_id(id);
    auto it = incarnations_.find(id);
    req.set_incarnation(it != incarnations_.end() && in_.Pick(4) != 0 ? it->second : in_.Pick(3));
    int moves = in_.Pick(3);
    for (int i = 0; i < moves; ++i) {
      v1::TierMoveResult* m = req.add_moves();
      m->set_move_id(in_.Pick(16));
      m->set_key(Key());
      m->set_ok(in_.Bool());
    }
    req.set_wait_for_orders_ms(0);
    v1::HeartbeatResponse resp;
    absl::Status s = master_->Heartbeat(req, &resp);
    Trace("Heartbeat", req, s);
    if (Tracing()) std::fprintf(stderr, "  orders {%s}\n", resp.ShortDebugString().c_str());
    // Carry out the orders the way a store would, and report next time.
    for (const v1::TierMove& m : resp.moves()) pending_moves_[id].push_back(m);
  }

  void Report() {
    if (pending_moves_.empty()) return;
    auto it = pending_moves_.begin();
    std::advance(it, in_.Pick(pending_moves_.size()));
    v1::HeartbeatRequest req;
    req.set_node_id(it->first);
    auto inc = incarnations_.find(it->first);
    req.set_incarnation(inc != incarnations_.end() ? inc->second : 0);
    for (const v1::TierMove& m : it->second) {
      v1::TierMoveResult* r = req.add_moves();
      r->set_move_id(m.move_id());
      r->set_key(m.key());
      r->set_ok(in_.Pick(4) != 0);
    }
    pending_moves_.erase(it);
    v1::HeartbeatResponse resp;
    Trace("Heartbeat(report)", req, master_->Heartbeat(req, &resp));
  }

  void PutStart() {
    v1::PutStartRequest req;
    req.set_key(Key());
    req.set_size(Size());
    req.set_checksum(in_.Pick(3));
    req.mutable_options()->set_replicas(in_.Pick(10));
    req.mutable_options()->set_best_effort(in_.Bool());
    req.mutable_options()->set_prefer_local(in_.Bool());
    req.mutable_options()->set_spread_label(in_.Bool() ? "zone" : "");
    if (in_.Pick(8) == 0) req.set_parent_key(Key());
    v1::PutStartResponse resp;
    absl::Status s = master_->PutStart(req, "host" + std::to_string(in_.Pick(2)), "fuzz", &resp);
    Trace("PutStart", req, s);
    if (Tracing()) std::fprintf(stderr, "  -> {%s}\n", resp.ShortDebugString().c_str());
    bool bad = req.key().empty() || req.key().size() > 256 || req.size() == 0 ||
               req.size() > (1 << 20) || req.options().replicas() > 8 ||
               req.parent_key().size() > 256;
    if (bad) Check(s.code() == absl::StatusCode::kInvalidArgument, "PutStart limits");
    if (s.ok() && resp.state() == v1::PUT_STARTED) {
      Check(resp.replicas_size() == resp.grants_size() && resp.replicas_size() > 0,
            "one grant per replica");
      put_ids_.push_back(resp.put_id());
    }
  }

  void Commit(bool abort) {
    int n = in_.Pick(3);
    std::vector<uint64_t> ids;
    ids.reserve(n);
    for (int i = 0; i < n; ++i) ids.push_back(PutId());
    if (abort) {
      v1::PutAbortRequest req;
      for (uint64_t id : ids) req.add_put_ids(id);
      v1::PutAbortResponse resp;
      master_->PutAbort(req, "fuzz", &resp);
      Trace("PutAbort", req, absl::OkStatus());
      Check(resp.statuses_size() == n, "one abort status per id");
    } else {
      v1::PutCommitRequest req;
      for (uint64_t id : ids) {
        req.add_put_ids(id);
      }
      n = req.put_ids_size();
      v1::PutCommitResponse resp;
      master_->PutCommit(req, "fuzz", &resp);
      Trace("PutCommit", req, absl::OkStatus());
      if (Tracing()) std::fprintf(stderr, "  -> {%s}\n", resp.ShortDebugString().c_str());
      Check(resp.statuses_size() == n, "one commit status per id");
    }
  }

  void Read(int which) {
    int n = in_.Pick(4);
    std::vector<std::string> keys;
    keys.reserve(n);
    for (int i = 0; i < n; ++i) keys.push_back(Key());
    bool bad = n == 0;
    for (const std::string& k : keys) bad |= k.empty() || k.size() > 256;
    bool no_lease = in_.Bool();
    absl::Status s;
    if (which == 0) {
      v1::LookupRequest req;
      for (const std::string& k : keys) req.add_keys(k);
      req.set_no_lease(no_lease);
      v1::LookupResponse resp;
      s = master_->Lookup(req, &resp);
      Trace("Lookup", req, s);
      if (s.ok()) {
        Check(resp.objects_size() == n, "one location per key");
        for (const v1::ObjectLocation& o : resp.objects()) {
          if (o.found()) Check(o.size() > 0, "found objects have a size");
        }
      }
    } else if (which == 1) {
      v1::MatchPrefixRequest req;
      for (const std::string& k : keys) req.add_keys(k);
      req.set_no_lease(no_lease);
      v1::MatchPrefixResponse resp;
      s = master_->MatchPrefix(req, &resp);
      Trace("MatchPrefix", req, s);
      if (s.ok()) {
        Check(resp.matched() <= static_cast<uint32_t>(n) &&
                  resp.objects_size() == static_cast<int>(resp.matched()),
              "prefix match answers the matched objects");
      }
    } else {
      v1::RemoveRequest req;
      for (const std::string& k : keys) req.add_keys(k);
      req.set_force(in_.Bool());
      v1::RemoveResponse resp;
      s = master_->Remove(req, &resp);
      Trace("Remove", req, s);
      if (s.ok()) Check(resp.statuses_size() == n, "one remove status per key");
    }
    if (bad) Check(s.code() == absl::StatusCode::kInvalidArgument, "read limits");
  }

  void Promote() {
    v1::PromoteRequest req;
    std::string id = NodeId();
    req.set_node_id(id);
    auto it = incarnations_.find(id);
    req.set_incarnation(it != incarnations_.end() ? it->second : 0);
    req.set_key(Key());
    req.set_size(Size());
    req.set_checksum(in_.Pick(3));
    v1::PromoteResponse resp;
    absl::Status ps = master_->Promote(req, &resp);
    Trace("Promote", req, ps);
    if (ps.ok() && resp.promote_id() != 0) {
      v1::PromoteCommitRequest commit;
      commit.set_node_id(id);
      commit.set_promote_id(in_.Pick(4) == 0 ? in_.U8() : resp.promote_id());
      commit.set_ok(in_.Pick(4) != 0);
      if (in_.Bool()) Trace("PromoteCommit", commit, master_->PromoteCommit(commit));
    }
  }

  void Admin() {
    switch (in_.Pick(6)) {
      case 0: {
        v1::EvictRequest req;
        req.set_bytes(in_.Bool() ? in_.U64() : in_.Pick(3) * 65536);
        if (in_.Bool()) req.set_node(NodeId());
        v1::EvictResponse resp;
        Trace("Evict", req, master_->Evict(req, &resp));
        break;
      }
      case 1: {
        v1::PinRequest req;
        req.set_key(Key());
        req.set_unpin(in_.Bool());
        req.set_hard(in_.Bool());
        req.set_ttl_ms(in_.Pick(3));
        Trace("Pin", req, master_->Pin(req));
        break;
      }
      case 2: {
        v1::DrainRequest req;
        req.set_node(NodeId());
        req.set_undrain(in_.Bool());
        v1::DrainResponse resp;
        Trace("Drain", req, master_->Drain(req, &resp));
        break;
      }
      case 3: {
        v1::StatRequest req;
        req.set_key(Key());
        v1::StatResponse resp;
        master_->Stat(req, &resp).IgnoreError();
        break;
      }
      case 4: {
        v1::StatusResponse st;
        master_->Status(&st);
        v1::SegmentsResponse sg;
        master_->Segments(&sg);
        break;
      }
      default:
        registry_.Render();
    }
  }

  // A request parsed straight from the bytes (whatever protobuf makes of
  // them), for the fields the structured calls above never set.
  void Raw() {
    std::string bytes = in_.Bytes(in_.Pick(64));
    switch (in_.Pick(5)) {
      case 0: {
        v1::PutStartRequest req;
        if (!req.ParseFromString(bytes)) return;
        v1::PutStartResponse resp;
        Trace("PutStart(raw)", req,
              master_->PutStart(req, req.options().client_host_id(), "fuzz", &resp));
        if (resp.state() == v1::PUT_STARTED) {
          put_ids_.push_back(resp.put_id());
        }
        break;
      }
      case 1: {
        v1::LookupRequest req;
        if (!req.ParseFromString(bytes)) return;
        v1::LookupResponse resp;
        Trace("Lookup(raw)", req, master_->Lookup(req, &resp));
        break;
      }
      case 2: {
        v1::MatchPrefixRequest req;
        if (!req.ParseFromString(bytes)) return;
        v1::MatchPrefixResponse resp;
        Trace("MatchPrefix(raw)", req, master_->MatchPrefix(req, &resp));
        break;
      }
      case 3: {
        v1::RemoveRequest req;
        if (!req.ParseFromString(bytes)) return;
        v1::RemoveResponse resp;
        Trace("Remove(raw)", req, master_->Remove(req, &resp));
        break;
      }
      default: {
        v1::RegisterStoreRequest req;
        if (!req.ParseFromString(bytes)) return;
        v1::RegisterStoreResponse resp;
        absl::Status rs = master_->RegisterStore(req, &resp);
        Trace("RegisterStore(raw)", req, rs);
        if (rs.ok()) {
          incarnations_[req.endpoint().node_id()] = req.incarnation();
        }
      }
    }
  }

  void Step() {
    switch (in_.Pick(16)) {
      case 0:
      case 1:
        return Register();
      case 2:
        return Heartbeat();
      case 3:
        return Report();
      case 4:
      case 5:
      case 6:
        return PutStart();
      case 7:
        return Commit(false);
      case 8:
        return Commit(true);
      case 9:
        return Read(0);
      case 10:
        return Read(1);
      case 11:
        return Read(2);
      case 12:
        return Promote();
      case 13:
        return Admin();
      case 14:
        if (Tracing()) std::fprintf(stderr, "Tick\n");
        return master_->Tick();
      default:
        return Raw();
    }
  }

  fuzz::FuzzInput& in_;
  prom::Exposition registry_;
  std::unique_ptr<master::Master> master_;
  std::map<std::string, uint64_t> incarnations_;
  std::map<std::string, std::vector<v1::TierMove>> pending_moves_;
  std::vector<uint64_t> put_ids_;
};

}  // namespace
}  // namespace shelf

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Quiet: the master logs every odd request, protobuf every bad string.
  static const bool quiet = [] {
    if (!shelf::Tracing()) shelf::SetLogLevel(shelf::LogLevel::kError);
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  shelf::fuzz::FuzzInput in(data, size);
  shelf::Program program(in);
  program.Run();
  return 0;
}
