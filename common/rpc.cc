#include "common/rpc.h"

#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/hmac.h"
#include "common/secret_file.h"

namespace shelf {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

std::string AuthToken(const std::string& secret) {
  if (secret.empty()) return std::string();
  return absl::BytesToHexString(HmacSha256(secret, "shelf-grpc-v1"));
}

void PrepareContext(grpc::ClientContext* ctx, const std::string& token, uint64_t timeout_ms) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  if (!token.empty()) ctx->AddMetadata(kTokenHeader, token);
}

absl::Status CheckToken(const grpc::ServerContext* ctx, const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  const auto& md = ctx->client_metadata();
  auto it = md.find(kTokenHeader);
  if (it == md.end()) {
    return absl::UnauthenticatedError("this cluster needs a secret: pass --secret-file");
  }
  std::string got(it->second.data(), it->second.size());
  if (!ConstantTimeEqual(got, token)) {
    return absl::UnauthenticatedError("wrong cluster secret");
  }
  return absl::OkStatus();
}

absl::string_view CallToken(const grpc::ServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kTokenHeader);
  if (it == md.end()) return absl::string_view();
  return absl::string_view(it->second.data(), it->second.size());
}

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  if (path.empty()) return std::string();
  if (std::string(what) == "--tls-key") return ReadPrivateFile(path, what);
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", what, " '", path, "'"));
  std::stringstream buf;
  buf << f.rdbuf();
  return buf.str();
}

}  // namespace

// Rejects a call whose metadata lacks the cluster token. gRPC runs it on
// the call's initial metadata, before the handler's request message is
// received and deserialized, so a caller without the token cannot make the
// server buffer or parse a body.
class TokenAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuthProcessor(std::string token) : token_(std::move(token)) {}
  bool IsBlocking() const override { return false; }  // a constant-time compare
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    auto it = auth_metadata.find(kTokenHeader);
    if (it == auth_metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this cluster needs a secret: pass --secret-file");
    }
    if (!ConstantTimeEqual(std::string(it->second.data(), it->second.size()), token_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong cluster secret");
    }
    return grpc::Status::OK;
  }

 private:
  const std::string token_;
};

// The same check as TokenAuthProcessor, by an Authenticator (principals
// or the cluster token): a table lookup and a constant-time compare.
// With `bind_certificates` (mutual TLS), the principal must also be named
// by the connection's client certificate.
class PrincipalAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  PrincipalAuthProcessor(std::shared_ptr<const Authenticator> auth, bool bind_certificates)
      : auth_(std::move(auth)), bind_certificates_(bind_certificates) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata*, OutputMetadata*) override {
    auto it = auth_metadata.find(kTokenHeader);
    absl::string_view token;
    if (it != auth_metadata.end()) token = absl::string_view(it->second.data(), it->second.size());
    absl::StatusOr<Principal> p = auth_->Authenticate(token);
    if (!p.ok()) return ToGrpc(p.status());
    if (bind_certificates_ && auth_->has_principals() && !CertificateNames(*context, p->name)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          absl::StrCat("principal '", p->name,
                                       "' is not named by this connection's client certificate "
                                       "(its common name or a DNS subjectAltName must be '",
                                       p->name, "')"));
    }
    return grpc::Status::OK;
  }

 private:
  static bool CertificateNames(const grpc::AuthContext& context, absl::string_view name) {
    for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
      for (const grpc::string_ref& value : context.FindPropertyValues(property)) {
        if (absl::string_view(value.data(), value.size()) == name) return true;
      }
    }
    return false;
  }

  const std::shared_ptr<const Authenticator> auth_;
  const bool bind_certificates_;
};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& tls, std::shared_ptr<const Authenticator> auth, bool bind_certificates) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = ServerCredentials(tls, "");
  if (!creds.ok() || !tls.enabled() || auth == nullptr || !auth->required()) return creds;
  // Only mutual TLS has a client certificate to bind to.
  (*creds)->SetAuthMetadataProcessor(std::make_shared<PrincipalAuthProcessor>(
      std::move(auth), bind_certificates && !tls.ca.empty()));
  return creds;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& tls, const std::string& token) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert.empty() || tls.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  auto cert = ReadPem(tls.cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(tls.key, "--tls-key");
  if (!key.ok()) return key.status();
  auto ca = ReadPem(tls.ca, "--tls-ca");
  if (!ca.ok()) return ca.status();
  // With a CA: mutual TLS, a client without a certificate signed by it
  // fails the handshake.
  grpc::SslServerCredentialsOptions opts(
      ca->empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = *ca;
  opts.pem_key_cert_pairs.push_back({*key, *cert});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(opts);
  if (!token.empty()) creds->SetAuthMetadataProcessor(std::make_shared<TokenAuthProcessor>(token));
  return creds;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  auto ca = ReadPem(tls.ca, "--tls-ca");
  if (!ca.ok()) return ca.status();
  opts.pem_root_certs = *ca;
  if (!tls.cert.empty() || !tls.key.empty()) {
    if (tls.cert.empty() || tls.key.empty()) {
      return absl::InvalidArgumentError("a client certificate needs both --tls-cert and --tls-key");
    }
    auto cert = ReadPem(tls.cert, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(tls.key, "--tls-key");
    if (!key.ok()) return key.status();
    opts.pem_cert_chain = *cert;
    opts.pem_private_key = *key;
  }
  return grpc::SslCredentials(opts);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address,
                                                           const TlsFiles& tls) {
  auto creds = ChannelCredentials(tls);
  if (!creds.ok()) return creds.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // gRPC takes this as the shortest time it gives one connection attempt
  // (its "min connect timeout"), not only as a backoff: at 100 ms a master
  // slow to send its HTTP/2 SETTINGS on a loaded host failed the call with
  // "connection attempt timed out before receiving SETTINGS frame". A
  // refused connection still fails at once; calls keep their own deadlines.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, *creds, args);
}

}  // namespace shelf
