// shelfctl: the Shelf admin CLI. `shelfctl --help` lists the commands.
//
// Exit status: 0 success; 1 other failure; 2 usage error; 3 NOT_FOUND;
// 4 UNAVAILABLE or DEADLINE_EXCEEDED (cluster unreachable or too slow);
// 5 UNAUTHENTICATED or PERMISSION_DENIED (wrong or missing secret);
// 6 RESOURCE_EXHAUSTED. Errors print "shelfctl: CODE: message" on stderr.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/data_tls_flags.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/net.h"
#include "common/rpc.h"
#include "common/units.h"
#include "coord/etcd_flags.h"
#include "coord/master_locator.h"
#include "proto/shelf.grpc.pb.h"
#include "shelf/client.h"
#include "tools/plan.h"

namespace shelf {
namespace {

struct Globals {
  std::string master = "127.0.0.1:7000";
  bool json = false;
  uint64_t timeout_ms = 5000;
  std::string secret_file;
  std::string tls_ca, tls_cert, tls_key;
  // The data plane's TLS (--data-tls...): what a client-side command needs
  // to reach stores run with --data-tls.
  ClientOptions data_tls;
  coord::EtcdOptions etcd;  // for an etcd:// --master
  std::string secret;
  // A principal of the master's --credentials (docs/security.md).
  std::string credentials_file, principal;
  // Command options.
  int64_t replicas = 1;
  bool best_effort = false;
  uint64_t bytes = 0;
  std::string node;
  uint64_t ttl_ms = 0;
  bool hard = false;
  bool copy = false;
  uint64_t interval_ms = 1000;
  int64_t iterations = 0;
};

// What every client-side command opens libshelf with, but the masters.
ClientOptions ClientOptionsOf(const Globals& g, uint64_t timeout_ms) {
  ClientOptions opts = g.data_tls;
  opts.secret = g.secret;
  opts.credentials_file = g.credentials_file;
  opts.principal = g.principal;
  opts.timeout_ms = timeout_ms;
  opts.tls_ca = g.tls_ca;
  opts.tls_cert = g.tls_cert;
  opts.tls_key = g.tls_key;
  return opts;
}

int ExitCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
      return 2;
    case absl::StatusCode::kNotFound:
      return 3;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return 4;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return 5;
    case absl::StatusCode::kResourceExhausted:
      return 6;
    default:
      return 1;
  }
}

const char* Hint(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
      return " (is shelf-master running at --master? check the address and port)";
    case absl::StatusCode::kUnauthenticated:
      return " (pass the cluster's --secret-file)";
    case absl::StatusCode::kDeadlineExceeded:
      return " (raise --timeout, or check the cluster's load)";
    default:
      return "";
  }
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "shelfctl: %s: %s%s\n", absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str(), Hint(s.code()));
  return ExitCode(s.code());
}

int Fail(const Status& s) {
  return Fail(absl::Status(static_cast<absl::StatusCode>(s.code()), s.message()));
}

int Usage(const std::string& msg) {
  std::fprintf(stderr, "shelfctl: %s\nRun 'shelfctl --help' for the commands.\n", msg.c_str());
  return 2;
}

const char* StateName(v1::NodeState s) {
  switch (s) {
    case v1::NODE_LIVE:
      return "live";
    case v1::NODE_DRAINING:
      return "draining";
    case v1::NODE_DEAD:
      return "dead";
    default:
      return "unknown";
  }
}

const char* TierName(v1::Tier t) { return t == v1::TIER_SSD ? "ssd" : "dram"; }

Json NodeJson(const v1::NodeStatus& n) {
  Json o = Json::object();
  o["node_id"] = n.node_id();
  o["address"] = n.address();
  o["state"] = StateName(n.state());
  o["dram_capacity_bytes"] = n.dram_capacity_bytes();
  o["dram_used_bytes"] = n.dram_used_bytes();
  o["dram_clean_bytes"] = n.dram_clean_bytes();
  o["dram_demoting_bytes"] = n.dram_demoting_bytes();
  o["ssd_capacity_bytes"] = n.ssd_capacity_bytes();
  o["ssd_used_bytes"] = n.ssd_used_bytes();
  o["objects"] = n.objects();
  o["last_heartbeat_age_ms"] = n.last_heartbeat_age_ms();
  Json labels = Json::object();
  for (const auto& [k, v] : n.labels()) labels[k] = v;
  o["labels"] = labels;
  return o;
}

// {"<field>": key, "<field>_hex": hex}: keys are bytes (common/json.h).
Json KeyObject(const std::string& field, const std::string& key) {
  Json o = Json::object();
  AddBytesField(&o, field, key);
  return o;
}

// One line: the key fields and one more.
template <typename T>
std::string KeyJson(const std::string& field, const std::string& key, const char* name, T value) {
  Json o = KeyObject(field, key);
  o[name] = value;
  return JsonDump(o);
}

void PrintNodes(const google::protobuf::RepeatedPtrField<v1::NodeStatus>& nodes) {
  std::printf("%-24s %-22s %-9s %21s %21s %9s\n", "NODE", "ADDRESS", "STATE", "DRAM used/cap",
              "SSD used/cap", "OBJECTS");
  for (const v1::NodeStatus& n : nodes) {
    std::string dram =
        absl::StrCat(FormatBytes(n.dram_used_bytes()), "/", FormatBytes(n.dram_capacity_bytes()));
    std::string ssd = n.ssd_capacity_bytes() == 0
                          ? "-"
                          : absl::StrCat(FormatBytes(n.ssd_used_bytes()), "/",
                                         FormatBytes(n.ssd_capacity_bytes()));
    std::printf("%-24s %-22s %-9s %21s %21s %9llu\n", n.node_id().c_str(), n.address().c_str(),
                StateName(n.state()), dram.c_str(), ssd.c_str(),
                static_cast<unsigned long long>(n.objects()));
  }
}

class Ctl {
 public:
  explicit Ctl(Globals g) : g_(std::move(g)) {}

  absl::Status Connect() {
    auto loc = coord::MasterLocator::Create(g_.master, g_.etcd);
    if (!loc.ok()) return loc.status();
    locator_ = *std::move(loc);
    if (!g_.credentials_file.empty()) {
      absl::StatusOr<std::string> token =
          TokenFromCredentialsFile(g_.credentials_file, g_.principal);
      if (!token.ok()) return token.status();
      token_ = *std::move(token);
    } else {
      token_ = AuthToken(g_.secret);
    }
    return absl::OkStatus();
  }

  v1::AdminService::Stub* Stub(const std::string& address) {
    auto& stub = stubs_[address];
    if (stub == nullptr) {
      TlsFiles tls{g_.tls_cert, g_.tls_key, g_.tls_ca};
      auto ch = MakeChannel(address, tls);
      if (!ch.ok()) return nullptr;
      stub = v1::AdminService::NewStub(*ch);
    }
    return stub.get();
  }

  // Calls the leading master: a standby's NOT_LEADER, or an unreachable
  // master, moves on to the next candidate (or the leader it names).
  template <typename Req, typename Resp>
  absl::Status Admin(grpc::Status (v1::AdminService::Stub::*m)(grpc::ClientContext*, const Req&,
                                                               Resp*),
                     const Req& req, Resp* resp) {
    absl::Status last = absl::UnavailableError("no master to ask (etcd names no leader yet)");
    size_t attempts = locator_->Candidates().size() + 2;
    for (size_t i = 0; i < attempts; ++i) {
      std::string address = locator_->Current();
      v1::AdminService::Stub* stub = address.empty() ? nullptr : Stub(address);
      if (stub == nullptr) break;
      grpc::ClientContext ctx;
      PrepareContext(&ctx, token_, g_.timeout_ms);
      last = FromGrpc((stub->*m)(&ctx, req, resp));
      if (last.code() != absl::StatusCode::kUnavailable) return last;
      locator_->Failed(address, last);
    }
    return last;
  }

  std::vector<std::string> ClientMasters() {
    if (locator_->uses_etcd()) return {locator_->Current()};
    return locator_->Candidates();
  }

  absl::StatusOr<std::unique_ptr<Client>> OpenClient() {
    ClientOptions opts = ClientOptionsOf(g_, g_.timeout_ms);
    opts.masters = ClientMasters();
    std::unique_ptr<Client> c;
    Status s = Client::Open(opts, &c);
    if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
    return c;
  }

  int Status_() {
    v1::StatusResponse r;
    if (absl::Status s = Admin(&v1::AdminService::Stub::Status, v1::StatusRequest(), &r); !s.ok()) {
      return Fail(s);
    }
    if (!r.is_leader() && !r.leader().empty()) {
      // A standby answered: ask the leader it names.
      v1::AdminService::Stub* leader = Stub(r.leader());
      v1::StatusResponse lr;
      grpc::ClientContext ctx;
      PrepareContext(&ctx, token_, g_.timeout_ms);
      if (leader != nullptr && leader->Status(&ctx, v1::StatusRequest(), &lr).ok()) r = lr;
    }
    if (g_.json) {
      Json nodes = Json::array();
      for (const auto& n : r.nodes()) nodes.push_back(NodeJson(n));
      Json o = Json::object();
      o["version"] = r.version();
      o["leader"] = r.leader();
      o["is_leader"] = r.is_leader();
      o["term"] = r.term();
      o["recovering"] = r.recovering();
      o["objects"] = r.objects();
      o["puts_in_flight"] = r.puts_in_flight();
      o["dram_capacity_bytes"] = r.dram_capacity_bytes();
      o["dram_used_bytes"] = r.dram_used_bytes();
      o["dram_clean_bytes"] = r.dram_clean_bytes();
      o["dram_demoting_bytes"] = r.dram_demoting_bytes();
      o["ssd_capacity_bytes"] = r.ssd_capacity_bytes();
      o["ssd_used_bytes"] = r.ssd_used_bytes();
      o["uptime_ms"] = r.uptime_ms();
      o["nodes"] = nodes;
      std::printf("%s\n", JsonDump(o).c_str());
      return 0;
    }
    int live = 0;
    for (const auto& n : r.nodes()) live += n.state() != v1::NODE_DEAD;
    std::printf("Shelf %s  leader %s  term %llu%s  up %llus\n", r.version().c_str(),
                r.leader().c_str(), static_cast<unsigned long long>(r.term()),
                r.recovering() ? " (recovering)" : "",
                static_cast<unsigned long long>(r.uptime_ms() / 1000));
    std::printf("objects %llu  puts in flight %llu  nodes %d live / %d\n",
                static_cast<unsigned long long>(r.objects()),
                static_cast<unsigned long long>(r.puts_in_flight()), live, r.nodes_size());
    std::printf(
        "DRAM %s / %s (clean %s, demoting %s)   SSD %s / %s\n\n",
        FormatBytes(r.dram_used_bytes()).c_str(), FormatBytes(r.dram_capacity_bytes()).c_str(),
        FormatBytes(r.dram_clean_bytes()).c_str(), FormatBytes(r.dram_demoting_bytes()).c_str(),
        FormatBytes(r.ssd_used_bytes()).c_str(), FormatBytes(r.ssd_capacity_bytes()).c_str());
    PrintNodes(r.nodes());
    return 0;
  }

  int Nodes() {
    v1::StatusResponse r;
    if (absl::Status s = Admin(&v1::AdminService::Stub::Status, v1::StatusRequest(), &r); !s.ok()) {
      return Fail(s);
    }
    if (g_.json) {
      Json nodes = Json::array();
      for (const auto& n : r.nodes()) nodes.push_back(NodeJson(n));
      std::printf("%s\n", JsonDump(nodes).c_str());
    } else {
      PrintNodes(r.nodes());
    }
    return 0;
  }

  int Segments() {
    v1::SegmentsResponse r;
    if (absl::Status s = Admin(&v1::AdminService::Stub::Segments, v1::SegmentsRequest(), &r);
        !s.ok()) {
      return Fail(s);
    }
    if (g_.json) {
      Json out = Json::array();
      for (const auto& s : r.segments()) {
        Json o = Json::object();
        o["node_id"] = s.node_id();
        o["segment_id"] = static_cast<uint64_t>(s.segment_id());
        o["tier"] = TierName(s.tier());
        o["capacity_bytes"] = s.capacity_bytes();
        o["used_bytes"] = s.used_bytes();
        o["free_extents"] = s.free_extents();
        o["largest_free_bytes"] = s.largest_free_bytes();
        if (s.tier() == v1::TIER_DRAM) {
          o["clean_bytes"] = s.clean_bytes();
          o["demoting_bytes"] = s.demoting_bytes();
          o["dram_only_bytes"] = DramOnly(s);
        }
        out.push_back(o);
      }
      std::printf("%s\n", JsonDump(out).c_str());
      return 0;
    }
    // Of USED, DRAM: CLEAN is also on the store's SSD (dropped at once when
    // a writer needs the room), DEMOTING is being written there, DRAM-ONLY
    // is the rest (docs/storage.md, "What the capacity holds").
    std::printf("%-24s %4s %-5s %11s %11s %11s %11s %11s %8s %12s\n", "NODE", "SEG", "TIER", "USED",
                "CAPACITY", "DRAM-ONLY", "CLEAN", "DEMOTING", "EXTENTS", "LARGEST FREE");
    for (const auto& s : r.segments()) {
      const bool ssd = s.tier() == v1::TIER_SSD;
      auto dram = [ssd](uint64_t v) { return ssd ? std::string("-") : FormatBytes(v); };
      std::printf("%-24s %4u %-5s %11s %11s %11s %11s %11s %8llu %12s\n", s.node_id().c_str(),
                  s.segment_id(), TierName(s.tier()), FormatBytes(s.used_bytes()).c_str(),
                  FormatBytes(s.capacity_bytes()).c_str(), dram(DramOnly(s)).c_str(),
                  dram(s.clean_bytes()).c_str(), dram(s.demoting_bytes()).c_str(),
                  static_cast<unsigned long long>(s.free_extents()),
                  dram(s.largest_free_bytes()).c_str());
    }
    return 0;
  }

  // A DRAM segment's used bytes that are neither clean nor demoting.
  static uint64_t DramOnly(const v1::SegmentStatus& s) {
    uint64_t held = std::min(s.used_bytes(), s.clean_bytes() + s.demoting_bytes());
    return s.used_bytes() - held;
  }

  int Stat(const std::string& key) {
    v1::StatRequest req;
    req.set_key(key);
    v1::StatResponse r;
    if (absl::Status s = Admin(&v1::AdminService::Stub::Stat, req, &r); !s.ok()) return Fail(s);
    const v1::ObjectLocation& o = r.object();
    Json reps = Json::array();
    for (const auto& rep : o.replicas()) {
      Json j = Json::object();
      j["node_id"] = rep.store().node_id();
      j["address"] = rep.store().data_address();
      j["tier"] = TierName(rep.tier());
      j["segment_id"] = static_cast<uint64_t>(rep.segment_id());
      j["offset"] = rep.offset();
      reps.push_back(j);
    }
    if (g_.json) {
      Json j = Json::object();
      AddBytesField(&j, "key", key);
      j["size"] = o.size();
      j["checksum"] = o.checksum();
      j["pinned"] = r.pinned();
      j["hard_pin"] = r.hard_pin();
      j["pin_expires_unix_ms"] = r.pin_expires_unix_ms();  // 0: none, or until unpinned
      j["last_access_unix_ms"] = r.last_access_unix_ms();
      j["lease_expires_unix_ms"] = r.lease_expires_unix_ms();
      j["replicas"] = reps;
      std::printf("%s\n", JsonDump(j).c_str());
      return 0;
    }
    std::printf("key       %s\nsize      %llu (%s)\nchecksum  %016llx\npinned    %s\n", key.c_str(),
                static_cast<unsigned long long>(o.size()), FormatBytes(o.size()).c_str(),
                static_cast<unsigned long long>(o.checksum()),
                r.hard_pin() ? "hard" : (r.pinned() ? "soft" : "no"));
    for (const auto& rep : o.replicas()) {
      std::printf("replica   %s %s %s offset %llu\n", rep.store().node_id().c_str(),
                  rep.store().data_address().c_str(), TierName(rep.tier()),
                  static_cast<unsigned long long>(rep.offset()));
    }
    return 0;
  }

  int Put(const std::string& key, const std::string& file) {
    std::string data;
    if (file == "-") {
      data.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
      std::ifstream in(file, std::ios::binary);
      if (!in) return Fail(absl::NotFoundError(absl::StrCat("cannot read '", file, "'")));
      data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (g_.replicas < 1 || g_.replicas > kReplicasMax) {
      return Usage(absl::StrCat("--replicas takes 1..", kReplicasMax));
    }
    auto client = OpenClient();
    if (!client.ok()) return Fail(client.status());
    PutOptions po;
    po.replicas = static_cast<uint32_t>(g_.replicas);
    po.best_effort = g_.best_effort;
    Status s = (*client)->Put(key, data.data(), data.size(), po);
    if (!s.ok()) return Fail(s);
    if (g_.json) {
      std::printf("%s\n", KeyJson("key", key, "size", static_cast<uint64_t>(data.size())).c_str());
    } else {
      std::printf("stored %s (%s)\n", key.c_str(), FormatBytes(data.size()).c_str());
    }
    return 0;
  }

  int Get(const std::string& key, const std::string& file) {
    auto client = OpenClient();
    if (!client.ok()) return Fail(client.status());
    std::string data;
    Status s = (*client)->Get(key, &data, g_.timeout_ms);
    if (!s.ok()) return Fail(s);
    if (file == "-") {
      std::fwrite(data.data(), 1, data.size(), stdout);
      return 0;
    }
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) return Fail(absl::UnavailableError(absl::StrCat("cannot write '", file, "'")));
    if (g_.json) {
      std::printf("%s\n", KeyJson("key", key, "size", static_cast<uint64_t>(data.size())).c_str());
    } else {
      std::fprintf(stderr, "fetched %s (%s)\n", key.c_str(), FormatBytes(data.size()).c_str());
    }
    return 0;
  }

  int Rm(const std::string& key) {
    auto client = OpenClient();
    if (!client.ok()) return Fail(client.status());
    Status s = (*client)->Remove(key, g_.timeout_ms);
    if (!s.ok()) return Fail(s);
    if (!g_.json) std::printf("removed %s\n", key.c_str());
    if (g_.json) std::printf("%s\n", JsonDump(KeyObject("removed", key)).c_str());
    return 0;
  }

  // Where a chain of keys lives: per store, its leading run of the chain.
  int Locate(const std::vector<std::string>& keys) {
    auto client = OpenClient();
    if (!client.ok()) return Fail(client.status());
    std::vector<NodeRun> nodes;
    size_t cluster_blocks = 0;
    Status s = (*client)->Locate(keys, &nodes, &cluster_blocks, g_.timeout_ms);
    if (!s.ok()) return Fail(s);
    auto tier_text = [](const NodeRun& n) {
      std::string t;
      for (Tier x : n.tiers) t.push_back(x == Tier::kDram ? 'D' : 'S');
      return t;
    };
    if (g_.json) {
      Json out = Json::array();
      for (const NodeRun& n : nodes) {
        Json j = Json::object();
        j["node_id"] = n.node_id;
        j["address"] = n.data_address;
        j["host_id"] = n.host_id;
        j["blocks"] = static_cast<uint64_t>(n.blocks);
        j["dram_blocks"] = static_cast<uint64_t>(n.dram_blocks);
        Json tiers = Json::array();
        for (Tier x : n.tiers) tiers.push_back(x == Tier::kDram ? "dram" : "ssd");
        j["tiers"] = tiers;
        out.push_back(j);
      }
      Json o = Json::object();
      o["keys"] = static_cast<uint64_t>(keys.size());
      o["cluster_blocks"] = static_cast<uint64_t>(cluster_blocks);
      o["nodes"] = out;
      std::printf("%s\n", JsonDump(o).c_str());
      return 0;
    }
    std::printf("%zu keys, the first %zu present in the cluster\n", keys.size(), cluster_blocks);
    std::printf("%-24s %-22s %7s %7s  %s\n", "NODE", "ADDRESS", "BLOCKS", "DRAM", "TIERS");
    for (const NodeRun& n : nodes) {
      std::printf("%-24s %-22s %7zu %7zu  %s\n", n.node_id.c_str(), n.data_address.c_str(),
                  n.blocks, n.dram_blocks, tier_text(n).c_str());
    }
    return 0;
  }

  int Drain(const std::string& node, bool undrain) {
    v1::DrainRequest req;
    req.set_node(node);
    req.set_undrain(undrain);
    v1::DrainResponse r;
    if (absl::Status s = Admin(&v1::AdminService::Stub::Drain, req, &r); !s.ok()) return Fail(s);
    if (g_.json) {
      std::printf("%s\n", JsonDump(NodeJson(r.node())).c_str());
    } else {
      std::printf("%s is %s\n", r.node().node_id().c_str(), StateName(r.node().state()));
    }
    return 0;
  }

  int Evict() {
    if (g_.bytes == 0) return Usage("evict needs --bytes N (e.g. --bytes 1GiB)");
    v1::EvictRequest req;
    req.set_bytes(g_.bytes);
    req.set_node(g_.node);
    req.set_copy(g_.copy);
    v1::EvictResponse r;
    if (absl::Status s = Admin(&v1::AdminService::Stub::Evict, req, &r); !s.ok()) return Fail(s);
    if (g_.json) {
      Json o = Json::object();
      o["evicted_bytes"] = r.evicted_bytes();
      o["evicted_objects"] = r.evicted_objects();
      o["demoted_objects"] = r.demoted_objects();
      std::printf("%s\n", JsonDump(o).c_str());
    } else {
      std::printf("evicted %s in %llu objects; %llu demotions ordered\n",
                  FormatBytes(r.evicted_bytes()).c_str(),
                  static_cast<unsigned long long>(r.evicted_objects()),
                  static_cast<unsigned long long>(r.demoted_objects()));
    }
    return 0;
  }

  int Pin(const std::string& key, bool unpin) {
    v1::PinRequest req;
    req.set_key(key);
    req.set_unpin(unpin);
    req.set_hard(g_.hard);
    req.set_ttl_ms(g_.ttl_ms);
    v1::PinResponse r;
    if (absl::Status s = Admin(&v1::AdminService::Stub::Pin, req, &r); !s.ok()) return Fail(s);
    if (g_.json) {
      std::printf("%s\n", KeyJson("key", key, "pinned", !unpin).c_str());
    } else {
      std::printf("%s %s\n", unpin ? "unpinned" : (g_.hard ? "hard-pinned" : "pinned"),
                  key.c_str());
    }
    return 0;
  }

  int Top() {
    bool tty = isatty(STDOUT_FILENO);
    for (int64_t i = 0; g_.iterations <= 0 || i < g_.iterations; ++i) {
      v1::StatusResponse r;
      absl::Status s = Admin(&v1::AdminService::Stub::Status, v1::StatusRequest(), &r);
      if (tty) std::printf("\033[H\033[2J");
      if (!s.ok()) {
        std::printf("master %s: %s\n", g_.master.c_str(), std::string(s.message()).c_str());
      } else {
        std::printf("shelf top — leader %s term %llu — %s\n\n", r.leader().c_str(),
                    static_cast<unsigned long long>(r.term()),
                    FormatBytes(r.dram_used_bytes()).c_str());
        std::printf(
            "objects %llu   puts in flight %llu\nDRAM %s / %s   SSD %s / %s\n\n",
            static_cast<unsigned long long>(r.objects()),
            static_cast<unsigned long long>(r.puts_in_flight()),
            FormatBytes(r.dram_used_bytes()).c_str(), FormatBytes(r.dram_capacity_bytes()).c_str(),
            FormatBytes(r.ssd_used_bytes()).c_str(), FormatBytes(r.ssd_capacity_bytes()).c_str());
        PrintNodes(r.nodes());
      }
      std::fflush(stdout);
      if (g_.iterations > 0 && i + 1 >= g_.iterations) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(g_.interval_ms));
    }
    return 0;
  }

 private:
  Globals g_;
  std::unique_ptr<coord::MasterLocator> locator_;
  std::map<std::string, std::unique_ptr<v1::AdminService::Stub>> stubs_;
  std::string token_;
};

constexpr char kCommands[] =
    "Commands:\n"
    "  status                      cluster summary and nodes (--json: includes `nodes`)\n"
    "  nodes                       the node table\n"
    "  segments                    DRAM segments and SSD tiers with fill and fragmentation\n"
    "  stat KEY                    where a key lives, its size, checksum, pins, lease\n"
    "  put KEY FILE                store FILE ('-' = stdin) under KEY [--replicas N]\n"
    "  get KEY FILE                fetch KEY into FILE ('-' = stdout)\n"
    "  rm KEY                      remove KEY\n"
    "  locate KEY...               per node, how many leading keys of the chain it holds\n"
    "                              and in which tier (D: DRAM, S: SSD)\n"
    "  drain NODE | undrain NODE   stop / resume new placements on a node (id or address)\n"
    "  evict --bytes N [--node N] [--copy]\n"
    "                              evict at least N bytes (demoting to SSD where it can);\n"
    "                              --copy: copy N bytes to SSD, keeping them in DRAM (clean)\n"
    "  pin KEY [--ttl D] [--hard]  keep KEY from eviction; unpin KEY\n"
    "  top                         live view, refreshed every --interval\n"
    "  plan ARGS                   size a cluster from the KV formula (shelfctl plan --help);\n"
    "                              with --master, uses the bandwidth measured on that cluster\n"
    "\nExit status: 0 ok, 1 error, 2 usage, 3 not found, 4 unavailable/deadline,\n"
    "5 unauthenticated, 6 resource exhausted.\n";

}  // namespace
}  // namespace shelf

namespace shelf {
namespace {

// Measures get bandwidth on the cluster: a few 16 MiB blocks put, then read
// back several times. Returns GB/s.
absl::StatusOr<double> MeasureGetGbps(const Globals& g) {
  ClientOptions opts = ClientOptionsOf(g, std::max<uint64_t>(g.timeout_ms, 30000));
  auto loc = coord::MasterLocator::Create(g.master, g.etcd);
  if (!loc.ok()) return loc.status();
  opts.masters =
      (*loc)->uses_etcd() ? std::vector<std::string>{(*loc)->Current()} : (*loc)->Candidates();
  std::unique_ptr<Client> client;
  if (Status s = Client::Open(opts, &client); !s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
  }
  constexpr size_t kBlock = 16 << 20;
  std::string block(kBlock, '\0');
  for (size_t i = 0; i < kBlock; i += 8) std::memcpy(&block[i], &i, 8);
  std::string key = absl::StrCat("shelfctl-plan-probe-", getpid(), "-", MonoUs());
  if (Status s = client->Put(key, block.data(), block.size()); !s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
  }
  std::string out;
  uint64_t bytes = 0, t0 = MonoUs();
  for (int i = 0; i < 8; ++i) {
    if (Status s = client->Get(key, &out); !s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
    }
    bytes += out.size();
  }
  double secs = (MonoUs() - t0) / 1e6;
  client->Remove(key);
  return secs > 0 ? bytes / secs / 1e9 : 0.0;
}

int Plan(const Globals& g, bool measure, std::vector<std::string> args) {
  bool has_link = false;
  for (const std::string& a : args) has_link |= a.rfind("--link-gbps", 0) == 0;
  if (measure && !has_link) {
    absl::StatusOr<double> gbps = MeasureGetGbps(g);
    if (!gbps.ok()) return Fail(gbps.status());
    std::fprintf(stderr, "measured get bandwidth on %s: %.2f GB/s\n", g.master.c_str(), *gbps);
    args.push_back(absl::StrFormat("--link-gbps=%.3f", *gbps));
  }
  absl::StatusOr<std::string> out = plan::RunPlanCommand(args, g.json);
  if (!out.ok()) return Fail(out.status());
  std::fputs(out->c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace shelf

int main(int argc, char** argv) {
  using namespace shelf;
  Globals g;
  // `plan` takes its own flags: everything after the word goes to it.
  int plan_at = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "plan") {
      plan_at = i;
      break;
    }
  }
  Flags flags("shelfctl", "administer a Shelf cluster");
  flags.AddString("master", &g.master,
                  "the master: HOST:PORT[,HOST:PORT...] or etcd://HOST:PORT[,...]/CLUSTER");
  flags.AddBool("json", &g.json, "machine-readable output");
  flags.AddDurationMs("timeout", &g.timeout_ms, "deadline of each call");
  coord::AddEtcdFlags(&flags, &g.etcd);
  flags.AddString("secret-file", &g.secret_file, "cluster secret");
  flags.AddString("credentials", &g.credentials_file,
                  "credentials file: call the master as one of its principals (an admin for "
                  "the admin commands)");
  flags.AddString("principal", &g.principal,
                  "which principal of --credentials (default: the file's only one)");
  flags.AddString("tls-ca", &g.tls_ca, "PEM CA bundle: talk TLS to the master");
  flags.AddString("tls-cert", &g.tls_cert, "PEM client certificate (masters with mutual TLS)");
  flags.AddString("tls-key", &g.tls_key, "PEM private key of --tls-cert");
  AddDataTlsClientFlags(&flags, &g.data_tls);
  flags.AddInt("replicas", &g.replicas, "put: replicas on distinct nodes");
  flags.AddBool("best-effort", &g.best_effort, "put: accept fewer replicas than asked");
  flags.AddSize("bytes", &g.bytes, "evict: bytes to evict");
  flags.AddBool("copy", &g.copy, "evict: copy to SSD and keep the DRAM copies (clean)");
  flags.AddString("node", &g.node, "evict: only this node (id or address)");
  flags.AddDurationMs("ttl", &g.ttl_ms, "pin: soft pin lifetime (0: until unpinned)");
  flags.AddBool("hard", &g.hard, "pin: never evict (counts against the node's cap)");
  flags.AddDurationMs("interval", &g.interval_ms, "top: refresh interval");
  flags.AddInt("iterations", &g.iterations, "top: stop after N refreshes (0: forever)");
  flags.set_epilog(kCommands);
  std::vector<std::string> args = flags.ParseOrExit(plan_at > 0 ? plan_at : argc, argv);
  if (absl::Status s = CheckDataTlsClientFlags(g.data_tls); !s.ok()) return Fail(s);
  if (plan_at > 0) {
    if (!args.empty()) return Usage("arguments before 'plan'");
    if (!g.secret_file.empty()) {
      absl::StatusOr<std::string> s = ReadSecretFile(g.secret_file);
      if (!s.ok()) return Fail(s.status());
      g.secret = *s;
    }
    return Plan(g, flags.WasSet("master"),
                std::vector<std::string>(argv + plan_at + 1, argv + argc));
  }
  if (args.empty()) return Usage("missing command");
  if (!g.secret_file.empty()) {
    absl::StatusOr<std::string> s = ReadSecretFile(g.secret_file);
    if (!s.ok()) return Fail(s.status());
    g.secret = *s;
  }
  const std::string& cmd = args[0];
  auto need = [&](size_t n) { return args.size() == n + 1; };
  Ctl ctl(g);
  if (absl::Status s = ctl.Connect(); !s.ok()) return Fail(s);
  if (cmd == "status" && need(0)) return ctl.Status_();
  if (cmd == "nodes" && need(0)) return ctl.Nodes();
  if (cmd == "segments" && need(0)) return ctl.Segments();
  if (cmd == "stat" && need(1)) return ctl.Stat(args[1]);
  if (cmd == "put" && need(2)) return ctl.Put(args[1], args[2]);
  if (cmd == "get" && need(2)) return ctl.Get(args[1], args[2]);
  if (cmd == "rm" && need(1)) return ctl.Rm(args[1]);
  if (cmd == "locate" && args.size() >= 2) {
    return ctl.Locate(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (cmd == "drain" && need(1)) return ctl.Drain(args[1], false);
  if (cmd == "undrain" && need(1)) return ctl.Drain(args[1], true);
  if (cmd == "evict" && need(0)) return ctl.Evict();
  if (cmd == "pin" && need(1)) return ctl.Pin(args[1], false);
  if (cmd == "unpin" && need(1)) return ctl.Pin(args[1], true);
  if (cmd == "top" && need(0)) return ctl.Top();
  return Usage(absl::StrCat("unknown command or wrong arguments: '", cmd, "'"));
}
