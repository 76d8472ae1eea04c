// RecvWithFd and SendWithFd: one read from, or one write to, a Unix socket
// that may carry a descriptor (SCM_RIGHTS). The shared-memory handshake,
// the shm write requests, arena requests and their tests and fuzzer all
// pass descriptors this way.
#ifndef SHELF_TRANSPORT_FD_PASSING_H_
#define SHELF_TRANSPORT_FD_PASSING_H_

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

namespace shelf::transport {

// Reads exactly `len` bytes into `buf` (MSG_WAITALL) and the one descriptor
// sent with them, close-on-exec, into *received_fd (-1 when none came).
// Returns recvmsg's count: fewer than `len` when the peer closed or timed
// out. A message with more than one descriptor returns -1 with errno
// EMSGSIZE, having closed every one that arrived (the kernel installs as
// many as the control buffer holds, and closes the rest). The caller owns
// *received_fd whatever the count.
inline ssize_t RecvWithFd(int fd, void* buf, size_t len, int* received_fd) {
  *received_fd = -1;
  struct iovec iov = {buf, len};
  struct msghdr msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  // Room for a few, so that a message with extras shows them (to close).
  constexpr int kFdsMax = 8;
  alignas(struct cmsghdr) char control[CMSG_SPACE(kFdsMax * sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  if (n < 0) return n;
  int fds = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fds++ == 0) {
        *received_fd = got;
      } else {
        close(got);
      }
    }
  }
  if (fds > 1 || (msg.msg_flags & MSG_CTRUNC) != 0) {
    if (*received_fd >= 0) close(*received_fd);
    *received_fd = -1;
    errno = EMSGSIZE;
    return -1;
  }
  return n;
}

// One sendmsg of `iov[0..iovcnt)` with descriptor `send_fd` attached (none
// when -1), retried on EINTR, never raising SIGPIPE. Returns sendmsg's
// count: a short count means the descriptor went with the bytes sent, and
// the caller finishes the rest with plain writes.
inline ssize_t SendWithFd(int fd, struct iovec* iov, int iovcnt, int send_fd) {
  struct msghdr msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (send_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &send_fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_FD_PASSING_H_
