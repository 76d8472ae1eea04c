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
// A store whose segment is made of arenas (one memfd each; docs/security.md,
// "Tenant arenas") answers segment_id kShmArenas and size = one arena's
// bytes, with no descriptor: the client then asks for each arena it reads
// from, presenting a read grant into it (transport/shm_write.h, "SHMA").
// A status is an absl::StatusCode: UNAUTHENTICATED for a wrong MAC,
// PERMISSION_DENIED for a peer uid the store does not allow.
//
// Both ends check who is on the other end (SO_PEERCRED): the store hands
// its segment only to the uids it allows; the client takes a segment only
// from the uid it expects the store to run as (or root). The client maps a
// descriptor only if it is sealed against shrinking and growing
// (F_SEAL_SHRINK | F_SEAL_GROW), so no holder can resize it under the
// mappings (SIGBUS), and only if it cannot be written through: sealed
// F_SEAL_FUTURE_WRITE, or opened O_RDONLY. The store serves only such a
// descriptor, and the client maps it PROT_READ.
//
// After the handshake the socket stays open: the client's puts travel on it
// as copy requests from its own staging memfd, each checked against the
// put's grant by the store (transport/shm_write.h).
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
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "transport/shm_board.h"
#include "transport/shm_warm.h"
#include "transport/shm_write.h"

namespace shelf::transport {

class ShmServer {
 public:
  // Serves `memfd` (of `size` bytes, segment `segment_id`) on `socket_path`
  // (created; an existing stale socket is replaced) to peers whose uid is
  // in `allowed_uids` (empty: this process's effective uid and root).
  // FAILED_PRECONDITION when `memfd` is not sealed against shrinking and
  // growing: a peer could resize it under every mapping. Peers receive
  // `memfd` itself when it is sealed F_SEAL_FUTURE_WRITE, else a read-only
  // descriptor of it (reopened through /proc/self/fd). Writes requested on
  // an attachment's socket go to `writes` (null: refused).
  static absl::StatusOr<std::unique_ptr<ShmServer>> Start(const std::string& socket_path, int memfd,
                                                          uint32_t segment_id, uint64_t size,
                                                          std::string secret,
                                                          std::vector<uint32_t> allowed_uids = {},
                                                          DataHandler* writes = nullptr);
  // The same for a segment made of arenas of `arena_bytes` each: no
  // descriptor goes with the handshake; `handler` hands each arena's
  // (DataHandler::ShmArena) for a read grant into it.
  static absl::StatusOr<std::unique_ptr<ShmServer>> StartArenas(const std::string& socket_path,
                                                                uint64_t arena_bytes,
                                                                std::string secret,
                                                                std::vector<uint32_t> allowed_uids,
                                                                DataHandler* handler);
  ~ShmServer();
  const std::string& path() const { return path_; }

 private:
  ShmServer(std::string path, int listen_fd, int memfd, int owned_fd, uint32_t segment_id,
            uint64_t size, std::string secret, std::vector<uint32_t> allowed_uids,
            DataHandler* writes);
  void Loop();
  // `peer_allowed`: the connected peer's uid is in allowed_uids_. True when
  // the segment was handed over (the socket then carries writes).
  bool ServeOne(int fd, bool peer_allowed);

  // An attachment's open socket, served by its own thread.
  struct Connection {
    int fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  const std::string path_;
  const int listen_fd_;
  const int memfd_;     // the descriptor handed to peers (write-protected); -1: arenas
  const int owned_fd_;  // memfd_ when this server opened it, else -1
  DataHandler* const writes_;
  const uint32_t segment_id_;
  const uint64_t size_;
  const std::string secret_;
  const std::vector<uint32_t> allowed_uids_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // Touched by Loop only, and by the destructor once Loop has ended.
  std::vector<std::unique_ptr<Connection>> connections_;
};

// Attachment sockets one store serves at once; more are closed after their
// handshake (their puts then go over TCP).
inline constexpr size_t kShmConnectionsMax = 256;
// Connections one client opens to one store for SSD reads in parallel
// (beyond its attachment's own).
inline constexpr int kShmReadChannelsMax = 8;

// The handshake's segment_id of a store whose segment is made of arenas.
inline constexpr uint32_t kShmArenas = 0xFFFFFFFF;

// A segment of a local store, mapped into this process.
struct ShmMapping {
  char* base = nullptr;
  uint64_t size = 0;
  uint32_t segment_id = 0;
  uint64_t incarnation = 0;  // of the store it was made for (0: unknown)
  // Arenas (segment_id kShmArenas): base is null and size is one arena's
  // bytes; the arenas mapped so far (ShmAttachments::Arena), by segment id.
  bool arenas = false;
  Mutex arenas_mu;
  std::map<uint32_t, const char*> arena_bases ABSL_GUARDED_BY(arenas_mu);
  // The attachment's socket: puts into this segment (never null once
  // attached).
  std::unique_ptr<ShmWriter> writer;
  std::string socket_path;
  // More connections to the store for SSD reads (ShmAttachments::ReadSsd).
  Mutex readers_mu;
  std::vector<std::unique_ptr<ShmWriter>> idle_readers ABSL_GUARDED_BY(readers_mu);
  int readers ABSL_GUARDED_BY(readers_mu) = 0;               // made and not broken
  bool readers_refused ABSL_GUARDED_BY(readers_mu) = false;  // the store closed a new one
  // The store's key board (transport/shm_board.h), asked for when the
  // segment is attached, while the store answers (a read never waits on
  // the store for it): null when the store keeps none, with arenas, or
  // when its descriptor is not sealed as a segment's must be. Set before
  // the mapping is shared.
  std::unique_ptr<KeyBoardView> board;
  ~ShmMapping();
};

class ShmAttachments {
 public:
  // `store_uid`: the uid a store's socket must be served by (root is always
  // accepted); -1: this process's effective uid. `warm_bytes`: bytes of
  // each segment mapped that a background thread reads through once
  // (transport/shm_warm.h); 0: none.
  explicit ShmAttachments(std::string secret, int64_t store_uid = -1, uint64_t warm_bytes = 0)
      : secret_(std::move(secret)), store_uid_(store_uid), warmer_(warm_bytes) {}
  // Maps (once) the segment served at `socket_path`; callers asking while
  // another's attach to it is under way share that attach's answer.
  // UNAVAILABLE when the socket cannot be reached, UNAUTHENTICATED on a
  // wrong secret. A cached mapping made for another non-zero `incarnation`
  // of the store (it restarted: same socket path, new segment) is dropped
  // and the segment attached again.
  //
  // Refusals, remembered per socket until the store's incarnation changes
  // (logged and counted once, not retried on every op): PERMISSION_DENIED
  // when the socket's peer is not the expected uid or the store does not
  // allow this process's uid; FAILED_PRECONDITION when the descriptor is
  // not sealed against shrinking and growing or could be written through.
  absl::StatusOr<std::shared_ptr<ShmMapping>> Get(const std::string& socket_path,
                                                  uint64_t incarnation = 0);
  // An SSD read through mapping `m` (ShmWriter::ReadSsd, under
  // `read_grant`), on a connection of its own while others run: the store
  // serves each connection on one thread, so parallel reads need several.
  // `deadline_ms` as there.
  absl::Status ReadSsd(
      ShmMapping& m, absl::string_view key, uint64_t size, absl::string_view read_grant,
      uint64_t deadline_ms,
      absl::FunctionRef<absl::Status(uint32_t segment_id, uint64_t offset, uint64_t length)> copy);
  // With arenas: the base of arena `segment_id` of `m`, mapped (read-only)
  // the first time with `credential`, a read grant for [offset, +length)
  // of it. The store's refusal (PERMISSION_DENIED), FAILED_PRECONDITION
  // for an unsealed or writable descriptor, UNAVAILABLE when the socket
  // fails.
  absl::StatusOr<const char*> Arena(ShmMapping& m, uint32_t segment_id, uint64_t offset,
                                    uint64_t length, absl::string_view credential);
  // The mapping of `socket_path` for `incarnation` (0: any) if there is
  // one already; null otherwise. Attaches nothing.
  std::shared_ptr<ShmMapping> Mapped(const std::string& socket_path, uint64_t incarnation);
  // Forgets a mapping (e.g. the store restarted with a new segment).
  void Forget(const std::string& socket_path);
  // Attachments refused so far (each socket and incarnation once).
  uint64_t refusals() const { return refusals_.load(); }
  // Bytes of puts copied into a staging memfd first (their source was not
  // shared host memory: transport/shm_sources.h).
  uint64_t staged_bytes() const { return staged_bytes_.load(); }
  // Bytes of mapped segments read through so far (MappingWarmer).
  uint64_t warmed_bytes() const { return warmer_.warmed_bytes(); }
  // Blocks until every mapping queued for a read-through is done (tests).
  void WaitWarm() { warmer_.WaitIdle(); }

 private:
  struct Refusal {
    uint64_t incarnation;
    absl::Status status;
  };
  // An attach under way for one socket: the threads that ask for the same
  // store meanwhile wait for its result instead of each connecting and
  // mapping the segment again (the last mapping would win, the others
  // would cost a handshake, a store connection and a read-through each).
  struct Attaching {
    explicit Attaching(uint64_t for_incarnation) : incarnation(for_incarnation) {}
    const uint64_t incarnation;
    bool done = false;
    absl::StatusOr<std::shared_ptr<ShmMapping>> result = absl::UnknownError("attach unfinished");
  };
  absl::StatusOr<std::shared_ptr<ShmMapping>> Attach(const std::string& socket_path,
                                                     uint64_t incarnation);
  // Asks `m`'s store for its key board and maps it into m.board (nothing
  // when the store refuses).
  static void MapBoard(ShmMapping& m);
  // Connects to `socket_path` and runs the handshake: the connected socket,
  // the segment descriptor in *memfd and the store's 16-byte reply.
  absl::StatusOr<int> Handshake(const std::string& socket_path, int* memfd, char reply[16]);

  const std::string secret_;
  const int64_t store_uid_;
  std::atomic<uint64_t> refusals_{0};
  std::atomic<uint64_t> staged_bytes_{0};
  Mutex mu_;
  std::map<std::string, std::shared_ptr<ShmMapping>> maps_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Refusal> refused_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Attaching>> attaching_ ABSL_GUARDED_BY(mu_);
  CondVar attached_;  // an Attaching is done
  // Last: stopped and joined before the mappings it may hold go.
  MappingWarmer warmer_;
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_SHM_H_
