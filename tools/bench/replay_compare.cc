// shelf-bench replay --compare-dram-only: the same replay run DRAM alone
// (--ssd-size 0) and DRAM + SSD with the flags given, each in a child
// process with its own cluster, --rounds times each, alternating which
// goes first; each side reports its round with the best put GB/s (a
// shared machine's speed drifts between runs by more than the gap
// measured). Then the disk's raw write speed for blocks of the same size
// (O_DIRECT at queue depth 8, where the cluster keeps its SSD tiers),
// since a tiered cluster whose DRAM is full puts no faster than it
// demotes: the goal for tiered puts is min(0.8 x DRAM-only, 0.9 x raw).
// Prints put and get GB/s and p99 side by side, their ratios, and how the
// tiered puts stand against that goal.
#include "tools/bench/replay_compare.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/units.h"
#include "tools/bench/raw_io.h"

namespace shelf::bench {

namespace {

// Runs this binary with `args`; returns its stdout's last line as JSON.
bool RunChild(const std::vector<std::string>& args, Json* out) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  // Built before fork: only async-signal-safe calls in the child until exec.
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
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

// The raw write row: `bytes` of `block_bytes` blocks written with O_DIRECT
// at queue depth 8 into a fresh directory under `parent`, then removed.
// False (and a message on stderr) where that cannot be done, such as on a
// file system without O_DIRECT.
bool MeasureRawWrite(const std::string& parent, uint64_t block_bytes, uint64_t bytes, Measure* m) {
  constexpr int kDepth = 8;
  const uint64_t size = (block_bytes + kAlign - 1) / kAlign * kAlign;
  std::string tmpl = (std::filesystem::path(parent) / "shelf-raw-write-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "shelf-bench replay: no raw write row: cannot create a directory in %s\n",
                 parent.c_str());
    return false;
  }
  AlignedBuffer block(size);
  for (uint64_t i = 0; i < size; ++i) block.data[i] = static_cast<char>(i * 131 + 7);
  absl::Status s =
      RawWrite(tmpl + "/raw.dat", block.data, size, std::max<uint64_t>(1, bytes / size), kDepth, m);
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  if (!s.ok()) {
    std::fprintf(stderr, "shelf-bench replay: no raw write row: %s\n",
                 std::string(s.message()).c_str());
    return false;
  }
  return true;
}

}  // namespace

int ReplayCompare(const std::vector<std::string>& args, const ReplayCompareOptions& options) {
  std::vector<std::string> dram = {"shelf-bench", "replay"};
  dram.insert(dram.end(), args.begin(), args.end());
  std::vector<std::string> tiered = dram;
  dram.insert(dram.end(), {"--ssd-size", "0", "--json-only"});
  tiered.push_back("--json-only");
  // Every round of each side, then the best by put GB/s.
  std::vector<Json> dram_rounds, tiered_rounds;
  for (int round = 0; round < options.rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      // Which side runs first alternates from round to round.
      const bool tiered_now = (k == 1) == (round % 2 == 0);
      std::fprintf(stderr, "replay round %d of %d, %s...\n", round + 1, options.rounds,
                   tiered_now ? "DRAM + SSD" : "DRAM only");
      Json j;
      if (!RunChild(tiered_now ? tiered : dram, &j)) {
        std::fprintf(stderr, "shelf-bench replay: the %s run failed\n",
                     tiered_now ? "DRAM + SSD" : "DRAM-only");
        return 1;
      }
      (tiered_now ? tiered_rounds : dram_rounds).push_back(std::move(j));
    }
  }
  auto best = [](const std::vector<Json>& rounds) {
    return *std::max_element(rounds.begin(), rounds.end(), [](const Json& x, const Json& y) {
      return Num(x, "put_gbps") < Num(y, "put_gbps");
    });
  };
  const Json a = best(dram_rounds), b = best(tiered_rounds);
  std::fprintf(stderr, "raw O_DIRECT writes of %s blocks...\n",
               FormatBytes(options.block_bytes).c_str());
  Measure raw;
  const bool have_raw = MeasureRawWrite(options.dir, options.block_bytes, options.raw_bytes, &raw);

  auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
  const double put_ratio = ratio(Num(b, "put_gbps"), Num(a, "put_gbps"));
  const double put_p99_ratio = ratio(Num(b, "put_p99_us"), Num(a, "put_p99_us"));
  const double get_ratio = ratio(Num(b, "get_gbps"), Num(a, "get_gbps"));
  double goal = 0.8 * Num(a, "put_gbps");
  if (have_raw) goal = std::min(goal, 0.9 * raw.gbps());
  const double goal_ratio = ratio(Num(b, "put_gbps"), goal);

  std::printf(
      "\nShelf replay: DRAM only against DRAM + SSD (same trace, same DRAM); each side's "
      "best put round of %d\n\n",
      options.rounds);
  std::printf("  %-11s %9s %11s %9s %11s %10s %7s\n", "", "put GB/s", "put p99 us", "get GB/s",
              "get p99 us", "hit ratio", "errors");
  for (const auto& [name, j] :
       {std::pair<const char*, const Json*>{"DRAM only", &a}, {"DRAM + SSD", &b}}) {
    std::printf("  %-11s %9.3f %11.0f %9.3f %11.0f %9.2f%% %7.0f\n", name, Num(*j, "put_gbps"),
                Num(*j, "put_p99_us"), Num(*j, "get_gbps"), Num(*j, "get_p99_us"),
                100 * Num(*j, "hit_ratio"), Num(*j, "errors"));
  }
  if (options.rounds > 1) {
    std::printf("\n  put GB/s by round:");
    for (int r = 0; r < options.rounds; ++r) {
      std::printf(" %.3f / %.3f", Num(dram_rounds[r], "put_gbps"),
                  Num(tiered_rounds[r], "put_gbps"));
      if (r + 1 < options.rounds) std::printf(",");
    }
    std::printf(" (DRAM only / DRAM + SSD)\n");
    // The hit ratio depends on the timing of demotions against lookups:
    // every round's, not just the one whose puts were fastest.
    std::printf("  DRAM + SSD hit ratio by round:");
    for (int r = 0; r < options.rounds; ++r) {
      std::printf(" %.2f%%", 100 * Num(tiered_rounds[r], "hit_ratio"));
    }
    std::printf(" (exclusive LRU %.2f%%)\n", 100 * Num(b, "lru_sim_hit_ratio"));
  }
  // Backpressure: puts that waited for demotions, and blocks a put dropped
  // (their only copy) once its wait ran out; every tiered round's.
  if (b.contains("put_room_waits")) {
    std::printf("  DRAM + SSD backpressure by round:");
    for (int r = 0; r < options.rounds; ++r) {
      std::printf(" %.0f waits %.2f s %.0f drops", Num(tiered_rounds[r], "put_room_waits"),
                  Num(tiered_rounds[r], "put_room_wait_seconds"),
                  Num(tiered_rounds[r], "put_drops"));
      if (r + 1 < options.rounds) std::printf(",");
    }
    std::printf("\n");
  }
  std::printf("\n  tiered / DRAM only: puts %.2fx GB/s, put p99 %.2fx; gets %.2fx GB/s\n",
              put_ratio, put_p99_ratio, get_ratio);
  if (have_raw) {
    std::printf("  raw O_DIRECT write, queue depth 8, %s blocks: %.3f GB/s (%s in %s)\n",
                FormatBytes(options.block_bytes).c_str(), raw.gbps(),
                FormatBytes(raw.bytes).c_str(), options.dir.c_str());
  }
  std::printf("  put goal min(0.8 x DRAM only%s) = %.3f GB/s: tiered puts at %.2fx of it\n\n",
              have_raw ? ", 0.9 x raw write" : "", goal, goal_ratio);

  Json o = Json::object();
  o["bench"] = "replay_compare";
  o["rounds"] = options.rounds;
  o["dram_only"] = a;
  o["tiered"] = b;
  Json put_rounds = Json::array();
  for (int r = 0; r < options.rounds; ++r) {
    put_rounds.push_back(
        Json::array({Num(dram_rounds[r], "put_gbps"), Num(tiered_rounds[r], "put_gbps")}));
  }
  o["put_gbps_rounds"] = put_rounds;
  Json hit_rounds = Json::array();
  for (const Json& j : tiered_rounds) hit_rounds.push_back(Num(j, "hit_ratio"));
  o["tiered_hit_ratio_rounds"] = hit_rounds;
  Json waits = Json::array(), drops = Json::array();
  for (const Json& j : tiered_rounds) {
    waits.push_back(Num(j, "put_room_waits"));
    drops.push_back(Num(j, "put_drops"));
  }
  o["tiered_put_room_waits_rounds"] = waits;
  o["tiered_put_drops_rounds"] = drops;
  o["put_gbps_ratio"] = put_ratio;
  o["put_p99_ratio"] = put_p99_ratio;
  o["get_gbps_ratio"] = get_ratio;
  o["raw_write_gbps"] = have_raw ? Json(raw.gbps()) : Json(nullptr);
  o["put_goal_gbps"] = goal;
  o["put_goal_ratio"] = goal_ratio;
  // Every round's, both sides.
  double errors = 0, mismatches = 0;
  for (const std::vector<Json>* side : {&dram_rounds, &tiered_rounds}) {
    for (const Json& j : *side) {
      errors += Num(j, "errors");
      mismatches += Num(j, "checksum_mismatches");
    }
  }
  o["errors"] = errors;
  o["mismatches"] = mismatches;
  std::printf("%s\n", JsonDump(o).c_str());
  return errors == 0 && mismatches == 0 ? 0 : 1;
}

}  // namespace shelf::bench
