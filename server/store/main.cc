// shelf-store: the per-node storage daemon. See docs/storage.md.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/credentials.h"
#include "common/flags.h"
#include "common/http_server.h"
#include "common/json.h"
#include "common/log.h"
#include "common/mutex_debug.h"
#include "common/net.h"
#include "common/ops_endpoint.h"
#include "common/protected_mode.h"
#include "common/ready_file.h"
#include "common/units.h"
#include "coord/etcd_flags.h"
#include "server/store/store.h"

int main(int argc, char** argv) {
  using namespace shelf;
  using namespace shelf::store;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ConfigureMutexDeadlockDetection();
  SetLogComponent("store");

  StoreOptions opts;
  std::string shm_allow_uids;
  std::string labels, secret_file, ready_file, admin_listen, metrics_listen;
  std::string credentials_file, principal;
  int64_t max_connections = opts.max_connections;
  int64_t max_connections_per_source = opts.max_connections_per_source;
  int64_t handshake_timeout_ms = static_cast<int64_t>(opts.handshake_timeout_ms);
  int64_t max_unauthenticated = opts.max_unauthenticated;
  int64_t max_unauthenticated_per_source = opts.max_unauthenticated_per_source;
  int64_t rdma_port = opts.rdma_port, rdma_gid_index = opts.rdma_gid_index;
  int64_t rdma_traffic_class = opts.rdma_traffic_class;
  int64_t rdma_service_level = opts.rdma_service_level;
  int64_t rdma_pkey_index = opts.rdma_pkey_index;
  int64_t rdma_queue_pairs_max = opts.rdma_queue_pairs_max;
  Flags flags("shelf-store", "the Shelf storage daemon (DRAM segment, SSD tier, data plane)");
  flags.AddString("master", &opts.master,
                  "the master (required): HOST:PORT[,HOST:PORT...] or "
                  "etcd://HOST:PORT[,...]/CLUSTER");
  coord::AddEtcdFlags(&flags, &opts.etcd);
  flags.AddString("listen", &opts.listen, "data-plane HOST:PORT (port 0 picks one)");
  flags.AddString("admin-listen", &admin_listen,
                  "gRPC HOST:PORT for health checking and reflection (off when empty)");
  flags.AddSize("dram-size", &opts.dram_size, "size of the DRAM segment");
  flags.AddString("ssd-dir", &opts.ssd_dir, "directory of the SSD tier (none: no SSD tier)");
  flags.AddSize("ssd-size", &opts.ssd_size, "capacity of the SSD tier (0: 64GiB)");
  flags.AddString("node-id", &opts.node_id,
                  "stable node id (default: kept in --ssd-dir, else host:port)");
  flags.AddString("run-dir", &opts.run_dir,
                  "where the shared-memory socket lives: a directory owned by the store's user, "
                  "not group- or world-writable, else no shm (default $RUNTIME_DIRECTORY, else "
                  "/run/shelf, made 0700 when missing)");
  flags.AddString("labels", &labels, "placement labels, e.g. zone=a,rack=r1");
  flags.AddString("secret-file", &secret_file, "cluster secret (>= 16 bytes)");
  flags.AddString("credentials", &credentials_file,
                  "credentials file holding this store's principal (role store): it calls the "
                  "master as that principal; --secret-file still guards the data plane");
  flags.AddString("principal", &principal,
                  "which principal of --credentials (default: the file's only one)");
  flags.AddString("tls-ca", &opts.tls.ca, "PEM CA bundle to verify the master's TLS certificate");
  flags.AddString("tls-cert", &opts.tls.cert, "PEM client certificate for the master channel");
  flags.AddString("tls-key", &opts.tls.key, "PEM client key for the master channel");
  flags.AddBool("hugepages", &opts.hugepages, "back the DRAM segment with hugepages if reserved");
  flags.AddBool("mlock", &opts.mlock, "lock the DRAM segment in memory");
  flags.AddBool("populate-dram", &opts.populate_dram,
                "fault the DRAM segment's pages in from start, in the background, so that no "
                "put pays a page fault per 4 KiB of fresh memory (the memory is taken at "
                "start, not as it fills)");
  flags.AddBool("shm", &opts.shm, "serve same-host clients through shared memory");
  std::string shm_arena = "auto";
  flags.AddString("shm-arena", &shm_arena,
                  "SIZE: the DRAM segment is made of arenas of this size, each its own memfd, "
                  "data-plane segment and RDMA region; the master gives each arena to one tenant "
                  "and a same-host client maps only the arenas it holds read grants for "
                  "(docs/security.md, \"Tenant arenas\"); --dram-size must be a multiple of it. "
                  "0: one segment, every same-host client maps all of it. auto: up to 16 arenas "
                  "(of at least 1 MiB) when the store runs as a principal (--credentials), so a "
                  "cluster of tenants keeps them apart; one segment otherwise");
  flags.AddBool("shm-key-board", &opts.shm_key_board,
                "with --shm and one segment: publish which block each range holds in shared "
                "memory (read-only to clients), so same-host clients check a cached location "
                "without a round trip to the store (docs/client.md, \"Cached reads\")");
  flags.AddSize("shm-ssd-window", &opts.shm_ssd_window,
                "with --shm and --ssd-dir: shared memory past the DRAM segment into which "
                "same-host clients' SSD hits are read for them to copy (0: over TCP)");
  flags.AddString("shm-allow-uids", &shm_allow_uids,
                  "comma-separated uids whose processes may map the DRAM segment (checked with "
                  "SO_PEERCRED; default: the store's own uid and root)");
  flags.AddString("rdma-device", &opts.rdma_device,
                  "RDMA device offering clients one-sided reads of the DRAM segment, e.g. mlx5_0 "
                  "(off when empty; a device that fails to open is logged, not fatal)");
  flags.AddInt("rdma-port", &rdma_port, "port of --rdma-device");
  flags.AddInt("rdma-gid-index", &rdma_gid_index,
               "GID table index of --rdma-device's port; -1: auto (InfiniBand: 0; RoCE: the "
               "first RoCE v2 GID, an IPv4 or global one before a link-local one)");
  flags.AddInt("rdma-traffic-class", &rdma_traffic_class,
               "traffic class of --rdma-device's packets (RoCE: DSCP << 2 | ECN), 0..255");
  flags.AddInt("rdma-service-level", &rdma_service_level,
               "service level of --rdma-device's packets, 0..15");
  flags.AddInt("rdma-pkey-index", &rdma_pkey_index,
               "P_Key table index of --rdma-device's port (the InfiniBand partition)");
  flags.AddInt("rdma-queue-pairs-max", &rdma_queue_pairs_max,
               "client queue pairs --rdma-device serves at once (one per client connection); "
               "past it clients read over tcp");
  flags.AddBool("promote-on-hit", &opts.promote_on_hit,
                "copy a block read from the SSD tier up into DRAM (the SSD copy stays)");
  flags.AddString("demote-copy", &opts.demote_copy,
                  "how demotions reach the SSD tier: auto (when the DRAM segment is on 4KiB "
                  "pages, as where transparent hugepages are off for shared memory, blocks of "
                  "2MiB and more are copied, and runs of smaller ones gathered, into hugepage "
                  "buffers first), always (every block copied into a buffer first, and runs "
                  "gathered), never (every block written straight from the segment)");
  flags.AddBool("read-grants", &opts.read_grants,
                "with --secret-file, serve a READ or READ_KEY only under a read grant the master "
                "minted (on by default)");
  flags.AddInt("max-connections", &max_connections, "data-plane connection limit");
  flags.AddInt("max-connections-per-source", &max_connections_per_source,
               "data-plane connections one source address may hold (authenticated or not), so "
               "one host cannot take them all; 0: half of --max-connections");
  flags.AddBool("data-tls", &opts.data_tls,
                "TLS 1.3 on the data plane (clients need ClientOptions::data_tls); off by default");
  flags.AddBool("session-tag-payload", &opts.session_tag_payload,
                "with a cluster secret, session tags cover every frame's payload too, not only "
                "its header (a full pass over the bytes; clients follow)");
  flags.AddString("data-tls-cert", &opts.data_tls_files.cert,
                  "PEM certificate chain of the data plane (must name the address clients dial)");
  flags.AddString("data-tls-key", &opts.data_tls_files.key, "PEM key of --data-tls-cert");
  flags.AddString(
      "data-tls-ca", &opts.data_tls_files.ca,
      "PEM CA bundle: with it, data-plane clients must present a certificate it signed");
  flags.AddInt("handshake-timeout-ms", &handshake_timeout_ms,
               "a data-plane connection not authenticated this long after accept is closed");
  flags.AddDurationMs("idle-timeout", &opts.idle_timeout_ms,
                      "an authenticated data-plane connection that sends no frame this long is "
                      "closed, so held connections cannot keep --max-connections taken (clients "
                      "reconnect); 0: never");
  flags.AddInt("max-unauthenticated", &max_unauthenticated,
               "data-plane connections in their handshake at once (at most half of "
               "--max-connections); past it the oldest is closed");
  flags.AddInt("max-unauthenticated-per-source", &max_unauthenticated_per_source,
               "data-plane connections in their handshake at once from one source address");
  flags.AddString("ready-file", &ready_file,
                  "write the data-plane HOST:PORT here once serving (then "
                  "'metrics HOST:PORT' with --metrics-listen)");
  flags.AddString("metrics-listen", &metrics_listen,
                  "HOST:PORT serving /metrics (Prometheus) and /health over HTTP (off when empty)");
  bool insecure = false, reflection = false;
  flags.AddBool("grpc-reflection", &reflection, "serve gRPC reflection on --admin-listen");
  flags.AddBool("insecure", &insecure, kInsecureHelp);
  flags.ParseOrExit(argc, argv);
  opts.max_connections = static_cast<int>(max_connections);
  if (max_connections_per_source < 0 || max_connections_per_source > max_connections) {
    std::fprintf(stderr,
                 "shelf-store: --max-connections-per-source takes 0 (half of "
                 "--max-connections) .. --max-connections\n");
    return 2;
  }
  opts.max_connections_per_source = static_cast<int>(max_connections_per_source);
  if (max_connections < 1 || handshake_timeout_ms < 1 || max_unauthenticated < 1 ||
      max_unauthenticated_per_source < 1) {
    std::fprintf(stderr,
                 "shelf-store: --max-connections, --handshake-timeout-ms, --max-unauthenticated "
                 "and --max-unauthenticated-per-source take positive values\n");
    return 2;
  }
  opts.handshake_timeout_ms = static_cast<uint64_t>(handshake_timeout_ms);
  if (opts.data_tls && (opts.data_tls_files.cert.empty() || opts.data_tls_files.key.empty())) {
    std::fprintf(stderr, "shelf-store: --data-tls needs --data-tls-cert and --data-tls-key\n");
    return 2;
  }
  opts.max_unauthenticated = static_cast<int>(max_unauthenticated);
  opts.max_unauthenticated_per_source = static_cast<int>(max_unauthenticated_per_source);
  if (rdma_port < 1 || rdma_port > 255 || rdma_gid_index < -1 || rdma_gid_index > 255 ||
      rdma_traffic_class < 0 || rdma_traffic_class > 255 || rdma_service_level < 0 ||
      rdma_service_level > 15 || rdma_pkey_index < 0 || rdma_pkey_index > 65535 ||
      rdma_queue_pairs_max < 1 || rdma_queue_pairs_max > 65536) {
    std::fprintf(stderr,
                 "shelf-store: --rdma-port takes 1..255, --rdma-gid-index -1 (auto) or 0..255, "
                 "--rdma-traffic-class 0..255, --rdma-service-level 0..15, --rdma-pkey-index "
                 "0..65535, --rdma-queue-pairs-max 1..65536\n");
    return 2;
  }
  opts.rdma_port = static_cast<int>(rdma_port);
  opts.rdma_gid_index = static_cast<int>(rdma_gid_index);
  opts.rdma_traffic_class = static_cast<int>(rdma_traffic_class);
  opts.rdma_service_level = static_cast<int>(rdma_service_level);
  opts.rdma_pkey_index = static_cast<int>(rdma_pkey_index);
  opts.rdma_queue_pairs_max = static_cast<int>(rdma_queue_pairs_max);

  for (absl::string_view u : absl::StrSplit(shm_allow_uids, ',', absl::SkipEmpty())) {
    uint32_t uid = 0;
    if (!absl::SimpleAtoi(u, &uid)) {
      std::fprintf(stderr, "shelf-store: --shm-allow-uids: '%s' is not a uid\n",
                   std::string(u).c_str());
      return 2;
    }
    opts.shm_allow_uids.push_back(uid);
  }
  if (!labels.empty()) {
    for (absl::string_view kv : absl::StrSplit(labels, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.first.empty() || p.second.empty()) {
        std::fprintf(stderr, "shelf-store: --labels: expected key=value, got '%s'\n",
                     std::string(kv).c_str());
        return 2;
      }
      opts.labels[p.first] = p.second;
    }
  }
  if (!secret_file.empty()) {
    absl::StatusOr<std::string> s = ReadSecretFile(secret_file);
    if (!s.ok()) {
      std::fprintf(stderr, "shelf-store: %s\n", std::string(s.status().message()).c_str());
      return 2;
    }
    opts.secret = *s;
  } else {
    SHELF_LOG(WARNING) << "no --secret-file: this store accepts any client";
  }
  if (!credentials_file.empty()) {
    absl::StatusOr<std::string> token = TokenFromCredentialsFile(credentials_file, principal);
    if (!token.ok()) {
      std::fprintf(stderr, "shelf-store: %s\n", std::string(token.status().message()).c_str());
      return 2;
    }
    opts.master_token = *std::move(token);
  }
  if (shm_arena != "auto") {
    absl::StatusOr<uint64_t> bytes = ParseSize(shm_arena);
    if (!bytes.ok()) {
      std::fprintf(stderr, "shelf-store: --shm-arena takes auto, 0 or a size, not '%s'\n",
                   shm_arena.c_str());
      return 2;
    }
    opts.shm_arena_bytes = *bytes;
  } else if (!credentials_file.empty()) {
    // Principals mean tenants (the master's --credentials may gain one on
    // any SIGHUP), and one segment would map every tenant's blocks into
    // every same-host client.
    opts.shm_arena_bytes = DefaultArenaBytes(opts.dram_size);
    if (opts.shm_arena_bytes == 0) {
      SHELF_LOG(WARNING) << "--dram-size " << opts.dram_size
                         << " splits into no tenant arenas: every same-host client maps every "
                            "tenant's blocks; give --shm-arena";
    }
  }
  if (absl::Status s =
          CheckProtectedMode({{"--listen", opts.listen}, {"--admin-listen", admin_listen}},
                             !opts.secret.empty(), insecure, "give --secret-file");
      !s.ok()) {
    std::fprintf(stderr, "shelf-store: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Start(opts);
  if (!store.ok()) {
    std::fprintf(stderr, "shelf-store: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<grpc::Server> admin;
  if (!admin_listen.empty()) {
    grpc::EnableDefaultHealthCheckService(true);
    if (reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(admin_listen, grpc::InsecureServerCredentials());
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is refused
    admin = builder.BuildAndStart();
    if (admin == nullptr) {
      std::fprintf(stderr, "shelf-store: cannot listen on --admin-listen %s\n",
                   admin_listen.c_str());
      return 1;
    }
  }
  std::unique_ptr<HttpServer> http;
  if (!metrics_listen.empty()) {
    Store* st = store->get();
    auto started = StartOpsEndpoint("--metrics-listen", metrics_listen, [st](const HttpRequest&) {
      bool reg = st->registered();
      // Unauthenticated: the state a probe needs, nothing about the node.
      Json body = Json::object();
      body["status"] = reg ? "ok" : "unregistered";
      return HttpResponse{reg ? 200 : 503, "application/json", JsonDump(body) + "\n"};
    });
    if (!started.ok()) {
      std::fprintf(stderr, "shelf-store: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    http = *std::move(started);
  }
  // Line 1 is the data-plane address; the metrics address (its real port,
  // also for --metrics-listen HOST:0), when on, follows.
  std::string ready = (*store)->data_address() + "\n";
  if (http != nullptr) absl::StrAppend(&ready, "metrics ", http->bound().ToString(), "\n");
  WriteReadyFile(ready_file, ready);
  std::thread runner([&] { (*store)->Run(); });
  int sig = 0;
  sigwait(&signals, &sig);
  SHELF_LOG(INFO) << "stopping" << Kv("signal", sig);
  (*store)->Stop();
  runner.join();
  if (admin != nullptr) admin->Shutdown();
  http.reset();
  return 0;
}
