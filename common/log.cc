#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace shelf {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("SHELF_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int> g_level{static_cast<int>(LevelFromEnv())};
char g_component[32] = "shelf";

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }
void SetLogComponent(absl::string_view name) {
  size_t n = std::min(name.size(), sizeof(g_component) - 1);
  std::memcpy(g_component, name.data(), n);
  g_component[n] = '\0';
}

std::string Kv::Quote(const std::string& v) {
  bool plain = !v.empty();
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t') plain = false;
  }
  if (plain) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' ? ' ' : c);
  }
  return out + "\"";
}

LogLine::LogLine(LogLevel level) : level_(level) {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char buf[64];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, sizeof(buf) - n, ".%03dZ", static_cast<int>(tv.tv_usec / 1000));
  stream_ << buf << ' ' << LevelName(level_) << ' ' << g_component << ": ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  std::string line = stream_.str();
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace shelf
