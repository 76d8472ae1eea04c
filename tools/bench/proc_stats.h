// A process's CPU time and resident memory, read from /proc (Linux), for
// benches that measure a server they started (shelf-bench master).
#ifndef SHELF_TOOLS_BENCH_PROC_STATS_H_
#define SHELF_TOOLS_BENCH_PROC_STATS_H_

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace shelf::bench {

// User + system CPU seconds of process `pid` so far (/proc/PID/stat), 0
// when it cannot be read.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The name (field 2) is in parentheses and may hold spaces: count the
  // fields from the last ')'. State is field 3; utime and stime are 14, 15.
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(paren + 1));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::strtod(f.c_str(), nullptr);
    if (i == 15) stime = std::strtod(f.c_str(), nullptr);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A "Name:   value kB" line of /proc/PID/status in bytes (VmRSS, VmHWM),
// or a plain count (Threads); 0 when absent.
inline uint64_t ProcessStatusValue(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, name.size() + 1, name + ":") != 0) continue;
    uint64_t v = std::strtoull(line.c_str() + name.size() + 1, nullptr, 10);
    return line.find("kB") != std::string::npos ? v * 1024 : v;
  }
  return 0;
}

inline uint64_t ProcessRssBytes(pid_t pid) { return ProcessStatusValue(pid, "VmRSS"); }
inline uint64_t ProcessThreads(pid_t pid) { return ProcessStatusValue(pid, "Threads"); }

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_PROC_STATS_H_
