// The pieces of the shared-memory handshake (the exchange is described in
// transport/shm.h) that both of its sides compute: the store's hello magic
// and the client's MAC over the store's nonce. ShmServer and
// ShmAttachments use them, and so does the shm fuzzer, so what it checks
// the store against is what the product computes, not a copy.
#ifndef SHELF_TRANSPORT_SHM_HANDSHAKE_H_
#define SHELF_TRANSPORT_SHM_HANDSHAKE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace shelf::transport {

// The store's hello: kShmMagic (u32, little-endian), then the nonce.
inline constexpr uint32_t kShmMagic = 0x484D4853;  // "SHMH"
inline constexpr size_t kShmNonceBytes = 16;
inline constexpr size_t kShmHelloBytes = 4 + kShmNonceBytes;

// The client's answer to `nonce`: HMAC-SHA256(secret, "shelf-shm-v1" ||
// nonce), kMacBytes long; kMacBytes zero bytes when `secret` is empty (an
// open cluster).
std::string ShmMac(const std::string& secret, absl::string_view nonce);

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_SHM_HANDSHAKE_H_
