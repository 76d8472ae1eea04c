#include "transport/session.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/errno_text.h"
#include "common/hmac.h"
#include "common/net.h"
#include "transport/data_tls.h"

namespace shelf::transport::wire {
namespace {

std::string U64(uint64_t v) {
  std::string out(8, '\0');
  absl::little_endian::Store64(out.data(), v);
  return out;
}

std::string U32(uint32_t v) {
  std::string out(4, '\0');
  absl::little_endian::Store32(out.data(), v);
  return out;
}

// HKDF-SHA256 (RFC 5869) of `ikm` with `salt` and `info`, `n` bytes.
std::string Hkdf(absl::string_view ikm, absl::string_view salt, absl::string_view info, size_t n) {
  std::string out(n, '\0');
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  size_t len = n;
  bool ok = ctx != nullptr && EVP_PKEY_derive_init(ctx) > 0 &&
            EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) > 0 &&
            EVP_PKEY_CTX_set1_hkdf_salt(ctx, reinterpret_cast<const unsigned char*>(salt.data()),
                                        static_cast<int>(salt.size())) > 0 &&
            EVP_PKEY_CTX_set1_hkdf_key(ctx, reinterpret_cast<const unsigned char*>(ikm.data()),
                                       static_cast<int>(ikm.size())) > 0 &&
            EVP_PKEY_CTX_add1_hkdf_info(ctx, reinterpret_cast<const unsigned char*>(info.data()),
                                        static_cast<int>(info.size())) > 0 &&
            EVP_PKEY_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), &len) > 0 &&
            len == n;
  EVP_PKEY_CTX_free(ctx);
  SHELF_CHECK(ok) << "HKDF-SHA256 failed";
  return out;
}

EVP_CIPHER_CTX* Ctx(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }

}  // namespace

std::string ClientProof(absl::string_view secret, absl::string_view store_nonce,
                        absl::string_view client_nonce) {
  if (secret.empty()) return std::string();
  return HmacSha256(secret, absl::StrCat("shelf-auth-v2", store_nonce, client_nonce));
}

std::string StoreProof(absl::string_view secret, absl::string_view store_nonce,
                       absl::string_view client_nonce, absl::string_view node_id,
                       uint64_t incarnation, uint32_t flags) {
  if (secret.empty()) return std::string();
  return HmacSha256(secret, absl::StrCat("shelf-store-v2", store_nonce, client_nonce,
                                         U64(incarnation), U32(flags), node_id));
}

FrameMac::FrameMac() = default;

FrameMac::FrameMac(absl::string_view key, bool payload) : payload_(payload) {
  SHELF_CHECK(key.size() == 32) << "a frame key is 32 bytes";
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  SHELF_CHECK(ctx != nullptr &&
              EVP_EncryptInit_ex(ctx, EVP_chacha20_poly1305(), nullptr,
                                 reinterpret_cast<const unsigned char*>(key.data()), nullptr) > 0)
      << "ChaCha20-Poly1305 unavailable";
  ctx_ = ctx;
}

FrameMac::~FrameMac() {
  if (ctx_ != nullptr) EVP_CIPHER_CTX_free(Ctx(ctx_));
}

FrameMac::FrameMac(FrameMac&& other) noexcept
    : ctx_(other.ctx_), seq_(other.seq_), payload_(other.payload_) {
  other.ctx_ = nullptr;
}

FrameMac& FrameMac::operator=(FrameMac&& other) noexcept {
  if (this != &other) {
    if (ctx_ != nullptr) EVP_CIPHER_CTX_free(Ctx(ctx_));
    ctx_ = other.ctx_;
    seq_ = other.seq_;
    payload_ = other.payload_;
    other.ctx_ = nullptr;
  }
  return *this;
}

void FrameMac::Begin(Op op) {
  // An RDMA_CONNECT answer's payload is connection info, not block bytes:
  // always covered.
  payload_now_ = payload_ || op == Op::kRdmaConnect;
  if (ctx_ == nullptr) return;
  // The nonce is the sequence number: unique per key, as each direction
  // has its own key.
  unsigned char iv[12] = {0};
  absl::little_endian::Store64(iv + 4, seq_);
  SHELF_CHECK(EVP_EncryptInit_ex(Ctx(ctx_), nullptr, nullptr, nullptr, iv) > 0);
}

void FrameMac::Add(const void* data, size_t size) {
  if (ctx_ == nullptr) return;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    int chunk = size > (1u << 30) ? (1 << 30) : static_cast<int>(size);
    int outl = 0;
    SHELF_CHECK(EVP_EncryptUpdate(Ctx(ctx_), nullptr, &outl, p, chunk) > 0);
    p += chunk;
    size -= static_cast<size_t>(chunk);
  }
}

std::string FrameMac::Finish() {
  if (ctx_ == nullptr) return std::string();
  unsigned char end[16];
  int outl = 0;
  std::string tag(kTagBytes, '\0');
  SHELF_CHECK(EVP_EncryptFinal_ex(Ctx(ctx_), end, &outl) > 0 &&
              EVP_CIPHER_CTX_ctrl(Ctx(ctx_), EVP_CTRL_AEAD_GET_TAG, static_cast<int>(kTagBytes),
                                  tag.data()) > 0);
  ++seq_;
  return tag;
}

absl::Status FrameMac::ReadAndCheck(int fd, const Session* via) {
  if (ctx_ == nullptr) return absl::OkStatus();
  char got[kTagBytes];
  if (absl::Status s = StreamRead(fd, via, got, sizeof(got)); !s.ok()) return s;
  if (!ConstantTimeEqual(absl::string_view(got, sizeof(got)), Finish())) {
    return absl::PermissionDeniedError(
        "data-plane frame tag does not verify (not this session's key, or replayed, reordered "
        "or altered)");
  }
  return absl::OkStatus();
}

void DeriveSession(absl::string_view secret, absl::string_view store_nonce,
                   absl::string_view client_nonce, absl::string_view node_id, uint64_t incarnation,
                   uint32_t flags, Session* client, Session* store) {
  for (Session* s : {client, store}) {
    if (s == nullptr) continue;
    s->node_id = std::string(node_id);
    s->incarnation = incarnation;
  }
  if (secret.empty()) return;
  std::string keys =
      Hkdf(secret, absl::StrCat(store_nonce, client_nonce),
           absl::StrCat("shelf-session-v2", U64(incarnation), U32(flags), node_id), 64);
  absl::string_view to_store(keys.data(), 32), to_client(keys.data() + 32, 32);
  const bool payload = (flags & kAuthTagPayload) != 0;
  if (client != nullptr) {
    client->send = FrameMac(to_store, payload);
    client->recv = FrameMac(to_client, payload);
  }
  if (store != nullptr) {
    store->send = FrameMac(to_client, payload);
    store->recv = FrameMac(to_store, payload);
  }
}

absl::Status SendFrame(int fd, Session* s, const Header& h, const struct iovec* rest, int restcnt) {
  FrameMac* mac = &s->send;
  char head[kHeaderBytes];
  EncodeHeader(h, head);
  mac->Begin(h.op);
  mac->Add(head, sizeof(head));
  uint64_t extra_left = h.extra_len;  // the first bytes of `rest`: always covered
  // A large payload goes out a chunk at a time, each tagged just before it
  // is written: the peer reads (and tags) one chunk while this end tags
  // the next, instead of waiting for a whole pass first.
  constexpr size_t kChunk = 256 << 10;
  struct iovec out[8];
  int n = 0;
  out[n++] = {head, sizeof(head)};
  for (int i = 0; i < restcnt && i < 4; ++i) {
    char* p = static_cast<char*>(rest[i].iov_base);
    size_t left = rest[i].iov_len;
    while (left > 0) {
      size_t chunk = left < kChunk ? left : kChunk;
      const size_t meta = extra_left < chunk ? extra_left : chunk;
      mac->Add(p, meta);
      mac->AddPayload(p + meta, chunk - meta);
      extra_left -= meta;
      out[n++] = {p, chunk};
      p += chunk;
      left -= chunk;
      if (left > 0 || n >= 6) {
        if (absl::Status st = StreamWritev(fd, s, out, n); !st.ok()) return st;
        n = 0;
      }
    }
  }
  std::string tag = mac->Finish();
  out[n++] = {tag.data(), tag.size()};
  return StreamWritev(fd, s, out, n);
}

absl::Status ReadPayload(int fd, Session* via, char* dst, uint64_t n, uint64_t deadline_ms) {
  constexpr uint64_t kChunk = 256 << 10;
  while (n > 0) {
    uint64_t chunk = n < kChunk ? n : kChunk;
    absl::Status s = deadline_ms == 0 ? StreamRead(fd, via, dst, chunk)
                                      : StreamReadBefore(fd, via, dst, chunk, deadline_ms);
    if (!s.ok()) return s;
    via->recv.AddPayload(dst, chunk);
    dst += chunk;
    n -= chunk;
  }
  return absl::OkStatus();
}

absl::Status ClientHandshake(int fd, absl::string_view secret, Session* session, bool tag_payload) {
  char head[kHeaderBytes];
  if (absl::Status s = StreamRead(fd, session, head, sizeof(head)); !s.ok()) return s;
  if (absl::little_endian::Load32(head) == kMagic && static_cast<uint8_t>(head[4]) != kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the store speaks data-plane protocol version ", static_cast<uint8_t>(head[4]),
                     ", this client version ", kVersion, ": run the same Shelf release on both"));
  }
  absl::StatusOr<Header> hello = DecodeHeader(head);
  if (!hello.ok() || hello->op != Op::kHello || hello->extra_len != kNonceBytes) {
    return absl::UnavailableError("not a Shelf store (no HELLO)");
  }
  std::string store_nonce(kNonceBytes, '\0');
  if (absl::Status s = StreamRead(fd, session, store_nonce.data(), store_nonce.size()); !s.ok())
    return s;
  std::string client_nonce = RandomBytes(kNonceBytes);
  std::string extra = client_nonce + ClientProof(secret, store_nonce, client_nonce);
  Header auth;
  auth.op = Op::kAuth;
  auth.extra_len = static_cast<uint32_t>(extra.size());
  auth.segment_id = tag_payload ? kAuthTagPayload : 0;
  EncodeHeader(auth, head);
  struct iovec out[2] = {{head, sizeof(head)}, {extra.data(), extra.size()}};
  if (absl::Status s = StreamWritev(fd, session, out, 2); !s.ok()) return s;
  if (absl::Status s = StreamRead(fd, session, head, sizeof(head)); !s.ok()) return s;
  absl::StatusOr<Header> reply = DecodeHeader(head);
  if (!reply.ok() || reply->op != Op::kAuth || reply->length != 0) {
    return absl::UnavailableError("the store's AUTH answer is malformed");
  }
  std::string answer(reply->extra_len, '\0');
  if (absl::Status s = StreamRead(fd, session, answer.data(), answer.size()); !s.ok()) return s;
  if (reply->status != 0) return absl::Status(static_cast<absl::StatusCode>(reply->status), answer);
  const size_t proof_bytes = secret.empty() ? 0 : kMacBytes;
  if (answer.size() < proof_bytes + 8 || answer.size() > proof_bytes + 8 + kNodeIdBytesMax) {
    return absl::UnauthenticatedError(
        "the store did not prove the cluster secret (its AUTH answer is of the wrong size)");
  }
  uint64_t incarnation = absl::little_endian::Load64(answer.data() + proof_bytes);
  absl::string_view node_id = absl::string_view(answer).substr(proof_bytes + 8);
  if (!ConstantTimeEqual(
          answer.substr(0, proof_bytes),
          StoreProof(secret, store_nonce, client_nonce, node_id, incarnation, reply->segment_id))) {
    return absl::UnauthenticatedError(
        "the store's handshake proof is wrong: it does not hold this cluster's secret");
  }
  if (tag_payload && !secret.empty() && (reply->segment_id & kAuthTagPayload) == 0) {
    return absl::UnauthenticatedError(
        "the store did not agree to session tags over payloads, which this client asks for");
  }
  DeriveSession(secret, store_nonce, client_nonce, node_id, incarnation, reply->segment_id, session,
                nullptr);
  return absl::OkStatus();
}

namespace {

// What one read of a plain connection may take beyond what was asked for:
// a frame's header, extra bytes and tag with room to spare, and the start
// of a pipelined client's next frame.
constexpr size_t kReadAheadBytes = 16 << 10;

}  // namespace

void ReadAhead::Unland() {
  if (landed_n_ == 0) return;
  std::string joined(data_, begin_, end_ - begin_);
  joined.append(landed_, landed_n_);
  joined.append(data_, back_begin_, back_end_ - back_begin_);
  data_ = std::move(joined);
  begin_ = 0;
  end_ = data_.size();
  landed_ = nullptr;
  landed_n_ = 0;
}

size_t ReadAhead::Take(char* buf, size_t n) {
  if (n == 0) return 0;
  // The block's own read reaches the landed bytes exactly where they lie;
  // any other read takes them from the buffer.
  if (landed_n_ > 0 && buf + (end_ - begin_) != landed_) Unland();
  size_t took = 0;
  if (landed_n_ > 0) {
    const size_t front = std::min(n, end_ - begin_);
    std::memcpy(buf, data_.data() + begin_, front);
    begin_ += front;
    took = front;
    if (took == n) return took;
    const size_t in_place = std::min(n - took, landed_n_);
    landed_ += in_place;
    landed_n_ -= in_place;
    took += in_place;
    if (landed_n_ > 0) return took;
    landed_ = nullptr;
    begin_ = back_begin_;
    end_ = back_end_;
  }
  const size_t from_buffer = std::min(n - took, end_ - begin_);
  std::memcpy(buf + took, data_.data() + begin_, from_buffer);
  begin_ += from_buffer;
  return took + from_buffer;
}

absl::Status ReadAhead::Read(int fd, char* buf, size_t n) {
  char* const expect = expect_;
  const size_t expect_n = expect_n_;
  expect_ = nullptr;  // the hint is for this read alone
  expect_n_ = 0;
  const size_t took = Take(buf, n);
  buf += took;
  n -= took;
  // The block's first bytes go to the buffer's first kLandScratchBytes, the
  // rest to the block's place, then whatever follows to the buffer's rest.
  const size_t scratch = expect == nullptr ? 0 : std::min(expect_n, kLandScratchBytes);
  while (n > 0) {
    // Nothing is left ahead: read what was asked for, then as much more as
    // arrived.
    if (data_.size() < kReadAheadBytes) data_.resize(kReadAheadBytes);
    begin_ = end_ = 0;
    struct iovec iov[4];
    int count = 0;
    iov[count++] = {buf, n};
    if (expect != nullptr) {
      iov[count++] = {data_.data(), scratch};
      if (expect_n > scratch) iov[count++] = {expect + scratch, expect_n - scratch};
      iov[count++] = {data_.data() + scratch, data_.size() - scratch};
    } else {
      iov[count++] = {data_.data(), data_.size()};
    }
    const ssize_t got = readv(fd, iov, count);
    if (got == 0) return absl::UnavailableError("connection closed by peer");
    if (got < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      std::string msg = absl::StrCat("read from peer: ", ErrnoText(e));
      if (e == EAGAIN || e == EWOULDBLOCK) return absl::DeadlineExceededError(msg);
      return absl::UnavailableError(msg);
    }
    size_t more = static_cast<size_t>(got);
    if (more <= n) {
      buf += more;
      n -= more;
      continue;
    }
    more -= n;
    n = 0;
    if (expect == nullptr) {
      end_ = more;
      break;
    }
    const size_t in_scratch = std::min(more, scratch);
    const size_t in_place = std::min(more - in_scratch, expect_n - scratch);
    const size_t after = more - in_scratch - in_place;
    if (in_place == 0) {
      // All in the buffer, in order (anything after the scratch means the
      // block fit in it).
      end_ = in_scratch + after;
    } else {
      end_ = in_scratch;
      landed_ = expect + scratch;
      landed_n_ = in_place;
      back_begin_ = scratch;
      back_end_ = scratch + after;
    }
  }
  return absl::OkStatus();
}

}  // namespace shelf::transport::wire
