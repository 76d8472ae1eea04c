// shelf-bench subcommands. Each prints a human table, then its figures as
// one JSON object on its last line, starts every process it needs and stops
// them all when it ends.
#ifndef SHELF_TOOLS_BENCH_BENCH_H_
#define SHELF_TOOLS_BENCH_BENCH_H_

#include <string>

namespace shelf::bench {

int Replay(int argc, char** argv);

// The bundled trace: next to the binary's source tree when run from a build
// tree, or installed under share/shelf.
std::string DefaultTracePath();

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_BENCH_H_
