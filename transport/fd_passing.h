// RecvWithFd: one read from a Unix socket that may carry a descriptor
// (SCM_RIGHTS). The shared-memory handshake, the shm write requests and
// their tests and fuzzer all receive this way.
#ifndef SHELF_TRANSPORT_FD_PASSING_H_
#define SHELF_TRANSPORT_FD_PASSING_H_

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

namespace shelf {

// Reads exactly `len` bytes into `buf` (MSG_WAITALL) and the one descriptor
// sent with them, close-on-exec, into *received_fd (-1 when none came).
// Returns recvmsg's count: fewer than `len` when the peer closed or timed
// out. A message whose control data did not fit (more than one descriptor)
// returns -1 with errno EMSGSIZE, having closed what did arrive. The caller
// owns *received_fd whatever the count.
inline ssize_t RecvWithFd(int fd, void* buf, size_t len, int* received_fd) {
  *received_fd = -1;
  struct iovec iov = {buf, len};
  struct msghdr msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  if (n < 0) return n;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(received_fd, CMSG_DATA(c), sizeof(int));
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    if (*received_fd >= 0) close(*received_fd);
    *received_fd = -1;
    errno = EMSGSIZE;
    return -1;
  }
  return n;
}

}  // namespace shelf

#endif  // SHELF_TRANSPORT_FD_PASSING_H_
