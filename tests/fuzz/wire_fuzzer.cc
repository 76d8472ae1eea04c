// Fuzzes the TCP data plane's decoders (transport/wire.h): DecodeHeader on
// the first 40 bytes, DecodeGrant on what follows, and VerifyGrant against
// a reference model of its checks. Properties, beyond "does not crash":
//   - a header that decodes re-encodes to the same 40 bytes and respects
//     the limits (opcode known, extra <= 4096, length <= 4 GiB);
//   - a grant that decodes re-encodes to the same kGrantBytes (100);
//   - VerifyGrant accepts exactly when the MAC matches, the grant is not
//     expired, and the write lies inside the granted range (checked with
//     128-bit arithmetic, so no overflow can hide a wrong answer).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_input.h"
#include "transport/session.h"
#include "transport/wire.h"

namespace shelf {

namespace wire = transport::wire;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "wire_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

void FuzzHeader(const std::string& bytes) {
  if (bytes.size() < wire::kHeaderBytes) return;
  absl::StatusOr<wire::Header> h = wire::DecodeHeader(bytes.data());
  if (!h.ok()) return;
  char again[wire::kHeaderBytes];
  wire::EncodeHeader(*h, again);
  Check(std::string(again, sizeof(again)) == bytes.substr(0, wire::kHeaderBytes),
        "header round trip");
  Check(h->magic == wire::kMagic && h->version == wire::kVersion, "magic and version");
  Check(static_cast<uint8_t>(h->op) >= static_cast<uint8_t>(wire::Op::kHello) &&
            static_cast<uint8_t>(h->op) <= static_cast<uint8_t>(wire::Op::kRdmaPull),
        "opcode range");
  Check(h->extra_len <= wire::kExtraBytesMax, "extra limit");
  Check(h->length <= wire::kPayloadBytesMax, "length limit");
}

void FuzzGrant(fuzz::FuzzInput& in) {
  const std::string key = in.Bytes(in.Pick(40));
  const std::string node = in.Bytes(in.Pick(20));
  const wire::GrantScope scope{node, in.U64(), in.U64()};
  const uint32_t segment_id = in.Pick(3);
  const uint64_t offset = in.Bool() ? in.U64() : in.U16() * 4096ull;
  const uint64_t length = in.Bool() ? in.U64() : in.U16();
  const uint64_t now = in.Bool() ? in.U64() : 1000000;
  const bool sign = in.Bool();
  std::string raw = in.Bytes(wire::kGrantBytes);
  absl::StatusOr<wire::Grant> g = wire::DecodeGrant(raw);
  Check(g.ok() == (raw.size() == wire::kGrantBytes), "grant decodes iff kGrantBytes long");
  if (!g.ok()) return;
  Check(wire::EncodeGrant(*g) == raw, "grant round trip");
  // Half the time the grant carries a true MAC, so the range and expiry
  // checks are reached.
  if (sign) g->mac = wire::GrantMac(key, scope, *g);
  absl::Status verdict = wire::VerifyGrant(key, scope, *g, segment_id, offset, length, now);
  using u128 = unsigned __int128;
  bool mac_ok = g->mac == wire::GrantMac(key, scope, *g);
  bool expected = mac_ok && now <= g->expires_unix_ms && segment_id == g->segment_id &&
                  offset >= g->offset &&
                  static_cast<u128>(offset) + length <= static_cast<u128>(g->offset) + g->length;
  Check(verdict.ok() == expected, "VerifyGrant agrees with the reference model");
  if (!verdict.ok()) {
    Check(verdict.code() == absl::StatusCode::kPermissionDenied,
          "rejections are PERMISSION_DENIED");
  }
  // A grant for another node, incarnation or term never verifies.
  if (expected) {
    const std::string other_node = node + "x";
    wire::GrantScope other = scope;
    other.node_id = other_node;
    Check(!wire::VerifyGrant(key, other, *g, segment_id, offset, length, now).ok(),
          "a grant is bound to its node");
    other = scope;
    ++other.incarnation;
    Check(!wire::VerifyGrant(key, other, *g, segment_id, offset, length, now).ok(),
          "a grant is bound to its store incarnation");
    other = scope;
    ++other.term;
    Check(!wire::VerifyGrant(key, other, *g, segment_id, offset, length, now).ok(),
          "a grant is bound to the master term");
  }
}

}  // namespace
}  // namespace shelf

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  shelf::FuzzHeader(bytes);
  shelf::fuzz::FuzzInput in(data, size);
  in.Bytes(size >= shelf::transport::wire::kHeaderBytes ? shelf::transport::wire::kHeaderBytes : 0);
  shelf::FuzzGrant(in);
  std::string nonce = in.Bytes(16);
  std::string mac = shelf::transport::wire::ClientProof(in.Bytes(in.Pick(64)), nonce, in.Bytes(16));
  shelf::Check(mac.empty() || mac.size() == 32, "AUTH MAC size");
  return 0;
}
