#include "transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/hmac.h"
#include "common/log.h"
#include "common/net.h"
#include "transport/data_tls.h"
#include "transport/fd_passing.h"
#include "transport/shm_handshake.h"

namespace shelf::transport {

std::string ShmMac(const std::string& secret, absl::string_view nonce) {
  if (secret.empty()) return std::string(kMacBytes, '\0');
  return HmacSha256(secret, absl::StrCat("shelf-shm-v1", nonce));
}

namespace {

absl::Status FillAddr(const std::string& path, struct sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr->sun_path, path.data(), path.size());
  return absl::OkStatus();
}

// The seals without which a segment descriptor is not handed out, nor mapped:
// its size is fixed for every holder.
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW;

bool SealedAgainstResize(int fd) {
  int seals = fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & kRequiredSeals) == kRequiredSeals;
}

// No holder of the descriptor can write the segment through it: it is
// sealed F_SEAL_FUTURE_WRITE (no new writable mapping, no write(2)), or it
// was opened read-only.
bool WriteProtected(int fd) {
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals >= 0 && (seals & F_SEAL_FUTURE_WRITE) != 0) return true;
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_ACCMODE) == O_RDONLY;
}

// OK when descriptor `fd` (of `what`, for messages) may be mapped: sealed
// against resizing and not writable through; FAILED_PRECONDITION if not.
absl::Status CheckSealed(int fd, absl::string_view what) {
  if (!SealedAgainstResize(fd)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what,
                     " is not sealed against shrinking and growing (F_SEAL_SHRINK | "
                     "F_SEAL_GROW): refusing to map it"));
  }
  if (!WriteProtected(fd)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what,
                     " can be written through (neither F_SEAL_FUTURE_WRITE nor O_RDONLY): "
                     "refusing to map it"));
  }
  return absl::OkStatus();
}

// The uid of the process on the other end of a connected Unix socket.
absl::StatusOr<uid_t> PeerUid(int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::UnavailableError(absl::StrCat("SO_PEERCRED: ", ErrnoText(errno)));
  }
  return cred.uid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmServer>> ShmServer::Start(const std::string& socket_path,
                                                            int memfd, uint32_t segment_id,
                                                            uint64_t size, std::string secret,
                                                            std::vector<uint32_t> allowed_uids,
                                                            DataHandler* writes) {
  if (!SealedAgainstResize(memfd)) {
    return absl::FailedPreconditionError(
        "the segment descriptor is not sealed against shrinking and growing: a peer could "
        "resize it under every mapping");
  }
  // Peers get the memfd itself, sealed F_SEAL_FUTURE_WRITE (Linux >= 5.1):
  // no holder can map it writable or write(2) it. A read-only reopening is
  // no substitute: its holder can open /proc/self/fd/N read-write (a
  // memfd's inode is mode 0777).
  if (!WriteProtected(memfd)) {
    return absl::FailedPreconditionError(
        "the segment is not sealed F_SEAL_FUTURE_WRITE (Linux 5.1 or later): peers could write "
        "it; shared memory is off, clients use TCP");
  }
  if (allowed_uids.empty()) allowed_uids = {static_cast<uint32_t>(geteuid()), 0};
  struct sockaddr_un addr;
  if (absl::Status s = FillAddr(socket_path, &addr); !s.ok()) return s;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    return absl::UnavailableError(absl::StrCat("socket: ", ErrnoText(e)));
  }
  unlink(socket_path.c_str());
  if (bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", socket_path, ": ", ErrnoText(e)));
  }
  std::unique_ptr<ShmServer> server(new ShmServer(socket_path, fd, memfd, /*owned_fd=*/-1,
                                                  segment_id, size, std::move(secret),
                                                  std::move(allowed_uids), writes));
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

absl::StatusOr<std::unique_ptr<ShmServer>> ShmServer::StartArenas(
    const std::string& socket_path, uint64_t arena_bytes, std::string secret,
    std::vector<uint32_t> allowed_uids, DataHandler* handler) {
  if (allowed_uids.empty()) allowed_uids = {static_cast<uint32_t>(geteuid()), 0};
  struct sockaddr_un addr;
  if (absl::Status s = FillAddr(socket_path, &addr); !s.ok()) return s;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", ErrnoText(errno)));
  unlink(socket_path.c_str());
  if (bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", socket_path, ": ", ErrnoText(e)));
  }
  std::unique_ptr<ShmServer> server(new ShmServer(socket_path, fd, -1, -1, kShmArenas, arena_bytes,
                                                  std::move(secret), std::move(allowed_uids),
                                                  handler));
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

ShmServer::ShmServer(std::string path, int listen_fd, int memfd, int owned_fd, uint32_t segment_id,
                     uint64_t size, std::string secret, std::vector<uint32_t> allowed_uids,
                     DataHandler* writes)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      memfd_(memfd),
      owned_fd_(owned_fd),
      writes_(writes),
      segment_id_(segment_id),
      size_(size),
      secret_(std::move(secret)),
      allowed_uids_(std::move(allowed_uids)) {}

ShmServer::~ShmServer() {
  stopping_.store(true);
  shutdown(listen_fd_, SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  for (std::unique_ptr<Connection>& c : connections_) {
    shutdown(c->fd, SHUT_RDWR);
    c->thread.join();
    close(c->fd);
  }
  close(listen_fd_);
  if (owned_fd_ >= 0) close(owned_fd_);
  unlink(path_.c_str());
}

void ShmServer::Loop() {
  while (!stopping_.load()) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) break;
      if (errno != EINTR && errno != ECONNABORTED) PauseAfterAcceptError(errno, "shm");
      continue;
    }
    // Handshakes are tiny and bounded by a timeout, so one thread serves them.
    SetIoTimeoutMs(fd, 2000);
    absl::StatusOr<uid_t> uid = PeerUid(fd);
    const bool allowed = uid.ok() && std::find(allowed_uids_.begin(), allowed_uids_.end(),
                                               static_cast<uint32_t>(*uid)) != allowed_uids_.end();
    if (!allowed) {
      SHELF_LOG(WARNING) << "shared-memory attach rejected: peer uid not allowed (--shm-allow-uids)"
                         << Kv("uid", uid.ok() ? absl::StrCat(*uid) : uid.status().ToString());
    }
    // Reap the connections whose peers left (their fds are closed here, after
    // the join, so the destructor never shuts down a reused number).
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        close((*it)->fd);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    if (!ServeOne(fd, allowed) || connections_.size() >= kShmConnectionsMax) {
      close(fd);
      continue;
    }
    // Idle between puts for as long as the client likes: no receive timeout
    // (the destructor shuts the socket down); a stalled reader is still cut
    // off by the send timeout.
    struct timeval none = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    Connection* raw = c.get();
    try {
      c->thread = std::thread([this, raw] {
        ServeShmWrites(raw->fd, writes_);
        // Its peer sees the end now, not at the next attach's reaping.
        shutdown(raw->fd, SHUT_RDWR);
        raw->done.store(true);
      });
    } catch (const std::system_error& e) {  // out of threads or memory
      SHELF_LOG(WARNING) << "shared-memory attach refused: no thread to serve it"
                         << Kv("error", e.what());
      close(fd);
      continue;
    }
    connections_.push_back(std::move(c));
  }
}

bool ShmServer::ServeOne(int fd, bool peer_allowed) {
  std::string nonce = RandomBytes(kShmNonceBytes);
  char hello[kShmHelloBytes];
  absl::little_endian::Store32(hello, kShmMagic);
  std::memcpy(hello + 4, nonce.data(), kShmNonceBytes);
  if (!WriteFull(fd, hello, sizeof(hello)).ok()) return false;
  // Within 2 s in all: a peer sending a byte a second does not hold the
  // one thread that serves every attach.
  std::string mac(kMacBytes, '\0');
  if (!wire::StreamReadBefore(fd, nullptr, mac.data(), mac.size(), MonoMs() + 2000).ok()) {
    return false;
  }
  const bool authentic = secret_.empty() || ConstantTimeEqual(mac, ShmMac(secret_, nonce));
  const bool ok = authentic && peer_allowed;
  const absl::StatusCode code = ok           ? absl::StatusCode::kOk
                                : !authentic ? absl::StatusCode::kUnauthenticated
                                             : absl::StatusCode::kPermissionDenied;
  char reply[16];
  absl::little_endian::Store32(reply, static_cast<uint32_t>(code));
  absl::little_endian::Store32(reply + 4, segment_id_);
  absl::little_endian::Store64(reply + 8, ok ? size_ : 0);
  struct iovec iov = {reply, sizeof(reply)};
  if (!authentic) {
    SHELF_LOG(WARNING) << "shared-memory attach rejected: wrong secret";
  }
  ssize_t n = SendWithFd(fd, &iov, 1, ok ? memfd_ : -1);
  return ok && n == static_cast<ssize_t>(sizeof(reply));
}

ShmMapping::~ShmMapping() {
  if (base != nullptr) munmap(base, size);
  MutexLock lock(&arenas_mu);
  for (auto& [id, p] : arena_bases) munmap(const_cast<char*>(p), size);
}

absl::StatusOr<const char*> ShmAttachments::Arena(ShmMapping& m, uint32_t segment_id,
                                                  uint64_t offset, uint64_t length,
                                                  absl::string_view credential) {
  {
    MutexLock lock(&m.arenas_mu);
    auto it = m.arena_bases.find(segment_id);
    if (it != m.arena_bases.end()) return it->second;
  }
  absl::StatusOr<int> fd = m.writer->MapArena(segment_id, offset, length, credential);
  if (!fd.ok()) return fd.status();
  const std::string what = absl::StrCat("arena ", segment_id, " of ", m.socket_path);
  struct stat st;
  absl::Status s = CheckSealed(*fd, what);
  if (s.ok() && (fstat(*fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < m.size)) {
    s = absl::DataLossError(absl::StrCat(what, " is smaller than ", m.size));
  }
  void* p = MAP_FAILED;
  if (s.ok()) {
    p = mmap(nullptr, m.size, PROT_READ, MAP_SHARED, *fd, 0);
    if (p == MAP_FAILED) s = absl::UnavailableError(absl::StrCat("mmap arena: ", ErrnoText(errno)));
  }
  close(*fd);
  if (!s.ok()) return s;
  MutexLock lock(&m.arenas_mu);
  auto [it, inserted] = m.arena_bases.emplace(segment_id, static_cast<const char*>(p));
  if (!inserted) munmap(p, m.size);  // another thread mapped it meanwhile
  return it->second;
}

void ShmAttachments::MapBoard(ShmMapping& m) {
  absl::StatusOr<int> fd = m.writer->MapArena(kShmKeyBoard, 0, 0, "");
  if (!fd.ok()) return;  // the store keeps none: cached reads ask it
  absl::Status s = CheckSealed(*fd, absl::StrCat("the key board of ", m.socket_path));
  absl::StatusOr<std::unique_ptr<KeyBoardView>> view =
      s.ok() ? KeyBoardView::Map(*fd, m.size) : absl::StatusOr<std::unique_ptr<KeyBoardView>>(s);
  close(*fd);
  if (!view.ok()) {
    SHELF_LOG(WARNING) << "key board not mapped: cached same-host reads ask the store"
                       << Kv("socket", m.socket_path) << Kv("error", view.status().message());
    return;
  }
  m.board = *std::move(view);
}

std::shared_ptr<ShmMapping> ShmAttachments::Mapped(const std::string& socket_path,
                                                   uint64_t incarnation) {
  MutexLock lock(&mu_);
  auto it = maps_.find(socket_path);
  if (it == maps_.end() || (incarnation != 0 && it->second->incarnation != incarnation)) {
    return nullptr;
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<ShmMapping>> ShmAttachments::Get(const std::string& socket_path,
                                                                uint64_t incarnation) {
  std::shared_ptr<Attaching> mine;
  {
    MutexLock lock(&mu_);
    for (;;) {
      auto it = maps_.find(socket_path);
      if (it != maps_.end()) {
        if (incarnation == 0 || it->second->incarnation == incarnation) return it->second;
        // The store restarted: this mapping is the dead one's memory.
        maps_.erase(it);
      }
      auto r = refused_.find(socket_path);
      if (r != refused_.end()) {
        if (incarnation == 0 || r->second.incarnation == incarnation) return r->second.status;
        refused_.erase(r);  // another store now: ask it afresh
      }
      auto a = attaching_.find(socket_path);
      if (a == attaching_.end()) break;
      std::shared_ptr<Attaching> theirs = a->second;
      while (!theirs->done) attached_.Wait(&mu_);
      if (incarnation == 0 || theirs->incarnation == incarnation) return theirs->result;
      // Made for another incarnation of the store: look again.
    }
    mine = std::make_shared<Attaching>(incarnation);
    attaching_.emplace(socket_path, mine);
  }
  absl::StatusOr<std::shared_ptr<ShmMapping>> m = Attach(socket_path, incarnation);
  const absl::StatusCode code = m.status().code();
  MutexLock lock(&mu_);
  if (code == absl::StatusCode::kPermissionDenied ||
      code == absl::StatusCode::kFailedPrecondition) {
    // A deliberate refusal, not a passing failure: remember it, so that it
    // is logged once and every later op goes straight to another transport.
    if (refused_.insert_or_assign(socket_path, Refusal{incarnation, m.status()}).second) {
      refusals_.fetch_add(1);
      SHELF_LOG(WARNING) << "shared memory refused: using another transport"
                         << Kv("socket", socket_path) << Kv("reason", m.status().message());
    }
  }
  mine->result = m;
  mine->done = true;
  attaching_.erase(socket_path);
  attached_.SignalAll();
  return m;
}

absl::StatusOr<int> ShmAttachments::Handshake(const std::string& socket_path, int* memfd,
                                              char reply[16]) {
  *memfd = -1;
  struct sockaddr_un addr;
  if (absl::Status s = FillAddr(socket_path, &addr); !s.ok()) return s;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", ErrnoText(errno)));
  SetIoTimeoutMs(fd, 2000);
  if (connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot reach store socket ", socket_path, ": ", ErrnoText(e)));
  }
  // Whoever can bind the socket's path can answer on it: take a segment
  // only from the uid the store is expected to run as.
  const uid_t want = store_uid_ >= 0 ? static_cast<uid_t>(store_uid_) : geteuid();
  absl::StatusOr<uid_t> peer = PeerUid(fd);
  if (!peer.ok() || (*peer != want && *peer != 0)) {
    close(fd);
    if (!peer.ok()) return peer.status();
    return absl::PermissionDeniedError(absl::StrCat("store socket ", socket_path,
                                                    " is served by uid ", *peer, ", not uid ", want,
                                                    " or root (ClientOptions::shm_store_uid)"));
  }
  char hello[kShmHelloBytes];
  absl::Status s = ReadFull(fd, hello, sizeof(hello));
  if (s.ok() && absl::little_endian::Load32(hello) != kShmMagic) {
    s = absl::UnavailableError("not a Shelf shared-memory socket");
  }
  if (s.ok()) {
    std::string mac = ShmMac(secret_, absl::string_view(hello + 4, kShmNonceBytes));
    s = WriteFull(fd, mac.data(), mac.size());
  }
  if (s.ok()) {
    ssize_t n = RecvWithFd(fd, reply, 16, memfd);
    char extra;
    if (n != 16) {
      s = absl::UnavailableError("short shared-memory reply");
    } else if (recv(fd, &extra, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
      // A store says nothing more until asked: the socket then carries the
      // mapping's puts, whose replies these bytes would be taken for.
      s = absl::UnavailableError("store sent more than its shared-memory reply");
    } else {
      const auto code = static_cast<absl::StatusCode>(absl::little_endian::Load32(reply));
      if (code == absl::StatusCode::kPermissionDenied) {
        s = absl::PermissionDeniedError(
            absl::StrCat("shared-memory attach refused: the store does not allow uid ", geteuid(),
                         " (its --shm-allow-uids)"));
      } else if (code != absl::StatusCode::kOk) {
        s = absl::Status(code, "shared-memory attach refused: wrong or missing cluster secret");
      } else if (*memfd < 0 && absl::little_endian::Load32(reply + 4) != kShmArenas) {
        s = absl::UnavailableError("store sent no segment descriptor");
      } else if (*memfd >= 0 && absl::little_endian::Load32(reply + 4) == kShmArenas) {
        s = absl::UnavailableError("store sent a descriptor for a segment of arenas");
      }
    }
  }
  if (!s.ok()) {
    close(fd);
    if (*memfd >= 0) close(*memfd);
    *memfd = -1;
    return s;
  }
  return fd;
}

absl::StatusOr<std::shared_ptr<ShmMapping>> ShmAttachments::Attach(const std::string& socket_path,
                                                                   uint64_t incarnation) {
  char reply[16];
  int memfd = -1;
  absl::StatusOr<int> fd = Handshake(socket_path, &memfd, reply);
  if (!fd.ok()) return fd.status();
  // From here the socket belongs to the mapping: its puts travel on it.
  auto writer = std::make_unique<ShmWriter>(*fd, &staged_bytes_);
  SetIoTimeoutMs(*fd, kShmWriteTimeoutMs);
  if (absl::little_endian::Load32(reply + 4) == kShmArenas) {
    // Nothing mapped yet: each arena is asked for with a read grant.
    auto mapping = std::make_shared<ShmMapping>();
    mapping->segment_id = kShmArenas;
    mapping->size = absl::little_endian::Load64(reply + 8);
    mapping->arenas = true;
    mapping->incarnation = incarnation;
    mapping->writer = std::move(writer);
    mapping->socket_path = socket_path;
    if (mapping->size == 0) return absl::DataLossError("store claims arenas of 0 bytes");
    MutexLock lock(&mu_);
    auto [it, inserted] = maps_.insert_or_assign(socket_path, mapping);
    return it->second;
  }
  if (absl::Status sealed =
          CheckSealed(memfd, absl::StrCat("store segment descriptor from ", socket_path));
      !sealed.ok()) {
    close(memfd);
    return sealed;
  }
  auto mapping = std::make_shared<ShmMapping>();
  mapping->segment_id = absl::little_endian::Load32(reply + 4);
  mapping->size = absl::little_endian::Load64(reply + 8);
  mapping->incarnation = incarnation;
  mapping->writer = std::move(writer);
  mapping->socket_path = socket_path;
  // A store (or whatever answers on its socket) claiming a larger segment
  // than its descriptor holds would leave the tail of the mapping unbacked:
  // a copy there is SIGBUS, not an error. Map only what is there.
  struct stat st;
  if (fstat(memfd, &st) != 0 || mapping->size == 0 ||
      mapping->size > static_cast<uint64_t>(st.st_size)) {
    uint64_t have = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
    close(memfd);
    return absl::DataLossError(
        absl::StrCat("store segment claims ", mapping->size, " bytes over a descriptor of ", have));
  }
  void* p = mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, memfd, 0);
  close(memfd);
  if (p == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap store segment: ", ErrnoText(errno)));
  }
  mapping->base = static_cast<char*>(p);
  MapBoard(*mapping);
  warmer_.Add(mapping, mapping->base, mapping->size);
  MutexLock lock(&mu_);
  auto [it, inserted] = maps_.insert_or_assign(socket_path, mapping);
  return it->second;
}

absl::Status ShmAttachments::ReadSsd(
    ShmMapping& m, absl::string_view key, uint64_t size, absl::string_view read_grant,
    uint64_t deadline_ms,
    absl::FunctionRef<absl::Status(uint32_t segment_id, uint64_t offset, uint64_t length)> copy) {
  // The store serves each connection on one thread: reads running in
  // parallel each take a connection of their own (an idle one, else a new
  // one up to kShmReadChannelsMax, else the attachment's own, shared).
  std::unique_ptr<ShmWriter> channel;
  bool make = false;
  {
    MutexLock lock(&m.readers_mu);
    if (!m.idle_readers.empty()) {
      channel = std::move(m.idle_readers.back());
      m.idle_readers.pop_back();
    } else if (m.readers < kShmReadChannelsMax && !m.readers_refused) {
      ++m.readers;
      make = true;
    }
  }
  if (make) {
    char reply[16];
    int memfd = -1;
    absl::StatusOr<int> fd = Handshake(m.socket_path, &memfd, reply);
    if (fd.ok()) {
      if (memfd >= 0) close(memfd);  // the segment is mapped already
      SetIoTimeoutMs(*fd, kShmWriteTimeoutMs);
      channel = std::make_unique<ShmWriter>(*fd);
      if (absl::little_endian::Load32(reply + 4) != m.segment_id ||
          absl::little_endian::Load64(reply + 8) != m.size) {
        channel.reset();  // another store answers there now
      }
    }
    if (channel == nullptr) {
      MutexLock lock(&m.readers_mu);
      --m.readers;
    }
  }
  if (channel == nullptr) return m.writer->ReadSsd(key, size, read_grant, deadline_ms, copy);
  absl::Status s = channel->ReadSsd(key, size, read_grant, deadline_ms, copy);
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    // The connection waits for a reply no one reads: not kept, and no
    // other read for this one (its time is up).
    MutexLock lock(&m.readers_mu);
    --m.readers;
    return s;
  }
  if (s.code() != absl::StatusCode::kUnavailable) {
    MutexLock lock(&m.readers_mu);
    m.idle_readers.push_back(std::move(channel));
    return s;
  }
  {
    // A broken connection is not kept. A new one that fails at once was
    // most likely closed by a store at its connection limit: make no more
    // for this mapping.
    MutexLock lock(&m.readers_mu);
    --m.readers;
    if (make) m.readers_refused = true;
  }
  // A failed connection fails before the copy (the request or its reply):
  // the attachment's own connection reads the block instead.
  return m.writer->ReadSsd(key, size, read_grant, deadline_ms, copy);
}

void ShmAttachments::Forget(const std::string& socket_path) {
  MutexLock lock(&mu_);
  maps_.erase(socket_path);
}

}  // namespace shelf::transport
