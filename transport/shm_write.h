// Shared-memory puts under the put's grant. Clients map a store's segment
// read-only (transport/shm.h), so a same-host put does not write into it:
// the store copies the block in, with one memcpy, from memory of the client
// it maps read-only, once it has checked the grant exactly as its TCP data
// server does (DataHandler::CheckWrite). That memory is a memfd sealed
// against shrinking, so it cannot be truncated under the store's mapping:
//   - slot 0, the connection's staging memfd: the client copies a block
//     there first when its bytes lie anywhere else;
//   - slots 1..kShmSourceSlots, the client's shared host memory
//     (transport/shm_sources.h): a put from there is copied once, by the
//     store.
// Only memfds on tmpfs are mapped: a hugetlbfs one could fault SIGBUS in
// the store when its pool runs dry.
//
// After a successful handshake the socket stays open for these requests
// (little-endian):
//   client -> store: magic u32 "SHMW" | flags u32 | segment_id u32 |
//                    grant_len u32 | offset u64 | length u64 |
//                    src_offset u64 | grant[grant_len]
//                    flags bit 0: the staging memfd is attached (SCM_RIGHTS);
//                    it replaces the connection's previous one
//                    flags bit 1: the bytes are in source slot flags >> 16
//                    (then no descriptor rides along), not in the staging
//   store -> client: status u32 (absl::StatusCode) | msg_len u32 | msg
// [src_offset, +length) of the staging memfd (or the slot's source) is
// copied to [offset, +length) of segment segment_id. A refused request
// leaves the segment unchanged and the connection open; a malformed one
// closes it.
//
// A source takes a slot with
//   client -> store: magic u32 "SHMS" | flags u32 | slot u32 | 0 u32 |
//                    0 u64 | 0 u64 | 0 u64
//                    flags bit 0: the source's memfd is attached; it
//                    replaces the slot's previous one. Without it the slot
//                    is emptied (the client freed that memory).
//   store -> client: status u32 | msg_len u32 | msg
// FAILED_PRECONDITION for a descriptor that is not a tmpfs memfd sealed
// against shrinking. The store unmaps every slot when the connection closes.
//
// Same-host reads of SSD-tier blocks travel on the same socket (the client
// never opens the store's files):
//   client -> store: magic u32 "SHMR" | flags u32 | segment_id u32 = 0 |
//                    key_len u32 | budget_ms u64 | length u64 (the size
//                    expected, 0: any) | src_offset u64 = 0 | key[key_len]
//                    flags bit 0 (kShmReadFlagGranted): key[] is the read
//                    credential, as for READ_KEY over TCP: the replica's
//                    read grant from the master, then the key
// The store checks the grant as it does for READ_KEY
// (DataHandler::CheckRead): a store that wants grants refuses a read
// without one, or with one not for this key, store incarnation and time.
// budget_ms: the milliseconds left to the reader's deadline when it sent
// the request (0: none; stores before it ignore the field, which was 0).
// A read the store completes past it is not pinned: DEADLINE_EXCEEDED,
// the range freed at once, since the reader has stopped waiting.
//   store -> client: status u32 | msg_len u32 | msg, then when status is
//                    OK: segment_id u32 | 0 u32 | offset u64 | length u64 |
//                    pin u64
// The store has read the block from its SSD tier into [offset, +length) of
// the segment (checksum-verified), in a window past every range the master
// hands out, and leaves that range alone until the client releases the pin:
//   client -> store: magic u32 "SHMF" | 0 u32 | 0 u32 | 0 u32 | pin u64 |
//                    0 u64 | 0 u64            (no reply)
// Pins the client has not released when the connection closes are released
// then; a connection holds at most kShmPinsMax (more: RESOURCE_EXHAUSTED).
// A release of a pin the connection does not hold closes it.
//
// A store whose segment is made of arenas (docs/security.md, "Tenant
// arenas") hands no descriptor with the handshake; a client asks for each
// arena it reads from:
//   client -> store: magic u32 "SHMA" | 0 u32 | segment_id u32 |
//                    cred_len u32 | offset u64 | length u64 | 0 u64 |
//                    cred[cred_len]   (a read credential for [offset,
//                                      +length) of the arena)
//   store -> client: status u32 | msg_len u32 | msg, with the arena's
//                    sealed, write-protected memfd attached when OK.
// A credential that does not verify for the range is PERMISSION_DENIED.
// The same request for segment_id kShmKeyBoard, with no credential, asks
// for the store's key board (transport/shm_board.h): its memfd, sealed
// the same way, or a refusal where the store keeps none (a store that
// knows no board refuses it as an arena it does not have).
//
// ShmWriter is thread-safe (requests on one connection are serialized).
#ifndef SHELF_TRANSPORT_SHM_WRITE_H_
#define SHELF_TRANSPORT_SHM_WRITE_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "transport/data_server.h"
#include "transport/shm_sources.h"
#include "transport/wire.h"

namespace shelf::transport {

inline constexpr uint32_t kShmWriteMagic = 0x574D4853;    // "SHMW"
inline constexpr uint32_t kShmReadMagic = 0x524D4853;     // "SHMR"
inline constexpr uint32_t kShmReleaseMagic = 0x464D4853;  // "SHMF"
inline constexpr uint32_t kShmArenaMagic = 0x414D4853;    // "SHMA"
inline constexpr uint32_t kShmSourceMagic = 0x534D4853;   // "SHMS"
inline constexpr uint32_t kShmWriteFlagFd = 1;
inline constexpr uint32_t kShmWriteFlagSlot = 2;
inline constexpr uint32_t kShmSourceSlots = 64;  // per connection
// Write requests a client sends before reading their answers: few enough
// that the answers (each at most kShmWriteReplyBytes plus a message of
// kShmWriteMessageBytesMax) fit the socket's buffer, so neither side
// blocks on a full one.
inline constexpr size_t kShmPipelineOps = 64;
inline constexpr uint32_t kShmReadFlagGranted = 1;
inline constexpr size_t kShmReadReplyBytes = 32;  // after an OK status
inline constexpr size_t kShmPinsMax = 64;
inline constexpr size_t kShmWriteHeaderBytes = 40;
inline constexpr size_t kShmWriteReplyBytes = 8;
inline constexpr uint32_t kShmWriteMessageBytesMax = 1024;
// The staging memfd never grows past this; a larger block moves in chunks
// of it, each under the same grant.
inline constexpr uint64_t kShmStagingBytesMax = 64ull << 20;
static_assert(kShmStagingBytesMax <= wire::kPayloadBytesMax, "a chunk is one op's payload");
// A block staged from private memory of kShmSplitMinBytes or more goes as
// requests of kShmSplitBytes under its grant, pipelined: the store copies
// one piece into the segment while the client copies the next into the
// staging memory, where a whole block would be two copies one after the
// other.
inline constexpr uint64_t kShmSplitBytes = 256ull << 10;
inline constexpr uint64_t kShmSplitMinBytes = 2 * kShmSplitBytes;
// How long the client waits on one request's send or reply (a chunk's copy).
inline constexpr uint64_t kShmWriteTimeoutMs = 30000;

// Store side: serves write requests on connected socket `fd` until the peer
// closes it or sends a malformed request. `handler` null: every request is
// refused (FAILED_PRECONDITION).
void ServeShmWrites(int fd, DataHandler* handler);

// Client side: the write half of one attachment's socket.
class ShmWriter {
 public:
  // Takes `fd`, the attachment's connected socket. `staged` (optional)
  // counts the bytes copied into the staging memfd: what the puts from
  // outside any shared-memory source cost in an extra copy.
  explicit ShmWriter(int fd, std::atomic<uint64_t>* staged = nullptr)
      : fd_(fd), staged_bytes_(staged) {}
  ~ShmWriter();
  ShmWriter(const ShmWriter&) = delete;
  ShmWriter& operator=(const ShmWriter&) = delete;

  // Writes `length` bytes from `src` to [offset, +length) of `segment_id`
  // under `grant` (wire::EncodeGrant): copied by the store straight from
  // `src` when it lies in a shared-memory source, else through the staging
  // memfd. The store's verdict on a refused request (as the TCP path gives
  // it); UNAVAILABLE when the socket or the staging memory fails, after
  // which this writer fails every request.
  absl::Status Write(uint32_t segment_id, uint64_t offset, const char* src, uint64_t length,
                     absl::string_view grant);

  // One write of a batch: `length` bytes from `src` to [offset, +length)
  // of `segment_id` under `grant`.
  struct WriteOp {
    uint32_t segment_id = 0;
    uint64_t offset = 0;
    const char* src = nullptr;
    uint64_t length = 0;
    absl::string_view grant;
  };
  // Writes each op as Write does, into results[i] (results.size() ==
  // ops.size()), pipelined: up to kShmPipelineOps requests go out before
  // their answers are read, so a batch of small blocks pays one round trip
  // per window, not per block. An op staged from private memory of
  // kShmSplitMinBytes or more goes as pieces of kShmSplitBytes, so the
  // store copies one while the client stages the next. An op larger than
  // kShmStagingBytesMax moves alone, in chunks.
  void WriteBatch(absl::Span<const WriteOp> ops, absl::Span<absl::Status> results);

  // Has the store read SSD-tier block `key` (of `size` bytes, 0: any) into
  // its segment, runs `copy` on the range while the store keeps it pinned,
  // then releases the pin. `read_grant`: the replica's read grant from the
  // master ("": none). The store's verdict (PERMISSION_DENIED, NOT_FOUND,
  // DATA_LOSS, RESOURCE_EXHAUSTED, ...) or `copy`'s; UNAVAILABLE when the
  // socket fails. `deadline_ms` (MonoMs; 0: none) bounds the wait for the
  // store's reply below the socket's I/O timeout: DEADLINE_EXCEEDED once it
  // passes, and the connection is then broken (the late reply would be read
  // as the next one's), so the caller makes another.
  absl::Status ReadSsd(
      absl::string_view key, uint64_t size, absl::string_view read_grant, uint64_t deadline_ms,
      absl::FunctionRef<absl::Status(uint32_t segment_id, uint64_t offset, uint64_t length)> copy);

  // Asks for arena `segment_id`'s descriptor under `credential`, a read
  // credential for [offset, +length) of it ("SHMA" above): the descriptor
  // (the caller's to close), the store's verdict (PERMISSION_DENIED for a
  // credential that does not verify), or UNAVAILABLE when the socket fails.
  absl::StatusOr<int> MapArena(uint32_t segment_id, uint64_t offset, uint64_t length,
                               absl::string_view credential);

 private:
  absl::Status Reserve(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the store's status reply (and its message); UNAVAILABLE, and the
  // writer broken, when the socket fails.
  absl::Status ReadReply() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Request(uint32_t segment_id, uint64_t offset, uint64_t length,
                       absl::string_view grant, uint32_t slot, uint64_t src_offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends one write request, its answer left to read (Request is Send,
  // then ReadReply).
  absl::Status Send(uint32_t segment_id, uint64_t offset, uint64_t length, absl::string_view grant,
                    uint32_t slot, uint64_t src_offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WriteBatch's ops, split into pieces, with their sources looked up.
  void WritePieces(absl::Span<const WriteOp> ops,
                   const std::vector<std::shared_ptr<const ShmSource>>& sources,
                   absl::Span<absl::Status> results) ABSL_LOCKS_EXCLUDED(mu_);
  // One op of WriteBatch's that moves alone (in chunks), under the lock,
  // with `source` already looked up.
  absl::Status WriteLocked(uint32_t segment_id, uint64_t offset, const char* src, uint64_t length,
                           absl::string_view grant, const std::shared_ptr<const ShmSource>& source)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slot `source` holds on this connection, given to it now if need
  // be; 0 when the store refuses it (its puts then go through the staging).
  // UNAVAILABLE when the socket fails.
  absl::StatusOr<uint32_t> SlotFor(const ShmSource& source) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends "SHMS" for `slot` with `fd` (-1: empty it) and reads the reply.
  absl::Status SetSlot(uint32_t slot, int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Empties the slots of sources freed since the last look.
  absl::Status DropFreedSources() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  Mutex mu_;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  int staging_fd_ ABSL_GUARDED_BY(mu_) = -1;
  char* staging_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t staging_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool staging_sent_ ABSL_GUARDED_BY(mu_) = false;  // on this connection
  struct Slot {
    uint64_t source_id = 0;  // 0: empty
    uint64_t last_use = 0;
  };
  std::array<Slot, kShmSourceSlots + 1> slots_ ABSL_GUARDED_BY(mu_);  // [0]: the staging
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t removals_seen_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_source_ ABSL_GUARDED_BY(mu_) = 0;  // the last the store refused
  std::atomic<uint64_t>* const staged_bytes_;
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_SHM_WRITE_H_
