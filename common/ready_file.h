// Writes a "ready file" atomically (write to a temporary name, rename), so
// a parent process that polls for it never reads a partial address.
#ifndef SHELF_COMMON_READY_FILE_H_
#define SHELF_COMMON_READY_FILE_H_

#include <cstdio>
#include <string>

namespace shelf {

inline bool WriteReadyFile(const std::string& path, const std::string& contents) {
  if (path.empty()) return true;
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  bool ok = std::fputs(contents.c_str(), f) >= 0;
  ok = (std::fclose(f) == 0) && ok;
  return ok && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace shelf

#endif  // SHELF_COMMON_READY_FILE_H_
