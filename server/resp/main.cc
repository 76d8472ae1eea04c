// shelf-resp: a Redis-protocol (RESP2/RESP3) front end to a Shelf cluster,
// so that Redis clients (LMCache's redis:// backend, redis-py, redis-cli)
// can use Shelf. See docs/resp.md.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/data_tls_flags.h"
#include "common/credentials.h"
#include "common/flags.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/mutex_debug.h"
#include "common/net.h"
#include "common/ops_endpoint.h"
#include "common/protected_mode.h"
#include "common/ready_file.h"
#include "common/secret_file.h"
#include "coord/etcd_flags.h"
#include "server/resp/resp_commands.h"
#include "server/resp/resp_server.h"
#include "shelf/client.h"

namespace {

int Fail(const std::string& message, int code = 2) {
  std::fprintf(stderr, "shelf-resp: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shelf;
  using namespace shelf::resp;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  ConfigureMutexDeadlockDetection();
  SetLogComponent("resp");
  // Values pass through heap buffers of 64 KiB to tens of MiB (a GET's copy
  // on the event loop, a SET's body), each freed once sent. By default
  // glibc hands such memory back to the kernel as soon as it is free, and
  // the next value faults every page of it in again: 16-deep pipelines of
  // 64 KiB GETs ran at a third of their speed, the front end's CPU in
  // copies into freshly faulted pages. Blocks under 32 MiB come from the
  // arenas, and up to 64 MiB of free memory stays with each. Set before
  // any other thread starts.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // NOLINT(concurrency-mt-unsafe): one thread yet
  mallopt(M_TRIM_THRESHOLD, 64 << 20);  // NOLINT(concurrency-mt-unsafe): as above

  RespServerOptions server_opts;
  server_opts.listen = "127.0.0.1:6379";
  CommandOptions cmd_opts;
  std::string master, secret_file, requirepass_file, admin_listen, ready_file;
  std::string credentials_file, principal;
  TlsOptions tls;
  std::string tls_auth_clients = "no";
  std::string grpc_tls_ca, grpc_tls_cert, grpc_tls_key;
  int64_t replicas = 1, max_clients = 10000, threads = 16;
  uint64_t max_value = 512ull << 20, max_inflight = 2ull << 30, timeout_ms = 30000;
  uint64_t value_arena = server_opts.value_arena_bytes;
  Flags flags("shelf-resp",
              "a Redis-protocol (RESP2/RESP3) front end to a Shelf cluster (docs/resp.md)");
  flags.AddString("listen", &server_opts.listen,
                  "HOST:PORT to serve plain RESP on (port 0 picks one; empty: no plain TCP "
                  "listener, as Redis's port 0)");
  flags.AddString("tls-listen", &server_opts.tls_listen,
                  "HOST:PORT to serve RESP over TLS on, beside --listen (Redis's tls-port); "
                  "needs --tls-cert and --tls-key (off when empty)");
  flags.AddString("unix-socket", &server_opts.unix_socket,
                  "also serve RESP on this unix socket path (off when empty)");
  flags.AddString("master", &master,
                  "the master(s): HOST:PORT[,HOST:PORT...] or etcd://HOST:PORT[,...]/CLUSTER");
  flags.AddString("secret-file", &secret_file, "cluster secret (>= 16 bytes)");
  flags.AddString("credentials", &credentials_file,
                  "credentials file holding this gateway's principal (role gateway): its keys "
                  "live in the principal's tenant (docs/security.md). Every gateway principal "
                  "in it is also a user clients may AUTH as, with its secret (docs/resp.md)");
  flags.AddString("principal", &principal,
                  "which principal of --credentials (default: the file's only one)");
  flags.AddString("requirepass-file", &requirepass_file,
                  "file holding the password clients must AUTH with (off when empty)");
  flags.AddString("tls-cert", &tls.cert_file,
                  "PEM certificate (chain, server first) of the --tls-listen port");
  flags.AddString("tls-key", &tls.key_file, "PEM private key of --tls-cert");
  flags.AddDurationMs("tls-handshake-timeout", &server_opts.tls_handshake_timeout_ms,
                      "a --tls-listen connection that has not finished its TLS handshake this "
                      "long after accept is closed");
  flags.AddString("tls-ca-cert", &tls.ca_cert_file,
                  "PEM CA certificate(s) that client certificates must be signed by");
  flags.AddString("tls-auth-clients", &tls_auth_clients,
                  "no: no client certificate asked; yes: one signed by --tls-ca-cert required; "
                  "optional: checked when presented");
  flags.AddInt("replicas", &replicas, "copies of each value, on distinct nodes (1..8)");
  flags.AddSize("max-value-size", &max_value, "largest value a client may SET");
  flags.AddInt("max-clients", &max_clients, "connections served at once; more are refused");
  flags.AddSize("max-inflight-bytes", &max_inflight,
                "request bytes held in memory at once, all clients together, and the values "
                "one MGET may hold; over it: -OOM");
  uint64_t loop_get = CommandOptions::kLoopGetBytesMaxDefault;
  flags.AddSize("max-loop-get-bytes", &loop_get,
                "largest value a GET is answered with by the event loop itself: copied out of "
                "a same-host store's memory when its location is cached, checked and sent; a "
                "larger value goes to a worker, which leases it from the master and sends it "
                "from where it lies (docs/resp.md, \"GETs on the event loop\"; 0: only empty "
                "values)");
  flags.AddSize("value-arena-size", &value_arena,
                "shared memory SET values of 64 KiB and more are read into, so that a store on "
                "this host copies each put once (a value in heap memory is copied twice); "
                "values that find it full go to heap memory (0: off)");
  ClientOptions copts;
  flags.AddSize("warm-shm-bytes", &copts.warm_shm_bytes,
                "bytes of each same-host store's segment read through once in the background "
                "after mapping, so that a value's first GET pays no first touch of its pages "
                "(docs/transport.md; 0: off)");
  int64_t call_streams = static_cast<int64_t>(copts.master_call_streams);
  flags.AddInt("master-call-streams", &call_streams,
               "streams to the master kept for the hot calls (put start, commit, lookup), each "
               "carrying one call at a time (docs/master.md, \"Call streams\"; 0: unary calls)");
  flags.AddInt("threads", &threads, "worker threads running commands against the cluster");
  flags.AddDurationMs("timeout", &timeout_ms, "deadline of each call to the cluster");
  flags.AddBool("enable-flush", &cmd_opts.flush_enabled,
                "allow FLUSHDB/FLUSHALL (they remove every key of the cluster)");
  flags.AddString("admin-listen", &admin_listen,
                  "HOST:PORT serving /metrics (Prometheus) and /health over HTTP (off when empty)");
  flags.AddString("ready-file", &ready_file,
                  "write the RESP HOST:PORT here once serving (the TLS one when there is no "
                  "plain listener; with both, the TLS one on a second line)");
  coord::EtcdOptions etcd;  // for an etcd:// --master
  coord::AddEtcdFlags(&flags, &etcd);
  flags.AddString("master-tls-ca", &grpc_tls_ca, "PEM CA bundle: talk TLS to the master");
  flags.AddString("master-tls-cert", &grpc_tls_cert,
                  "PEM client certificate for the master (mutual TLS)");
  flags.AddString("master-tls-key", &grpc_tls_key, "PEM private key of --master-tls-cert");
  AddDataTlsClientFlags(&flags, &copts);
  bool insecure = false;
  flags.AddBool("insecure", &insecure, kInsecureHelp);
  flags.ParseOrExit(argc, argv);

  if (master.empty()) return Fail("--master is required");
  if (call_streams < 0 || call_streams > 64) return Fail("--master-call-streams takes 0..64");
  copts.master_call_streams = static_cast<size_t>(call_streams);
  if (absl::Status s = CheckDataTlsClientFlags(copts); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  bool tls_files = !tls.cert_file.empty() || !tls.key_file.empty() || !tls.ca_cert_file.empty();
  if (server_opts.tls_listen.empty() && tls_files) {
    return Fail("--tls-cert/--tls-key/--tls-ca-cert are for --tls-listen, which is not set");
  }
  if (server_opts.listen.empty() && server_opts.tls_listen.empty() &&
      server_opts.unix_socket.empty()) {
    return Fail("nothing to serve on: give --listen, --tls-listen or --unix-socket");
  }
  if (!server_opts.tls_listen.empty()) {
    absl::StatusOr<TlsClientAuth> auth = ParseTlsClientAuth(tls_auth_clients);
    if (!auth.ok()) return Fail(std::string(auth.status().message()));
    tls.client_auth = *auth;
    // Before anything connects: a bad certificate or key stops the start.
    absl::StatusOr<std::unique_ptr<TlsContext>> ctx = TlsContext::Create(tls);
    if (!ctx.ok()) return Fail(std::string(ctx.status().message()));
    server_opts.tls = std::shared_ptr<const TlsContext>(std::move(*ctx));
  }
  if (server_opts.tls_handshake_timeout_ms == 0) {
    return Fail("--tls-handshake-timeout must be above 0");
  }
  if (replicas < 1 || replicas > 8) return Fail("--replicas takes 1..8");
  if (max_clients < 1 || max_clients > 1000000) return Fail("--max-clients takes 1..1000000");
  if (threads < 1 || threads > 1024) return Fail("--threads takes 1..1024");
  if (max_value < 1 || max_value > (4ull << 30)) return Fail("--max-value-size takes 1B..4GiB");
  if (max_inflight < max_value) return Fail("--max-inflight-bytes must be >= --max-value-size");
  if (value_arena > (64ull << 30)) return Fail("--value-arena-size takes 0..64GiB");
  if (loop_get >= CommandHandler::kCachedRunBytesMax) {
    return Fail(absl::StrCat("--max-loop-get-bytes takes 0..",
                             CommandHandler::kCachedRunBytesMax - 1,
                             " (below the most one run of GETs the event loop copies)"));
  }

  // One descriptor per client: raise the soft limit to the hard one; when
  // even that is short of --max-clients and 256 more (the cluster's own
  // connections, files), lower --max-clients to fit, as Redis does, so
  // clients past it get "max number of clients" rather than a hang.
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) getrlimit(RLIMIT_NOFILE, &nofile);
    constexpr rlim_t kReserved = 256;
    if (nofile.rlim_cur != RLIM_INFINITY &&
        nofile.rlim_cur < static_cast<rlim_t>(max_clients) + kReserved) {
      const int64_t fits = nofile.rlim_cur > 2 * kReserved
                               ? static_cast<int64_t>(nofile.rlim_cur - kReserved)
                               : static_cast<int64_t>(nofile.rlim_cur / 2);
      SHELF_LOG(WARNING) << "open-file limit below --max-clients: lowered to fit"
                         << Kv("nofile", static_cast<uint64_t>(nofile.rlim_cur))
                         << Kv("max_clients", max_clients) << Kv("now", std::max<int64_t>(1, fits));
      max_clients = std::max<int64_t>(1, fits);
    }
  }

  copts.timeout_ms = timeout_ms;
  copts.tls_ca = grpc_tls_ca;
  copts.tls_cert = grpc_tls_cert;
  copts.tls_key = grpc_tls_key;
  copts.etcd_ca = etcd.tls_ca_file;
  copts.etcd_cert = etcd.tls_cert_file;
  copts.etcd_key = etcd.tls_key_file;
  copts.etcd_user_file = etcd.user_file;
  // A static list, or one etcd:// spec: libshelf then follows the leader
  // etcd names, across failovers, without a restart.
  if (absl::StartsWith(master, "etcd://")) {
    copts.masters = {master};
  } else {
    for (absl::string_view m : absl::StrSplit(master, ',', absl::SkipEmpty())) {
      copts.masters.emplace_back(m);
    }
  }
  if (!secret_file.empty()) {
    absl::StatusOr<std::string> s = ReadSecretFile(secret_file);
    if (!s.ok()) return Fail(std::string(s.status().message()));
    copts.secret = *s;
  }
  copts.credentials_file = credentials_file;
  copts.principal = principal;
  if (!requirepass_file.empty()) {
    absl::StatusOr<std::string> text = ReadPrivateFile(requirepass_file, "--requirepass-file");
    if (!text.ok()) return Fail(std::string(text.status().message()));
    cmd_opts.requirepass = std::string(absl::StripAsciiWhitespace(*text));
    if (cmd_opts.requirepass.empty()) return Fail("--requirepass-file is empty");
  }
  if (!tls.key_file.empty()) {
    if (absl::Status s = CheckPrivateFile(tls.key_file, "--tls-key"); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  {
    // A TLS port that requires client certificates authenticates by itself.
    std::vector<std::pair<std::string, std::string>> open_listens = {
        {"--listen", server_opts.listen}};
    if (tls.client_auth != TlsClientAuth::kYes) {
      open_listens.push_back({"--tls-listen", server_opts.tls_listen});
    }
    absl::Status s = CheckProtectedMode(open_listens, !cmd_opts.requirepass.empty(), insecure,
                                        "give --requirepass-file (or serve --tls-listen only, "
                                        "with --tls-auth-clients yes)");
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  std::unique_ptr<Client> client;
  Status st = Client::Open(copts, &client);
  if (!st.ok()) return Fail(st.ToString(), 1);
  if (!credentials_file.empty()) {
    // Named users: the gateway principals of --credentials, each AUTHing
    // with its secret; a session authenticated as one runs as it, in its
    // tenant. "default" stays the default user's name.
    absl::StatusOr<std::vector<PrincipalEntry>> entries = ReadCredentialsFile(credentials_file);
    if (!entries.ok()) return Fail(std::string(entries.status().message()));
    for (const PrincipalEntry& e : *entries) {
      if (e.principal.role == Role::kGateway && e.principal.name != "default") {
        cmd_opts.users[e.principal.name] = e.secret;
      }
    }
    cmd_opts.open_user =
        [copts](const std::string& user) -> absl::StatusOr<std::unique_ptr<Client>> {
      ClientOptions o = copts;
      o.principal = user;
      std::unique_ptr<Client> c;
      Status s = Client::Open(o, &c);
      if (!s.ok()) return absl::UnavailableError(s.ToString());
      return c;
    };
  }

  cmd_opts.replicas = static_cast<uint32_t>(replicas);
  cmd_opts.max_value_bytes = max_value;
  cmd_opts.max_inflight_bytes = max_inflight;
  cmd_opts.loop_get_bytes_max = loop_get;
  server_opts.max_clients = static_cast<size_t>(max_clients);
  server_opts.max_inflight_bytes = max_inflight;
  server_opts.threads = static_cast<size_t>(threads);
  server_opts.value_arena_bytes = static_cast<size_t>(value_arena);
  server_opts.limits.bulk_bytes_max = max_value;
  server_opts.auth_required = !cmd_opts.requirepass.empty();
  ServerStats stats;
  cmd_opts.listen = server_opts.listen;
  CommandHandler handler(client.get(), cmd_opts, &stats);
  absl::StatusOr<std::unique_ptr<RespServer>> server =
      RespServer::Start(server_opts, &handler, &stats);
  if (!server.ok()) return Fail(std::string(server.status().message()), 1);

  std::unique_ptr<HttpServer> http;
  if (!admin_listen.empty()) {
    auto started = StartOpsEndpoint("--admin-listen", admin_listen, [](const HttpRequest&) {
      return HttpResponse{200, "application/json", "{\"status\": \"ok\"}\n"};
    });
    if (!started.ok()) return Fail(std::string(started.status().message()), 1);
    http = *std::move(started);
  }
  std::string ready;
  if (!(*server)->address().empty()) {
    SHELF_LOG(INFO) << "serving RESP" << Kv("address", (*server)->address());
    ready = (*server)->address() + "\n";
  }
  if (!(*server)->tls_address().empty()) {
    SHELF_LOG(INFO) << "serving RESP over TLS" << Kv("address", (*server)->tls_address());
    ready += (*server)->tls_address() + "\n";
  }
  if (ready.empty()) ready = server_opts.unix_socket + "\n";
  WriteReadyFile(ready_file, ready);
  std::thread runner([&] { (*server)->Run(); });
  int sig = 0;
  sigwait(&signals, &sig);
  SHELF_LOG(INFO) << "stopping" << Kv("signal", sig);
  (*server)->Stop();
  runner.join();
  server->reset();
  http.reset();
  return 0;
}
