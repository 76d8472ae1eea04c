// The data-plane session (docs/wire.md, "Handshake" and "Frame tags"):
// what both ends of a TCP data-plane connection compute in the handshake,
// and the tag that authenticates every frame after it.
//
// The handshake proves both ends: the client's AUTH carries its own nonce
// and a MAC over both nonces; the store's answer carries its node id, its
// incarnation and a proof over both nonces and those. Both then derive two
// session keys (one per direction) with HKDF-SHA256 from the cluster secret,
// salted with both nonces and bound to the node id and incarnation. Every
// later frame ends in a 16-byte tag: ChaCha20-Poly1305 with no plaintext
// (a Poly1305 MAC under a one-time key) under its direction's key, with the
// frame's sequence number in that direction as the nonce. By default the
// tag covers the frame's header and extra section (what the frame asks or
// answers, and the grant), not its payload; with payload tags (the store's
// --session-tag-payload, or a client asking for them in AUTH) it covers the
// payload too. An RDMA_CONNECT payload (connection info) is always covered.
// A relay that forwarded the handshake has no key: a frame of its own, or
// one replayed, dropped, reordered or with another header, fails its tag and
// the connection closes.
//
// Without a secret (an open cluster) there is nothing to key a MAC with:
// proofs and tags are empty and frames carry none.
//
//   wire::Session s;  // client side, after TcpConnect
//   RETURN_IF_ERROR(wire::ClientHandshake(fd, secret, &s));
//   RETURN_IF_ERROR(wire::SendFrame(fd, &s.send, request, rest, n));
//
// A FrameMac is used by one thread at a time (a connection is borrowed by
// one operation at a time).
#ifndef SHELF_TRANSPORT_SESSION_H_
#define SHELF_TRANSPORT_SESSION_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "transport/wire.h"

namespace shelf::transport::wire {

struct Session;
inline constexpr size_t kTagBytes = 16;
// The store's AUTH answer: proof (32 bytes, 0 without a secret),
// incarnation (8), then the node id.
inline constexpr size_t kNodeIdBytesMax = 256;
// AUTH flag (in segment_id): from the client, "tag payloads too, please";
// from the store, "tags cover payloads on this connection" (its proof and
// the session keys cover the answer's flags).
inline constexpr uint32_t kAuthTagPayload = 1;

// The client's AUTH MAC: HMAC-SHA256(secret, "shelf-auth-v2" || Ns || Nc);
// empty without a secret.
std::string ClientProof(absl::string_view secret, absl::string_view store_nonce,
                        absl::string_view client_nonce);
// The store's proof: HMAC-SHA256(secret, "shelf-store-v2" || Ns || Nc ||
// incarnation (u64 LE) || flags (u32 LE) || node_id); empty without a
// secret. `flags`: the answer's AUTH flags.
std::string StoreProof(absl::string_view secret, absl::string_view store_nonce,
                       absl::string_view client_nonce, absl::string_view node_id,
                       uint64_t incarnation, uint32_t flags);

// The tags of one direction of one session.
class FrameMac {
 public:
  FrameMac();  // inactive: no tags
  ~FrameMac();
  FrameMac(FrameMac&& other) noexcept;
  FrameMac& operator=(FrameMac&& other) noexcept;
  // Active, keyed with a 32-byte key.
  // Active, keyed with a 32-byte key; `payload`: tags cover payloads.
  FrameMac(absl::string_view key, bool payload);
  bool active() const { return ctx_ != nullptr; }
  bool payload() const { return payload_; }
  // Starts the next frame's tag (`op`: the frame's opcode); Add its header
  // and extra bytes, then AddPayload its payload, in order; Finish returns
  // it (kTagBytes) and moves to the next sequence number. AddPayload adds
  // nothing when this frame's tag does not cover its payload.
  void Begin(Op op);
  void Add(const void* data, size_t size);
  void AddPayload(const void* data, size_t size) {
    if (payload_now_) Add(data, size);
  }
  std::string Finish();
  // Reads the frame's tag from fd (through `via`'s TLS, if any) and
  // compares it with Finish(), in constant time: PERMISSION_DENIED on a
  // mismatch (the caller closes the connection). OK without reading when
  // inactive.
  absl::Status ReadAndCheck(int fd, const Session* via = nullptr);
  uint64_t sequence() const { return seq_; }

 private:
  void* ctx_ = nullptr;  // EVP_CIPHER_CTX of ChaCha20-Poly1305, keyed
  uint64_t seq_ = 0;
  bool payload_ = false;      // tags cover payloads
  bool payload_now_ = false;  // this frame's tag covers its payload
};

// What a plain TCP data connection read from its socket beyond what was
// asked for, so that a frame's header, extra bytes and tag come in one
// system call, and a payload's tail and the tag after it in one more
// (StreamRead). With Expect(), the next read of a header also lands the
// block after it in the block's destination: the first kLandScratchBytes
// in the buffer (an error's text, read where a block was expected, stays
// there and the destination is not touched), the rest in place. A whole
// small answer is then one receive and one copy of at most 4 KiB.
class ReadAhead {
 public:
  static constexpr size_t kLandScratchBytes = 4 << 10;

  // Bytes read and not yet consumed, wherever they sit.
  size_t pending() const {
    return (end_ - begin_) + landed_n_ + (landed_n_ > 0 ? back_end_ - back_begin_ : 0);
  }
  // The next header read puts what follows it (up to n bytes) at dst, as
  // above.
  void Expect(char* dst, size_t n) {
    expect_ = dst;
    expect_n_ = n;
  }
  // Reads exactly n bytes into buf: first what was read ahead, then from
  // the socket, reading ahead as far as the buffer allows.
  absl::Status Read(int fd, char* buf, size_t n);
  // Takes up to n bytes that were read ahead (none from the socket);
  // returns how many.
  size_t Take(char* buf, size_t n);

 private:
  // Moves the landed bytes, and the buffer's bytes after them, into the
  // buffer after its bytes before them: for a read that is not the block's.
  void Unland();

  // The stream's next bytes: data_[begin_, end_), then (when landed_n_ >
  // 0) landed_n_ bytes at landed_, then data_[back_begin_, back_end_).
  std::string data_;  // the buffer; sized on first use
  size_t begin_ = 0, end_ = 0;
  char* landed_ = nullptr;
  size_t landed_n_ = 0;
  size_t back_begin_ = 0, back_end_ = 0;
  char* expect_ = nullptr;
  size_t expect_n_ = 0;
};

// Both directions of a session, and who the store said it is.
struct Session {
  FrameMac send;
  FrameMac recv;
  std::string node_id;  // the store's, as it proved
  uint64_t incarnation = 0;
  // The connection's TLS (transport/data_tls.h), when it has one: every
  // byte after the TLS handshake goes through it.
  std::shared_ptr<void> tls;
  // The socket's SO_RCVTIMEO and SO_SNDTIMEO in ms as TcpDataClient last
  // set them (TcpDataClient::ArmTimeout); 0: not known.
  uint64_t armed_timeout_ms = 0;
  // Plain TCP data connections read ahead (never a unix socket: a read
  // ahead would drop the descriptors a message carries). Every read of the
  // connection then goes through StreamRead or StreamReadBefore.
  bool read_ahead = false;
  mutable ReadAhead ahead;
};

// Fills `client` and `store` with the session's FrameMacs (client sends on
// client_to_store). Inactive ones without a secret. `flags`: the store's
// AUTH flags (kAuthTagPayload), in the key derivation too.
void DeriveSession(absl::string_view secret, absl::string_view store_nonce,
                   absl::string_view client_nonce, absl::string_view node_id, uint64_t incarnation,
                   uint32_t flags, Session* client, Session* store);

// The client's side of the handshake on a connected socket (its timeouts
// set by the caller; through session->tls when set): reads HELLO, sends AUTH, checks the store's
// answer and proof. UNAUTHENTICATED when the store refuses the secret or its proof is wrong;
// FAILED_PRECONDITION when the store speaks another protocol version; UNAVAILABLE when it is not a
// Shelf store or the connection fails. `tag_payload`: ask for tags over
// payloads; UNAUTHENTICATED if the store's (proven) answer does not grant
// them. Either way the session follows the store's answer.
absl::Status ClientHandshake(int fd, absl::string_view secret, Session* session,
                             bool tag_payload = false);

// Reads n payload bytes into dst, adding them to the session's receiving
// tag as they come (while they are in cache) when it covers them. With a
// `deadline_ms` (MonoMs; 0: none), no byte is taken after it, however
// slowly the peer sends (DEADLINE_EXCEEDED), and the socket's receive
// timeout is left changed: the caller sets it again.
absl::Status ReadPayload(int fd, Session* s, char* dst, uint64_t n, uint64_t deadline_ms = 0);

// Encodes `h`, tags it with `rest` (h.extra_len bytes of extra, then the
// payload, which the tag covers as the session says) under the session's
// sending key, and writes all of it. At most 4 entries in `rest`.
absl::Status SendFrame(int fd, Session* s, const Header& h, const struct iovec* rest, int restcnt);

}  // namespace shelf::transport::wire

#endif  // SHELF_TRANSPORT_SESSION_H_
