// shelf-master: the metadata master. See docs/master.md.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/net.h"
#include "common/ready_file.h"
#include "common/rpc.h"
#include "server/master/master.h"
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
  TlsFiles tls;
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
  flags.AddSize("block-bytes-max", &opts.block_bytes_max, "largest block accepted");
  flags.AddSize("hard-pin-max", &opts.hard_pin_bytes_max,
                "hard-pinned bytes allowed per node (0: 10% of its DRAM)");
  flags.AddString("secret-file", &secret_file, "cluster secret (>= 16 bytes); none: open cluster");
  flags.AddString("tls-cert", &tls.cert, "PEM certificate for gRPC TLS");
  flags.AddString("tls-key", &tls.key, "PEM private key for gRPC TLS");
  flags.AddString("tls-ca", &tls.ca, "PEM CA bundle for gRPC TLS");
  flags.AddString("ready-file", &ready_file, "write the bound HOST:PORT here once serving");
  flags.AddString("metrics-listen", &metrics_listen,
                  "HOST:PORT serving /metrics (Prometheus) and /health over HTTP (off when empty)");
  flags.ParseOrExit(argc, argv);

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
  auto creds = ServerCredentials(tls);
  if (!creds.ok()) {
    std::fprintf(stderr, "shelf-master: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<HostPort> hp = ParseHostPort(listen);
  if (!hp.ok()) {
    std::fprintf(stderr, "shelf-master: --listen: %s\n", std::string(hp.status().message()).c_str());
    return 2;
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, *creds, &port);
  builder.SetMaxReceiveMessageSize(64 << 20);
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
  master->SetLeaderAddress(bound);
  std::unique_ptr<HttpServer> http;
  if (!metrics_listen.empty()) {
    std::map<std::string, HttpHandler> handlers;
    handlers["/metrics"] = [](const HttpRequest&) {
      return HttpResponse{200, metrics::Registry::kContentType, DefaultRegistry().Render()};
    };
    handlers["/health"] = [&master](const HttpRequest&) {
      v1::StatusResponse st;
      master->Status(&st);
      int live = 0;
      for (const auto& n : st.nodes()) live += n.state() == v1::NODE_LIVE;
      return HttpResponse{200, "application/json",
                          absl::StrCat("{\"status\": \"ok\", \"role\": \"",
                                       st.is_leader() ? "leader" : "standby", "\", \"term\": ",
                                       st.term(), ", \"recovering\": ",
                                       st.recovering() ? "true" : "false",
                                       ", \"live_nodes\": ", live, "}\n")};
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
  WriteReadyFile(ready_file, bound + "\n");

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
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  ticker.join();
  http.reset();
  return 0;
}
