// gRPC glue shared by every binary: status conversion, the cluster-secret
// token carried in call metadata, deadlines and credentials.
//
// Authentication: when a cluster secret is configured, every call carries
// metadata `x-shelf-token: hex(HMAC-SHA256(secret, "shelf-grpc-v1"))`; a
// server with a secret answers UNAUTHENTICATED to any call without it. A
// master with --credentials takes principals' tokens instead
// (common/credentials.h): `NAME:hex(HMAC-SHA256(secret, "shelf-grpc-v1:" NAME))`.
// Use TLS (--tls-cert/--tls-key/--tls-ca) where the network is not trusted:
// the token is a bearer credential.
#ifndef SHELF_COMMON_RPC_H_
#define SHELF_COMMON_RPC_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/credentials.h"

namespace shelf {

grpc::Status ToGrpc(const absl::Status& s);
absl::Status FromGrpc(const grpc::Status& s);

inline constexpr char kTokenHeader[] = "x-shelf-token";
std::string AuthToken(const std::string& secret);

// Sets the deadline and the token on a client context.
void PrepareContext(grpc::ClientContext* ctx, const std::string& token, uint64_t timeout_ms);
// OK when the server runs open or the call carries the right token.
absl::Status CheckToken(const grpc::ServerContext* ctx, const std::string& token);
// The call's x-shelf-token ("" when it has none).
absl::string_view CallToken(const grpc::ServerContext* ctx);

struct TlsFiles {
  std::string cert;  // PEM certificate chain
  std::string key;   // PEM private key
  std::string ca;    // PEM CA bundle that signed the peer
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};
// Server credentials. With TLS: `tls.ca` set means mutual TLS, every client
// must present a certificate signed by that CA (verified during the
// handshake); a non-empty `token` is checked by an AuthMetadataProcessor on
// the call's metadata, before the request message is received and parsed,
// for every method (health and reflection included). With an Authenticator
// the processor authenticates the caller (a principal, or the cluster
// token) the same way; with mutual TLS and `bind_certificates`, a
// principal is accepted only on a connection whose client certificate names
// it (its common name, or a DNS subjectAltName), so a stolen token is no
// use without its holder's certificate and key.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& tls, const std::string& token = "");
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& tls, std::shared_ptr<const Authenticator> auth, bool bind_certificates);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const TlsFiles& tls);
// A channel to HOST:PORT with Shelf's channel arguments (large messages,
// keepalive, bounded reconnect backoff).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                           const TlsFiles& tls);

}  // namespace shelf

#endif  // SHELF_COMMON_RPC_H_
