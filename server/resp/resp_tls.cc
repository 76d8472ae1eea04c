#include "server/resp/resp_tls.h"

#include <openssl/err.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shelf::resp {

namespace {

// OpenSSL's queued errors as one line (and the queue emptied, so a later
// call on another connection does not report them).
std::string DrainErrors() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown error" : out;
}

absl::Status FileError(const char* flag, const std::string& path, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": cannot ", what, " '", path, "': ", DrainErrors()));
}

}  // namespace

absl::StatusOr<TlsClientAuth> ParseTlsClientAuth(const std::string& text) {
  if (text == "no") return TlsClientAuth::kNo;
  if (text == "yes") return TlsClientAuth::kYes;
  if (text == "optional") return TlsClientAuth::kOptional;
  return absl::InvalidArgumentError(
      absl::StrCat("--tls-auth-clients takes no, yes or optional, not '", text, "'"));
}

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::Create(const TlsOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  if (options.client_auth != TlsClientAuth::kNo && options.ca_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls-auth-clients yes|optional needs --tls-ca-cert");
  }
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + DrainErrors());
  std::unique_ptr<TlsContext> out(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Partial writes and a moving buffer: RespServer writes straight out of
  // its reply queue and retries from wherever the bytes are.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  // A client that drops the connection without close_notify is a close,
  // as on the plain port, not an error.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
    return FileError("--tls-cert", options.cert_file, "load the PEM certificate");
  }
  bool loaded = SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) == 1;
  if (!loaded && ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH) {
    return FileError("--tls-key", options.key_file, "load the PEM private key");
  }
  if (!loaded || SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-key '", options.key_file,
                                                   "' does not match --tls-cert '",
                                                   options.cert_file, "': ", DrainErrors()));
  }
  if (!options.ca_cert_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, options.ca_cert_file.c_str(), nullptr) != 1) {
      return FileError("--tls-ca-cert", options.ca_cert_file, "load the PEM CA certificate(s)");
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.ca_cert_file.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
  }
  switch (options.client_auth) {
    case TlsClientAuth::kNo:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
      break;
    case TlsClientAuth::kYes:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      break;
    case TlsClientAuth::kOptional:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
      break;
  }
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

SSL* TlsContext::NewSession(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return ssl;
}

namespace {

TlsIo Classify(SSL* ssl, int rc, std::string* error) {
  int e = SSL_get_error(ssl, rc);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      return TlsIo::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return TlsIo::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return TlsIo::kClosed;
    case SSL_ERROR_SYSCALL:
      if (error != nullptr) {
        *error = errno != 0 ? std::string(strerror(errno)) : std::string("connection closed");
      }
      ERR_clear_error();
      return TlsIo::kError;
    default:
      if (error != nullptr) {
        *error = DrainErrors();
      } else {
        ERR_clear_error();
      }
      return TlsIo::kError;
  }
}

}  // namespace

TlsIo TlsHandshake(SSL* ssl, std::string* error) {
  ERR_clear_error();
  errno = 0;
  int rc = SSL_do_handshake(ssl);
  if (rc == 1) return TlsIo::kOk;
  TlsIo r = Classify(ssl, rc, error);
  return r == TlsIo::kClosed ? TlsIo::kError : r;  // closed mid-handshake: failed
}

TlsIo TlsRead(SSL* ssl, char* buf, size_t len, size_t* n) {
  *n = 0;
  ERR_clear_error();
  errno = 0;
  int rc = SSL_read(ssl, buf, static_cast<int>(std::min<size_t>(len, INT_MAX)));
  if (rc > 0) {
    *n = static_cast<size_t>(rc);
    return TlsIo::kOk;
  }
  TlsIo r = Classify(ssl, rc, nullptr);
  return r == TlsIo::kError ? TlsIo::kClosed : r;  // a reset: the peer is gone
}

TlsIo TlsWrite(SSL* ssl, const char* buf, size_t len, size_t* n) {
  *n = 0;
  ERR_clear_error();
  errno = 0;
  int rc = SSL_write(ssl, buf, static_cast<int>(std::min<size_t>(len, INT_MAX)));
  if (rc > 0) {
    *n = static_cast<size_t>(rc);
    return TlsIo::kOk;
  }
  return Classify(ssl, rc, nullptr);
}

bool TlsHasPending(SSL* ssl) { return SSL_pending(ssl) > 0 || SSL_has_pending(ssl) == 1; }

}  // namespace shelf::resp
