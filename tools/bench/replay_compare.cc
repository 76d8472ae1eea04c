// shelf-bench replay --compare-dram-only: the same replay twice in one
// run, each in a child process with its own cluster: DRAM alone
// (--ssd-size 0), then DRAM + SSD with the flags given. Prints put and
// get GB/s and p99 side by side, and their ratios: what the SSD tier
// costs the writers and readers.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"

namespace shelf::bench {

namespace {

// Runs this binary with `args`; returns its stdout's last line as JSON.
bool RunChild(const std::vector<std::string>& args, Json* out) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  // Built before fork: only async-signal-safe calls in the child until exec.
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  size_t nl = text.rfind('\n');
  std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
  Json j = Json::parse(last, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  *out = j;
  return WIFEXITED(status);
}

double Num(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

}  // namespace

// `args`: the replay's own flags, --compare-dram-only removed.
int ReplayCompare(const std::vector<std::string>& args) {
  std::vector<std::string> dram = {"shelf-bench", "replay"};
  dram.insert(dram.end(), args.begin(), args.end());
  std::vector<std::string> tiered = dram;
  dram.insert(dram.end(), {"--ssd-size", "0", "--json-only"});
  tiered.push_back("--json-only");
  Json a, b;
  std::fprintf(stderr, "replay, DRAM only...\n");
  if (!RunChild(dram, &a)) {
    std::fprintf(stderr, "shelf-bench replay: the DRAM-only run failed\n");
    return 1;
  }
  std::fprintf(stderr, "replay, DRAM + SSD...\n");
  if (!RunChild(tiered, &b)) {
    std::fprintf(stderr, "shelf-bench replay: the DRAM + SSD run failed\n");
    return 1;
  }
  auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
  std::printf("\nShelf replay: DRAM only against DRAM + SSD (same trace, same DRAM)\n\n");
  std::printf("  %-11s %9s %11s %9s %11s %10s %7s\n", "", "put GB/s", "put p99 us", "get GB/s",
              "get p99 us", "hit ratio", "errors");
  for (const auto& [name, j] :
       {std::pair<const char*, Json*>{"DRAM only", &a}, {"DRAM + SSD", &b}}) {
    std::printf("  %-11s %9.3f %11.0f %9.3f %11.0f %9.2f%% %7.0f\n", name, Num(*j, "put_gbps"),
                Num(*j, "put_p99_us"), Num(*j, "get_gbps"), Num(*j, "get_p99_us"),
                100 * Num(*j, "hit_ratio"), Num(*j, "errors"));
  }
  double put_ratio = ratio(Num(b, "put_gbps"), Num(a, "put_gbps"));
  double put_p99_ratio = ratio(Num(b, "put_p99_us"), Num(a, "put_p99_us"));
  double get_ratio = ratio(Num(b, "get_gbps"), Num(a, "get_gbps"));
  std::printf("\n  tiered / DRAM only: puts %.2fx GB/s, put p99 %.2fx; gets %.2fx GB/s\n\n",
              put_ratio, put_p99_ratio, get_ratio);
  Json o = Json::object();
  o["bench"] = "replay_compare";
  o["dram_only"] = a;
  o["tiered"] = b;
  o["put_gbps_ratio"] = put_ratio;
  o["put_p99_ratio"] = put_p99_ratio;
  o["get_gbps_ratio"] = get_ratio;
  std::printf("%s\n", JsonDump(o).c_str());
  return Num(a, "errors") + Num(b, "errors") == 0 ? 0 : 1;
}

}  // namespace shelf::bench
