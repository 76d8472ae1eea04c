// shelf-bench: Shelf's benchmarks. `shelf-bench --help` lists them.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tools/bench/bench.h"

namespace shelf::bench {

std::string DefaultTracePath() {
  for (const char* p : {SHELF_SOURCE_TRACE, "/usr/local/share/shelf/traces/synthetic_trace.jsonl",
                        "/usr/share/shelf/traces/synthetic_trace.jsonl"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return SHELF_SOURCE_TRACE;
}

}  // namespace shelf::bench

namespace {

constexpr char kHelp[] =
    "shelf-bench: Shelf's benchmarks\n\n"
    "Usage: shelf-bench SUBCOMMAND [flags]   (shelf-bench SUBCOMMAND --help for its flags)\n\n"
    "  replay [TRACE]   replay a Mooncake-format trace against a local (or given) cluster\n\n"
    "Each prints a table, then one JSON object with its figures on its last line.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kHelp, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string sub = argv[1];
  if (sub == "replay") return shelf::bench::Replay(argc - 1, argv + 1);
  std::fprintf(stderr, "shelf-bench: unknown subcommand '%s'\n%s", sub.c_str(), kHelp);
  return 2;
}
