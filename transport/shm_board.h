// KeyBoard: a store's note, in shared memory, of which committed block each
// range of its DRAM segment holds, so that a client on the same host can
// tell whether a location it cached still holds its key's block without a
// round trip to the store.
//
// One 64-bit slot per kKeyBoardGranule bytes of the segment. The slot of
// offset `o` holds KeyBoardTag(key, generation) while the store's records
// (which follow the master's notices) name that commit of `key` at `o` and
// no write has begun on any byte of its range since; it holds 0 otherwise.
// The store sets a slot only when the record and the range's owner agree,
// clears it when the record goes, and clears every slot of a range before
// a write to it begins (server/store/range_owners.h). So a reader that
// finds its tag in the slot before and after copying the range has copied
// bytes nobody wrote in between, of a block the store's records named as
// the key's current one: the answer a READ_KEY check of the range gives
// (transport/data_server.h, DramKey), without asking. The reader still
// verifies the bytes against the block's checksum. Tags are 64-bit hashes
// of the key and the generation, never 0; two blocks whose slots collide
// (ranges aligned below the granule) only make each other's checks fail.
//
// The store creates the board (one memfd, sealed against resizing and
// against new writable mappings) and is its only writer; a client asks
// for it on its attachment socket ("SHMA" for segment kShmKeyBoard,
// transport/shm_write.h) and maps it read-only. A store whose segment is
// made of arenas keeps none.
//
// A dead store's board would vouch for its last blocks for as long as a
// client keeps it mapped, though the master dropped them with the store
// and may have placed a newer value of a key elsewhere since. So one more
// word, after the slots, says until when the board may be trusted: the
// store sets it (TrustUntil) after each heartbeat the master answers, to
// the heartbeat's start plus the master's node TTL (the earliest the
// master can declare the store dead), and to 0 when it stops. A reader
// trusts no slot once that time is past (CLOCK_MONOTONIC, one clock for
// every process on the host): a dead, hung or cut-off store's marks stop
// counting before its blocks can be placed anew, and the reader asks the
// store or the master instead.
//
// Thread-safe: every slot is read and written atomically.
#ifndef SHELF_TRANSPORT_SHM_BOARD_H_
#define SHELF_TRANSPORT_SHM_BOARD_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shelf::transport {

inline constexpr uint64_t kKeyBoardGranule = 4096;
// The "SHMA" segment id that asks for the key board instead of an arena.
inline constexpr uint32_t kShmKeyBoard = 0xFFFFFFFE;

// The tag of commit `generation` of block `key`: never 0.
uint64_t KeyBoardTag(absl::string_view key, uint64_t generation);

// The store's side: the board's memory, which only it writes.
class KeyBoard {
 public:
  // A board for a segment of `segment_bytes`, every slot 0. RESOURCE_EXHAUSTED
  // when the memfd cannot be made or mapped; FAILED_PRECONDITION when it
  // cannot be sealed (the kernel lacks F_SEAL_FUTURE_WRITE).
  static absl::StatusOr<std::unique_ptr<KeyBoard>> Create(uint64_t segment_bytes);
  ~KeyBoard();
  KeyBoard(const KeyBoard&) = delete;
  KeyBoard& operator=(const KeyBoard&) = delete;

  // The descriptor handed to clients (sealed; owned by the board).
  int fd() const { return fd_; }
  // Slots, one per kKeyBoardGranule of the segment (the trust word after
  // them not counted).
  uint64_t slots() const { return slots_; }

  // Readers trust the board's marks while CLOCK_MONOTONIC (MonoMs) is
  // below `mono_ms`; 0 (the board's start) trusts none.
  void TrustUntil(uint64_t mono_ms);

  // Marks the block at `offset` with `tag`. Offsets past the segment are
  // ignored.
  void Mark(uint64_t offset, uint64_t tag);
  // Clears the slot of the block at `offset`.
  void Clear(uint64_t offset);
  // Clears every slot of [offset, +length), ordered before every write
  // this thread makes after the call (a reader that sees the old tag after
  // its copy saw none of those writes).
  void ClearRange(uint64_t offset, uint64_t length);

 private:
  KeyBoard(int fd, uint64_t* slot, uint64_t slots) : fd_(fd), slot_(slot), slots_(slots) {}
  const int fd_;
  uint64_t* const slot_;  // slots_ slots, then the trust word
  const uint64_t slots_;
};

// The slots of a board for a segment of `segment_bytes`.
uint64_t KeyBoardSlots(uint64_t segment_bytes);

// A client's side: a store's board, mapped read-only.
class KeyBoardView {
 public:
  // Maps board descriptor `fd` (not taken; the caller has checked its
  // seals, as for a segment's), the board of a segment of `segment_bytes`:
  // UNAVAILABLE when it cannot be mapped or is not of that size (a board
  // without its trust word, say), which leaves reads to ask the store.
  static absl::StatusOr<std::unique_ptr<KeyBoardView>> Map(int fd, uint64_t segment_bytes);
  ~KeyBoardView();
  KeyBoardView(const KeyBoardView&) = delete;
  KeyBoardView& operator=(const KeyBoardView&) = delete;

  // Whether the store's trust word is ahead of MonoMs() now: false for a
  // store that stopped, died or lost the master (see above).
  bool Trusted() const;
  // Copies [offset, +length) of `segment` (the store's segment, mapped)
  // into `dst` and returns true if the board is trusted and the slot of
  // `offset` holds `tag` before the copy and after it; false otherwise
  // (`dst` then holds bytes that mean nothing).
  bool CopyIfMarked(const char* segment, uint64_t offset, uint64_t length, uint64_t tag,
                    char* dst) const;
  // Whether the board is trusted and the slot of `offset` holds `tag` now.
  bool Marked(uint64_t offset, uint64_t tag) const;

 private:
  KeyBoardView(const uint64_t* slot, uint64_t slots) : slot_(slot), slots_(slots) {}
  bool SlotHolds(uint64_t offset, uint64_t tag) const;
  const uint64_t* const slot_;  // slots_ slots, then the trust word
  const uint64_t slots_;
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_SHM_BOARD_H_
