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
// Milliseconds from `then` to `now`, 0 when `then` is later. A time
// stamped by another thread may be later than a `now` read before taking
// the lock that orders them; the plain unsigned difference then wraps to
// centuries.
inline uint64_t ElapsedMs(uint64_t now, uint64_t then) { return now > then ? now - then : 0; }

inline uint64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace shelf

#endif  // SHELF_COMMON_CLOCK_H_
