#include "server/master/master_config.h"

#include <zmq.h>

#include <cstdint>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/protected_mode.h"
#include "coord/etcd_flags.h"

namespace shelf::master {

namespace {

// The --events-* flags as given.
struct EventsFlags {
  std::string listen, replay_listen, encoding, other_listen, other_replay_listen, tenant_listen;
  std::string curve_secret_file, node_loss;
  bool allow_plaintext;
  int64_t queue, replay_batches;
  std::string credentials_file;
};

absl::StatusOr<std::string> EventsEndpoint(absl::string_view flag, absl::string_view value) {
  absl::StatusOr<std::string> ep = KvEventPublisher::NormalizeEndpoint(value);
  if (!ep.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", ep.status().message()));
  return ep;
}

// Checks the --events-* flags into c->events and c->master.
absl::Status ParseEventsConfig(const EventsFlags& f, MasterConfig* c) {
  KvEventPublisher::Options& o = c->events;
  if (f.node_loss == "removed") {
    c->master.events_node_loss = MasterOptions::NodeLossEvents::kRemoved;
  } else if (f.node_loss == "cleared") {
    c->master.events_node_loss = MasterOptions::NodeLossEvents::kCleared;
  } else {
    return absl::InvalidArgumentError("--events-node-loss is removed or cleared");
  }
  absl::StatusOr<KvEventEncoding> encoding = ParseKvEventEncoding(f.encoding);
  if (!encoding.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--events-encoding: ", encoding.status().message()));
  }
  const KvEventEncoding other =
      *encoding == KvEventEncoding::kMap ? KvEventEncoding::kArray : KvEventEncoding::kMap;
  if (f.listen.empty()) {
    for (const auto& [flag, value] :
         {std::pair<const char*, const std::string&>{"--events-replay-listen", f.replay_listen},
          {"--events-other-listen", f.other_listen},
          {"--events-other-replay-listen", f.other_replay_listen},
          {"--events-tenant-listen", f.tenant_listen},
          {"--events-curve-secret-file", f.curve_secret_file}}) {
      if (!value.empty())
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs --events-listen"));
    }
    return absl::OkStatus();
  }
  if (f.other_listen.empty() && !f.other_replay_listen.empty()) {
    return absl::InvalidArgumentError("--events-other-replay-listen needs --events-other-listen");
  }
  auto add = [&o](absl::string_view flag, const std::string& listen, absl::string_view replay_flag,
                  const std::string& replay, KvEventEncoding enc,
                  std::string tenant) -> absl::Status {
    absl::StatusOr<std::string> ep = EventsEndpoint(flag, listen);
    if (!ep.ok()) return ep.status();
    absl::StatusOr<std::string> rep = std::string();
    if (!replay.empty()) rep = EventsEndpoint(replay_flag, replay);
    if (!rep.ok()) return rep.status();
    o.streams.push_back({*ep, *rep, enc, std::move(tenant)});
    return absl::OkStatus();
  };
  if (absl::Status s = add("--events-listen", f.listen, "--events-replay-listen", f.replay_listen,
                           *encoding, "");
      !s.ok()) {
    return s;
  }
  if (!f.other_listen.empty()) {
    if (absl::Status s = add("--events-other-listen", f.other_listen,
                             "--events-other-replay-listen", f.other_replay_listen, other, "");
        !s.ok()) {
      return s;
    }
  }
  if (!f.tenant_listen.empty()) {
    for (absl::string_view item : absl::StrSplit(f.tenant_listen, ',')) {
      size_t eq = item.find('=');
      absl::string_view tenant = item.substr(0, eq);
      if (eq == absl::string_view::npos || !ValidTenantName(tenant)) {
        return absl::InvalidArgumentError(
            "--events-tenant-listen takes TENANT=ENDPOINT[,...] (a tenant is 1..32 of "
            "[A-Za-z0-9_-])");
      }
      if (absl::Status s = add("--events-tenant-listen", std::string(item.substr(eq + 1)), "", "",
                               *encoding, std::string(tenant));
          !s.ok()) {
        return s;
      }
    }
    if (f.credentials_file.empty()) {
      return absl::InvalidArgumentError("--events-tenant-listen needs --credentials (tenants)");
    }
  }
  if (f.queue < 1 || f.replay_batches < 0) {
    return absl::InvalidArgumentError("--events-queue must be >= 1, --events-replay-batches >= 0");
  }
  o.queue_events_max = static_cast<size_t>(f.queue);
  o.replay_batches_max = static_cast<size_t>(f.replay_batches);
  if (!f.curve_secret_file.empty()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(f.curve_secret_file);
    if (!secret.ok()) return absl::InvalidArgumentError(secret.status().message());
    std::string key(absl::StripAsciiWhitespace(*secret));
    char pub[41];
    if (key.size() != 40 || zmq_curve_public(pub, key.c_str()) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.curve_secret_file,
                       ": want a CURVE secret key, 40 Z85 characters (docs/events.md, Security)"));
    }
    o.curve.secret_key = key;
    o.curve.public_key = pub;
    if (f.credentials_file.empty()) {
      return absl::InvalidArgumentError(
          "--events-curve-secret-file needs --credentials: its events_key= entries are the "
          "subscribers admitted");
    }
    absl::StatusOr<std::vector<PrincipalEntry>> entries = ReadCredentialsFile(f.credentials_file);
    if (!entries.ok()) return absl::InvalidArgumentError(entries.status().message());
    for (const PrincipalEntry& e : *entries) {
      const Principal& p = e.principal;
      if (p.events_key.empty()) continue;
      o.curve.readers.push_back({p.events_key, {p.name, p.tenant}});
    }
  } else if (!f.allow_plaintext) {
    for (const KvEventPublisher::Stream& s : o.streams) {
      for (const std::string* ep : {&s.endpoint, &s.replay_endpoint}) {
        if (ep->empty() || KvEventEndpointIsLoopback(*ep)) continue;
        return absl::InvalidArgumentError(absl::StrCat(
            "events endpoint ", *ep,
            " is reachable from other hosts and the stream names every tenant's keys: give "
            "--events-curve-secret-file (with events_key= readers in --credentials), or "
            "--events-allow-plaintext for a network where anyone may read them"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MasterConfig> ParseMasterConfig(int argc, char** argv) {
  MasterConfig c;
  MasterOptions& opts = c.master;
  c.listen = "127.0.0.1:7000";
  std::string secret_file, credentials_file;
  std::string events_listen, events_replay_listen, events_encoding = "map";
  std::string events_other_listen, events_other_replay_listen, events_tenant_listen;
  std::string events_curve_secret_file, events_node_loss = "removed";
  bool events_allow_plaintext = false;
  KvEventPublisher::Options& events_opts = c.events;
  int64_t events_queue = static_cast<int64_t>(events_opts.queue_events_max);
  int64_t events_replay_batches = static_cast<int64_t>(events_opts.replay_batches_max);
  Flags flags("shelf-master", "the Shelf metadata master (placement, index, leases, eviction)");
  flags.AddString("listen", &c.listen, "HOST:PORT to serve gRPC on (port 0 picks one)");
  flags.AddDurationMs("node-ttl", &opts.node_ttl_ms, "a store silent this long is dead");
  flags.AddDurationMs("dead-store-memory", &opts.dead_store_memory_ms,
                      "how long the master keeps what a dead store missed (removals); one "
                      "dead longer comes back empty, its blocks dropped");
  flags.AddDurationMs("read-grant-ttl", &opts.read_grant_ms,
                      "how long the read grant of a lookup hit stays valid (docs/security.md)");
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
                  "most of a DRAM segment (0..1) kept as room ahead of puts (free, or clean: "
                  "also on SSD)");
  flags.AddBool("demote-keep-dram", &opts.demote_keep_dram,
                "demotion ahead of need copies the block to SSD and keeps its DRAM copy, clean, "
                "until a writer needs the room (dropped at once, nothing lost); "
                "=false: it moves the block, leaving the room empty");
  flags.AddSize("block-bytes-max", &opts.block_bytes_max, "largest block accepted");
  flags.AddSize("hard-pin-max", &opts.hard_pin_bytes_max,
                "hard-pinned bytes allowed per node (0: 10% of its DRAM)");
  flags.AddSize("rpc-memory-max", &c.rpc_memory_max,
                "memory gRPC may use for requests being received (grpc::ResourceQuota); past "
                "it, calls are refused with RESOURCE_EXHAUSTED; 0: no limit");
  flags.AddString("secret-file", &secret_file, "cluster secret (>= 16 bytes); none: open cluster");
  flags.AddString("credentials", &credentials_file,
                  "principals file (NAME ROLE TENANT SECRET [read=TENANTS] [QUOTA=VALUE...] "
                  "per line, tenant=NAME [QUOTA=VALUE...] for a tenant's quotas; "
                  "docs/security.md): callers authenticate as principals, roles, tenant "
                  "namespaces and quotas are enforced; reloaded on SIGHUP");
  flags.AddString("tls-cert", &c.tls.cert, "PEM certificate for gRPC TLS");
  flags.AddString("tls-key", &c.tls.key, "PEM private key for gRPC TLS");
  flags.AddString("tls-ca", &c.tls.ca,
                  "PEM CA bundle: mutual TLS, callers must present a certificate it signed");
  flags.AddBool("tls-bind-principals", &c.tls_bind_principals,
                "with --tls-ca and --credentials, a caller's client certificate must name its "
                "principal (common name or DNS subjectAltName)");
  flags.AddDurationMs("handshake-timeout", &c.handshake_timeout_ms,
                      "a gRPC connection that has not finished its (TLS and HTTP/2) handshake "
                      "this long after accept is closed");
  flags.AddDurationMs("idle-timeout", &c.idle_timeout_ms,
                      "a gRPC connection with no call in progress for this long is closed "
                      "(clients reconnect on their next call); 0: never");
  flags.AddInt("max-connections", &c.max_connections,
               "gRPC connections held at once; newer ones are closed at once (counted in "
               "shelf_master_connections_refused_total); keep it under LimitNOFILE; 0: no cap");
  flags.AddInt("max-call-streams", &c.max_call_streams,
               "clients' call streams served at once, each holding a thread while open "
               "(docs/master.md, \"Call streams\"); past it, clients make unary calls; 0: none");
  flags.AddInt("max-connections-per-source", &c.max_connections_per_source,
               "of --max-connections, the most one source address may hold (0: half)");
  flags.AddString("ready-file", &c.ready_file,
                  "write the bound HOST:PORT here once serving (then "
                  "'events', 'events-replay' and 'metrics HOST:PORT' lines for those that are on)");
  bool insecure = false;
  flags.AddBool("insecure", &insecure, kInsecureHelp);
  flags.AddBool("grpc-reflection", &c.reflection,
                "serve gRPC reflection (off: callers need the protos)");
  flags.AddString("etcd", &c.ha.etcd,
                  "etcd endpoints http[s]://HOST:PORT[,...]: elect one leader among masters");
  coord::AddEtcdFlags(&flags, &c.ha.etcd_options);
  flags.AddString("cluster", &c.ha.cluster,
                  "cluster name: masters of one cluster elect one leader");
  flags.AddDurationMs("election-ttl", &c.ha.election_ttl_ms,
                      "leader lease TTL: a dead leader is replaced after about this long");
  flags.AddDurationMs("recovery-grace", &c.ha.recovery_grace_ms,
                      "a new leader waits this long at most for known stores to re-register");
  flags.AddString("advertise", &c.ha.advertise,
                  "HOST:PORT others reach this master at (default: the bound --listen)");
  flags.AddString("metrics-listen", &c.metrics_listen,
                  "HOST:PORT serving /metrics (Prometheus) and /health over HTTP (off when empty)");
  flags.AddString("events-listen", &events_listen,
                  "publish block events in vLLM's KV-event format on this ZMQ PUB endpoint: "
                  "PORT or HOST:PORT (host 127.0.0.1 when left out; port 0 picks one) or a "
                  "ZMQ endpoint; off when empty (docs/events.md)");
  flags.AddString("events-replay-listen", &events_replay_listen,
                  "ZMQ ROUTER endpoint answering replay requests for missed event batches "
                  "(same forms as --events-listen)");
  flags.AddString("events-encoding", &events_encoding,
                  "how --events-listen encodes its batches: map (msgpack maps, vLLM's own "
                  "publisher) or array (msgpack arrays, as llm-d's and Dynamo's decoders read)");
  flags.AddString("events-other-listen", &events_other_listen,
                  "a second PUB endpoint with the same events and sequence numbers in the "
                  "other encoding (same forms as --events-listen)");
  flags.AddString("events-other-replay-listen", &events_other_replay_listen,
                  "the replay endpoint of --events-other-listen, answering in its encoding");
  flags.AddString("events-tenant-listen", &events_tenant_listen,
                  "TENANT=ENDPOINT[,...]: a stream of that tenant's blocks only, each in "
                  "--events-encoding (with --events-curve-secret-file, only that tenant's "
                  "events_key readers and admins may subscribe)");
  flags.AddString(
      "events-curve-secret-file", &events_curve_secret_file,
      "file holding the master's CURVE secret key (Z85; docs/events.md, "
      "Security): every events endpoint then takes only subscribers whose public key is an "
      "events_key= of --credentials");
  flags.AddBool("events-allow-plaintext", &events_allow_plaintext,
                "publish on a non-loopback endpoint without CURVE: anyone who reaches it reads "
                "every key (for a subscriber without CURVE, such as llm-d's indexer, on a "
                "network where that is acceptable)");
  flags.AddString("events-node-loss", &events_node_loss,
                  "when a store's blocks all go (its death, a flush): removed (a BlockRemoved "
                  "listing them, which every router applies) or cleared (vLLM's "
                  "AllBlocksCleared, which llm-d ignores)");
  flags.AddString("events-namespace", &events_opts.ns,
                  "the last part of the topic kv@<node_id>@NAMESPACE for a block whose put "
                  "named no model");
  flags.AddInt("events-queue", &events_queue,
               "events waiting to be published at most; more are dropped and counted");
  flags.AddInt("events-replay-batches", &events_replay_batches, "event batches kept for replay");
  flags.ParseOrExit(argc, argv);

  if (opts.block_bytes_max == 0 || opts.block_bytes_max > kBlockBytesLimit) {
    return absl::InvalidArgumentError("need 0 < --block-bytes-max < 4 GiB");
  }
  if (!(opts.demote_headroom_max >= 0 && opts.demote_headroom_max < 1)) {
    return absl::InvalidArgumentError("need 0 <= --demote-headroom-max < 1");
  }
  if (!(opts.evict_low > 0 && opts.evict_low < opts.evict_high && opts.evict_high <= 1) ||
      !(opts.ssd_evict_low > 0 && opts.ssd_evict_low < opts.ssd_evict_high &&
        opts.ssd_evict_high <= 1)) {
    return absl::InvalidArgumentError(
        "need 0 < --evict-low < --evict-high <= 1 (and the same for "
        "--ssd-evict-low/--ssd-evict-high)");
  }
  if (opts.read_grant_ms == 0) return absl::InvalidArgumentError("--read-grant-ttl must be > 0");
  if (!secret_file.empty()) {
    absl::StatusOr<std::string> s = ReadSecretFile(secret_file);
    if (!s.ok()) return absl::InvalidArgumentError(s.status().message());
    c.secret = *s;
  } else {
    opts.read_grants = false;  // open stores check none
    if (credentials_file.empty()) {
      SHELF_LOG(WARNING) << "no --secret-file: this cluster runs open; anyone who can reach it "
                            "can read and write";
    }
  }
  if (!credentials_file.empty()) {
    // Principals only: the cluster secret, if given too, keys grants and
    // the data plane but no longer authenticates a gRPC caller.
    auto auth = Authenticator::FromFile(credentials_file);
    if (!auth.ok()) return absl::InvalidArgumentError(auth.status().message());
    c.auth = *std::move(auth);
    opts.tenant_namespaces = true;
    opts.credentials = c.auth;  // quotas (docs/security.md, "Quotas")
  } else {
    c.auth = Authenticator::ClusterSecret(c.secret);
  }
  if (absl::Status s = CheckProtectedMode(
          {{"--listen", c.listen}}, c.auth->required() || !c.tls.ca.empty(), insecure,
          "give --secret-file or --credentials, or mutual TLS (--tls-ca with "
          "--tls-cert/--tls-key: TLS alone encrypts but admits anyone)");
      !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  constexpr uint64_t kTimeoutMsMax = std::numeric_limits<int>::max();  // gRPC takes an int
  if (c.handshake_timeout_ms == 0 || c.handshake_timeout_ms > kTimeoutMsMax) {
    return absl::InvalidArgumentError("--handshake-timeout takes 1ms..24d");
  }
  if (c.idle_timeout_ms > kTimeoutMsMax) {
    return absl::InvalidArgumentError("--idle-timeout takes 0 (never)..24d");
  }
  constexpr int64_t kCallStreamsMax = 1 << 16;
  if (c.max_call_streams < 0 || c.max_call_streams > kCallStreamsMax) {
    return absl::InvalidArgumentError("--max-call-streams takes 0 (none)..65536");
  }
  constexpr int64_t kConnectionsMax = 1 << 24;
  if (c.max_connections < 0 || c.max_connections > kConnectionsMax) {
    return absl::InvalidArgumentError("--max-connections takes 0 (no cap)..16777216");
  }
  if (c.max_connections_per_source < 0 || c.max_connections_per_source > c.max_connections) {
    return absl::InvalidArgumentError(
        "--max-connections-per-source takes 0 (half of --max-connections).."
        "--max-connections");
  }
  auto creds =
      ServerCredentials(c.tls, std::shared_ptr<const Authenticator>(c.auth), c.tls_bind_principals);
  if (!creds.ok()) return absl::InvalidArgumentError(creds.status().message());
  c.credentials = *std::move(creds);
  absl::StatusOr<HostPort> hp = ParseHostPort(c.listen);
  if (!hp.ok())
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", hp.status().message()));
  c.listen_host_port = *hp;

  if (absl::Status st =
          ParseEventsConfig({events_listen, events_replay_listen, events_encoding,
                             events_other_listen, events_other_replay_listen, events_tenant_listen,
                             events_curve_secret_file, events_node_loss, events_allow_plaintext,
                             events_queue, events_replay_batches, credentials_file},
                            &c);
      !st.ok()) {
    return st;
  }
  return c;
}

}  // namespace shelf::master
