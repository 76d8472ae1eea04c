// shelf-master's command line: every flag, parsed and checked, as the
// options of the pieces main.cc starts (the Master, its gRPC server, the
// event publisher, MasterHa and the ops endpoint). See docs/master.md.
//
//   absl::StatusOr<MasterConfig> config = ParseMasterConfig(argc, argv);
//   if (!config.ok()) { print "shelf-master: <message>"; exit 2; }
#ifndef SHELF_SERVER_MASTER_MASTER_CONFIG_H_
#define SHELF_SERVER_MASTER_MASTER_CONFIG_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/credentials.h"
#include "common/net.h"
#include "common/rpc.h"
#include "server/master/events/kv_events.h"
#include "server/master/ha/master_ha.h"
#include "server/master/master.h"

namespace shelf::master {

struct MasterConfig {
  // listen_address is left empty: the bound address is known after the
  // gRPC server starts.
  MasterOptions master;
  std::string listen;  // --listen as given (port 0 picks one)
  HostPort listen_host_port;
  std::string secret;  // the cluster secret; empty: open cluster
  // Who may call: the principals of --credentials, else the cluster
  // secret's one all-roles principal, else anyone (open).
  std::shared_ptr<Authenticator> auth;
  TlsFiles tls;
  // With mutual TLS and principals: a caller's client certificate must name
  // its principal (docs/security.md, "TLS on gRPC").
  bool tls_bind_principals = true;
  // A connection that has not finished its handshake this long after
  // accept is closed (gRPC's own default is 120 s).
  uint64_t handshake_timeout_ms = 10000;
  // A connection with no call in progress this long is closed; 0: never.
  uint64_t idle_timeout_ms = uint64_t{10} * 60 * 1000;
  // gRPC connections held at once, and from one source address (0: half of
  // max_connections); past them, new ones are shut down
  // (server/master/connection_cap.h). max_connections 0: no cap.
  int64_t max_connections = 16384;
  // Calls streams served at once (MasterServiceImpl::Calls); 0: none.
  int64_t max_call_streams = 1024;
  int64_t max_connections_per_source = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  bool reflection = false;
  // Bounds what concurrent large bodies (registrations) can make gRPC hold:
  // 8 concurrent 60 MiB calls peak near 1 GiB without it, near 0.6 GiB with
  // it; a lone 64 MiB registration and 20 concurrent 10 MiB ones still pass
  // (docs/security.md, "Message size limits"). 0: no limit.
  uint64_t rpc_memory_max = uint64_t{256} << 20;
  std::string ready_file;
  std::string metrics_listen;  // empty: no /metrics, /health
  // ha.etcd empty: no etcd, the master leads alone. ha.advertise empty:
  // the bound --listen.
  MasterHaOptions ha;
  // events.endpoint empty: no event publisher.
  KvEventPublisher::Options events;
};

// Parses argv (--help and a malformed flag print and exit, as Flags does)
// and checks the values: INVALID_ARGUMENT with the message to print after
// "shelf-master: " otherwise. Reads --secret-file and --credentials; warns
// when both are absent.
absl::StatusOr<MasterConfig> ParseMasterConfig(int argc, char** argv);

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_MASTER_CONFIG_H_
