// Time sources. Deadlines and TTLs use the monotonic clock; only values that
// cross process boundaries (grant expiry, lease expiry shown to clients) use
// wall-clock Unix milliseconds.
#ifndef SHELF_COMMON_CLOCK_H_
#define SHELF_COMMON_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace shelf {

inline uint64_t MonoMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline uint64_t MonoUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline uint64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace shelf

#endif  // SHELF_COMMON_CLOCK_H_
