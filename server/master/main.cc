// shelf-master: the metadata master. See docs/master.md.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/hmac.h"
#include "common/http_server.h"
#include "common/json.h"
#include "common/log.h"
#include "common/net.h"
#include "common/prom.h"
#include "common/protected_mode.h"
#include "common/ready_file.h"
#include "common/rpc.h"
#include "coord/election.h"
#include "coord/etcd_client.h"
#include "coord/etcd_flags.h"
#include "server/master/master.h"
#include "server/master/rpc_limits.h"
#include "server/master/service.h"

namespace {

sigset_t BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shelf;
  sigset_t signals = BlockTerminationSignals();
  SetLogComponent("master");
  MasterOptions opts;
  std::string listen = "127.0.0.1:7000";
  std::string secret_file, ready_file, metrics_listen;
  // Bounds what concurrent large bodies (registrations) can make gRPC hold:
  // 8 concurrent 60 MiB calls peak near 1 GiB without it, near 0.6 GiB with
  // it; a lone 64 MiB registration and 20 concurrent 10 MiB ones still pass
  // (docs/security.md, "Message size limits").
  uint64_t rpc_memory_max = uint64_t{256} << 20;
  std::string etcd, cluster = "default", advertise;
  uint64_t election_ttl_ms = 3000, recovery_grace_ms = 5000;
  TlsFiles tls;
  std::string events_listen, events_replay_listen;
  KvEventPublisher::Options events_opts;
  int64_t events_queue = static_cast<int64_t>(events_opts.queue_events_max);
  int64_t events_replay_batches = static_cast<int64_t>(events_opts.replay_batches_max);
  Flags flags("shelf-master", "the Shelf metadata master (placement, index, leases, eviction)");
  flags.AddString("listen", &listen, "HOST:PORT to serve gRPC on (port 0 picks one)");
  flags.AddDurationMs("node-ttl", &opts.node_ttl_ms, "a store silent this long is dead");
  flags.AddDurationMs("heartbeat-interval", &opts.heartbeat_interval_ms,
                      "how often stores heartbeat");
  flags.AddDurationMs("put-timeout", &opts.put_timeout_ms,
                      "an uncommitted put is reclaimed after this");
  flags.AddDurationMs("lease", &opts.lease_ms, "read lease granted with each lookup hit");
  flags.AddDouble("evict-high", &opts.evict_high, "segment fill (0..1) that starts eviction");
  flags.AddDouble("evict-low", &opts.evict_low, "eviction stops below this fill (0..1)");
  flags.AddDouble("ssd-evict-high", &opts.ssd_evict_high,
                  "SSD tier fill (0..1) that starts dropping its least recently used");
  flags.AddDouble("ssd-evict-low", &opts.ssd_evict_low, "SSD eviction stops below this fill");
  flags.AddDurationMs("demote-wait", &opts.demote_wait_ms,
                      "a put that finds DRAM full waits this long for demotions before dropping");
  flags.AddDurationMs("demote-lead", &opts.demote_lead_ms,
                      "demote ahead: keep free the DRAM puts fill in this long (at least twice "
                      "a store's measured demotion time; 0: the watermarks alone)");
  flags.AddDouble("demote-headroom-max", &opts.demote_headroom_max,
                  "most of a DRAM segment (0..1) kept free ahead of puts");
  flags.AddSize("block-bytes-max", &opts.block_bytes_max, "largest block accepted");
  flags.AddSize("hard-pin-max", &opts.hard_pin_bytes_max,
                "hard-pinned bytes allowed per node (0: 10% of its DRAM)");
  flags.AddSize("rpc-memory-max", &rpc_memory_max,
                "memory gRPC may use for requests being received (grpc::ResourceQuota); past "
                "it, calls are refused with RESOURCE_EXHAUSTED; 0: no limit");
  flags.AddString("secret-file", &secret_file, "cluster secret (>= 16 bytes); none: open cluster");
  flags.AddString("tls-cert", &tls.cert, "PEM certificate for gRPC TLS");
  flags.AddString("tls-key", &tls.key, "PEM private key for gRPC TLS");
  flags.AddString("tls-ca", &tls.ca, "PEM CA bundle for gRPC TLS");
  flags.AddString("ready-file", &ready_file, "write the bound HOST:PORT here once serving");
  bool insecure = false;
  flags.AddBool("insecure", &insecure, kInsecureHelp);
  bool reflection = false;
  flags.AddBool("grpc-reflection", &reflection,
                "serve gRPC reflection (off: callers need the protos)");
  flags.AddString("etcd", &etcd,
                  "etcd endpoints http[s]://HOST:PORT[,...]: elect one leader among masters");
  coord::EtcdOptions etcd_options;
  coord::AddEtcdFlags(&flags, &etcd_options);
  flags.AddString("cluster", &cluster, "cluster name: masters of one cluster elect one leader");
  flags.AddDurationMs("election-ttl", &election_ttl_ms,
                      "leader lease TTL: a dead leader is replaced after about this long");
  flags.AddDurationMs("recovery-grace", &recovery_grace_ms,
                      "a new leader waits this long at most for known stores to re-register");
  flags.AddString("advertise", &advertise,
                  "HOST:PORT others reach this master at (default: the bound --listen)");
  flags.AddString("metrics-listen", &metrics_listen,
                  "HOST:PORT serving /metrics (Prometheus) and /health over HTTP (off when empty)");
  flags.AddString("events-listen", &events_listen,
                  "publish block events in vLLM's KV-event format on this ZMQ PUB endpoint: "
                  "PORT or HOST:PORT (host 127.0.0.1 when left out; port 0 picks one) or a "
                  "ZMQ endpoint; off when empty (docs/events.md)");
  flags.AddString("events-replay-listen", &events_replay_listen,
                  "ZMQ ROUTER endpoint answering replay requests for missed event batches "
                  "(same forms as --events-listen)");
  flags.AddString("events-namespace", &events_opts.ns,
                  "the NAMESPACE of the event topics kv@<node_id>@NAMESPACE");
  flags.AddInt("events-queue", &events_queue,
               "events waiting to be published at most; more are dropped and counted");
  flags.AddInt("events-replay-batches", &events_replay_batches, "event batches kept for replay");
  flags.ParseOrExit(argc, argv);

  if (opts.block_bytes_max == 0 || opts.block_bytes_max > kBlockBytesLimit) {
    std::fprintf(stderr, "shelf-master: need 0 < --block-bytes-max < 4 GiB\n");
    return 2;
  }
  if (!(opts.demote_headroom_max >= 0 && opts.demote_headroom_max < 1)) {
    std::fprintf(stderr, "shelf-master: need 0 <= --demote-headroom-max < 1\n");
    return 2;
  }
  if (!(opts.evict_low > 0 && opts.evict_low < opts.evict_high && opts.evict_high <= 1) ||
      !(opts.ssd_evict_low > 0 && opts.ssd_evict_low < opts.ssd_evict_high &&
        opts.ssd_evict_high <= 1)) {
    std::fprintf(stderr,
                 "shelf-master: need 0 < --evict-low < --evict-high <= 1 (and the same for "
                 "--ssd-evict-low/--ssd-evict-high)\n");
    return 2;
  }
  std::string secret;
  if (!secret_file.empty()) {
    absl::StatusOr<std::string> s = ReadSecretFile(secret_file);
    if (!s.ok()) {
      std::fprintf(stderr, "shelf-master: %s\n", std::string(s.status().message()).c_str());
      return 2;
    }
    secret = *s;
    // Grants are keyed from the secret, so every master of a cluster
    // (and every restart) issues grants the stores already accept.
    opts.grant_key = HmacSha256(secret, "shelf-grant-key-v1");
  } else {
    SHELF_LOG(WARNING) << "no --secret-file: this cluster runs open; anyone who can reach it "
                          "can read and write";
  }
  if (absl::Status s = CheckProtectedMode({{"--listen", listen}}, !secret.empty() || tls.enabled(),
                                          insecure, "give --secret-file (and --tls-*)");
      !s.ok()) {
    std::fprintf(stderr, "shelf-master: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto creds = ServerCredentials(tls, AuthToken(secret));
  if (!creds.ok()) {
    std::fprintf(stderr, "shelf-master: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<HostPort> hp = ParseHostPort(listen);
  if (!hp.ok()) {
    std::fprintf(stderr, "shelf-master: --listen: %s\n",
                 std::string(hp.status().message()).c_str());
    return 2;
  }

  std::unique_ptr<KvEventPublisher> events;
  if (!events_listen.empty()) {
    auto ep = KvEventPublisher::NormalizeEndpoint(events_listen);
    absl::StatusOr<std::string> replay_ep = std::string();
    if (!events_replay_listen.empty()) {
      replay_ep = KvEventPublisher::NormalizeEndpoint(events_replay_listen);
    }
    if (!ep.ok() || !replay_ep.ok()) {
      std::fprintf(stderr, "shelf-master: --events-%slisten: %s\n", ep.ok() ? "replay-" : "",
                   std::string((ep.ok() ? replay_ep.status() : ep.status()).message()).c_str());
      return 2;
    }
    events_opts.endpoint = *ep;
    events_opts.replay_endpoint = *replay_ep;
    if (events_queue < 1 || events_replay_batches < 0) {
      std::fprintf(stderr,
                   "shelf-master: --events-queue must be >= 1, --events-replay-batches >= 0\n");
      return 2;
    }
    events_opts.queue_events_max = static_cast<size_t>(events_queue);
    events_opts.replay_batches_max = static_cast<size_t>(events_replay_batches);
    auto started = KvEventPublisher::Start(events_opts, &DefaultExposition());
    if (!started.ok()) {
      std::fprintf(stderr, "shelf-master: events: %s\n",
                   std::string(started.status().message()).c_str());
      return 2;
    }
    events = *std::move(started);
    opts.events = events.get();
    SHELF_LOG(INFO) << "publishing KV events" << Kv("endpoint", events->bound_endpoint())
                    << Kv("replay", events->bound_replay_endpoint());
  } else if (!events_replay_listen.empty()) {
    std::fprintf(stderr, "shelf-master: --events-replay-listen needs --events-listen\n");
    return 2;
  }

  grpc::EnableDefaultHealthCheckService(true);
  if (reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, *creds, &port);
  // The largest body of any method; each handler then holds its method to
  // its own limit (server/master/rpc_limits.h).
  builder.SetMaxReceiveMessageSize(static_cast<int>(kRpcReceiveBytesMax));
  // ... and bodies being received, together, to --rpc-memory-max.
  grpc::ResourceQuota rpc_quota("shelf-master");
  if (rpc_memory_max > 0) {
    rpc_quota.Resize(static_cast<size_t>(rpc_memory_max));
    builder.SetResourceQuota(rpc_quota);
  }
  // Every idle store holds a long-poll heartbeat, and the sync server gives
  // each call in progress a thread of its own: a cluster of N stores keeps
  // about N threads busy. By default a thread that finishes a call exits
  // when 2 others already wait for work, so each heartbeat cycle created
  // and destroyed a thread; up to kIdleThreadsMax idle ones are kept
  // instead (docs/master.md, "Scale").
  constexpr int kIdleThreadsMax = 256;
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kIdleThreadsMax);
  // The address the master advertises as leader: with port 0, the picked one.
  std::string token = AuthToken(secret);
  // Master options need the final address; construct after binding.
  std::unique_ptr<Master> master;
  MasterOptions final_opts = opts;
  final_opts.listen_address = listen;
  master = std::make_unique<Master>(final_opts);
  MasterServiceImpl master_service(master.get(), token);
  AdminServiceImpl admin_service(master.get(), token);
  builder.RegisterService(&master_service);
  builder.RegisterService(&admin_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "shelf-master: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  std::string bound = HostPort{hp->host, static_cast<uint16_t>(port)}.ToString();
  if (advertise.empty()) advertise = bound;
  master->SetLeaderAddress(advertise);

  // High availability: campaign through etcd; lead only while elected.
  std::unique_ptr<coord::EtcdClient> etcd_client;
  std::unique_ptr<coord::LeaderElection> election;
  std::unique_ptr<coord::EtcdWatch> leader_watch;
  std::atomic<bool> etcd_degraded{false};
  if (!etcd.empty()) {
    auto client = coord::EtcdClient::Connect(etcd, etcd_options);
    if (!client.ok()) {
      std::fprintf(stderr, "shelf-master: --etcd: %s\n",
                   std::string(client.status().message()).c_str());
      return 2;
    }
    etcd_client = *std::move(client);
    master->StartAsStandby();
    std::string nodes_prefix = absl::StrCat("/shelf/", cluster, "/nodes/");
    coord::EtcdClient* ec = etcd_client.get();
    master->set_on_node_registered([ec, nodes_prefix](const std::string& id) {
      absl::StatusOr<int64_t> put = ec->Put(nodes_prefix + id, "");
      if (!put.ok()) {
        SHELF_LOG(WARNING) << "cannot record node in etcd" << Kv("node", id)
                           << Kv("error", put.status().message());
      }
    });
    coord::ElectionOptions eo;
    eo.cluster = cluster;
    eo.address = advertise;
    eo.lease_ttl_s = static_cast<int64_t>(std::max<uint64_t>(1, (election_ttl_ms + 999) / 1000));
    eo.on_elected = [&, ec, nodes_prefix](int64_t term) {
      // The index is soft state: start empty and let every store known to
      // the cluster re-register with its inventory.
      std::vector<std::string> expected;
      auto known = ec->GetPrefix(nodes_prefix);
      if (known.ok()) {
        for (const auto& kv : known->kvs) expected.push_back(kv.key.substr(nodes_prefix.size()));
      }
      master->BecomeLeader(static_cast<uint64_t>(term), std::move(expected), recovery_grace_ms);
    };
    eo.on_lost = [&] { master->StepDown(""); };
    eo.on_health = [&](const absl::Status& s) {
      etcd_degraded.store(!s.ok());
      if (!s.ok()) {
        SHELF_LOG(WARNING) << "etcd unreachable: serving on the current lease (degraded)"
                           << Kv("error", s.message());
      } else {
        SHELF_LOG(INFO) << "etcd reachable again";
      }
    };
    election = std::make_unique<coord::LeaderElection>(etcd_client.get(), eo);
    coord::LeaderElection* el = election.get();
    master->set_lease_check([el] { return el->is_leader(); });
    if (absl::Status s = election->Start(); !s.ok()) {
      std::fprintf(stderr, "shelf-master: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    auto watch = coord::LeaderElection::WatchLeader(
        etcd_client.get(), cluster, [&](const std::optional<coord::LeaderInfo>& info) {
          if (info.has_value() && info->intact && info->address != advertise) {
            master->SetLeaderHint(info->address);
          }
        });
    if (watch.ok()) leader_watch = *std::move(watch);
    SHELF_LOG(INFO) << "campaigning" << Kv("etcd", etcd) << Kv("cluster", cluster)
                    << Kv("advertise", advertise);
  }
  std::unique_ptr<HttpServer> http;
  if (!metrics_listen.empty()) {
    std::map<std::string, HttpHandler> handlers;
    handlers["/metrics"] = [](const HttpRequest&) {
      return HttpResponse{200, prom::Exposition::kContentType, DefaultExposition().Render()};
    };
    // Unauthenticated, so it says only what a probe needs: no term (a
    // process posing as the master would quote it), no leader address, no
    // node count (docs/security.md, "Reflection and health").
    handlers["/health"] = [&](const HttpRequest&) {
      v1::StatusResponse st;
      master->Status(&st);
      Json body = Json::object();
      body["status"] = "ok";
      body["role"] = st.is_leader() ? "leader" : "standby";
      body["recovering"] = st.recovering();
      body["etcd"] = etcd.empty() ? "off" : (etcd_degraded.load() ? "degraded" : "ok");
      return HttpResponse{200, "application/json", JsonDump(body) + "\n"};
    };
    auto started = HttpServer::Start(metrics_listen, std::move(handlers));
    if (!started.ok()) {
      std::fprintf(stderr, "shelf-master: --metrics-listen: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    http = *std::move(started);
    SHELF_LOG(INFO) << "metrics served" << Kv("listen", http->bound().ToString());
  }
  SHELF_LOG(INFO) << "serving" << Kv("listen", bound) << Kv("node_ttl_ms", opts.node_ttl_ms)
                  << Kv("lease_ms", opts.lease_ms) << Kv("tls", tls.enabled());
  // Line 1 is the gRPC address; the event endpoints, when on, follow.
  std::string ready = bound + "\n";
  if (events != nullptr) {
    absl::StrAppend(&ready, "events ", events->bound_endpoint(), "\n");
    if (!events->bound_replay_endpoint().empty()) {
      absl::StrAppend(&ready, "events-replay ", events->bound_replay_endpoint(), "\n");
    }
  }
  WriteReadyFile(ready_file, ready);

  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop.load()) {
      master->Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  int sig = 0;
  sigwait(&signals, &sig);
  SHELF_LOG(INFO) << "stopping" << Kv("signal", sig);
  stop.store(true);
  leader_watch.reset();
  if (election != nullptr) election->Resign().IgnoreError();  // hand over at once
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  ticker.join();
  http.reset();
  return 0;  // `events` is destroyed after the master, which emits into it
}
