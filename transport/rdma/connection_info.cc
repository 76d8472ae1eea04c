// ConnectionInfo encoding: little-endian, fixed layout (docs/rdma.md).
#include "transport/rdma/connection_info.h"

#include <cstring>

#include "absl/base/internal/endian.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace shelf::transport::rdma {
namespace {

// Field offsets; the layout is documented in docs/rdma.md.
constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kRdAtomicResponderAt = 6;  // u8; version 1: reserved, must be 0
constexpr size_t kRdAtomicInitiatorAt = 7;  // u8; version 1: reserved, must be 0
constexpr size_t kGidAt = 8;
constexpr size_t kLidAt = 24;
constexpr size_t kMtuAt = 26;
constexpr size_t kReserved2At = 27;  // u8, must be 0
constexpr size_t kQpNumAt = 28;
constexpr size_t kPsnAt = 32;
constexpr size_t kRkeyAt = 36;
constexpr size_t kSegmentAddrAt = 40;
constexpr size_t kSegmentLengthAt = 48;
static_assert(kSegmentLengthAt + 8 == kConnectionInfoBytes, "layout must fill the record");

}  // namespace

std::string EncodeConnectionInfo(const ConnectionInfo& info) {
  std::string out(kConnectionInfoBytes, '\0');
  char* p = out.data();
  absl::little_endian::Store32(p + kMagicAt, kConnectionInfoMagic);
  SHELF_CHECK(info.version >= kConnectionInfoVersionMin && info.version <= kConnectionInfoVersion);
  absl::little_endian::Store16(p + kVersionAt, info.version);
  if (info.version >= 2) {
    SHELF_CHECK(info.rd_atomic_responder >= 1 && info.rd_atomic_initiator >= 1);
    p[kRdAtomicResponderAt] = static_cast<char>(info.rd_atomic_responder);
    p[kRdAtomicInitiatorAt] = static_cast<char>(info.rd_atomic_initiator);
  }
  std::memcpy(p + kGidAt, info.gid.data(), info.gid.size());
  absl::little_endian::Store16(p + kLidAt, info.lid);
  p[kMtuAt] = static_cast<char>(info.mtu);
  absl::little_endian::Store32(p + kQpNumAt, info.qp_num);
  absl::little_endian::Store32(p + kPsnAt, info.psn);
  absl::little_endian::Store32(p + kRkeyAt, info.segment.rkey);
  absl::little_endian::Store64(p + kSegmentAddrAt, info.segment.addr);
  absl::little_endian::Store64(p + kSegmentLengthAt, info.segment.length);
  return out;
}

absl::StatusOr<ConnectionInfo> DecodeConnectionInfo(absl::string_view bytes) {
  if (bytes.size() != kConnectionInfoBytes) {
    return absl::InvalidArgumentError(absl::StrCat("RDMA connection info: ", bytes.size(),
                                                   " bytes, want ", kConnectionInfoBytes));
  }
  const char* p = bytes.data();
  if (absl::little_endian::Load32(p + kMagicAt) != kConnectionInfoMagic) {
    return absl::InvalidArgumentError("RDMA connection info: bad magic");
  }
  const uint16_t version = absl::little_endian::Load16(p + kVersionAt);
  if (version < kConnectionInfoVersionMin || version > kConnectionInfoVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA connection info: unsupported version ", version));
  }
  ConnectionInfo info;
  info.version = version;
  info.rd_atomic_responder = static_cast<uint8_t>(p[kRdAtomicResponderAt]);
  info.rd_atomic_initiator = static_cast<uint8_t>(p[kRdAtomicInitiatorAt]);
  const bool depths_ok = version >= 2
                             ? info.rd_atomic_responder >= 1 && info.rd_atomic_initiator >= 1
                             : info.rd_atomic_responder == 0 && info.rd_atomic_initiator == 0;
  if (!depths_ok || p[kReserved2At] != 0) {
    return absl::InvalidArgumentError(
        version >= 2 ? "RDMA connection info: READ depth 0 or reserved field set"
                     : "RDMA connection info: reserved field set");
  }
  std::memcpy(info.gid.data(), p + kGidAt, info.gid.size());
  info.lid = absl::little_endian::Load16(p + kLidAt);
  info.mtu = static_cast<uint8_t>(p[kMtuAt]);
  info.qp_num = absl::little_endian::Load32(p + kQpNumAt);
  info.psn = absl::little_endian::Load32(p + kPsnAt);
  info.segment.rkey = absl::little_endian::Load32(p + kRkeyAt);
  info.segment.addr = absl::little_endian::Load64(p + kSegmentAddrAt);
  info.segment.length = absl::little_endian::Load64(p + kSegmentLengthAt);
  if (info.mtu < 1 || info.mtu > 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA connection info: bad MTU code ", info.mtu));
  }
  if (info.qp_num > kQpNumMax || info.psn > kPsnMax) {
    return absl::InvalidArgumentError("RDMA connection info: QPN or PSN over 24 bits");
  }
  if (info.segment.addr + info.segment.length < info.segment.addr) {
    return absl::InvalidArgumentError("RDMA connection info: segment wraps around");
  }
  return info;
}

}  // namespace shelf::transport::rdma
