// Thin, blocking socket helpers for the data plane and tests. Every call
// returns a Status that names the peer; none throws or aborts on peer errors.
#ifndef SHELF_COMMON_NET_H_
#define SHELF_COMMON_NET_H_

#include <sys/uio.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shelf {

struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;
};

// "HOST:PORT" or "[V6]:PORT". INVALID_ARGUMENT on anything else.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text);

// Listens on host:port (port 0 picks one); returns the fd. `bound` gets the
// actual address.
absl::StatusOr<int> TcpListen(const HostPort& addr, HostPort* bound, int backlog = 512);
// Connects with a timeout; sets TCP_NODELAY and large socket buffers.
absl::StatusOr<int> TcpConnect(const HostPort& addr, uint64_t timeout_ms);
// Sets SO_RCVTIMEO and SO_SNDTIMEO (0 = none).
void SetIoTimeoutMs(int fd, uint64_t timeout_ms);
// For a listener whose accept() failed with `err`, other than EINTR and
// ECONNABORTED: out of descriptors or memory, a network error passed on
// (accept(2)). Logs it (at most every 10 s) and sleeps 10 ms; the caller
// then accepts again: no error ends a listener that is not stopping.
void PauseAfterAcceptError(int err, const char* listener);

// Write/read exactly the bytes described by `iov` (modified in place).
// UNAVAILABLE on a closed or failed peer, DEADLINE_EXCEEDED on timeout.
absl::Status WriteFullv(int fd, struct iovec* iov, int iovcnt);
absl::Status ReadFullv(int fd, struct iovec* iov, int iovcnt);
absl::Status WriteFull(int fd, const void* data, size_t size);
absl::Status ReadFull(int fd, void* data, size_t size);

// An identity of this machine (boot id + hostname): two processes with
// the same HostId can share memory.
const std::string& HostId();

// Reads a cluster secret file: at least 16 bytes after trimming whitespace,
// in a file only its owner may read (common/secret_file.h).
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace shelf

#endif  // SHELF_COMMON_NET_H_
