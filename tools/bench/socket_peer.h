// The socket baseline of `shelf-bench transport`: a plain blocking-socket
// peer in a forked process. For a READ, one 16-byte request, then the peer
// sends the batch's bytes; for a WRITE, a 16-byte header and the bytes,
// then a 1-byte ack.
#ifndef SHELF_TOOLS_BENCH_SOCKET_PEER_H_
#define SHELF_TOOLS_BENCH_SOCKET_PEER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/net.h"

namespace shelf::bench {

// A baseline peer in a forked process. Fork before any thread exists.
class BaselinePeer {
 public:
  static absl::StatusOr<std::unique_ptr<BaselinePeer>> Start(uint64_t block_bytes_max);
  ~BaselinePeer();
  BaselinePeer(const BaselinePeer&) = delete;
  BaselinePeer& operator=(const BaselinePeer&) = delete;
  absl::Status Connect();
  // Receives `blocks` blocks of `size` bytes into dst[i].
  absl::Status Receive(const std::vector<char*>& dst, uint64_t size);
  // Sends src[i] (size bytes each) and waits for the ack.
  absl::Status Send(const std::vector<char*>& src, uint64_t size);

 private:
  BaselinePeer(pid_t pid, HostPort address) : pid_(pid), address_(std::move(address)) {}
  pid_t pid_;
  HostPort address_;
  int fd_ = -1;
};

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_SOCKET_PEER_H_
