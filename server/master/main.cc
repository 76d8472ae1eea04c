// shelf-master: the metadata master. See docs/master.md.
//
// Parse the flags (master_config.cc), build the master, serve gRPC, join
// the election when --etcd is given (ha/master_ha.cc), serve /metrics and
// /health, then tick until SIGINT or SIGTERM.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/http_server.h"
#include "common/json.h"
#include "common/log.h"
#include "common/mutex_debug.h"
#include "common/net.h"
#include "common/ops_endpoint.h"
#include "common/prom.h"
#include "common/ready_file.h"
#include "common/rpc.h"
#include "server/master/connection_cap.h"
#include "server/master/ha/master_ha.h"
#include "server/master/master.h"
#include "server/master/master_config.h"
#include "server/master/rpc_limits.h"
#include "server/master/service.h"

namespace shelf::master {
namespace {

sigset_t BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);  // reload --credentials
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int Fail(absl::string_view message, int code) {
  std::fprintf(stderr, "shelf-master: %s\n", std::string(message).c_str());
  return code;
}

// Binds `config.listen` and serves `services`; null when it cannot listen.
// `*port` is the port bound.
std::unique_ptr<grpc::Server> StartGrpcServer(const MasterConfig& config,
                                              std::initializer_list<grpc::Service*> services,
                                              int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  if (config.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, config.credentials, port);
  // gRPC binds with SO_REUSEPORT by default: a second master started on
  // the port of a running one would bind too, and the kernel would split
  // connections between them (stores registered with one, clients asking
  // the other). A port in use is refused instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The largest body of any method; each handler then holds its method to
  // its own limit (server/master/rpc_limits.h).
  builder.SetMaxReceiveMessageSize(static_cast<int>(kRpcReceiveBytesMax));
  // A peer that connects and never finishes its handshake, or holds a
  // connection with nothing in progress, gives its descriptor back.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(config.handshake_timeout_ms));
  if (config.idle_timeout_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               static_cast<int>(config.idle_timeout_ms));
  }
  // ... and bodies being received, together, to --rpc-memory-max (the
  // builder keeps its own reference to the quota).
  grpc::ResourceQuota rpc_quota("shelf-master");
  if (config.rpc_memory_max > 0) {
    rpc_quota.Resize(static_cast<size_t>(config.rpc_memory_max));
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
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) return nullptr;
  return server;
}

// Unauthenticated, so it says only what a probe needs: no term (a process
// posing as the master would quote it), no leader address, no node count
// (docs/security.md, "Reflection and health").
HttpResponse Health(Master* master, const MasterHa* ha) {
  v1::StatusResponse st;
  master->Status(&st);
  Json body = Json::object();
  body["status"] = "ok";
  body["role"] = st.is_leader() ? "leader" : "standby";
  body["recovering"] = st.recovering();
  body["etcd"] = ha == nullptr ? "off" : (ha->degraded() ? "degraded" : "ok");
  return HttpResponse{200, "application/json", JsonDump(body) + "\n"};
}

}  // namespace
}  // namespace shelf::master

int main(int argc, char** argv) {
  using namespace shelf;
  using namespace shelf::master;
  sigset_t signals = BlockTerminationSignals();
  ConfigureMutexDeadlockDetection();
  SetLogComponent("master");
  absl::StatusOr<MasterConfig> parsed = ParseMasterConfig(argc, argv);
  if (!parsed.ok()) return Fail(parsed.status().message(), 2);
  MasterConfig& config = *parsed;

  std::unique_ptr<KvEventPublisher> events;
  if (!config.events.streams.empty()) {
    auto started = KvEventPublisher::Start(config.events, &DefaultExposition());
    if (!started.ok()) return Fail(absl::StrCat("events: ", started.status().message()), 2);
    events = *std::move(started);
    config.master.events = events.get();
    for (size_t i = 0; i < events->stream_count(); ++i) {
      const KvEventPublisher::Stream& s = config.events.streams[i];
      SHELF_LOG(INFO) << "publishing KV events" << Kv("endpoint", events->bound_endpoint(i))
                      << Kv("replay", events->bound_replay_endpoint(i))
                      << Kv("encoding", KvEventEncodingName(s.encoding))
                      << Kv("tenant", s.tenant.empty() ? "*" : s.tenant)
                      << Kv("curve", !config.events.curve.secret_key.empty());
    }
  }

  MasterOptions master_opts = config.master;
  master_opts.listen_address = config.listen;
  auto master = std::make_unique<Master>(master_opts);
  MasterServiceImpl master_service(master.get(), config.auth,
                                   static_cast<size_t>(config.max_call_streams));
  AdminServiceImpl admin_service(master.get(), config.auth);
  int port = 0;
  std::unique_ptr<grpc::Server> server =
      StartGrpcServer(config, {&master_service, &admin_service}, &port);
  if (server == nullptr) {
    return Fail(absl::StrCat("cannot listen on ", config.listen,
                             ": the port is in use, or the address is not one of this host's"),
                1);
  }
  // The address the master advertises as leader: with port 0, the picked one.
  std::string bound =
      HostPort{config.listen_host_port.host, static_cast<uint16_t>(port)}.ToString();
  if (config.ha.advertise.empty()) config.ha.advertise = bound;
  master->electable().SetLeaderAddress(config.ha.advertise);
  ConnectionCapOptions cap_opts;
  cap_opts.port = static_cast<uint16_t>(port);
  cap_opts.max_connections = static_cast<int>(config.max_connections);
  cap_opts.max_per_source = static_cast<int>(config.max_connections_per_source);
  std::unique_ptr<ConnectionCap> cap = ConnectionCap::Start(cap_opts, &DefaultExposition());

  // High availability: campaign through etcd; lead only while elected.
  std::unique_ptr<MasterHa> ha;
  if (!config.ha.etcd.empty()) {
    ha = std::make_unique<MasterHa>(&master->electable(), config.ha);
    if (absl::Status s = ha->Start(); !s.ok()) return Fail(s.message(), 2);
  }
  std::unique_ptr<HttpServer> http;
  if (!config.metrics_listen.empty()) {
    Master* m = master.get();
    const MasterHa* h = ha.get();
    auto started = StartOpsEndpoint("--metrics-listen", config.metrics_listen,
                                    [m, h](const HttpRequest&) { return Health(m, h); });
    if (!started.ok()) return Fail(started.status().message(), 1);
    http = *std::move(started);
  }
  SHELF_LOG(INFO) << "serving" << Kv("listen", bound)
                  << Kv("node_ttl_ms", config.master.node_ttl_ms)
                  << Kv("lease_ms", config.master.lease_ms) << Kv("tls", config.tls.enabled())
                  << Kv("max_connections", config.max_connections);
  // Line 1 is the gRPC address; the event endpoints and the metrics
  // address (its real port, also for --metrics-listen HOST:0), when on,
  // follow.
  std::string ready = bound + "\n";
  // Streams: "events" (--events-listen), "events-other", then one
  // "events-tenant TENANT" each.
  for (size_t i = 0; events != nullptr && i < events->stream_count(); ++i) {
    const std::string& tenant = config.events.streams[i].tenant;
    const std::string name = !tenant.empty() ? absl::StrCat("events-tenant ", tenant)
                             : i == 0        ? "events"
                                             : "events-other";
    absl::StrAppend(&ready, name, " ", events->bound_endpoint(i), "\n");
    if (!events->bound_replay_endpoint(i).empty()) {
      absl::StrAppend(&ready, name, "-replay ", events->bound_replay_endpoint(i), "\n");
    }
  }
  if (http != nullptr) absl::StrAppend(&ready, "metrics ", http->bound().ToString(), "\n");
  WriteReadyFile(config.ready_file, ready);

  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop.load()) {
      master->Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    // Calls in progress keep the principal they resolved; the next ones
    // see the new table. A file that does not parse leaves the old one.
    if (!config.auth->has_principals()) {
      SHELF_LOG(INFO) << "SIGHUP: no --credentials to reload";
    } else if (absl::Status s = config.auth->Reload(); !s.ok()) {
      SHELF_LOG(WARNING) << "credentials not reloaded: " << s.message();
    } else {
      SHELF_LOG(INFO) << "credentials reloaded" << Kv("principals", config.auth->size());
    }
  }
  SHELF_LOG(INFO) << "stopping" << Kv("signal", sig);
  stop.store(true);
  if (ha != nullptr) ha->Stop();  // hand over at once
  master_service.EndCallStreams();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  ticker.join();
  cap.reset();
  http.reset();
  return 0;  // `events` is destroyed after the master, which emits into it
}
