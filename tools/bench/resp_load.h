// The RESP load of `shelf-bench resp`: the bench's own client, so that both
// servers are given the same work and every answer is checked, which
// redis-benchmark cannot do (it sets one value of fixed bytes over a key
// space it revisits, and reads nothing back).
//
// A run is two phases over `requests` fresh keys, split between `clients`
// connections (a thread each), each connection keeping `pipeline` commands
// in flight:
//   SET  every key once, a value of its own: a 16-byte stamp (the run's
//        seed and the key's index) then a window of a random pool, so no
//        two values are alike and none repeats what the server holds;
//   GET  every key once; the answer must be the value set, byte for byte.
// A nil answer is counted as a miss (a server evicting under its memory
// limit), a wrong one as a mismatch, an error reply or a broken connection
// ends the run with its message.
//
//   RespLoadOptions o;
//   o.port = 6379; o.value_bytes = 1 << 20; o.clients = 8; o.pipeline = 16;
//   o.requests = 2048; o.key_prefix = "run1:redis:";
//   RespLoadResult r = RunRespLoad(o);
#ifndef SHELF_TOOLS_BENCH_RESP_LOAD_H_
#define SHELF_TOOLS_BENCH_RESP_LOAD_H_

#include <cstdint>
#include <string>

namespace shelf::bench {

struct RespLoadOptions {
  int port = 0;          // on 127.0.0.1
  std::string tls_ca;    // non-empty: TLS, the server's certificate signed by this CA
  std::string password;  // non-empty: AUTH first
  uint64_t value_bytes = 0;
  int clients = 1;
  int pipeline = 1;
  uint64_t requests = 0;   // keys, each SET once and read once
  std::string key_prefix;  // fresh for every run: the keys are key_prefix + index
  uint64_t seed = 1;       // of the stamps and the random pool
};

struct RespLoadResult {
  double set_per_s = 0;
  double get_per_s = 0;
  uint64_t sets = 0;        // answered +OK
  uint64_t gets = 0;        // answered with the value set
  uint64_t misses = 0;      // answered nil
  uint64_t mismatches = 0;  // answered with other bytes
  std::string error;        // empty unless a command failed
};

RespLoadResult RunRespLoad(const RespLoadOptions& options);

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_RESP_LOAD_H_
