// ShmEngine: the shared-memory backend of transport::Engine. It reaches a
// store on this host (same HostId) that offers shm: the store's segment is
// mapped read-only once (ShmAttachments, bound to the store's incarnation);
// a read is one memcpy from it, a write a copy into this client's staging
// memfd that the store, after checking the op's grant as over TCP, copies
// into the segment (transport/shm_write.h). Both run in the submitting
// thread.
//
// An op fails with UNAVAILABLE, and the mapping is dropped, when the socket
// cannot be reached, the attachment is refused (peer uid, unsealed segment) or the mapping does not
// match the op (another segment, a range past its end): the caller then uses another transport. A
// write the store refuses fails with the store's verdict, as over TCP.
//
// Thread-safe.
#ifndef SHELF_TRANSPORT_SHM_ENGINE_H_
#define SHELF_TRANSPORT_SHM_ENGINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "transport/engine.h"
#include "transport/shm.h"

namespace shelf::transport {

class ShmEngine final : public Engine {
 public:
  // `store_uid`: the uid stores' sockets must be served by (root always
  // passes); -1: this process's effective uid. `warm_bytes`: bytes of
  // each segment read through in the background once mapped (0: none).
  // See ShmAttachments.
  explicit ShmEngine(std::string secret, int64_t store_uid = -1, uint64_t warm_bytes = 0)
      : attachments_(std::move(secret), store_uid, warm_bytes) {}

  Kind kind() const override { return Kind::kShm; }
  // A store on this host that offers shm.
  bool Reaches(const Peer& peer) const override;
  // Reads block `key` (`size` bytes) of the SSD tier of the store `peer`
  // into `dst` through its segment: the store reads it into a pinned range
  // there, this thread copies it out of the read-only mapping, and the pin
  // is released (transport/shm_write.h), under `read_grant` (the
  // replica's, from the master; "": none). Errors as for a read op; the
  // store's verdict (PERMISSION_DENIED, NOT_FOUND, DATA_LOSS,
  // RESOURCE_EXHAUSTED, FAILED_PRECONDITION) as it gives it. The caller
  // verifies the bytes. `deadline_ms` (MonoMs; 0: none): DEADLINE_EXCEEDED
  // once it passes.
  absl::Status ReadSsd(const Peer& peer, const std::string& key, char* dst, uint64_t size,
                       absl::string_view read_grant, uint64_t deadline_ms);
  // Calls `view` with the bytes [offset, offset + length) of segment
  // `segment_id` of the store `peer`, where they lie in its read-only
  // mapping (an arena mapped under `grant`, the read credential), while
  // the mapping is held: a reader copies them where it wants them, once.
  // Errors as a read op's: UNAVAILABLE (no mapping, or one that does not
  // hold the range) sends the caller to another transport.
  absl::Status ReadView(const Peer& peer, uint32_t segment_id, uint64_t offset, uint64_t length,
                        absl::string_view grant, absl::FunctionRef<void(const char*)> view);
  // The same bytes as ReadView's, where they lie, with the mapping that
  // holds them: `data` stays mapped while `mapping` is held, past this
  // call (a reader that hands the bytes on, e.g. to a socket, without a
  // copy). Errors as ReadView's.
  struct HeldView {
    std::shared_ptr<const void> mapping;
    const char* data = nullptr;
  };
  absl::StatusOr<HeldView> HoldView(const Peer& peer, uint32_t segment_id, uint64_t offset,
                                    uint64_t length, absl::string_view grant);
  // Copies [offset, +length) of segment `segment_id` of the store `peer`
  // into `dst` if the store's key board (transport/shm_board.h) marks the
  // block there with `tag` before and after the copy: the store's records
  // named that block there throughout, and no write touched its range. OK
  // then; FAILED_PRECONDITION when the board did not mark it (replaced,
  // removed, not yet recorded, or written meanwhile); UNIMPLEMENTED when
  // the store keeps no board; UNAVAILABLE as ReadView's. The caller still
  // verifies the bytes against their checksum.
  absl::Status CopyIfCurrent(const Peer& peer, uint32_t segment_id, uint64_t offset,
                             uint64_t length, uint64_t tag, char* dst);
  // Whether the store `peer` is mapped here with its key board, trusted
  // now (KeyBoardView::Trusted), so that CopyIfCurrent needs no round
  // trip. Attaches nothing: false until an op has mapped the store.
  bool Vouches(const Peer& peer);
  // Whether the store `peer`, mapped here with its key board, marks the
  // block at `offset` with `tag` (KeyBoardTag) now. Attaches nothing.
  bool Marks(const Peer& peer, uint64_t offset, uint64_t tag);
  // Stores whose shared memory was refused (ShmAttachments::refusals).
  uint64_t refusals() const { return attachments_.refusals(); }
  // Bytes of writes staged before the store copied them in
  // (ShmAttachments::staged_bytes).
  uint64_t staged_bytes() const { return attachments_.staged_bytes(); }
  // Bytes of segments read through in the background
  // (ShmAttachments::warmed_bytes).
  uint64_t warmed_bytes() const { return attachments_.warmed_bytes(); }

 private:
  void Start(std::shared_ptr<Batch> batch, std::vector<Work> work, uint64_t deadline_ms) override;
  // The mapping of the store `peer` (attached the first time); UNAVAILABLE
  // when it cannot be had.
  absl::StatusOr<std::shared_ptr<ShmMapping>> MappingOf(const Peer& peer);
  // Where a read of [offset, +length) of segment `segment_id` finds its
  // bytes in mapping `m` of the store `peer` (reached at `socket`):
  // UNAVAILABLE, the mapping forgotten, when it does not hold them.
  absl::StatusOr<const char*> ReadSource(ShmMapping& m, const std::string& socket, const Peer& peer,
                                         uint32_t segment_id, uint64_t offset, uint64_t length,
                                         absl::string_view grant);

  ShmAttachments attachments_;
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_SHM_ENGINE_H_
