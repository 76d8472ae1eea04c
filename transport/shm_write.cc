#include "transport/shm_write.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/log.h"
#include "common/net.h"
#include "transport/fd_passing.h"
#include "transport/shm_board.h"
#include "transport/wire.h"

namespace shelf::transport {
namespace {

constexpr uint64_t kStagingGrainBytes = 1ull << 20;

struct WriteRequest {
  uint32_t flags = 0;
  uint32_t segment_id = 0;
  uint32_t grant_len = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t src_offset = 0;
};

void EncodeRequest(const WriteRequest& r, char out[kShmWriteHeaderBytes]) {
  absl::little_endian::Store32(out, kShmWriteMagic);
  absl::little_endian::Store32(out + 4, r.flags);
  absl::little_endian::Store32(out + 8, r.segment_id);
  absl::little_endian::Store32(out + 12, r.grant_len);
  absl::little_endian::Store64(out + 16, r.offset);
  absl::little_endian::Store64(out + 24, r.length);
  absl::little_endian::Store64(out + 32, r.src_offset);
}

bool Reply(int fd, const absl::Status& status) {
  std::string msg(status.message().substr(0, kShmWriteMessageBytesMax));
  char head[kShmWriteReplyBytes];
  absl::little_endian::Store32(head, static_cast<uint32_t>(status.code()));
  absl::little_endian::Store32(head + 4, static_cast<uint32_t>(msg.size()));
  struct iovec iov[2] = {{head, sizeof(head)}, {msg.data(), msg.size()}};
  return WriteFullv(fd, iov, 2).ok();
}

// What the store copies a connection's puts from: slot 0 its staging
// memfd, slots 1..kShmSourceSlots its shared-memory sources, each mapped
// read-only while the connection lasts.
class MappedSources {
 public:
  MappedSources() = default;
  ~MappedSources() {
    for (uint32_t slot = 0; slot < slots_.size(); ++slot) Drop(slot);
  }
  MappedSources(const MappedSources&) = delete;
  MappedSources& operator=(const MappedSources&) = delete;

  // Empties `slot`, then takes `fd` into it when it is a tmpfs memfd
  // sealed against shrinking; closes it otherwise.
  absl::Status Attach(uint32_t slot, int fd) {
    struct statfs fs;
    const int seals = fcntl(fd, F_GET_SEALS);
    absl::Status s = absl::OkStatus();
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      s = absl::FailedPreconditionError(
          "the source descriptor is not a memfd sealed against shrinking (F_SEAL_SHRINK)");
    } else if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
      s = absl::FailedPreconditionError("the source descriptor is not a memfd on tmpfs");
    }
    Drop(slot);
    if (!s.ok()) {
      close(fd);
      return s;
    }
    slots_[slot].fd = fd;
    return absl::OkStatus();
  }

  void Drop(uint32_t slot) {
    Source& src = slots_[slot];
    if (src.base != nullptr) munmap(const_cast<char*>(src.base), src.mapped);
    if (src.fd >= 0) close(src.fd);
    src = Source{};
  }

  bool Has(uint32_t slot) const { return slots_[slot].fd >= 0; }

  // Copies [src_offset, +length) of `slot`'s memory to `dst`, bounds-checked
  // against the descriptor's size (it can only grow: mapped again when it
  // has).
  absl::Status CopyOut(uint32_t slot, uint64_t src_offset, char* dst, uint64_t length) {
    Source& src = slots_[slot];
    if (src_offset > src.mapped || length > src.mapped - src_offset) {
      struct stat st;
      if (fstat(src.fd, &st) != 0) {
        return absl::InternalError(absl::StrCat("fstat source: ", ErrnoText(errno)));
      }
      const uint64_t have = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
      if (src_offset > have || length > have - src_offset) {
        return absl::OutOfRangeError(absl::StrCat("source range [", src_offset, ", +", length,
                                                  ") outside its descriptor of ", have));
      }
      void* p = mmap(nullptr, have, PROT_READ, MAP_SHARED, src.fd, 0);
      if (p == MAP_FAILED) {
        return absl::InternalError(absl::StrCat("mapping a source: ", ErrnoText(errno)));
      }
      if (src.base != nullptr) munmap(const_cast<char*>(src.base), src.mapped);
      src.base = static_cast<const char*>(p);
      src.mapped = have;
    }
    if (length > 0) std::memcpy(dst, src.base + src_offset, length);
    return absl::OkStatus();
  }

 private:
  struct Source {
    int fd = -1;
    const char* base = nullptr;
    uint64_t mapped = 0;
  };
  std::array<Source, kShmSourceSlots + 1> slots_;
};

// Whether `fd` has bytes to read before MonoMs() reaches `deadline_ms`.
bool WaitReadable(int fd, uint64_t deadline_ms) {
  for (;;) {
    const uint64_t now = MonoMs();
    if (now >= deadline_ms) return false;
    struct pollfd p = {fd, POLLIN, 0};
    const uint64_t wait = std::min<uint64_t>(deadline_ms - now, 60000);
    int n = poll(&p, 1, static_cast<int>(wait));
    if (n > 0) return true;  // readable, or hung up: the read tells
    if (n < 0 && errno != EINTR) return true;
  }
}

// A read ("SHMR") or a release ("SHMF") whose header is `head`. False
// when the connection must close (a malformed request, a failed reply).
bool ServeSsdRead(int fd, const char* head, DataHandler* handler, std::set<uint64_t>* pins) {
  const uint32_t magic = absl::little_endian::Load32(head);
  const uint32_t key_len = absl::little_endian::Load32(head + 12);
  if (magic == kShmReleaseMagic) {
    const uint64_t pin = absl::little_endian::Load64(head + 16);
    if (handler == nullptr || pins->erase(pin) == 0) return false;
    handler->Unpin(pin);
    return true;
  }
  const uint32_t flags = absl::little_endian::Load32(head + 4);
  if ((flags & ~kShmReadFlagGranted) != 0 || key_len == 0 || key_len > wire::kExtraBytesMax) {
    return false;
  }
  const uint64_t received_ms = MonoMs();
  std::string extra(key_len, '\0');
  if (!ReadFull(fd, extra.data(), extra.size()).ok()) return false;
  const uint64_t budget_ms = absl::little_endian::Load64(head + 16);
  const uint64_t size = absl::little_endian::Load64(head + 24);
  // With a grant, extra is the read credential: the grant, then the key.
  const bool granted = (flags & kShmReadFlagGranted) != 0;
  absl::string_view key = extra;
  if (granted) {
    key = key.size() > wire::kReadGrantBytes ? key.substr(wire::kReadGrantBytes) : "";
    if (key.empty()) return Reply(fd, absl::InvalidArgumentError("SHMR: a grant and no key"));
  }
  // The same check as READ_KEY over TCP (DataServer::HandleFrame).
  absl::Status allowed =
      handler == nullptr
          ? absl::FailedPreconditionError("this store offers no SSD reads here")
          : handler->CheckRead(granted ? absl::string_view(extra) : "", key, false, 0, 0, size);
  if (!allowed.ok()) return Reply(fd, allowed);
  absl::StatusOr<DataHandler::Pinned> p =
      pins->size() >= kShmPinsMax
          ? absl::ResourceExhaustedError("too many shared-memory reads pinned on one connection")
          : handler->PinSsdKey(key, size);
  if (p.ok() && budget_ms != 0 && MonoMs() - received_ms > budget_ms) {
    // The reader has given up on this read (and its connection): keep no
    // range pinned for it until the connection closes.
    handler->Unpin(p->pin);
    p = absl::DeadlineExceededError("the SSD read ended past the reader's deadline");
  }
  if (!p.ok()) return Reply(fd, p.status());
  pins->insert(p->pin);
  char body[kShmReadReplyBytes] = {};
  absl::little_endian::Store32(body, p->segment_id);
  absl::little_endian::Store64(body + 8, p->offset);
  absl::little_endian::Store64(body + 16, p->size);
  absl::little_endian::Store64(body + 24, p->pin);
  char status[kShmWriteReplyBytes] = {};  // OK, no message
  struct iovec iov[2] = {{status, sizeof(status)}, {body, sizeof(body)}};
  return WriteFullv(fd, iov, 2).ok();
}

// An arena request ("SHMA") whose header is `head`. False when the
// connection must close.
bool ServeArena(int fd, const char* head, DataHandler* handler) {
  const uint32_t segment_id = absl::little_endian::Load32(head + 8);
  const uint32_t cred_len = absl::little_endian::Load32(head + 12);
  if (absl::little_endian::Load32(head + 4) != 0 || cred_len > wire::kExtraBytesMax) return false;
  std::string cred(cred_len, '\0');
  if (!ReadFull(fd, cred.data(), cred.size()).ok()) return false;
  absl::StatusOr<int> arena =
      handler == nullptr ? absl::FailedPreconditionError("this store has no arenas")
      : segment_id == kShmKeyBoard
          ? handler->ShmKeyBoard()
          : handler->ShmArena(cred, segment_id, absl::little_endian::Load64(head + 16),
                              absl::little_endian::Load64(head + 24));
  if (!arena.ok()) {
    if (segment_id == kShmKeyBoard) return Reply(fd, arena.status());  // asked, not an error
    SHELF_LOG(WARNING) << "shared-memory arena refused" << Kv("arena", segment_id)
                       << Kv("error", arena.status().message());
    return Reply(fd, arena.status());
  }
  // Never a descriptor that can be written through: the memfd itself,
  // sealed F_SEAL_FUTURE_WRITE (a read-only reopening is no substitute: its
  // holder can open /proc/self/fd/N read-write).
  int seals = fcntl(*arena, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_FUTURE_WRITE) == 0) {
    return Reply(fd, absl::FailedPreconditionError(
                         "the arena is not sealed F_SEAL_FUTURE_WRITE (Linux 5.1 or later): "
                         "shared memory is off, use TCP"));
  }
  char status[kShmWriteReplyBytes] = {};  // OK, no message
  struct iovec iov = {status, sizeof(status)};
  ssize_t n = SendWithFd(fd, &iov, 1, *arena);
  return n == static_cast<ssize_t>(sizeof(status));
}

// A slot request ("SHMS") whose header is `head`, with descriptor `got`
// (-1: none; taken). False when the connection must close.
bool ServeSlot(int fd, const char* head, int got, MappedSources* sources) {
  const uint32_t flags = absl::little_endian::Load32(head + 4);
  const uint32_t slot = absl::little_endian::Load32(head + 8);
  if ((got >= 0) != ((flags & kShmWriteFlagFd) != 0) || (flags & ~kShmWriteFlagFd) != 0 ||
      slot == 0 || slot > kShmSourceSlots) {
    if (got >= 0) close(got);
    return false;
  }
  if (got < 0) {
    sources->Drop(slot);
    return Reply(fd, absl::OkStatus());
  }
  absl::Status s = sources->Attach(slot, got);
  if (!s.ok()) {
    SHELF_LOG(WARNING) << "shared-memory source refused" << Kv("error", s.message());
  }
  return Reply(fd, s);
}

}  // namespace

void ServeShmWrites(int fd, DataHandler* handler) {
  MappedSources sources;
  std::set<uint64_t> pins;  // held by this connection
  for (;;) {
    char head[kShmWriteHeaderBytes];
    int got = -1;
    ssize_t n = RecvWithFd(fd, head, sizeof(head), &got);
    const uint32_t magic =
        n == static_cast<ssize_t>(sizeof(head)) ? absl::little_endian::Load32(head) : 0;
    if ((magic == kShmReadMagic || magic == kShmReleaseMagic) && got < 0) {
      if (!ServeSsdRead(fd, head, handler, &pins)) break;
      continue;
    }
    if (magic == kShmArenaMagic && got < 0) {
      if (!ServeArena(fd, head, handler)) break;
      continue;
    }
    if (magic == kShmSourceMagic) {
      if (!ServeSlot(fd, head, got, &sources)) break;
      continue;
    }
    if (magic != kShmWriteMagic) {
      if (got >= 0) close(got);
      break;  // closed by the peer, or not a request: drop the connection
    }
    WriteRequest r;
    r.flags = absl::little_endian::Load32(head + 4);
    r.segment_id = absl::little_endian::Load32(head + 8);
    r.grant_len = absl::little_endian::Load32(head + 12);
    r.offset = absl::little_endian::Load64(head + 16);
    r.length = absl::little_endian::Load64(head + 24);
    r.src_offset = absl::little_endian::Load64(head + 32);
    // Bit 0 (the staging rides along) or bit 1 (a slot's source, named in
    // the high half), never both.
    const bool from_slot = (r.flags & kShmWriteFlagSlot) != 0;
    const uint32_t slot = from_slot ? r.flags >> 16 : 0;
    const uint32_t known = from_slot ? (kShmWriteFlagSlot | 0xFFFF0000u) : kShmWriteFlagFd;
    if ((got >= 0) != ((r.flags & kShmWriteFlagFd) != 0) || (r.flags & ~known) != 0 ||
        (from_slot && (slot == 0 || slot > kShmSourceSlots)) ||
        r.grant_len > wire::kExtraBytesMax) {
      if (got >= 0) close(got);
      break;
    }
    std::string grant_bytes(r.grant_len, '\0');
    if (!ReadFull(fd, grant_bytes.data(), grant_bytes.size()).ok()) {
      if (got >= 0) close(got);
      break;
    }
    absl::Status verdict = got >= 0 ? sources.Attach(0, got) : absl::OkStatus();
    if (verdict.ok() && handler == nullptr) {
      verdict = absl::FailedPreconditionError("this store takes no shared-memory writes");
    }
    // The same checks, in the same order, as a WRITE frame over TCP
    // (DataServer::HandleFrame), so a refused put reads the same either way.
    absl::StatusOr<DataHandler::Region> seg = absl::InternalError("unchecked");
    if (verdict.ok()) {
      seg = handler->Segment(r.segment_id);
      verdict = seg.status();
    }
    if (verdict.ok() && (r.offset > seg->size || r.length > seg->size - r.offset)) {
      verdict = absl::OutOfRangeError(
          absl::StrCat("write [", r.offset, ", +", r.length, ") outside segment of ", seg->size));
    }
    std::optional<AdmittedWrite> admitted;
    if (verdict.ok()) {
      absl::StatusOr<wire::Grant> grant = wire::DecodeGrant(grant_bytes);
      verdict = grant.ok() ? handler->CheckWrite(*grant, r.segment_id, r.offset, r.length)
                           : grant.status();
      if (verdict.ok()) admitted.emplace(handler, *grant);
    }
    if (verdict.ok() && !sources.Has(slot)) {
      verdict = absl::FailedPreconditionError(
          slot == 0 ? "no staging descriptor sent on this connection"
                    : absl::StrCat("no source in slot ", slot, " on this connection"));
    }
    if (verdict.ok()) {
      verdict = sources.CopyOut(slot, r.src_offset, seg->base + r.offset, r.length);
    }
    if (verdict.ok()) {
      handler->OnShmWrite(r.length);
    } else {
      SHELF_LOG(WARNING) << "shared-memory write rejected" << Kv("error", verdict.message());
    }
    if (!Reply(fd, verdict)) break;
  }
  for (uint64_t pin : pins) handler->Unpin(pin);
}

ShmWriter::~ShmWriter() {
  if (staging_ != nullptr) munmap(staging_, staging_bytes_);
  if (staging_fd_ >= 0) close(staging_fd_);
  close(fd_);
}

absl::Status ShmWriter::Reserve(uint64_t bytes) {
  if (bytes <= staging_bytes_) return absl::OkStatus();
  uint64_t want = std::max(bytes, std::min(2 * staging_bytes_, kShmStagingBytesMax));
  want = (want + kStagingGrainBytes - 1) / kStagingGrainBytes * kStagingGrainBytes;
  if (staging_fd_ < 0) {
    int fd = memfd_create("shelf-shm-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("memfd_create: ", ErrnoText(errno)));
    staging_fd_ = fd;
  }
  // Grow first, then seal (sealing again is a no-op): the store may copy
  // only from a descriptor that cannot shrink under the copy.
  if (ftruncate(staging_fd_, static_cast<off_t>(want)) != 0 ||
      fcntl(staging_fd_, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
    return absl::UnavailableError(absl::StrCat("sizing staging memory: ", ErrnoText(errno)));
  }
  void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, staging_fd_, 0);
  if (p == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap staging memory: ", ErrnoText(errno)));
  }
  if (staging_ != nullptr) munmap(staging_, staging_bytes_);
  staging_ = static_cast<char*>(p);
  staging_bytes_ = want;
  return absl::OkStatus();
}

absl::Status ShmWriter::Request(uint32_t segment_id, uint64_t offset, uint64_t length,
                                absl::string_view grant, uint32_t slot, uint64_t src_offset) {
  absl::Status s = Send(segment_id, offset, length, grant, slot, src_offset);
  return s.ok() ? ReadReply() : s;
}

absl::Status ShmWriter::Send(uint32_t segment_id, uint64_t offset, uint64_t length,
                             absl::string_view grant, uint32_t slot, uint64_t src_offset) {
  const bool attach_staging = slot == 0 && !staging_sent_;
  WriteRequest r;
  r.flags = slot != 0 ? (kShmWriteFlagSlot | slot << 16) : attach_staging ? kShmWriteFlagFd : 0;
  r.segment_id = segment_id;
  r.grant_len = static_cast<uint32_t>(grant.size());
  r.offset = offset;
  r.length = length;
  r.src_offset = src_offset;
  char head[kShmWriteHeaderBytes];
  EncodeRequest(r, head);
  // Header and grant in one message (the descriptor rides on its first
  // byte); a short send finishes with WriteFullv.
  struct iovec iov[2] = {{head, sizeof(head)}, {const_cast<char*>(grant.data()), grant.size()}};
  ssize_t n = SendWithFd(fd_, iov, 2, attach_staging ? staging_fd_ : -1);
  absl::Status s = absl::OkStatus();
  if (n < 0) {
    s = absl::UnavailableError(absl::StrCat("shm write request: ", ErrnoText(errno)));
  } else {
    // Past the first byte the descriptor has gone with the message.
    size_t sent = static_cast<size_t>(n);
    for (struct iovec& v : iov) {
      const size_t skip = std::min(sent, v.iov_len);
      v.iov_base = static_cast<char*>(v.iov_base) + skip;
      v.iov_len -= skip;
      sent -= skip;
    }
    s = WriteFullv(fd_, iov, 2);
  }
  if (!s.ok()) {
    broken_ = true;
    return absl::UnavailableError(absl::StrCat("shared-memory write channel: ", s.message()));
  }
  if (attach_staging) staging_sent_ = true;
  return absl::OkStatus();
}

absl::Status ShmWriter::SetSlot(uint32_t slot, int fd) {
  WriteRequest r;
  r.flags = fd >= 0 ? kShmWriteFlagFd : 0;
  r.segment_id = slot;
  char head[kShmWriteHeaderBytes];
  EncodeRequest(r, head);
  absl::little_endian::Store32(head, kShmSourceMagic);
  struct iovec iov = {head, sizeof(head)};
  ssize_t n = SendWithFd(fd_, &iov, 1, fd);
  absl::Status s = absl::OkStatus();
  if (n < 0) {
    s = absl::UnavailableError(absl::StrCat("shm source request: ", ErrnoText(errno)));
  } else if (static_cast<size_t>(n) < sizeof(head)) {
    s = WriteFull(fd_, head + n, sizeof(head) - static_cast<size_t>(n));
  }
  if (!s.ok()) {
    broken_ = true;
    return absl::UnavailableError(absl::StrCat("shared-memory write channel: ", s.message()));
  }
  return ReadReply();
}

absl::StatusOr<uint32_t> ShmWriter::SlotFor(const ShmSource& source) {
  if (source.id == refused_source_) return 0;
  uint32_t victim = 1;
  for (uint32_t slot = 1; slot <= kShmSourceSlots; ++slot) {
    if (slots_[slot].source_id == source.id) {
      slots_[slot].last_use = ++uses_;
      return slot;
    }
    if (slots_[slot].last_use < slots_[victim].last_use) victim = slot;
  }
  // The least recently used slot (an empty one first) takes the source.
  slots_[victim] = Slot{};
  absl::Status s = SetSlot(victim, source.fd);
  if (s.code() == absl::StatusCode::kUnavailable) return s;
  if (!s.ok()) {
    SHELF_LOG(WARNING) << "the store maps no shared-memory source of this client; its puts are "
                          "staged"
                       << Kv("error", s.message());
    refused_source_ = source.id;
    return 0;
  }
  slots_[victim] = Slot{source.id, ++uses_};
  return victim;
}

absl::Status ShmWriter::DropFreedSources() {
  const uint64_t removals = ShmSources::Process().removals();
  if (removals == removals_seen_) return absl::OkStatus();
  for (uint32_t slot = 1; slot <= kShmSourceSlots; ++slot) {
    if (slots_[slot].source_id == 0 || ShmSources::Process().Alive(slots_[slot].source_id)) {
      continue;
    }
    slots_[slot] = Slot{};
    absl::Status s = SetSlot(slot, -1);
    if (!s.ok()) return s;
  }
  removals_seen_ = removals;
  return absl::OkStatus();
}

absl::Status ShmWriter::ReadReply() {
  char reply[kShmWriteReplyBytes];
  absl::Status s = ReadFull(fd_, reply, sizeof(reply));
  uint32_t msg_len = 0;
  if (s.ok()) {
    msg_len = absl::little_endian::Load32(reply + 4);
    if (msg_len > kShmWriteMessageBytesMax) s = absl::UnavailableError("oversized shm reply");
  }
  std::string text(msg_len, '\0');
  if (s.ok()) s = ReadFull(fd_, text.data(), text.size());
  if (!s.ok()) {
    broken_ = true;
    return absl::UnavailableError(absl::StrCat("shared-memory write channel: ", s.message()));
  }
  const auto code = static_cast<absl::StatusCode>(absl::little_endian::Load32(reply));
  return code == absl::StatusCode::kOk ? absl::OkStatus() : absl::Status(code, text);
}

absl::Status ShmWriter::ReadSsd(
    absl::string_view key, uint64_t size, absl::string_view read_grant, uint64_t deadline_ms,
    absl::FunctionRef<absl::Status(uint32_t segment_id, uint64_t offset, uint64_t length)> copy) {
  if (key.size() + read_grant.size() > wire::kExtraBytesMax) {
    return absl::InvalidArgumentError("key too long");
  }
  uint32_t segment_id = 0;
  uint64_t offset = 0, length = 0, pin = 0;
  {
    MutexLock lock(&mu_);
    if (broken_) return absl::UnavailableError("shared-memory channel broken");
    const uint64_t now = MonoMs();
    if (deadline_ms != 0 && now >= deadline_ms) {
      return absl::DeadlineExceededError("deadline passed before the shared-memory SSD read");
    }
    WriteRequest r;
    r.flags = read_grant.empty() ? 0 : kShmReadFlagGranted;
    r.grant_len = static_cast<uint32_t>(read_grant.size() + key.size());
    r.offset = deadline_ms == 0 ? 0 : deadline_ms - now;  // budget_ms
    r.length = size;
    char head[kShmWriteHeaderBytes];
    EncodeRequest(r, head);
    absl::little_endian::Store32(head, kShmReadMagic);
    // With a grant, the read credential (grant, then key), as for READ_KEY.
    struct iovec iov[3] = {{head, sizeof(head)},
                           {const_cast<char*>(read_grant.data()), read_grant.size()},
                           {const_cast<char*>(key.data()), key.size()}};
    absl::Status s = WriteFullv(fd_, iov, 3);
    if (!s.ok()) {
      broken_ = true;
      return absl::UnavailableError(absl::StrCat("shared-memory read request: ", s.message()));
    }
    // The store's reply within the deadline; the socket's own timeout
    // (kShmWriteTimeoutMs) bounds the reads that follow.
    if (deadline_ms != 0 && !WaitReadable(fd_, deadline_ms)) {
      broken_ = true;
      return absl::DeadlineExceededError("deadline passed waiting for the shared-memory SSD read");
    }
    s = ReadReply();
    if (!s.ok()) return s;
    char pinned[kShmReadReplyBytes];
    s = ReadFull(fd_, pinned, sizeof(pinned));
    if (!s.ok()) {
      broken_ = true;
      return absl::UnavailableError(absl::StrCat("shared-memory read reply: ", s.message()));
    }
    segment_id = absl::little_endian::Load32(pinned);
    offset = absl::little_endian::Load64(pinned + 8);
    length = absl::little_endian::Load64(pinned + 16);
    pin = absl::little_endian::Load64(pinned + 24);
  }
  // The copy runs outside the lock: other requests on this connection
  // proceed meanwhile, and the store keeps the range until the release.
  absl::Status copied = copy(segment_id, offset, length);
  MutexLock lock(&mu_);
  if (broken_) return copied;  // the store released the pin with the connection
  char head[kShmWriteHeaderBytes];
  EncodeRequest(WriteRequest{}, head);
  absl::little_endian::Store32(head, kShmReleaseMagic);
  absl::little_endian::Store64(head + 16, pin);
  if (!WriteFull(fd_, head, sizeof(head)).ok()) broken_ = true;
  return copied;
}

absl::StatusOr<int> ShmWriter::MapArena(uint32_t segment_id, uint64_t offset, uint64_t length,
                                        absl::string_view credential) {
  if (credential.size() > wire::kExtraBytesMax) {
    return absl::InvalidArgumentError("read credential too long");
  }
  MutexLock lock(&mu_);
  if (broken_) return absl::UnavailableError("shared-memory channel broken");
  WriteRequest r;
  r.segment_id = segment_id;
  r.grant_len = static_cast<uint32_t>(credential.size());
  r.offset = offset;
  r.length = length;
  char head[kShmWriteHeaderBytes];
  EncodeRequest(r, head);
  absl::little_endian::Store32(head, kShmArenaMagic);
  struct iovec iov[2] = {{head, sizeof(head)},
                         {const_cast<char*>(credential.data()), credential.size()}};
  absl::Status s = WriteFullv(fd_, iov, 2);
  char reply[kShmWriteReplyBytes];
  int got = -1;
  if (s.ok()) {
    ssize_t n = RecvWithFd(fd_, reply, sizeof(reply), &got);
    if (n != static_cast<ssize_t>(sizeof(reply))) {
      s = absl::UnavailableError("short shared-memory arena reply");
    }
  }
  if (!s.ok()) {
    if (got >= 0) close(got);
    broken_ = true;
    return absl::UnavailableError(absl::StrCat("shared-memory arena request: ", s.message()));
  }
  const auto code = static_cast<absl::StatusCode>(absl::little_endian::Load32(reply));
  const uint32_t msg_len = absl::little_endian::Load32(reply + 4);
  if (code == absl::StatusCode::kOk && got >= 0 && msg_len == 0) return got;
  if (got >= 0) close(got);
  std::string text(std::min(msg_len, kShmWriteMessageBytesMax), '\0');
  if (msg_len > kShmWriteMessageBytesMax || !ReadFull(fd_, text.data(), text.size()).ok()) {
    broken_ = true;
    return absl::UnavailableError("shared-memory arena reply unreadable");
  }
  if (code == absl::StatusCode::kOk)
    return absl::UnavailableError("store sent no arena descriptor");
  return absl::Status(code, text);
}

absl::Status ShmWriter::Write(uint32_t segment_id, uint64_t offset, const char* src,
                              uint64_t length, absl::string_view grant) {
  const WriteOp op{segment_id, offset, src, length, grant};
  absl::Status result;
  WriteBatch({&op, 1}, {&result, 1});
  return result;
}

absl::Status ShmWriter::WriteLocked(uint32_t segment_id, uint64_t offset, const char* src,
                                    uint64_t length, absl::string_view grant,
                                    const std::shared_ptr<const ShmSource>& source) {
  uint32_t slot = 0;
  if (source != nullptr) {
    absl::StatusOr<uint32_t> got = SlotFor(*source);
    if (!got.ok()) return got.status();
    slot = *got;
  }
  uint64_t done = 0;
  do {
    const uint64_t chunk = std::min(length - done, kShmStagingBytesMax);
    uint64_t src_offset = 0;
    if (slot != 0) {
      src_offset = static_cast<uint64_t>(src + done - source->base);
    } else {
      if (absl::Status s = Reserve(std::max<uint64_t>(chunk, 1)); !s.ok()) {
        broken_ = true;
        return s;
      }
      std::memcpy(staging_, src + done, chunk);
      if (staged_bytes_ != nullptr) staged_bytes_->fetch_add(chunk, std::memory_order_relaxed);
    }
    absl::Status s = Request(segment_id, offset + done, chunk, grant, slot, src_offset);
    if (!s.ok()) return s;
    done += chunk;
  } while (done < length);
  return absl::OkStatus();
}

void ShmWriter::WriteBatch(absl::Span<const WriteOp> whole, absl::Span<absl::Status> results) {
  // Each op's source, held while the store may copy from it. An op staged
  // from private memory large enough to split goes as pieces
  // (kShmSplitBytes), each a request of its own under the op's grant, so
  // the two copies overlap; `owner` maps a piece to its op.
  std::vector<WriteOp> ops;
  std::vector<size_t> owner;
  std::vector<std::shared_ptr<const ShmSource>> sources;
  ops.reserve(whole.size());
  for (size_t w = 0; w < whole.size(); ++w) {
    const WriteOp& op = whole[w];
    std::shared_ptr<const ShmSource> source =
        op.length > 0 ? ShmSources::Process().Find(op.src, op.length) : nullptr;
    const bool split =
        source == nullptr && op.length >= kShmSplitMinBytes && op.length <= kShmStagingBytesMax;
    const uint64_t step = split ? kShmSplitBytes : std::max<uint64_t>(op.length, 1);
    uint64_t at = 0;
    do {
      WriteOp piece = op;
      piece.offset += at;
      piece.src += at;
      piece.length = std::min(step, op.length - at);
      ops.push_back(piece);
      owner.push_back(w);
      sources.push_back(source);
      at += step;
    } while (at < op.length);
  }
  std::vector<absl::Status> piece_results(ops.size());
  WritePieces(ops, sources, absl::MakeSpan(piece_results));
  for (size_t w = 0; w < whole.size(); ++w) results[w] = absl::OkStatus();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (results[owner[i]].ok()) results[owner[i]] = piece_results[i];
  }
}

void ShmWriter::WritePieces(absl::Span<const WriteOp> ops,
                            const std::vector<std::shared_ptr<const ShmSource>>& sources,
                            absl::Span<absl::Status> results) {
  MutexLock lock(&mu_);
  absl::Status channel =
      broken_ ? absl::UnavailableError("shared-memory write channel broken") : DropFreedSources();
  // The slots first: giving a source one is a request of its own, answered
  // before any write goes out.
  std::vector<uint32_t> slots(ops.size(), 0);
  for (size_t i = 0; channel.ok() && i < ops.size(); ++i) {
    if (sources[i] == nullptr) continue;
    absl::StatusOr<uint32_t> got = SlotFor(*sources[i]);
    if (got.ok()) {
      slots[i] = *got;
    } else {
      channel = got.status();
    }
  }
  size_t i = 0;
  while (i < ops.size()) {
    if (!channel.ok()) {
      results[i++] = channel;
      continue;
    }
    if (ops[i].length > kShmStagingBytesMax) {  // alone, in chunks
      results[i] = WriteLocked(ops[i].segment_id, ops[i].offset, ops[i].src, ops[i].length,
                               ops[i].grant, slots[i] != 0 ? sources[i] : nullptr);
      if (broken_) channel = results[i];
      ++i;
      continue;
    }
    // A window: the ops that fit the staging memory together, each staged
    // one at its own offset of it, all sent, then every answer read.
    size_t end = i;
    uint64_t staged = 0;
    bool any_staged = false;
    while (end < ops.size() && end - i < kShmPipelineOps &&
           ops[end].length <= kShmStagingBytesMax &&
           (slots[end] != 0 || staged + ops[end].length <= kShmStagingBytesMax)) {
      if (slots[end] == 0) {
        staged += ops[end].length;
        any_staged = true;
      }
      ++end;
    }
    if (any_staged) {
      channel = Reserve(std::max<uint64_t>(staged, 1));
      if (!channel.ok()) {
        broken_ = true;
        continue;
      }
    }
    uint64_t at = 0;
    size_t sent = i;
    for (; sent < end && channel.ok(); ++sent) {
      const WriteOp& op = ops[sent];
      uint64_t src_offset = 0;
      if (slots[sent] != 0) {
        src_offset = static_cast<uint64_t>(op.src - sources[sent]->base);
      } else {
        std::memcpy(staging_ + at, op.src, op.length);
        if (staged_bytes_ != nullptr) {
          staged_bytes_->fetch_add(op.length, std::memory_order_relaxed);
        }
        src_offset = at;
        at += op.length;
      }
      channel = Send(op.segment_id, op.offset, op.length, op.grant, slots[sent], src_offset);
    }
    // Every request sent has an answer coming, in order.
    for (size_t k = i; k < sent; ++k) {
      results[k] = channel.ok() || !broken_ ? ReadReply() : channel;
      if (broken_ && channel.ok()) channel = results[k];
    }
    i = sent;
  }
}

}  // namespace shelf::transport
