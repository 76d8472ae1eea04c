#include "transport/tcp_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/net.h"
#include "transport/session.h"

namespace shelf::transport {
namespace {

// Dials of one Connect while the store cuts the handshake short.
constexpr int kDialAttempts = 3;

absl::Status TimeLeft(uint64_t deadline_ms, uint64_t* left) {
  uint64_t now = MonoMs();
  if (now >= deadline_ms) return absl::DeadlineExceededError("data-plane deadline passed");
  *left = deadline_ms - now;
  return absl::OkStatus();
}

absl::Status WithPeer(const absl::Status& s, const std::string& address) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(s.message(), " (store ", address, ")"));
}

}  // namespace

TcpDataClient::TcpDataClient(Options options)
    : options_(std::move(options)),
      tls_(options_.tls ? wire::DataTls::ForClient(options_.tls_files)
                        : absl::StatusOr<std::shared_ptr<wire::DataTls>>(nullptr)) {}

TcpDataClient::~TcpDataClient() {
  for (auto& [addr, fds] : idle_) {
    for (int fd : fds) close(fd);
  }
}

absl::Status TcpDataClient::Connect(const std::string& address, uint64_t deadline_ms, int* out) {
  uint64_t left = 0;
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) return s;
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return hp.status();
  // A store under a flood of half-open connections closes the oldest ones
  // in their handshake (docs/security.md, "Denial of service"), and a burst
  // of new connections within this client's handshake can make its own
  // one of them: a handshake cut short is dialed again, up to
  // kDialAttempts in all. Once the store has answered AUTH the connection
  // is out of the handshake and no cap closes it.
  absl::Status s = Dial1(*hp, deadline_ms, out);
  for (int attempt = 1; attempt < kDialAttempts && s.code() == absl::StatusCode::kUnavailable &&
                        TimeLeft(deadline_ms, &left).ok();
       ++attempt) {
    s = Dial1(*hp, deadline_ms, out);
  }
  return s;
}

absl::Status TcpDataClient::Dial1(const HostPort& hp, uint64_t deadline_ms, int* out) {
  uint64_t left = 0;
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) return s;
  absl::StatusOr<int> fd = TcpConnect(hp, std::min(left, options_.connect_timeout_ms));
  if (!fd.ok()) return fd.status();
  SetIoTimeoutMs(*fd, left);
  auto session = std::make_unique<wire::Session>();
  absl::Status s = tls_.status();
  if (s.ok() && *tls_ != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> tls = (*tls_)->Handshake(*fd, hp.host, deadline_ms);
    if (tls.ok()) {
      session->tls = *std::move(tls);
    } else {
      s = tls.status();
    }
  }
  if (s.ok()) {
    s = wire::ClientHandshake(*fd, options_.secret, session.get(), options_.session_tag_payload);
  }
  if (!s.ok()) {
    close(*fd);
    return s;
  }
  // A plain connection reads ahead (wire::ReadAhead): an answer's header,
  // block and tag in one receive.
  session->read_ahead = session->tls == nullptr;
  {
    // A session left under this number belonged to a descriptor closed
    // since (the number is free again only once closed).
    MutexLock lock(&mu_);
    sessions_[*fd] = std::move(session);
  }
  *out = *fd;
  return absl::OkStatus();
}

wire::Session* TcpDataClient::SessionOf(int fd) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(fd);
  if (it != sessions_.end()) return it->second.get();
  // Not from Connect: cannot happen for descriptors this client made.
  auto [added, unused] = sessions_.emplace(fd, std::make_unique<wire::Session>());
  return added->second.get();
}

void TcpDataClient::ArmTimeout(int fd, uint64_t left_ms) {
  wire::Session* session = SessionOf(fd);
  uint64_t& armed = session->armed_timeout_ms;
  if (armed >= left_ms && armed - left_ms <= left_ms / kTimeoutSlackDivisor) return;
  SetIoTimeoutMs(fd, left_ms);
  armed = left_ms;
}

void TcpDataClient::Close(int fd) {
  {
    MutexLock lock(&mu_);
    sessions_.erase(fd);
  }
  close(fd);
}

absl::Status TcpDataClient::Exchange(int fd, const wire::Header& request, struct iovec* rest,
                                     int restcnt, wire::Header* response, bool* answered) {
  if (absl::Status s = wire::SendFrame(fd, SessionOf(fd), request, rest, restcnt); !s.ok()) {
    return s;
  }
  return Receive(fd, request, response, answered);
}

namespace {

// A tag that does not verify: the stream is not the store's, the connection
// is not to be used again.
absl::Status Untrusted(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kPermissionDenied) return s;
  return absl::UnavailableError(s.message());
}

}  // namespace

absl::Status TcpDataClient::Receive(int fd, const wire::Header& request, wire::Header* response,
                                    bool* answered) {
  wire::Session* session = SessionOf(fd);
  char in[wire::kHeaderBytes];
  if (absl::Status s = wire::StreamRead(fd, session, in, sizeof(in)); !s.ok()) return s;
  if (answered != nullptr) *answered = true;
  absl::StatusOr<wire::Header> h = wire::DecodeHeader(in);
  if (!h.ok()) return absl::UnavailableError(absl::StrCat("bad response: ", h.status().message()));
  if (h->request_id != request.request_id || h->op != request.op) {
    return absl::UnavailableError("response does not match request");
  }
  std::string msg(h->extra_len, '\0');
  if (absl::Status s = wire::StreamRead(fd, session, msg.data(), msg.size()); !s.ok()) return s;
  wire::FrameMac* mac = &session->recv;
  mac->Begin(h->op);
  mac->Add(in, sizeof(in));
  mac->Add(msg.data(), msg.size());
  // With a payload, ReadBody reads the tag after it.
  if (h->length == 0) {
    if (absl::Status s = Untrusted(mac->ReadAndCheck(fd, session)); !s.ok()) return s;
  }
  *response = *h;
  if (h->status != 0) {
    return absl::Status(static_cast<absl::StatusCode>(h->status), msg);
  }
  return absl::OkStatus();
}

absl::Status TcpDataClient::ReadBody(int fd, char* dst, uint64_t length) {
  wire::Session* session = SessionOf(fd);
  if (absl::Status s = wire::ReadPayload(fd, session, dst, length); !s.ok()) return s;
  return Untrusted(session->recv.ReadAndCheck(fd, session));
}

absl::StatusOr<int> TcpDataClient::Acquire(const std::string& address, uint64_t deadline_ms,
                                           bool* reused) {
  if (reused != nullptr) *reused = false;
  for (;;) {
    int idle = -1;
    {
      MutexLock lock(&mu_);
      auto it = idle_.find(address);
      if (it == idle_.end() || it->second.empty()) break;
      idle = it->second.back();
      it->second.pop_back();
    }
    if (reused != nullptr) {
      *reused = true;
      return idle;
    }
    // A store sends nothing unasked: an idle connection that reads (EOF:
    // the store restarted or closed it) or has failed is not used.
    struct pollfd p = {idle, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) == 0) return idle;
    Close(idle);
  }
  int fd = -1;
  if (absl::Status s = Connect(address, deadline_ms, &fd); !s.ok()) return s;
  return fd;
}

void TcpDataClient::Release(const std::string& address, int fd, bool reusable) {
  if (reusable) {
    MutexLock lock(&mu_);
    std::vector<int>& pool = idle_[address];
    if (pool.size() < options_.max_idle_per_peer) {
      pool.push_back(fd);
      return;
    }
  }
  Close(fd);
}

void TcpDataClient::Forget(const std::string& address) {
  std::vector<int> fds;
  {
    MutexLock lock(&mu_);
    auto it = idle_.find(address);
    if (it == idle_.end()) return;
    fds.swap(it->second);
  }
  for (int fd : fds) Close(fd);
}

namespace {

// Classifies an operation's failure: a status from the store (the frame
// exchange completed) leaves the connection usable; a transport failure
// does not.
bool StoreAnswered(const absl::Status& s) {
  return s.code() != absl::StatusCode::kUnavailable &&
         s.code() != absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

bool TcpDataClient::Retry(bool reused, bool answered, const absl::Status& s) {
  return reused && !answered && s.code() == absl::StatusCode::kUnavailable;
}

absl::Status TcpDataClient::Read(const std::string& address, uint32_t segment_id, uint64_t offset,
                                 uint64_t length, char* dst, uint64_t deadline_ms,
                                 absl::string_view read_credential) {
  for (bool first = true;; first = false) {
    bool reused = false, answered = false;
    absl::Status s = ReadOnce(address, segment_id, offset, length, dst, deadline_ms,
                              read_credential, first ? &reused : nullptr, &answered);
    if (!Retry(reused, answered, s)) return s;
  }
}

absl::Status TcpDataClient::ReadOnce(const std::string& address, uint32_t segment_id,
                                     uint64_t offset, uint64_t length, char* dst,
                                     uint64_t deadline_ms, absl::string_view read_credential,
                                     bool* reused, bool* answered) {
  uint64_t left = 0;
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) return s;
  absl::StatusOr<int> fd = Acquire(address, deadline_ms, reused);
  if (!fd.ok()) return WithPeer(fd.status(), address);
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) {
    Release(address, *fd, true);
    return s;
  }
  ArmTimeout(*fd, left);
  wire::Header req;
  req.op = wire::Op::kRead;
  {
    MutexLock lock(&mu_);
    req.request_id = next_request_id_++;
  }
  req.segment_id = segment_id;
  req.offset = offset;
  req.length = length;
  req.extra_len = static_cast<uint32_t>(read_credential.size());
  struct iovec rest[1] = {{const_cast<char*>(read_credential.data()), read_credential.size()}};
  wire::Header resp;
  SessionOf(*fd)->ahead.Expect(dst, length);  // the block follows the answer's header
  absl::Status s = Exchange(*fd, req, rest, read_credential.empty() ? 0 : 1, &resp, answered);
  if (s.ok() && resp.length != length) {
    s = absl::UnavailableError("store answered a read with the wrong length");
  }
  if (s.ok()) s = ReadBody(*fd, dst, length);
  Release(address, *fd, s.ok() || StoreAnswered(s));
  return WithPeer(s, address);
}

absl::Status TcpDataClient::Write(const std::string& address, const wire::Grant& grant,
                                  uint32_t segment_id, uint64_t offset, const char* src,
                                  uint64_t length, uint64_t deadline_ms) {
  uint64_t left = 0;
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) return s;
  absl::StatusOr<int> fd = Acquire(address, deadline_ms);
  if (!fd.ok()) return WithPeer(fd.status(), address);
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) {
    Release(address, *fd, true);
    return s;
  }
  ArmTimeout(*fd, left);
  std::string extra = wire::EncodeGrant(grant);
  wire::Header req;
  req.op = wire::Op::kWrite;
  {
    MutexLock lock(&mu_);
    req.request_id = next_request_id_++;
  }
  req.segment_id = segment_id;
  req.offset = offset;
  req.length = length;
  req.extra_len = static_cast<uint32_t>(extra.size());
  struct iovec rest[2] = {{extra.data(), extra.size()}, {const_cast<char*>(src), length}};
  wire::Header resp;
  absl::Status s = Exchange(*fd, req, rest, 2, &resp);
  // A rejected write makes the store close the connection.
  Release(address, *fd, s.ok());
  return WithPeer(s, address);
}

absl::Status TcpDataClient::ReadKey(const std::string& address, absl::string_view key,
                                    uint64_t length, char* dst, uint64_t deadline_ms,
                                    uint64_t generation, absl::string_view read_grant) {
  return KeyOp(address, key, length, generation, dst, deadline_ms, read_grant, [] {});
}

absl::Status TcpDataClient::CheckKey(const std::string& address, absl::string_view key,
                                     uint64_t length, uint64_t generation, uint64_t deadline_ms,
                                     absl::string_view read_grant,
                                     std::optional<wire::KeyRange> at) {
  return KeyOp(
      address, key, length, generation, nullptr, deadline_ms, read_grant, [] {},
      at.has_value() ? &*at : nullptr);
}

absl::Status TcpDataClient::CheckKeyWhile(const std::string& address, absl::string_view key,
                                          uint64_t length, uint64_t generation,
                                          uint64_t deadline_ms, absl::string_view read_grant,
                                          absl::FunctionRef<void()> meanwhile,
                                          std::optional<wire::KeyRange> at) {
  return KeyOp(address, key, length, generation, nullptr, deadline_ms, read_grant, meanwhile,
               at.has_value() ? &*at : nullptr);
}

absl::Status TcpDataClient::KeyOp(const std::string& address, absl::string_view key,
                                  uint64_t length, uint64_t generation, char* dst,
                                  uint64_t deadline_ms, absl::string_view read_grant,
                                  absl::FunctionRef<void()> meanwhile, const wire::KeyRange* at) {
  // Runs `meanwhile` once: at its place in the first attempt, or on the
  // way out of an early return.
  struct Once {
    absl::FunctionRef<void()> fn;
    bool ran = false;
    void Run() {
      if (ran) return;
      ran = true;
      fn();
    }
    ~Once() { Run(); }
  } once{meanwhile};
  for (bool first = true;; first = false) {
    bool reused = false, answered = false;
    absl::Status s = KeyOpOnce(
        address, key, length, generation, dst, deadline_ms, read_grant, [&once] { once.Run(); }, at,
        first ? &reused : nullptr, &answered);
    if (!Retry(reused, answered, s)) return s;
  }
}

absl::Status TcpDataClient::KeyOpOnce(const std::string& address, absl::string_view key,
                                      uint64_t length, uint64_t generation, char* dst,
                                      uint64_t deadline_ms, absl::string_view read_grant,
                                      absl::FunctionRef<void()> meanwhile, const wire::KeyRange* at,
                                      bool* reused, bool* answered) {
  uint64_t left = 0;
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) return s;
  absl::StatusOr<int> fd = Acquire(address, deadline_ms, reused);
  if (!fd.ok()) return WithPeer(fd.status(), address);
  ArmTimeout(*fd, left);
  wire::Header req;
  req.op = wire::Op::kReadKey;
  {
    MutexLock lock(&mu_);
    req.request_id = next_request_id_++;
  }
  req.length = length;
  req.offset = generation;
  req.segment_id = dst == nullptr ? wire::kReadKeyCheckOnly : 0;
  if (!read_grant.empty()) req.segment_id |= wire::kReadKeyGranted;
  const std::string range = at == nullptr ? std::string() : wire::EncodeKeyRange(*at);
  if (at != nullptr) req.segment_id |= wire::kReadKeyAtRange;
  req.extra_len = static_cast<uint32_t>(read_grant.size() + key.size() + range.size());
  struct iovec rest[3] = {{const_cast<char*>(read_grant.data()), read_grant.size()},
                          {const_cast<char*>(key.data()), key.size()},
                          {const_cast<char*>(range.data()), range.size()}};
  wire::Header resp;
  absl::Status s = wire::SendFrame(*fd, SessionOf(*fd), req, rest, 3);
  meanwhile();
  // The wait for the answer gets what is left of the deadline after
  // `meanwhile`.
  if (s.ok()) s = TimeLeft(deadline_ms, &left);
  if (s.ok()) {
    ArmTimeout(*fd, left);
    if (dst != nullptr) SessionOf(*fd)->ahead.Expect(dst, length);
    s = Receive(*fd, req, &resp, answered);
  }
  const uint64_t want = dst == nullptr ? 0 : length;
  if (s.ok() && resp.length != want) {
    s = absl::UnavailableError("store answered a key read with the wrong length");
  }
  if (s.ok() && dst != nullptr) s = ReadBody(*fd, dst, length);
  Release(address, *fd, s.ok() || StoreAnswered(s));
  return WithPeer(s, address);
}

absl::StatusOr<int> TcpDataClient::StartPipeline(const std::string& address, size_t n,
                                                 uint64_t deadline_ms,
                                                 std::vector<wire::Header>* requests,
                                                 std::vector<absl::Status>* statuses) {
  statuses->assign(n, absl::OkStatus());
  if (n == 0) return absl::InvalidArgumentError("no requests");
  uint64_t left = 0;
  absl::Status s = TimeLeft(deadline_ms, &left);
  absl::StatusOr<int> fd = s.ok() ? Acquire(address, deadline_ms) : s;
  if (fd.ok()) {
    s = TimeLeft(deadline_ms, &left);
    if (!s.ok()) {
      Release(address, *fd, true);
      fd = s;
    }
  }
  if (!fd.ok()) {
    for (absl::Status& st : *statuses) st = WithPeer(fd.status(), address);
    return fd.status();
  }
  ArmTimeout(*fd, left);
  requests->assign(n, wire::Header());
  MutexLock lock(&mu_);
  for (wire::Header& h : *requests) h.request_id = next_request_id_++;
  return fd;
}

void TcpDataClient::ReadMany(const std::string& address, absl::Span<const ReadRequest> reads,
                             uint64_t deadline_ms, std::vector<absl::Status>* statuses) {
  std::vector<wire::Header> requests;
  absl::StatusOr<int> fd = StartPipeline(address, reads.size(), deadline_ms, &requests, statuses);
  if (!fd.ok()) return;
  absl::Status failed;
  // Every request first, in one write: the store answers them in order.
  wire::Session* session = SessionOf(*fd);
  wire::FrameMac* mac = &session->send;
  std::string heads;
  for (size_t i = 0; i < reads.size(); ++i) {
    wire::Header& req = requests[i];
    req.op = wire::Op::kRead;
    req.segment_id = reads[i].segment_id;
    req.offset = reads[i].offset;
    req.length = reads[i].length;
    absl::string_view credential = reads[i].read_credential;
    req.extra_len = static_cast<uint32_t>(credential.size());
    char head[wire::kHeaderBytes];
    wire::EncodeHeader(req, head);
    mac->Begin(req.op);  // the tag covers the header and the read credential
    mac->Add(head, sizeof(head));
    mac->Add(credential.data(), credential.size());
    heads.append(head, sizeof(head));
    heads.append(credential.data(), credential.size());
    heads.append(mac->Finish());  // empty without a session
  }
  struct iovec all = {heads.data(), heads.size()};
  failed = wire::StreamWritev(*fd, session, &all, 1);
  size_t done = 0;
  for (; done < reads.size() && failed.ok(); ++done) {
    wire::Header resp;
    absl::Status s = Receive(*fd, requests[done], &resp);
    if (s.ok() && resp.length != reads[done].length) {
      s = absl::UnavailableError("store answered a read with the wrong length");
    }
    if (s.ok()) s = ReadBody(*fd, reads[done].dst, reads[done].length);
    // A status from the store keeps the stream in step; anything else
    // fails this read and every one after it.
    if (!s.ok() && !StoreAnswered(s)) {
      failed = s;
      break;
    }
    (*statuses)[done] = WithPeer(s, address);
  }
  for (size_t i = done; i < reads.size(); ++i) (*statuses)[i] = WithPeer(failed, address);
  Release(address, *fd, failed.ok());
}

void TcpDataClient::WriteMany(const std::string& address, absl::Span<const WriteRequest> writes,
                              uint64_t deadline_ms, std::vector<absl::Status>* statuses) {
  std::vector<wire::Header> requests;
  absl::StatusOr<int> fd = StartPipeline(address, writes.size(), deadline_ms, &requests, statuses);
  if (!fd.ok()) return;
  absl::Status failed;
  // Every frame first, then the answers in order. The store closes the
  // connection after refusing a write, so the frames after it are lost.
  size_t sent = 0;
  for (; sent < writes.size() && failed.ok(); ++sent) {
    const WriteRequest& w = writes[sent];
    wire::Header& req = requests[sent];
    std::string extra = wire::EncodeGrant(*w.grant);
    req.op = wire::Op::kWrite;
    req.segment_id = w.segment_id;
    req.offset = w.offset;
    req.length = w.length;
    req.extra_len = static_cast<uint32_t>(extra.size());
    struct iovec rest[2] = {{extra.data(), extra.size()}, {const_cast<char*>(w.src), w.length}};
    failed = wire::SendFrame(*fd, SessionOf(*fd), req, rest, 2);
  }
  size_t answered = 0;
  bool clean = failed.ok();
  for (; answered < writes.size(); ++answered) {
    wire::Header resp;
    absl::Status s = Receive(*fd, requests[answered], &resp);
    if (!StoreAnswered(s)) break;
    (*statuses)[answered] = WithPeer(s, address);
    if (!s.ok()) {
      clean = false;  // the store closes the connection after a refusal
      ++answered;
      break;
    }
  }
  Release(address, *fd, clean && answered == writes.size());
  // Writes that got no answer are done one at a time, each getting its own
  // status (a refused write before them cost them their connection).
  for (size_t i = answered; i < writes.size(); ++i) {
    const WriteRequest& w = writes[i];
    (*statuses)[i] = Write(address, *w.grant, w.segment_id, w.offset, w.src, w.length, deadline_ms);
  }
}

absl::StatusOr<int> TcpDataClient::Dial(const std::string& address, uint64_t deadline_ms) {
  int fd = -1;
  if (absl::Status s = Connect(address, deadline_ms, &fd); !s.ok()) return WithPeer(s, address);
  return fd;
}

absl::StatusOr<std::string> TcpDataClient::RdmaConnect(int fd, uint32_t segment_id,
                                                       absl::string_view local_info,
                                                       absl::string_view credential,
                                                       uint64_t deadline_ms) {
  uint64_t left = 0;
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) return s;
  ArmTimeout(fd, left);
  wire::Header req;
  req.op = wire::Op::kRdmaConnect;
  {
    MutexLock lock(&mu_);
    req.request_id = next_request_id_++;
  }
  req.segment_id = segment_id;
  req.extra_len = static_cast<uint32_t>(local_info.size() + credential.size());
  struct iovec rest[2] = {{const_cast<char*>(local_info.data()), local_info.size()},
                          {const_cast<char*>(credential.data()), credential.size()}};
  wire::Header resp;
  if (absl::Status s = Exchange(fd, req, rest, 2, &resp); !s.ok()) return s;
  if (resp.length > wire::kExtraBytesMax) {
    return absl::UnavailableError("store answered RDMA_CONNECT with an oversized payload");
  }
  std::string remote(resp.length, '\0');
  if (absl::Status s = ReadBody(fd, remote.data(), remote.size()); !s.ok()) return s;
  return remote;
}

absl::Status TcpDataClient::RdmaPull(int fd, uint32_t segment_id, uint64_t offset, uint64_t length,
                                     const wire::RdmaSource& source, absl::string_view grant,
                                     uint64_t deadline_ms) {
  uint64_t left = 0;
  if (absl::Status s = TimeLeft(deadline_ms, &left); !s.ok()) return s;
  ArmTimeout(fd, left);
  std::string extra = wire::EncodeRdmaSource(source);
  extra.append(grant.data(), grant.size());
  wire::Header req;
  req.op = wire::Op::kRdmaPull;
  {
    MutexLock lock(&mu_);
    req.request_id = next_request_id_++;
  }
  req.segment_id = segment_id;
  req.offset = offset;
  req.length = length;
  req.extra_len = static_cast<uint32_t>(extra.size());
  struct iovec rest[1] = {{extra.data(), extra.size()}};
  wire::Header resp;
  if (absl::Status s = Exchange(fd, req, rest, 1, &resp); !s.ok()) return s;
  if (resp.length != 0) return absl::UnavailableError("store answered RDMA_PULL with a payload");
  return absl::OkStatus();
}

absl::Status TcpDataClient::Ping(const std::string& address, uint64_t deadline_ms) {
  absl::StatusOr<int> fd = Acquire(address, deadline_ms);
  if (!fd.ok()) return WithPeer(fd.status(), address);
  uint64_t left = 0;
  absl::Status s = TimeLeft(deadline_ms, &left);
  if (s.ok()) {
    ArmTimeout(*fd, left);
    wire::Header req;
    req.op = wire::Op::kPing;
    wire::Header resp;
    s = Exchange(*fd, req, nullptr, 0, &resp);
  }
  Release(address, *fd, s.ok());
  return WithPeer(s, address);
}

}  // namespace shelf::transport
