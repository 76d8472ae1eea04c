#include "transport/data_tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/net.h"
#include "transport/session.h"

namespace shelf::transport::wire {
namespace {

SSL_CTX* Ctx(void* p) { return static_cast<SSL_CTX*>(p); }
SSL* Ssl(const Session* s) { return static_cast<SSL*>(s->tls.get()); }

std::string OpenSslError(const char* what) {
  unsigned long e = ERR_get_error();
  char buf[256] = {0};
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return absl::StrCat(what, e != 0 ? ": " : "", buf);
}

absl::StatusOr<SSL_CTX*> NewCtx(bool server, const DataTls::Files& files) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return absl::InternalError(OpenSslError("SSL_CTX_new"));
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  // No session tickets: nothing arrives after the handshake but data.
  if (server) SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Whole socket reads, not a record header then its body: half the
  // syscalls. What it buffers counts in StreamPending (SSL_has_pending).
  SSL_CTX_set_read_ahead(ctx, 1);
  auto fail = [&](const std::string& why) {
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(why);
  };
  if (!files.cert.empty() && SSL_CTX_use_certificate_chain_file(ctx, files.cert.c_str()) != 1) {
    return fail(OpenSslError(absl::StrCat("data TLS certificate ", files.cert).c_str()));
  }
  if (!files.key.empty() &&
      SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return fail(OpenSslError(absl::StrCat("data TLS key ", files.key).c_str()));
  }
  if (!files.cert.empty() && SSL_CTX_check_private_key(ctx) != 1) {
    return fail(OpenSslError("data TLS key does not match the certificate"));
  }
  if (!files.ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, files.ca.c_str(), nullptr) != 1) {
      return fail(OpenSslError(absl::StrCat("data TLS CA ", files.ca).c_str()));
    }
    SSL_CTX_set_verify(
        ctx, server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER, nullptr);
  }
  return ctx;
}

void SetBlocking(int fd, bool blocking) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK));
}

// Waits for fd to be readable or writable until deadline_ms.
absl::Status WaitFor(int fd, bool write, uint64_t deadline_ms) {
  for (;;) {
    uint64_t now = MonoMs();
    if (now >= deadline_ms) return absl::DeadlineExceededError("TLS handshake deadline passed");
    struct pollfd p = {fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    int n = poll(&p, 1, static_cast<int>(std::min<uint64_t>(deadline_ms - now, 1 << 30)));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return absl::UnavailableError("poll failed");
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<DataTls>> DataTls::ForServer(const Files& files) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("--data-tls needs --data-tls-cert and --data-tls-key");
  }
  absl::StatusOr<SSL_CTX*> ctx = NewCtx(true, files);
  if (!ctx.ok()) return ctx.status();
  return std::shared_ptr<DataTls>(new DataTls(*ctx, true));
}

absl::StatusOr<std::shared_ptr<DataTls>> DataTls::ForClient(const Files& files) {
  if (files.ca.empty()) {
    return absl::InvalidArgumentError("data TLS needs the CA that signs the stores' certificates");
  }
  absl::StatusOr<SSL_CTX*> ctx = NewCtx(false, files);
  if (!ctx.ok()) return ctx.status();
  return std::shared_ptr<DataTls>(new DataTls(*ctx, false));
}

DataTls::~DataTls() { SSL_CTX_free(Ctx(ctx_)); }

absl::StatusOr<std::shared_ptr<void>> DataTls::Handshake(int fd, const std::string& host,
                                                         uint64_t deadline_ms) const {
  SSL* ssl = SSL_new(Ctx(ctx_));
  if (ssl == nullptr) return absl::InternalError(OpenSslError("SSL_new"));
  std::shared_ptr<void> state(ssl, [](void* p) { SSL_free(static_cast<SSL*>(p)); });
  SSL_set_fd(ssl, fd);
  if (!server_ && !host.empty()) {
    struct in6_addr a6;
    struct in_addr a4;
    bool ip =
        inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, host.c_str());
      SSL_set1_host(ssl, host.c_str());
    }
  }
  SetBlocking(fd, false);
  absl::Status result = absl::OkStatus();
  for (;;) {
    int r = server_ ? SSL_accept(ssl) : SSL_connect(ssl);
    if (r == 1) break;
    int err = SSL_get_error(ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      result = WaitFor(fd, err == SSL_ERROR_WANT_WRITE, deadline_ms);
      if (!result.ok()) break;
      continue;
    }
    std::string why = OpenSslError("data-plane TLS handshake failed");
    long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      why = absl::StrCat(why, " (certificate: ", X509_verify_cert_error_string(verify), ")");
    }
    result = absl::UnavailableError(why);
    break;
  }
  SetBlocking(fd, true);
  if (!result.ok()) return result;
  return state;
}

absl::Status StreamRead(int fd, const Session* s, void* buf, size_t n) {
  if (s != nullptr && s->read_ahead) return s->ahead.Read(fd, static_cast<char*>(buf), n);
  if (s == nullptr || s->tls == nullptr) return ReadFull(fd, buf, n);
  SSL* ssl = Ssl(s);
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    size_t got = 0;
    int r = SSL_read_ex(ssl, p, n, &got);
    if (r == 1) {
      p += got;
      n -= got;
      continue;
    }
    int err = SSL_get_error(ssl, r);
    if (err == SSL_ERROR_ZERO_RETURN) return absl::UnavailableError("connection closed by peer");
    if (err == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ERR_clear_error();
      return absl::DeadlineExceededError("read from peer: timed out");
    }
    if (err == SSL_ERROR_SYSCALL && errno == EINTR) continue;
    return absl::UnavailableError(OpenSslError("TLS read from peer"));
  }
  return absl::OkStatus();
}

absl::Status StreamWritev(int fd, const Session* s, const struct iovec* iov, int iovcnt) {
  if (s == nullptr || s->tls == nullptr) {
    // WriteFullv advances the vector it is given: a copy (on the stack for
    // a frame's few pieces), every piece of it.
    constexpr int kOnStack = 8;
    struct iovec on_stack[kOnStack];
    std::vector<struct iovec> on_heap;
    struct iovec* copy = on_stack;
    if (iovcnt > kOnStack) {
      on_heap.assign(iov, iov + iovcnt);
      copy = on_heap.data();
    } else {
      std::copy(iov, iov + iovcnt, on_stack);
    }
    return WriteFullv(fd, copy, iovcnt);
  }
  SSL* ssl = Ssl(s);
  // Small pieces (header, extra, tag) go out together with what follows
  // them when it is small too: one record, not one per piece.
  std::string small;
  auto write = [&](const char* p, size_t n) -> absl::Status {
    while (n > 0) {
      size_t put = 0;
      int r = SSL_write_ex(ssl, p, n, &put);
      if (r == 1) {
        p += put;
        n -= put;
        continue;
      }
      int err = SSL_get_error(ssl, r);
      if (err == SSL_ERROR_SYSCALL && errno == EINTR) continue;
      if (err == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        ERR_clear_error();
        return absl::DeadlineExceededError("write to peer: timed out");
      }
      return absl::UnavailableError(OpenSslError("TLS write to peer"));
    }
    return absl::OkStatus();
  };
  constexpr size_t kSmall = 4096;
  for (int i = 0; i < iovcnt; ++i) {
    const char* p = static_cast<const char*>(iov[i].iov_base);
    size_t n = iov[i].iov_len;
    if (n <= kSmall) {
      small.append(p, n);
      continue;
    }
    if (!small.empty()) {
      if (absl::Status st = write(small.data(), small.size()); !st.ok()) return st;
      small.clear();
    }
    if (absl::Status st = write(p, n); !st.ok()) return st;
  }
  if (!small.empty()) return write(small.data(), small.size());
  return absl::OkStatus();
}

namespace {

absl::Status SetLeft(int fd, uint64_t deadline_ms) {
  uint64_t now = MonoMs();
  if (now >= deadline_ms) return absl::DeadlineExceededError("deadline passed");
  SetIoTimeoutMs(fd, deadline_ms - now);
  return absl::OkStatus();
}

// One TLS read or write of up to n bytes on a non-blocking socket, polled
// until the deadline. Sets *done to the bytes moved.
absl::Status TlsIoBefore(int fd, SSL* ssl, bool write, char* p, size_t n, uint64_t deadline_ms,
                         size_t* done) {
  for (;;) {
    int r = write ? SSL_write_ex(ssl, p, n, done) : SSL_read_ex(ssl, p, n, done);
    if (r == 1) return absl::OkStatus();
    int err = SSL_get_error(ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (absl::Status s = WaitFor(fd, err == SSL_ERROR_WANT_WRITE, deadline_ms); !s.ok()) {
        return s;
      }
      continue;
    }
    if (err == SSL_ERROR_ZERO_RETURN) return absl::UnavailableError("connection closed by peer");
    return absl::UnavailableError(OpenSslError(write ? "TLS write to peer" : "TLS read from peer"));
  }
}

}  // namespace

absl::Status StreamReadBefore(int fd, const Session* s, void* buf, size_t n, uint64_t deadline_ms) {
  char* p = static_cast<char*>(buf);
  if (s != nullptr && s->tls != nullptr) {
    SetBlocking(fd, false);
    absl::Status st = absl::OkStatus();
    while (n > 0 && st.ok()) {
      size_t got = 0;
      st = TlsIoBefore(fd, Ssl(s), false, p, n, deadline_ms, &got);
      p += got;
      n -= got;
    }
    SetBlocking(fd, true);
    return st;
  }
  if (s != nullptr && s->read_ahead) {
    const size_t took = s->ahead.Take(p, n);
    p += took;
    n -= took;
  }
  // Each recv waits only what is left: a byte a second buys nothing.
  while (n > 0) {
    if (absl::Status st = SetLeft(fd, deadline_ms); !st.ok()) return st;
    ssize_t got = recv(fd, p, n, 0);
    if (got == 0) return absl::UnavailableError("connection closed by peer");
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return absl::UnavailableError(absl::StrCat("read from peer: ", ErrnoText(errno)));
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status StreamWritevBefore(int fd, const Session* s, const struct iovec* iov, int iovcnt,
                                uint64_t deadline_ms) {
  if (s != nullptr && s->tls != nullptr) {
    std::string all;
    for (int i = 0; i < iovcnt; ++i) {
      all.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    }
    SetBlocking(fd, false);
    absl::Status st = absl::OkStatus();
    size_t off = 0;
    while (off < all.size() && st.ok()) {
      size_t put = 0;
      st = TlsIoBefore(fd, Ssl(s), true, all.data() + off, all.size() - off, deadline_ms, &put);
      off += put;
    }
    SetBlocking(fd, true);
    return st;
  }
  if (absl::Status st = SetLeft(fd, deadline_ms); !st.ok()) return st;
  return StreamWritev(fd, s, iov, iovcnt);
}

size_t StreamPending(const Session* s) {
  if (s != nullptr && s->read_ahead) return s->ahead.pending();
  if (s == nullptr || s->tls == nullptr) return 0;
  // Decrypted bytes, or raw ones read ahead and not yet decrypted.
  SSL* ssl = Ssl(s);
  return SSL_pending(ssl) > 0 || SSL_has_pending(ssl) == 1 ? 1 : 0;
}

}  // namespace shelf::transport::wire
