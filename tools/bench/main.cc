// shelf-bench: Shelf's benchmarks. `shelf-bench --help` lists them.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/mutex_debug.h"
#include "tools/bench/bench.h"

namespace shelf::bench {

std::string DefaultTracePath() {
  for (const char* p : {SHELF_SOURCE_TRACE, "/usr/local/share/shelf/traces/synthetic_trace.jsonl",
                        "/usr/share/shelf/traces/synthetic_trace.jsonl"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return SHELF_SOURCE_TRACE;
}

// The subcommands below are declared here rather than in bench.h, which
// declares the older ones; each takes argv with argv[0] = its own name.
int KvBench(int argc, char** argv);         // kv_bench.cc
int KvEventsBench(int argc, char** argv);   // events_bench.cc
int TransportBench(int argc, char** argv);  // transport_bench.cc
int SsdBench(int argc, char** argv);        // ssd_bench.cc
int SsdHitsBench(int argc, char** argv);    // ssd_hits_bench.cc
int MasterBench(int argc, char** argv);     // master_bench.cc
int RespBench(int argc, char** argv);       // resp_bench.cc
#ifdef SHELF_BENCH_HAVE_CLIENT
int ClientBench(int argc, char** argv);  // client_bench.cc
#endif

namespace {

std::atomic<bool> g_stop{false};

// The first SIGINT/SIGTERM asks the running bench to stop: it finishes the
// row in progress, prints what it measured and stops every process it
// started. A second one exits at once; children still die with us
// (PR_SET_PDEATHSIG), only temporary directories may be left behind.
void OnStopSignal(int sig) {
  if (g_stop.exchange(true)) {
    static const char kMsg[] = "shelf-bench: second signal, exiting now\n";
    ssize_t unused = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    (void)unused;
    _exit(128 + sig);
  }
  static const char kMsg[] = "shelf-bench: stopping (again to force)\n";
  ssize_t unused = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
  (void)unused;
}

void InstallStopHandlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: library calls (gRPC, RocksDB, hiredis) keep their blocking
  // semantics; the benches poll StopRequested() between operations.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  // A peer that vanishes must be an error, not a silent death.
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace

bool StopRequested() { return g_stop.load(std::memory_order_relaxed); }

}  // namespace shelf::bench

namespace {

constexpr char kHelp[] =
    "shelf-bench: Shelf's benchmarks\n\n"
    "Usage: shelf-bench SUBCOMMAND [flags]   (shelf-bench SUBCOMMAND --help for its flags)\n\n"
    "  replay [TRACE]   replay a Mooncake-format trace against a local (or given) cluster\n"
    "  kv               put/get through libshelf (shm and tcp) next to redis-server\n"
    "  kv-events        puts/s and lookups/s with the master's KV event stream on and off\n"
    "  transport        the tcp and shm data planes next to plain sockets and memcpy\n"
    "  ssd              the SSD tier (RocksDB) next to raw O_DIRECT I/O\n"
    "  ssd-hits         same-host SSD hits: shared memory against TCP\n"
    "  master           lookups, prefix matches and puts per second; bytes per object\n"
    "                   (--stores N: one shelf-master with N simulated stores heartbeating)\n"
    "  resp             one checked RESP load against shelf-resp and against redis-server\n"
#ifdef SHELF_BENCH_HAVE_CLIENT
    "  client           MatchPrefix latency and BatchGet throughput through libshelf\n"
#endif
    "\nEach prints a table, then one JSON object with its figures on its last line.\n"
    "docs/benchmarks.md explains the figures.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kHelp, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  shelf::ConfigureMutexDeadlockDetection();
  shelf::bench::InstallStopHandlers();
  std::string sub = argv[1];
  if (sub == "replay") return shelf::bench::Replay(argc - 1, argv + 1);
  if (sub == "kv") return shelf::bench::KvBench(argc - 1, argv + 1);
  if (sub == "kv-events") return shelf::bench::KvEventsBench(argc - 1, argv + 1);
  if (sub == "transport") return shelf::bench::TransportBench(argc - 1, argv + 1);
  if (sub == "ssd") return shelf::bench::SsdBench(argc - 1, argv + 1);
  if (sub == "ssd-hits") return shelf::bench::SsdHitsBench(argc - 1, argv + 1);
  if (sub == "master") return shelf::bench::MasterBench(argc - 1, argv + 1);
  if (sub == "resp") return shelf::bench::RespBench(argc - 1, argv + 1);
#ifdef SHELF_BENCH_HAVE_CLIENT
  if (sub == "client") return shelf::bench::ClientBench(argc - 1, argv + 1);
#endif
  std::fprintf(stderr, "shelf-bench: unknown subcommand '%s'\n%s", sub.c_str(), kHelp);
  return 2;
}
