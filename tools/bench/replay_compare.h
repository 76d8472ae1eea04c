// shelf-bench replay --compare-dram-only (replay_compare.cc).
#ifndef SHELF_TOOLS_BENCH_REPLAY_COMPARE_H_
#define SHELF_TOOLS_BENCH_REPLAY_COMPARE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace shelf::bench {

struct ReplayCompareOptions {
  int rounds = 3;            // runs of each side
  uint64_t block_bytes = 0;  // the replay's block size: the raw write row's
  uint64_t raw_bytes = 0;    // bytes the raw write row writes
  std::string dir;           // where the raw write row writes (the cluster's file system)
};

// Runs the replay DRAM only and DRAM + SSD; `args`: the replay's own flags,
// --compare-dram-only and --rounds removed. Returns the exit status.
int ReplayCompare(const std::vector<std::string>& args, const ReplayCompareOptions& options);

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_REPLAY_COMPARE_H_
