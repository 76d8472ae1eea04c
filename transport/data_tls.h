// TLS 1.3 on the TCP data plane (--data-tls; docs/security.md, "Data-plane
// TLS"), with OpenSSL, in user space: kernel TLS offload is not used (every
// byte is encrypted by SSL_write and decrypted by SSL_read).
//
// A DataTls is an SSL_CTX for one side. Handshake() runs the TLS handshake
// on a connected socket by an absolute deadline (non-blocking, polled, so a
// peer trickling bytes cannot stretch it), and returns the connection's TLS
// state for wire::Session::tls. From then on the session's reads and writes
// (StreamRead, StreamWritev) go through it.
//
//   auto tls = DataTls::ForClient(files);           // files.ca: who signs stores
//   auto state = (*tls)->Handshake(fd, "10.0.0.7", deadline_ms);
//   session.tls = *state;
//
// A DataTls is thread-safe; one connection's state is used by one thread at
// a time.
#ifndef SHELF_TRANSPORT_DATA_TLS_H_
#define SHELF_TRANSPORT_DATA_TLS_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shelf::transport::wire {

struct Session;

class DataTls {
 public:
  struct Files {
    std::string cert;  // PEM certificate chain (the store's; a client's for mutual TLS)
    std::string key;   // PEM private key
    std::string ca;    // PEM CA bundle: a client verifies stores with it; a store
                       // given one demands client certificates signed by it
  };
  // The store's side: cert and key required.
  static absl::StatusOr<std::shared_ptr<DataTls>> ForServer(const Files& files);
  // The client's side: ca required (the store's certificate must chain to
  // it and name the host dialled); cert and key optional.
  static absl::StatusOr<std::shared_ptr<DataTls>> ForClient(const Files& files);
  ~DataTls();

  // The TLS handshake on connected `fd` by `deadline_ms` (MonoMs); `host`
  // (client side) is the name or address the certificate must carry. The
  // socket is blocking again on return. UNAVAILABLE on a failed handshake
  // (with OpenSSL's reason: an unknown CA, a wrong name), DEADLINE_EXCEEDED
  // past the deadline.
  absl::StatusOr<std::shared_ptr<void>> Handshake(int fd, const std::string& host,
                                                  uint64_t deadline_ms) const;

 private:
  DataTls(void* ctx, bool server) : ctx_(ctx), server_(server) {}
  void* ctx_;  // SSL_CTX
  const bool server_;
};

// Reads or writes all bytes of a session's connection: through its TLS
// when it has one, else the socket. Errors as ReadFull / WriteFullv.
absl::Status StreamRead(int fd, const Session* s, void* buf, size_t n);
absl::Status StreamWritev(int fd, const Session* s, const struct iovec* iov, int iovcnt);
// As StreamRead / StreamWritev, but giving up at deadline_ms (MonoMs)
// however slowly the peer's bytes come (DEADLINE_EXCEEDED): for the
// handshake.
absl::Status StreamReadBefore(int fd, const Session* s, void* buf, size_t n, uint64_t deadline_ms);
absl::Status StreamWritevBefore(int fd, const Session* s, const struct iovec* iov, int iovcnt,
                                uint64_t deadline_ms);
// Non-zero when TLS holds bytes of the peer not yet handed out, decrypted
// or not (0 without TLS): the socket may then be empty with a frame waiting.
size_t StreamPending(const Session* s);

}  // namespace shelf::transport::wire

#endif  // SHELF_TRANSPORT_DATA_TLS_H_
