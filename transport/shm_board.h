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
  uint64_t slots() const { return slots_; }

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
  uint64_t* const slot_;
  const uint64_t slots_;
};

// A client's side: a store's board, mapped read-only.
class KeyBoardView {
 public:
  // Maps board descriptor `fd` (not taken; the caller has checked its
  // seals, as for a segment's): UNAVAILABLE when it cannot be mapped.
  static absl::StatusOr<std::unique_ptr<KeyBoardView>> Map(int fd);
  ~KeyBoardView();
  KeyBoardView(const KeyBoardView&) = delete;
  KeyBoardView& operator=(const KeyBoardView&) = delete;

  // Copies [offset, +length) of `segment` (the store's segment, mapped)
  // into `dst` and returns true if the slot of `offset` holds `tag` before
  // the copy and after it; false otherwise (`dst` then holds bytes that
  // mean nothing).
  bool CopyIfMarked(const char* segment, uint64_t offset, uint64_t length, uint64_t tag,
                    char* dst) const;
  // Whether the slot of `offset` holds `tag` now.
  bool Marked(uint64_t offset, uint64_t tag) const;

 private:
  KeyBoardView(const uint64_t* slot, uint64_t slots) : slot_(slot), slots_(slots) {}
  const uint64_t* const slot_;
  const uint64_t slots_;
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_SHM_BOARD_H_
