// ErrnoText(e): the text of errno value `e`, safe to call from any thread
// (std::strerror may return a buffer another thread's call overwrites).
//
//   if (fd < 0) return absl::UnavailableError(StrCat("socket: ", ErrnoText(errno)));
#ifndef SHELF_COMMON_ERRNO_TEXT_H_
#define SHELF_COMMON_ERRNO_TEXT_H_

#include <string.h>

#include <string>

namespace shelf {

inline std::string ErrnoText(int e) {
  char buf[128];
  // The GNU strerror_r returns the text (in `buf` or a static string).
  return std::string(strerror_r(e, buf, sizeof(buf)));
}

}  // namespace shelf

#endif  // SHELF_COMMON_ERRNO_TEXT_H_
