// The socket baseline of `shelf-bench transport`: a plain blocking-socket
// peer in a forked process. For a READ, one 16-byte request, then the peer
// sends the batch's bytes; for a WRITE, a 16-byte header and the bytes,
// then a 1-byte ack. On several connections at once, each moves one stripe
// of every block.
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

// A baseline peer in a forked process, which serves each connection in a
// process of its own. Fork before any thread exists.
class BaselinePeer {
 public:
  static absl::StatusOr<std::unique_ptr<BaselinePeer>> Start(uint64_t block_bytes_max);
  ~BaselinePeer();
  BaselinePeer(const BaselinePeer&) = delete;
  BaselinePeer& operator=(const BaselinePeer&) = delete;
  // Opens `connections` connections to the peer.
  absl::Status Connect(int connections = 1);
  // Receives `blocks` blocks of `size` bytes into dst[i]. With
  // `connections` > 1 each block is cut into that many contiguous stripes,
  // stripe k moved on connection k, all connections at once (a thread
  // each), as the engine stripes a large block.
  absl::Status Receive(const std::vector<char*>& dst, uint64_t size, int connections = 1) {
    return Striped(true, dst, size, connections);
  }
  // Sends src[i] (size bytes each) and waits for the ack; striped as Receive.
  absl::Status Send(const std::vector<char*>& src, uint64_t size, int connections = 1) {
    return Striped(false, src, size, connections);
  }
  int connections() const { return static_cast<int>(fds_.size()); }

 private:
  BaselinePeer(pid_t pid, HostPort address) : pid_(pid), address_(std::move(address)) {}
  absl::Status Striped(bool receive, const std::vector<char*>& blocks, uint64_t size,
                       int connections);
  pid_t pid_;
  HostPort address_;
  std::vector<int> fds_;
};

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_SOCKET_PEER_H_
