// ConnectionInfo: what one end of an RDMA RC connection tells the other, and
// its fixed 56-byte wire encoding (byte layout in docs/rdma.md).
//
// The RDMA backend has no connection manager of its own: each side encodes
// its ConnectionInfo, the two sides swap the bytes over their existing TCP
// control channel, and each hands the peer's bytes to RdmaEndpoint::Connect.
//
//   ConnectionInfo info;
//   info.qp_num = qp->qp_num;  ...
//   std::string bytes = EncodeConnectionInfo(info);  // send to the peer
//   SHELF_ASSIGN_OR_RETURN(ConnectionInfo peer, DecodeConnectionInfo(received));
//
// Thread-compatible value types and pure functions.
#ifndef SHELF_TRANSPORT_RDMA_CONNECTION_INFO_H_
#define SHELF_TRANSPORT_RDMA_CONNECTION_INFO_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/wire.h"

namespace shelf::transport::rdma {

inline constexpr uint32_t kConnectionInfoMagic = 0x4D445253;  // "SRDM" on the wire
// Version 2 adds the READ depths (bytes 6 and 7, reserved in version 1).
// Encoders write version 2, or version 1 to answer a peer that spoke it;
// decoders accept both.
inline constexpr uint16_t kConnectionInfoVersion = 2;
inline constexpr uint16_t kConnectionInfoVersionMin = 1;
inline constexpr size_t kConnectionInfoBytes = 56;
static_assert(kConnectionInfoBytes == wire::kRdmaConnectionInfoBytes, "RDMA_CONNECT's layout");
inline constexpr uint32_t kQpNumMax = 0xffffff;  // QPNs and PSNs are 24-bit
inline constexpr uint32_t kPsnMax = 0xffffff;

// The memory an end exposes to one-sided access by its peer: a registered
// region's address (as the peer must name it in a work request), length and
// rkey. A zero length means "exposes nothing" (an initiator-only end).
struct RemoteSegment {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;
};

struct ConnectionInfo {
  uint16_t version = kConnectionInfoVersion;  // kConnectionInfoVersionMin..kConnectionInfoVersion
  // RDMA READs this end can have outstanding on the QP, as the responder
  // (its device's max_qp_rd_atom, capped) and as the initiator (its
  // max_qp_init_rd_atom, capped): 1..255 in version 2; 0 (not advertised)
  // in version 1, where the encoder ignores them.
  uint8_t rd_atomic_responder = 0;
  uint8_t rd_atomic_initiator = 0;
  std::array<uint8_t, 16> gid{};  // port GID at the chosen index; all zero: address by LID
  uint16_t lid = 0;               // port LID (InfiniBand); 0 on RoCE
  uint8_t mtu = 0;                // the port's active MTU, an ibv_mtu value (1..5)
  uint32_t qp_num = 0;            // <= kQpNumMax
  uint32_t psn = 0;               // first packet sequence number this end sends; <= kPsnMax
  RemoteSegment segment;
};

// Always kConnectionInfoBytes bytes, in `info.version`.
// REQUIRES: a supported version; in version 2, both READ depths at least 1.
std::string EncodeConnectionInfo(const ConnectionInfo& info);
// INVALID_ARGUMENT when `bytes` has the wrong length, magic or version, a
// non-zero reserved field, a READ depth of 0 (version 2), an MTU outside
// 1..5, a QPN or PSN over 24 bits, or a segment whose range wraps around the
// address space.
absl::StatusOr<ConnectionInfo> DecodeConnectionInfo(absl::string_view bytes);

}  // namespace shelf::transport::rdma

#endif  // SHELF_TRANSPORT_RDMA_CONNECTION_INFO_H_
