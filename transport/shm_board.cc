#include "transport/shm_board.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/errno_text.h"

namespace shelf::transport {

uint64_t KeyBoardTag(absl::string_view key, uint64_t generation) {
  // The key's bytes, then the generation's (little-endian), hashed as one
  // block without building it.
  char gen[8];
  absl::little_endian::Store64(gen, generation);
  ChecksumStream hash;
  hash.Update(key.data(), key.size());
  hash.Update(gen, sizeof(gen));
  const uint64_t tag = hash.Digest();
  return tag == 0 ? 1 : tag;
}

uint64_t KeyBoardSlots(uint64_t segment_bytes) {
  return std::max<uint64_t>(1, (segment_bytes + kKeyBoardGranule - 1) / kKeyBoardGranule);
}

absl::StatusOr<std::unique_ptr<KeyBoard>> KeyBoard::Create(uint64_t segment_bytes) {
  const uint64_t slots = KeyBoardSlots(segment_bytes);
  const uint64_t bytes = (slots + 1) * sizeof(uint64_t);  // the trust word last
  int fd = memfd_create("shelf-key-board", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("memfd_create: ", ErrnoText(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("ftruncate key board: ", ErrnoText(err)));
  }
  // Mapped writable before the seal: F_SEAL_FUTURE_WRITE leaves this
  // mapping writable and refuses every later one.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("mmap key board: ", ErrnoText(err)));
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) != 0) {
    const int err = errno;
    munmap(p, bytes);
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot seal the key board (Linux 5.1 or later): ", ErrnoText(err)));
  }
  return std::unique_ptr<KeyBoard>(new KeyBoard(fd, static_cast<uint64_t*>(p), slots));
}

KeyBoard::~KeyBoard() {
  munmap(slot_, (slots_ + 1) * sizeof(uint64_t));
  close(fd_);
}

void KeyBoard::TrustUntil(uint64_t mono_ms) {
  __atomic_store_n(&slot_[slots_], mono_ms, __ATOMIC_RELEASE);
}

void KeyBoard::Mark(uint64_t offset, uint64_t tag) {
  const uint64_t i = offset / kKeyBoardGranule;
  if (i < slots_) __atomic_store_n(&slot_[i], tag, __ATOMIC_RELEASE);
}

void KeyBoard::Clear(uint64_t offset) { Mark(offset, 0); }

void KeyBoard::ClearRange(uint64_t offset, uint64_t length) {
  const uint64_t first = offset / kKeyBoardGranule;
  const uint64_t end =
      std::min(slots_, (offset + length + kKeyBoardGranule - 1) / kKeyBoardGranule);
  for (uint64_t i = first; i < end; ++i) __atomic_store_n(&slot_[i], 0, __ATOMIC_RELAXED);
  // The clearing before the writes that follow (the writer's half of a
  // sequence lock): a reader whose copy saw any of them sees 0 after it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

absl::StatusOr<std::unique_ptr<KeyBoardView>> KeyBoardView::Map(int fd, uint64_t segment_bytes) {
  const uint64_t slots = KeyBoardSlots(segment_bytes);
  const uint64_t bytes = (slots + 1) * sizeof(uint64_t);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::UnavailableError(absl::StrCat("fstat key board: ", ErrnoText(errno)));
  }
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    return absl::UnavailableError(absl::StrCat("the key board has ", st.st_size, " bytes, not the ",
                                               bytes, " of a segment of ", segment_bytes,
                                               " bytes and its trust word"));
  }
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap key board: ", ErrnoText(errno)));
  }
  return std::unique_ptr<KeyBoardView>(new KeyBoardView(static_cast<const uint64_t*>(p), slots));
}

KeyBoardView::~KeyBoardView() {
  munmap(const_cast<uint64_t*>(slot_), (slots_ + 1) * sizeof(uint64_t));
}

bool KeyBoardView::Trusted() const {
  return MonoMs() < __atomic_load_n(&slot_[slots_], __ATOMIC_ACQUIRE);
}

bool KeyBoardView::SlotHolds(uint64_t offset, uint64_t tag) const {
  const uint64_t i = offset / kKeyBoardGranule;
  return i < slots_ && __atomic_load_n(&slot_[i], __ATOMIC_ACQUIRE) == tag;
}

bool KeyBoardView::Marked(uint64_t offset, uint64_t tag) const {
  return Trusted() && SlotHolds(offset, tag);
}

bool KeyBoardView::CopyIfMarked(const char* segment, uint64_t offset, uint64_t length, uint64_t tag,
                                char* dst) const {
  // The reader's half of a sequence lock: the tag, the bytes, the tag.
  if (!Marked(offset, tag)) return false;
  std::memcpy(dst, segment + offset, length);
  std::atomic_thread_fence(std::memory_order_acquire);
  return __atomic_load_n(&slot_[offset / kKeyBoardGranule], __ATOMIC_RELAXED) == tag;
}

}  // namespace shelf::transport
