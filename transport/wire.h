// The TCP data-plane frame format (docs/wire.md has the byte layout).
//
// Every frame is a fixed 40-byte little-endian header, then `extra_len`
// bytes of opcode-specific metadata, then `payload` bytes (WRITE requests,
// READ responses), then, after the handshake of a cluster with a secret, a
// 16-byte session tag. The server speaks first: a HELLO with a 16-byte
// nonce; the client answers AUTH with its own nonce and a MAC over both; the
// store answers with a proof of its own (transport/session.h).
#ifndef SHELF_TRANSPORT_WIRE_H_
#define SHELF_TRANSPORT_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/hmac.h"
#include "shelf/limits.h"

namespace shelf::transport::wire {

inline constexpr uint32_t kMagic = 0x464C4853;  // "SHLF" on the wire
// 2: mutual handshake, session tags on every frame after it.
inline constexpr uint8_t kVersion = 2;
inline constexpr size_t kHeaderBytes = 40;
inline constexpr uint32_t kExtraBytesMax = 4096;  // grant, key or error text
static_assert(kKeyBytesMax <= kExtraBytesMax, "READ_KEY carries the key in extra");
inline constexpr size_t kNonceBytes = 16;
inline constexpr uint64_t kPayloadBytesMax = 1ull << 32;  // one op moves at most 4 GiB

enum class Op : uint8_t {
  kHello = 1,  // server -> client on accept; extra = nonce
  kAuth = 2,   // client -> server: nonce, mac; server -> client: proof, incarnation, node id
  kRead = 3,   // read [offset, offset+length) of segment_id; extra = read grant + key, or none
  kWrite = 4,  // write; extra = encoded grant; payload = length bytes
  // Read a committed block by key, DRAM first, then SSD; extra = key (or,
  // with kReadKeyGranted, a read grant then the key), offset = expected
  // generation (0: any), segment_id = flags.
  kReadKey = 5,
  kPing = 6,
  // Sets up the RDMA connection of this TCP connection: extra = the
  // client's RDMA connection info; response payload = the store's. The
  // store's queue pair lives as long as the TCP connection.
  kRdmaConnect = 7,
  // A put the store pulls over this connection's queue pair: the store
  // checks the grant for [offset, offset+length) of segment_id, then RDMA
  // READs that many bytes from the client's registered source into it.
  // extra = EncodeRdmaSource | grant; no payload either way.
  kRdmaPull = 8,
};

// RDMA_CONNECT's extra: the client's RDMA connection info (this many
// bytes, rdma::kConnectionInfoBytes), then optionally a read credential
// (a read grant then its key) for the segment, which a store of tenant
// arenas wants before it tells the client that arena's rkey.
inline constexpr size_t kRdmaConnectionInfoBytes = 56;

// The client memory an RDMA_PULL reads from: an address in a region the
// client registered for remote READ, and that region's rkey.
struct RdmaSource {
  uint64_t addr = 0;
  uint32_t rkey = 0;
};
inline constexpr size_t kRdmaSourceBytes = 8 + 4 + 4;  // addr, rkey, reserved 0
std::string EncodeRdmaSource(const RdmaSource& s);
// INVALID_ARGUMENT when `in` is shorter than kRdmaSourceBytes or its
// reserved field is not 0; the grant follows at kRdmaSourceBytes.
absl::StatusOr<RdmaSource> DecodeRdmaSource(absl::string_view in);

// READ_KEY flag (in segment_id): answer whether the store's DRAM record of
// the key has the generation asked, without the bytes.
inline constexpr uint32_t kReadKeyCheckOnly = 1;
// READ_KEY flag (in segment_id): extra is a read credential (below), not
// the bare key.
inline constexpr uint32_t kReadKeyGranted = 2;
// READ_KEY flag (in segment_id), with kReadKeyCheckOnly: extra ends with
// the range the asker copies the block from (EncodeKeyRange), and the
// answer is OK only if the store's DRAM record of the key is at that
// range. A generation alone does not say where the bytes are: a record of
// unknown generation (0) matches any.
inline constexpr uint32_t kReadKeyAtRange = 4;
struct KeyRange {
  uint32_t segment_id = 0;
  uint64_t offset = 0;
};
inline constexpr size_t kKeyRangeBytes = 4 + 8;  // segment id, offset
std::string EncodeKeyRange(const KeyRange& r);
// INVALID_ARGUMENT when `in` is not kKeyRangeBytes long.
absl::StatusOr<KeyRange> DecodeKeyRange(absl::string_view in);

struct Header {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  Op op = Op::kPing;
  uint16_t status = 0;  // responses: absl::StatusCode; requests: 0
  uint64_t request_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;  // payload bytes (READ request: bytes wanted)
  uint32_t segment_id = 0;
  uint32_t extra_len = 0;
};

void EncodeHeader(const Header& h, char out[kHeaderBytes]);
// INVALID_ARGUMENT on a bad magic, version, opcode or oversized extra.
absl::StatusOr<Header> DecodeHeader(const char in[kHeaderBytes]);

// The digest of a key that a write grant names (KeyDigest): the store
// records it for the range the write lands in, and a read by range must
// present a read grant for a key of the same digest (docs/security.md,
// "Grants bound to their blocks").
inline constexpr size_t kKeyDigestBytes = 16;
// The first kKeyDigestBytes of SHA-256(key): a preimage for another
// tenant's key is out of reach, unlike a non-cryptographic hash's.
std::string KeyDigest(absl::string_view key);

// A write grant as carried in a WRITE frame's extra section (100 bytes).
struct Grant {
  uint64_t put_id = 0;
  uint32_t segment_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t expires_unix_ms = 0;
  // The range's allocation on its store: the master numbers every DRAM
  // range it hands out on a store in increasing order, so the store can
  // tell a newer put's grant for a reused range from an older one's.
  uint64_t range_seq = 0;
  std::string key_digest;  // kKeyDigestBytes: KeyDigest of the put's key
  std::string mac;         // 32 bytes
};
inline constexpr size_t kGrantBytes = 8 + 4 + 8 + 8 + 8 + 8 + kKeyDigestBytes + 32;

std::string EncodeGrant(const Grant& g);
absl::StatusOr<Grant> DecodeGrant(absl::string_view in);

// What a grant is bound to besides its own fields: the store it is for (its
// node id and incarnation) and the master term that issued it. The store
// knows all three, so they are not carried. `key` is the store
// incarnation's own grant key, drawn by the master at registration.
struct GrantScope {
  absl::string_view node_id;
  uint64_t incarnation = 0;
  uint64_t term = 0;
};
// HMAC(key, "shelf-grant-v3" || node_id || "|" || incarnation || term || fields).
std::string GrantMac(absl::string_view key, const GrantScope& scope, const Grant& g);
// OK iff the MAC matches, the grant has not expired at `now_unix_ms`, and
// [offset, offset+length) of `segment_id` lies inside the grant.
absl::Status VerifyGrant(absl::string_view key, const GrantScope& scope, const Grant& g,
                         uint32_t segment_id, uint64_t offset, uint64_t length,
                         uint64_t now_unix_ms);
// The same under a prepared key (HmacKey: the hot paths).
std::string GrantMac(const HmacKey& key, const GrantScope& scope, const Grant& g);
absl::Status VerifyGrant(const HmacKey& key, const GrantScope& scope, const Grant& g,
                         uint32_t segment_id, uint64_t offset, uint64_t length,
                         uint64_t now_unix_ms);

// A read grant: lets the holder read the block `key` (READ_KEY) or, for a
// DRAM replica, [offset, offset+length) of `segment_id` (READ) from one
// store incarnation until expires_unix_ms. The master mints one per
// replica of every Lookup and MatchPrefix hit. 60 bytes; on the wire a
// READ or READ_KEY carries the read credential: the grant, then the key.
struct ReadGrant {
  uint32_t segment_id = 0;  // DRAM replica; kReadGrantNoRange for an SSD replica
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t expires_unix_ms = 0;
  std::string mac;  // 32 bytes
};
inline constexpr size_t kReadGrantBytes = 4 + 8 + 8 + 8 + 32;
// The segment id of an SSD replica's grant: it names no DRAM range, so it
// allows READ_KEY of its key and nothing by range (a READ, an arena's
// mapping, an RDMA key), whatever offset and length it carries.
inline constexpr uint32_t kReadGrantNoRange = 0xffffffff;

std::string EncodeReadGrant(const ReadGrant& g);
// EncodeReadGrant of `g` with its ReadGrantMac under `grant_key` (g.mac
// unused), written to `out` (kReadGrantBytes) with no allocation: what
// the master does for every replica of every hit.
void MintReadGrant(const HmacKey& grant_key, uint64_t incarnation, absl::string_view key,
                   const ReadGrant& g, char* out);
// The grant and the key of a read credential (grant || key).
absl::StatusOr<ReadGrant> DecodeReadCredential(absl::string_view in, absl::string_view* key);
// When the read grant that `grant` starts with expires (its
// expires_unix_ms): `grant` is an encoded read grant or a read credential.
// 0 when it is too short to hold one. Reads the field, verifies nothing:
// for a holder planning around the expiry, never for a check.
uint64_t ReadGrantExpiry(absl::string_view grant);
// HMAC(grant key, "R" || incarnation || fields || key). The grant key is
// the store incarnation's own, so it binds the node too; `node_id` is not
// hashed.
std::string ReadGrantMac(absl::string_view grant_key, absl::string_view node_id,
                         uint64_t incarnation, absl::string_view key, const ReadGrant& g);
// OK iff the MAC matches for `key` on this store incarnation and the grant
// has not expired; with `range`, also iff [offset, offset+length) of
// `segment_id` lies inside the granted range. PERMISSION_DENIED otherwise.
absl::Status VerifyReadGrant(absl::string_view grant_key, absl::string_view node_id,
                             uint64_t incarnation, absl::string_view key, const ReadGrant& g,
                             bool range, uint32_t segment_id, uint64_t offset, uint64_t length,
                             uint64_t now_unix_ms);
// The same under a prepared key.
std::string ReadGrantMac(const HmacKey& grant_key, absl::string_view node_id, uint64_t incarnation,
                         absl::string_view key, const ReadGrant& g);
absl::Status VerifyReadGrant(const HmacKey& grant_key, absl::string_view node_id,
                             uint64_t incarnation, absl::string_view key, const ReadGrant& g,
                             bool range, uint32_t segment_id, uint64_t offset, uint64_t length,
                             uint64_t now_unix_ms);

}  // namespace shelf::transport::wire

#endif  // SHELF_TRANSPORT_WIRE_H_
