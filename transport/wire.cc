#include "transport/wire.h"

#include <openssl/sha.h>

#include <algorithm>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/hmac.h"

namespace shelf::transport::wire {
namespace {

void Put16(char* p, uint16_t v) { absl::little_endian::Store16(p, v); }
void Put32(char* p, uint32_t v) { absl::little_endian::Store32(p, v); }
void Put64(char* p, uint64_t v) { absl::little_endian::Store64(p, v); }
uint16_t Get16(const char* p) { return absl::little_endian::Load16(p); }
uint32_t Get32(const char* p) { return absl::little_endian::Load32(p); }
uint64_t Get64(const char* p) { return absl::little_endian::Load64(p); }

}  // namespace

void EncodeHeader(const Header& h, char out[kHeaderBytes]) {
  Put32(out + 0, h.magic);
  out[4] = static_cast<char>(h.version);
  out[5] = static_cast<char>(h.op);
  Put16(out + 6, h.status);
  Put64(out + 8, h.request_id);
  Put64(out + 16, h.offset);
  Put64(out + 24, h.length);
  Put32(out + 32, h.segment_id);
  Put32(out + 36, h.extra_len);
}

absl::StatusOr<Header> DecodeHeader(const char in[kHeaderBytes]) {
  Header h;
  h.magic = Get32(in);
  if (h.magic != kMagic) return absl::InvalidArgumentError("bad frame magic");
  h.version = static_cast<uint8_t>(in[4]);
  if (h.version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported frame version ", h.version));
  }
  uint8_t op = static_cast<uint8_t>(in[5]);
  if (op < static_cast<uint8_t>(Op::kHello) || op > static_cast<uint8_t>(Op::kRdmaPull)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown opcode ", op));
  }
  h.op = static_cast<Op>(op);
  h.status = Get16(in + 6);
  h.request_id = Get64(in + 8);
  h.offset = Get64(in + 16);
  h.length = Get64(in + 24);
  h.segment_id = Get32(in + 32);
  h.extra_len = Get32(in + 36);
  if (h.extra_len > kExtraBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("frame extra of ", h.extra_len, " bytes"));
  }
  if (h.length > kPayloadBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("frame length of ", h.length, " bytes"));
  }
  return h;
}

namespace {

std::string GrantFields(const Grant& g) {
  std::string out(kGrantBytes - kMacBytes, '\0');
  char* p = out.data();
  Put64(p, g.put_id);
  Put32(p + 8, g.segment_id);
  Put64(p + 12, g.offset);
  Put64(p + 20, g.length);
  Put64(p + 28, g.expires_unix_ms);
  Put64(p + 36, g.range_seq);
  std::copy_n(g.key_digest.data(), std::min(g.key_digest.size(), kKeyDigestBytes), p + 44);
  return out;
}

}  // namespace

std::string KeyDigest(absl::string_view key) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), md);
  return std::string(reinterpret_cast<const char*>(md), kKeyDigestBytes);
}

std::string EncodeGrant(const Grant& g) {
  std::string mac = g.mac;
  mac.resize(kMacBytes, '\0');
  return GrantFields(g) + mac;
}

absl::StatusOr<Grant> DecodeGrant(absl::string_view in) {
  if (in.size() != kGrantBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("grant of ", in.size(), " bytes, expected ", kGrantBytes));
  }
  Grant g;
  const char* p = in.data();
  g.put_id = Get64(p);
  g.segment_id = Get32(p + 8);
  g.offset = Get64(p + 12);
  g.length = Get64(p + 20);
  g.expires_unix_ms = Get64(p + 28);
  g.range_seq = Get64(p + 36);
  g.key_digest = std::string(in.substr(44, kKeyDigestBytes));
  g.mac = std::string(in.substr(kGrantBytes - kMacBytes));
  return g;
}

std::string GrantMac(absl::string_view key, const GrantScope& scope, const Grant& g) {
  return GrantMac(HmacKey(key), scope, g);
}

std::string GrantMac(const HmacKey& key, const GrantScope& scope, const Grant& g) {
  char bound[16];
  Put64(bound, scope.incarnation);
  Put64(bound + 8, scope.term);
  return key.Mac({"shelf-grant-v3", scope.node_id, "|", absl::string_view(bound, sizeof(bound)),
                  GrantFields(g)});
}

absl::Status VerifyGrant(absl::string_view key, const GrantScope& scope, const Grant& g,
                         uint32_t segment_id, uint64_t offset, uint64_t length,
                         uint64_t now_unix_ms) {
  return VerifyGrant(HmacKey(key), scope, g, segment_id, offset, length, now_unix_ms);
}

absl::Status VerifyGrant(const HmacKey& key, const GrantScope& scope, const Grant& g,
                         uint32_t segment_id, uint64_t offset, uint64_t length,
                         uint64_t now_unix_ms) {
  if (!ConstantTimeEqual(GrantMac(key, scope, g), g.mac)) {
    return absl::PermissionDeniedError("write grant does not verify (wrong node, key or fields)");
  }
  if (now_unix_ms > g.expires_unix_ms) {
    return absl::PermissionDeniedError(absl::StrCat("write grant of put ", g.put_id, " expired"));
  }
  if (segment_id != g.segment_id || offset < g.offset || length > g.length ||
      offset - g.offset > g.length - length) {
    return absl::PermissionDeniedError(absl::StrCat("write [", offset, ", +", length,
                                                    ") outside granted range [", g.offset, ", +",
                                                    g.length, ") of segment ", g.segment_id));
  }
  return absl::OkStatus();
}

namespace {

constexpr size_t kReadGrantFieldBytes = kReadGrantBytes - kMacBytes;
// Where a read grant's expires_unix_ms lies: ReadGrantFields writes it,
// DecodeReadCredential and ReadGrantExpiry read it.
constexpr size_t kReadGrantExpiryAt = 20;

void ReadGrantFields(const ReadGrant& g, char* out) {
  Put32(out, g.segment_id);
  Put64(out + 4, g.offset);
  Put64(out + 12, g.length);
  Put64(out + kReadGrantExpiryAt, g.expires_unix_ms);
}

// The MAC of a read grant whose fields are encoded at `fields`: short, so
// that a grant for a content key (17 bytes) is one SHA-256 block to hash:
// the node is bound by the key, its own; "R" keeps read and write grants
// apart (a write grant's message starts "shelf-").
void ReadGrantMacInto(const HmacKey& grant_key, uint64_t incarnation, absl::string_view key,
                      const char* fields, char* out) {
  char inc[8];
  Put64(inc, incarnation);
  grant_key.MacInto({"R", absl::string_view(inc, sizeof(inc)),
                     absl::string_view(fields, kReadGrantFieldBytes), key},
                    out);
}

}  // namespace

std::string EncodeReadGrant(const ReadGrant& g) {
  std::string out(kReadGrantBytes, '\0');
  ReadGrantFields(g, out.data());
  g.mac.copy(out.data() + kReadGrantFieldBytes, kMacBytes);
  return out;
}

void MintReadGrant(const HmacKey& grant_key, uint64_t incarnation, absl::string_view key,
                   const ReadGrant& g, char* out) {
  ReadGrantFields(g, out);
  ReadGrantMacInto(grant_key, incarnation, key, out, out + kReadGrantFieldBytes);
}

absl::StatusOr<ReadGrant> DecodeReadCredential(absl::string_view in, absl::string_view* key) {
  if (in.size() <= kReadGrantBytes || in.size() > kReadGrantBytes + kKeyBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("read credential of ", in.size(), " bytes: a ",
                                                   kReadGrantBytes, "-byte grant and a key of 1..",
                                                   kKeyBytesMax));
  }
  ReadGrant g;
  const char* p = in.data();
  g.segment_id = Get32(p);
  g.offset = Get64(p + 4);
  g.length = Get64(p + 12);
  g.expires_unix_ms = Get64(p + kReadGrantExpiryAt);
  g.mac = std::string(in.substr(kReadGrantBytes - kMacBytes, kMacBytes));
  *key = in.substr(kReadGrantBytes);
  return g;
}

uint64_t ReadGrantExpiry(absl::string_view grant) {
  return grant.size() < kReadGrantBytes ? 0 : Get64(grant.data() + kReadGrantExpiryAt);
}

std::string ReadGrantMac(absl::string_view grant_key, absl::string_view node_id,
                         uint64_t incarnation, absl::string_view key, const ReadGrant& g) {
  return ReadGrantMac(HmacKey(grant_key), node_id, incarnation, key, g);
}

std::string ReadGrantMac(const HmacKey& grant_key, absl::string_view node_id, uint64_t incarnation,
                         absl::string_view key, const ReadGrant& g) {
  char fields[kReadGrantFieldBytes];
  ReadGrantFields(g, fields);
  std::string mac(kMacBytes, '\0');
  ReadGrantMacInto(grant_key, incarnation, key, fields, mac.data());
  return mac;
}

absl::Status VerifyReadGrant(absl::string_view grant_key, absl::string_view node_id,
                             uint64_t incarnation, absl::string_view key, const ReadGrant& g,
                             bool range, uint32_t segment_id, uint64_t offset, uint64_t length,
                             uint64_t now_unix_ms) {
  return VerifyReadGrant(HmacKey(grant_key), node_id, incarnation, key, g, range, segment_id,
                         offset, length, now_unix_ms);
}

absl::Status VerifyReadGrant(const HmacKey& grant_key, absl::string_view node_id,
                             uint64_t incarnation, absl::string_view key, const ReadGrant& g,
                             bool range, uint32_t segment_id, uint64_t offset, uint64_t length,
                             uint64_t now_unix_ms) {
  char fields[kReadGrantFieldBytes], mac[kMacBytes];
  ReadGrantFields(g, fields);
  ReadGrantMacInto(grant_key, incarnation, key, fields, mac);
  if (!ConstantTimeEqual(absl::string_view(mac, kMacBytes), g.mac)) {
    return absl::PermissionDeniedError(
        "read grant does not verify (wrong store, incarnation, key or fields)");
  }
  if (now_unix_ms > g.expires_unix_ms) return absl::PermissionDeniedError("read grant expired");
  if (range && g.segment_id == kReadGrantNoRange) {
    return absl::PermissionDeniedError("an SSD replica's read grant names no DRAM range");
  }
  if (range && (segment_id != g.segment_id || offset < g.offset || length > g.length ||
                offset - g.offset > g.length - length)) {
    return absl::PermissionDeniedError(absl::StrCat("read [", offset, ", +", length,
                                                    ") outside granted range [", g.offset, ", +",
                                                    g.length, ") of segment ", g.segment_id));
  }
  return absl::OkStatus();
}

std::string EncodeKeyRange(const KeyRange& r) {
  std::string out(kKeyRangeBytes, '\0');
  Put32(out.data(), r.segment_id);
  Put64(out.data() + 4, r.offset);
  return out;
}

absl::StatusOr<KeyRange> DecodeKeyRange(absl::string_view in) {
  if (in.size() != kKeyRangeBytes) return absl::InvalidArgumentError("READ_KEY: malformed range");
  return KeyRange{Get32(in.data()), Get64(in.data() + 4)};
}

std::string EncodeRdmaSource(const RdmaSource& s) {
  std::string out(kRdmaSourceBytes, '\0');
  Put64(out.data(), s.addr);
  Put32(out.data() + 8, s.rkey);
  return out;
}

absl::StatusOr<RdmaSource> DecodeRdmaSource(absl::string_view in) {
  if (in.size() < kRdmaSourceBytes || Get32(in.data() + 12) != 0) {
    return absl::InvalidArgumentError("RDMA_PULL: malformed source");
  }
  return RdmaSource{Get64(in.data()), Get32(in.data() + 8)};
}

}  // namespace shelf::transport::wire
