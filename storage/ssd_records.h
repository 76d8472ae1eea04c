// Internal to the SSD tier (storage/ssd_tier*.cc): the index's record
// format and the tier's error mapping. Layout: storage/ssd_tier.h.
#ifndef SHELF_STORAGE_SSD_RECORDS_H_
#define SHELF_STORAGE_SSD_RECORDS_H_

#include <rocksdb/status.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/base/internal/endian.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/errno_text.h"

namespace shelf::storage::ssd_records {

inline constexpr uint32_t kExtentMagic = 0x32445353;  // "SSD2": index entry of an extent
inline constexpr size_t kExtentRecord = 32;
inline constexpr uint64_t kAlign = 4096;

// Format version 2: "e" + key -> extent record. (Version 1, refused at
// open, kept block bytes under "b" + key and "m" + key.)
inline std::string ExtentKey(const std::string& key) { return "e" + key; }

inline uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

inline void EncodeExtent(uint64_t size, uint64_t checksum, uint64_t offset, char* out) {
  std::memset(out, 0, kExtentRecord);
  absl::little_endian::Store32(out, kExtentMagic);
  out[4] = 2;
  absl::little_endian::Store64(out + 8, size);
  absl::little_endian::Store64(out + 16, checksum);
  absl::little_endian::Store64(out + 24, offset);
}

inline absl::Status Errno(const std::string& what, int err) {
  std::string msg = absl::StrCat("SSD tier ", what, ": ", ErrnoText(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

inline absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("SSD tier ", what, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNoSpace() || s.subcode() == rocksdb::Status::kNoSpace) {
    return absl::ResourceExhaustedError(msg);
  }
  return absl::UnavailableError(msg);
}

}  // namespace shelf::storage::ssd_records

#endif  // SHELF_STORAGE_SSD_RECORDS_H_
