// RESP over TLS (like Redis 6+'s tls-port): the server's OpenSSL context,
// made once at startup from PEM files, and non-blocking wrappers around
// SSL_do_handshake / SSL_read / SSL_write that say what the socket must be
// waited on before the call can go on.
//
//   TlsOptions o;  o.cert_file = "server.crt";  o.key_file = "server.key";
//   auto ctx = TlsContext::Create(o);           // bad files: INVALID_ARGUMENT
//   SSL* ssl = (*ctx)->NewSession(fd);           // per accepted connection
//   size_t n;  TlsIo r = TlsRead(ssl, buf, len, &n);
//
// A TlsContext is immutable after Create and may be shared by threads; an
// SSL session is used by one thread at a time (RespServer's loop thread).
#ifndef SHELF_SERVER_RESP_RESP_TLS_H_
#define SHELF_SERVER_RESP_RESP_TLS_H_

#include <openssl/ssl.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shelf::resp {

// Whether clients must present a certificate signed by --tls-ca-cert.
enum class TlsClientAuth { kNo, kYes, kOptional };

struct TlsOptions {
  std::string cert_file;     // PEM certificate (chain), server first
  std::string key_file;      // PEM private key of that certificate
  std::string ca_cert_file;  // PEM CA(s) that sign client certificates
  TlsClientAuth client_auth = TlsClientAuth::kNo;
};

// "no" | "yes" | "optional" (Redis's tls-auth-clients values).
absl::StatusOr<TlsClientAuth> ParseTlsClientAuth(const std::string& text);

class TlsContext {
 public:
  // INVALID_ARGUMENT naming the file and OpenSSL's reason when a file cannot
  // be read or parsed, the key does not match the certificate, or client
  // authentication is asked for without a CA.
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(const TlsOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // A server-side session on the connected, non-blocking socket `fd`; the
  // caller owns it (SSL_free). Null when OpenSSL is out of memory.
  SSL* NewSession(int fd) const;

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* const ctx_;
};

enum class TlsIo {
  kOk,         // progress: the handshake is done, or *n > 0 bytes moved
  kWantRead,   // call again once the socket is readable
  kWantWrite,  // call again once the socket is writable
  kClosed,     // the peer closed (close_notify or EOF)
  kError,      // a protocol or socket error: close the connection
};

// `error` (may be null) gets OpenSSL's reason on kError.
TlsIo TlsHandshake(SSL* ssl, std::string* error);
TlsIo TlsRead(SSL* ssl, char* buf, size_t len, size_t* n);
// After kWantRead/kWantWrite, call again with the same bytes and at least
// the same `len` (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER lets them move).
// Partial writes are on: *n may be less than `len`.
TlsIo TlsWrite(SSL* ssl, const char* buf, size_t len, size_t* n);
// Whether OpenSSL holds decrypted or undecrypted input the socket no longer
// shows (epoll would not wake for it).
bool TlsHasPending(SSL* ssl);

}  // namespace shelf::resp

#endif  // SHELF_SERVER_RESP_RESP_TLS_H_
