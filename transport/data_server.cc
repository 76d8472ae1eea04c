#include "transport/data_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hmac.h"
#include "common/log.h"

namespace shelf {

absl::StatusOr<std::unique_ptr<DataServer>> DataServer::Start(const Options& options,
                                                              DataHandler* handler) {
  HostPort bound;
  absl::StatusOr<int> fd = TcpListen(options.listen, &bound);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<DataServer> server(new DataServer(options, handler, *fd, bound));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

DataServer::DataServer(const Options& options, DataHandler* handler, int listen_fd, HostPort bound)
    : options_(options), handler_(handler), listen_fd_(listen_fd), bound_(std::move(bound)) {}

DataServer::~DataServer() { Stop(); }

void DataServer::Stop() {
  if (stopping_.exchange(true)) return;
  shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  close(listen_fd_);
  MutexLock lock(&mu_);
  for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  while (!fds_.empty()) cv_.Wait(&mu_);
}

void DataServer::AcceptLoop() {
  while (!stopping_.load()) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) break;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        SHELF_LOG(WARNING) << "out of file descriptors: refusing connections";
        usleep(10000);
        continue;
      }
      break;
    }
    // Answers are small frames written back to back when a client
    // pipelines: Nagle would hold each behind the last one's ACK.
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    MutexLock lock(&mu_);
    if (static_cast<int>(fds_.size()) >= options_.max_connections) {
      SHELF_LOG(WARNING) << "connection refused: limit reached"
                         << Kv("max_connections", options_.max_connections);
      close(fd);
      continue;
    }
    fds_.insert(fd);
    live_.fetch_add(1);
    std::thread([this, fd] { Serve(fd); }).detach();
  }
}

absl::Status DataServer::Handshake(int fd) {
  std::string nonce = RandomBytes(wire::kNonceBytes);
  char head[wire::kHeaderBytes];
  wire::Header hello;
  hello.op = wire::Op::kHello;
  hello.extra_len = static_cast<uint32_t>(nonce.size());
  wire::EncodeHeader(hello, head);
  struct iovec iov[2] = {{head, sizeof(head)}, {nonce.data(), nonce.size()}};
  if (absl::Status s = WriteFullv(fd, iov, 2); !s.ok()) return s;
  char in[wire::kHeaderBytes];
  if (absl::Status s = ReadFull(fd, in, sizeof(in)); !s.ok()) return s;
  absl::StatusOr<wire::Header> auth = wire::DecodeHeader(in);
  if (!auth.ok()) return auth.status();
  if (auth->op != wire::Op::kAuth || auth->extra_len > wire::kExtraBytesMax) {
    return absl::InvalidArgumentError("expected AUTH frame");
  }
  std::string mac(auth->extra_len, '\0');
  if (absl::Status s = ReadFull(fd, mac.data(), mac.size()); !s.ok()) return s;
  wire::Header reply;
  reply.op = wire::Op::kAuth;
  reply.request_id = auth->request_id;
  absl::Status verdict = absl::OkStatus();
  if (!options_.secret.empty() && !ConstantTimeEqual(mac, wire::AuthMac(options_.secret, nonce))) {
    verdict = absl::UnauthenticatedError("data-plane handshake: wrong or missing cluster secret");
  }
  std::string msg(verdict.message());
  reply.status = static_cast<uint16_t>(verdict.code());
  reply.extra_len = static_cast<uint32_t>(msg.size());
  wire::EncodeHeader(reply, head);
  struct iovec out[2] = {{head, sizeof(head)}, {msg.data(), msg.size()}};
  if (absl::Status s = WriteFullv(fd, out, 2); !s.ok()) return s;
  return verdict;
}

void DataServer::Serve(int fd) {
  ServeConnection(fd);  // everything the connection held is gone when it returns
  // Stop() waits for fds_ to empty and may then destroy this server, so
  // this thread (detached) touches nothing of it after unlocking: the
  // notify happens under the lock.
  MutexLock lock(&mu_);
  fds_.erase(fd);
  close(fd);
  live_.fetch_sub(1);
  cv_.SignalAll();
}

void DataServer::ServeConnection(int fd) {
  SetIoTimeoutMs(fd, options_.io_timeout_ms);
  absl::Status hs = Handshake(fd);
  Connection conn;
  if (hs.ok()) {
    // Idle connections wait without a timeout; a frame, once started, must
    // arrive within io_timeout_ms.
    while (!stopping_.load()) {
      char head[wire::kHeaderBytes];
      // A pipelining client has the next frame waiting: no timeout change.
      ssize_t n = recv(fd, head, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0) break;
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
        SetIoTimeoutMs(fd, 0);
        n = recv(fd, head, 1, MSG_PEEK);
        if (n <= 0) break;
        SetIoTimeoutMs(fd, options_.io_timeout_ms);
      }
      if (!ReadFull(fd, head, sizeof(head)).ok()) break;
      absl::StatusOr<wire::Header> h = wire::DecodeHeader(head);
      if (!h.ok()) {
        SHELF_LOG(WARNING) << "closing connection: malformed frame"
                           << Kv("error", h.status().message());
        break;
      }
      if (!HandleFrame(fd, *h, &conn)) break;
    }
  } else if (hs.code() == absl::StatusCode::kUnauthenticated) {
    SHELF_LOG(WARNING) << "data-plane connection rejected" << Kv("error", hs.message());
  }
  conn.rdma.reset();  // before the socket: the peer sees the QP gone first
}

namespace {

// READ_KEY answers of up to this many bytes go through a per-thread
// buffer (DataHandler::ReadKeyInto); larger ones through ReadKey.
constexpr uint64_t kReadKeyBufferMax = 16ull << 20;

// This thread's 4 KiB aligned buffer of at least `bytes` (rounded up to
// 4 KiB); null when memory runs out. Kept for the thread's life (a
// connection's), grown as needed.
char* ReadKeyBuffer(uint64_t bytes) {
  struct Buffer {
    char* data = nullptr;
    uint64_t bytes = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buf;
  const uint64_t want = (bytes + 4095) & ~4095ull;
  if (buf.bytes < want) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, want) != 0) return nullptr;
    std::free(buf.data);
    buf.data = static_cast<char*>(p);
    buf.bytes = want;
  }
  // The analyzer does not follow a thread_local across calls: it pairs the
  // free of one call's buffer with the next call's return.
  return buf.data;  // NOLINT(clang-analyzer-unix.Malloc)
}

// Sends a response header, optional error text, and optional payload.
bool Reply(int fd, const wire::Header& req, const absl::Status& status, const char* payload,
           uint64_t payload_len) {
  wire::Header h;
  h.op = req.op;
  h.request_id = req.request_id;
  h.segment_id = req.segment_id;
  h.offset = req.offset;
  h.status = static_cast<uint16_t>(status.code());
  std::string msg(status.message().substr(0, 1024));
  h.extra_len = static_cast<uint32_t>(msg.size());
  h.length = status.ok() ? payload_len : 0;
  char head[wire::kHeaderBytes];
  wire::EncodeHeader(h, head);
  struct iovec iov[3] = {{head, sizeof(head)},
                         {msg.data(), msg.size()},
                         {const_cast<char*>(payload), status.ok() ? payload_len : 0}};
  return WriteFullv(fd, iov, 3).ok();
}

}  // namespace

bool DataServer::HandleFrame(int fd, const wire::Header& h, Connection* conn) {
  std::string extra(h.extra_len, '\0');
  if (!ReadFull(fd, extra.data(), extra.size()).ok()) return false;
  switch (h.op) {
    case wire::Op::kPing:
      return h.length == 0 && Reply(fd, h, absl::OkStatus(), nullptr, 0);
    case wire::Op::kRead: {
      absl::StatusOr<DataHandler::Region> seg = handler_->Segment(h.segment_id);
      if (!seg.ok()) return Reply(fd, h, seg.status(), nullptr, 0);
      if (h.offset > seg->size || h.length > seg->size - h.offset) {
        return Reply(fd, h,
                     absl::OutOfRangeError(absl::StrCat("read [", h.offset, ", +", h.length,
                                                        ") outside segment of ", seg->size)),
                     nullptr, 0);
      }
      handler_->OnRead(h.length);
      return Reply(fd, h, absl::OkStatus(), seg->base + h.offset, h.length);
    }
    case wire::Op::kWrite: {
      // A rejected write closes the connection: its payload is not drained.
      absl::StatusOr<DataHandler::Region> seg = handler_->Segment(h.segment_id);
      absl::Status verdict = seg.status();
      if (verdict.ok() && (h.offset > seg->size || h.length > seg->size - h.offset)) {
        verdict = absl::OutOfRangeError(
            absl::StrCat("write [", h.offset, ", +", h.length, ") outside segment of ", seg->size));
      }
      if (verdict.ok()) {
        absl::StatusOr<wire::Grant> grant = wire::DecodeGrant(extra);
        verdict = grant.ok() ? handler_->CheckWrite(*grant, h.segment_id, h.offset, h.length)
                             : grant.status();
      }
      if (!verdict.ok()) {
        SHELF_LOG(WARNING) << "write rejected" << Kv("error", verdict.message());
        Reply(fd, h, verdict, nullptr, 0);
        return false;
      }
      if (!ReadFull(fd, seg->base + h.offset, h.length).ok()) return false;
      handler_->OnWrite(h.length);
      return Reply(fd, h, absl::OkStatus(), nullptr, 0);
    }
    case wire::Op::kReadKey: {
      if (extra.empty() || extra.size() > kKeyBytesMax) {
        return Reply(fd, h,
                     absl::InvalidArgumentError(
                         absl::StrCat("READ_KEY needs a key of 1..", kKeyBytesMax, " bytes")),
                     nullptr, 0);
      }
      if (h.segment_id & ~wire::kReadKeyCheckOnly) {
        return Reply(fd, h, absl::InvalidArgumentError("READ_KEY: unknown flags"), nullptr, 0);
      }
      // DRAM first: a block with a DRAM record is sent from the segment,
      // like a READ, after its generation is checked.
      absl::StatusOr<DataHandler::Region> dram = handler_->DramKey(extra, h.offset);
      if (dram.ok() && h.length != 0 && dram->size != h.length) {
        dram = absl::FailedPreconditionError(
            absl::StrCat("DRAM block is ", dram->size, " bytes, expected ", h.length));
      }
      if (h.segment_id == wire::kReadKeyCheckOnly) return Reply(fd, h, dram.status(), nullptr, 0);
      if (dram.ok()) {
        handler_->OnRead(dram->size);
        return Reply(fd, h, absl::OkStatus(), dram->base, dram->size);
      }
      if (dram.status().code() != absl::StatusCode::kNotFound) {
        return Reply(fd, h, dram.status(), nullptr, 0);
      }
      // A block of known size up to kReadKeyBufferMax is read straight into
      // this connection thread's aligned buffer (O_DIRECT, no copy) and
      // sent from there.
      if (h.length != 0 && h.length <= kReadKeyBufferMax) {
        char* buf = ReadKeyBuffer(h.length);
        uint64_t size = 0;
        absl::Status s =
            buf == nullptr ? absl::UnimplementedError("no buffer")
                           : handler_->ReadKeyInto(extra, buf, (h.length + 4095) & ~4095ull, &size);
        if (s.code() != absl::StatusCode::kUnimplemented &&
            s.code() != absl::StatusCode::kOutOfRange) {
          if (s.ok() && size != h.length) {
            s = absl::DataLossError(
                absl::StrCat("SSD block is ", size, " bytes, expected ", h.length));
          }
          return Reply(fd, h, s, buf, s.ok() ? size : 0);
        }
      }
      std::string value;
      absl::Status s = handler_->ReadKey(extra, &value);
      if (s.ok() && h.length != 0 && value.size() != h.length) {
        s = absl::DataLossError(
            absl::StrCat("SSD block is ", value.size(), " bytes, expected ", h.length));
      }
      return Reply(fd, h, s, value.data(), value.size());
    }
    case wire::Op::kRdmaConnect: {
      if (h.length != 0) return false;
      if (options_.rdma == nullptr) {
        return Reply(fd, h, absl::FailedPreconditionError("this store offers no rdma transport"),
                     nullptr, 0);
      }
      conn->rdma.reset();  // a reconnect replaces the old queue pair
      std::string store_info;
      absl::StatusOr<std::shared_ptr<void>> qp =
          options_.rdma->Accept(h.segment_id, extra, &store_info);
      if (!qp.ok()) {
        SHELF_LOG(WARNING) << "rdma connection refused" << Kv("error", qp.status().message());
        return Reply(fd, h, qp.status(), nullptr, 0);
      }
      conn->rdma = *std::move(qp);
      return Reply(fd, h, absl::OkStatus(), store_info.data(), store_info.size());
    }
    case wire::Op::kHello:
    case wire::Op::kAuth:
      break;
  }
  SHELF_LOG(WARNING) << "closing connection: unexpected opcode" << Kv("op", static_cast<int>(h.op));
  return false;
}

}  // namespace shelf
