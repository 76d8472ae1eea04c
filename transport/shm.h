// Same-host shared memory: a store hands its DRAM segment's memfd to local
// clients over a Unix socket (SCM_RIGHTS); a client maps it and moves a block
// with one memcpy.
//
// Handshake on the socket (little-endian):
//   store  -> client: magic u32 "SHMH" | nonce[16]
//   client -> store : mac[32] = HMAC-SHA256(secret, "shelf-shm-v1" || nonce)
//                     (32 zero bytes for an open cluster)
//   store  -> client: status u32 (0 = OK) | segment_id u32 | size u64,
//                     with the memfd attached as SCM_RIGHTS (OK only)
//
// ShmServer is thread-safe; ShmAttachments (client side) is thread-safe.
#ifndef SHELF_TRANSPORT_SHM_H_
#define SHELF_TRANSPORT_SHM_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace shelf {

class ShmServer {
 public:
  // Serves `memfd` (of `size` bytes, segment `segment_id`) on `socket_path`
  // (created; an existing stale socket is replaced).
  static absl::StatusOr<std::unique_ptr<ShmServer>> Start(const std::string& socket_path, int memfd,
                                                          uint32_t segment_id, uint64_t size,
                                                          std::string secret);
  ~ShmServer();
  const std::string& path() const { return path_; }

 private:
  ShmServer(std::string path, int listen_fd, int memfd, uint32_t segment_id, uint64_t size,
            std::string secret);
  void Loop();
  void ServeOne(int fd);

  const std::string path_;
  const int listen_fd_;
  const int memfd_;
  const uint32_t segment_id_;
  const uint64_t size_;
  const std::string secret_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// A segment of a local store, mapped into this process.
struct ShmMapping {
  char* base = nullptr;
  uint64_t size = 0;
  uint32_t segment_id = 0;
  uint64_t incarnation = 0;  // of the store it was made for (0: unknown)
  ~ShmMapping();
};

class ShmAttachments {
 public:
  explicit ShmAttachments(std::string secret) : secret_(std::move(secret)) {}
  // Maps (once) the segment served at `socket_path`. UNAVAILABLE when the
  // socket cannot be reached, UNAUTHENTICATED on a wrong secret. A cached
  // mapping made for another non-zero `incarnation` of the store (it
  // restarted: same socket path, new segment) is dropped and the segment
  // attached again.
  absl::StatusOr<std::shared_ptr<ShmMapping>> Get(const std::string& socket_path,
                                                  uint64_t incarnation = 0);
  // Forgets a mapping (e.g. the store restarted with a new segment).
  void Forget(const std::string& socket_path);

 private:
  const std::string secret_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<ShmMapping>> maps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf

#endif  // SHELF_TRANSPORT_SHM_H_
