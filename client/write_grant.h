// The wire form of a write grant as the master issued it (PutStart's
// WriteGrant): what every WRITE frame, shared-memory copy request and RDMA
// pull carries.
#ifndef SHELF_CLIENT_WRITE_GRANT_H_
#define SHELF_CLIENT_WRITE_GRANT_H_

#include "proto/shelf.pb.h"
#include "transport/wire.h"

namespace shelf {

inline transport::wire::Grant ToWireGrant(const v1::WriteGrant& g) {
  transport::wire::Grant w;
  w.put_id = g.put_id();
  w.segment_id = g.segment_id();
  w.offset = g.offset();
  w.length = g.length();
  w.expires_unix_ms = g.expires_unix_ms();
  w.range_seq = g.range_seq();
  w.key_digest = g.key_digest();
  w.mac = g.mac();
  return w;
}

}  // namespace shelf

#endif  // SHELF_CLIENT_WRITE_GRANT_H_
