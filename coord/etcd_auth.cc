// EtcdClient security: reading the TLS and user files EtcdOptions names, and
// the auth token that etcd's user authentication puts on every call.
//
// etcd (v3.4) answers Auth.Authenticate with a token that later calls carry
// as "token" metadata. A simple token expires after --auth-token-ttl (5 min)
// without use and a JWT at its expiry; a change to etcd's users or roles
// makes every token stale. Either way etcd says so on the next call, and
// the client logs in again and retries that call once.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/secret_file.h"
#include "coord/etcd_flags.h"
#include "coord/etcd_internal.h"

namespace shelf::coord::internal {

namespace {

absl::StatusOr<std::string> ReadPublicFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<EtcdSecurity> LoadSecurity(const EtcdOptions& options, bool https) {
  EtcdSecurity out;
  out.tls = https || !options.tls_ca_file.empty();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "etcd client certificate: give both --etcd-cert and --etcd-key");
  }
  if (!options.tls_cert_file.empty() && !out.tls) {
    return absl::InvalidArgumentError(
        "etcd client certificate without TLS: give --etcd-ca or https:// endpoints");
  }
  if (!options.tls_ca_file.empty()) {
    auto ca = ReadPublicFile(options.tls_ca_file, "--etcd-ca");
    if (!ca.ok()) return ca.status();
    out.ca_pem = *std::move(ca);
  }
  if (!options.tls_cert_file.empty()) {
    auto cert = ReadPublicFile(options.tls_cert_file, "--etcd-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadPrivateFile(options.tls_key_file, "--etcd-key");
    if (!key.ok()) return key.status();
    out.cert_pem = *std::move(cert);
    out.key_pem = *std::move(key);
  }
  if (!options.user_file.empty()) {
    auto content = ReadPrivateFile(options.user_file, "--etcd-user-file");
    if (!content.ok()) return content.status();
    absl::string_view line = absl::StripTrailingAsciiWhitespace(*content);
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0 ||
        line.find('\n') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--etcd-user-file '", options.user_file,
                                                     "': expected one line USER:PASSWORD"));
    }
    out.user = std::string(line.substr(0, colon));
    out.password = std::string(line.substr(colon + 1));
  }
  return out;
}

bool TokenRejected(const absl::Status& status) {
  if (absl::IsUnauthenticated(status)) return true;  // "invalid auth token"
  // A change to users or roles since the token was issued; a call that
  // carried no token while authentication is on.
  return absl::StrContains(status.message(), "revision of auth store is old") ||
         absl::StrContains(status.message(), "user name is empty");
}

absl::Status EtcdChannels::Authorize(size_t index, grpc::ClientContext* ctx, std::string* token) {
  token->clear();
  if (security_.user.empty()) return absl::OkStatus();
  MutexLock lock(&token_mu_);
  if (token_.empty()) {
    const EtcdEndpoint& ep = endpoint(index);
    etcdserverpb::AuthenticateRequest request;
    request.set_name(security_.user);
    request.set_password(security_.password);
    etcdserverpb::AuthenticateResponse response;
    grpc::ClientContext auth_ctx;
    auth_ctx.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(options_.call_timeout_ms));
    absl::Status s = FromGrpc(ep.auth->Authenticate(&auth_ctx, request, &response), ep);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("etcd authentication as '", security_.user, "': ", s.message()));
    }
    if (response.token().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "etcd ", ep.address, " returned no token: is authentication enabled in etcd?"));
    }
    token_ = response.token();
    SHELF_LOG(DEBUG) << "authenticated to etcd" << Kv("endpoint", ep.address)
                     << Kv("user", security_.user);
  }
  *token = token_;
  ctx->AddMetadata("token", token_);
  return absl::OkStatus();
}

void EtcdChannels::InvalidateToken(const std::string& token) {
  MutexLock lock(&token_mu_);
  if (token_ == token) token_.clear();
}

}  // namespace shelf::coord::internal

namespace shelf::coord {

void AddEtcdFlags(Flags* flags, EtcdOptions* options) {
  flags->AddString("etcd-ca", &options->tls_ca_file,
                   "PEM CA bundle that signed etcd's certificate: talk TLS to etcd");
  flags->AddString("etcd-cert", &options->tls_cert_file,
                   "PEM client certificate for etcd (its --client-cert-auth); needs --etcd-key");
  flags->AddString("etcd-key", &options->tls_key_file,
                   "PEM private key of --etcd-cert (refused when others may read it)");
  flags->AddString("etcd-user-file", &options->user_file,
                   "file holding USER:PASSWORD for etcd's authentication (refused when others "
                   "may read it)");
}

}  // namespace shelf::coord
