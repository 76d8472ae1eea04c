// Leveled logs, one line per event with key=value fields, to stderr:
//
//   2026-11-29T11:40:02.123Z INFO store registered node=n1 addr=127.0.0.1:7100
//
//   SHELF_LOG(INFO) << "store registered" << shelf::Kv("node", id);
//
// Thread-safe: each line is written with one write(2).
#ifndef SHELF_COMMON_LOG_H_
#define SHELF_COMMON_LOG_H_

#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace shelf {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; SHELF_LOG_LEVEL=debug
// in the environment, or SetLogLevel, changes it.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Sets the name printed in every line (e.g. "master", "store").
void SetLogComponent(absl::string_view name);

struct Kv {
  template <typename T>
  Kv(absl::string_view key, const T& value) {
    std::ostringstream s;
    s << value;
    text = std::string(key) + "=" + Quote(s.str());
  }
  static std::string Quote(const std::string& v);
  std::string text;
};

class LogLine {
 public:
  explicit LogLine(LogLevel level);
  ~LogLine();
  LogLine& operator<<(const Kv& kv) {
    stream_ << ' ' << kv.text;
    return *this;
  }
  template <typename T>
  LogLine& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace shelf

#define SHELF_LOG_LEVEL_DEBUG ::shelf::LogLevel::kDebug
#define SHELF_LOG_LEVEL_INFO ::shelf::LogLevel::kInfo
#define SHELF_LOG_LEVEL_WARNING ::shelf::LogLevel::kWarning
#define SHELF_LOG_LEVEL_ERROR ::shelf::LogLevel::kError
#define SHELF_LOG(level)                                  \
  if (SHELF_LOG_LEVEL_##level < ::shelf::GetLogLevel()) { \
  } else                                                  \
    ::shelf::LogLine(SHELF_LOG_LEVEL_##level)

#endif  // SHELF_COMMON_LOG_H_
