// RedisPeer: a private redis-server and a blocking hiredis connection, the
// baseline the kv bench measures Shelf against.
//
// The server runs with persistence off (`--save '' --appendonly no`) on a
// loopback port of its own, as a child process that dies with the bench
// (PR_SET_PDEATHSIG, through Process::Spawn); the destructor stops it.
//
//   auto server = RedisServer::Start("/usr/bin/redis-server", work_dir);
//   auto conn = RedisConn::Connect((*server)->port());
//   (*conn)->Set("k", data, size);
//
// Built without hiredis (no libhiredis-dev), Start answers UNIMPLEMENTED
// and the kv bench reports its Redis rows as unavailable.
//
// RedisServer: drive from one thread. RedisConn: one thread at a time (a
// hiredis context is not thread-safe); give each thread its own.
#ifndef SHELF_TOOLS_BENCH_REDIS_PEER_H_
#define SHELF_TOOLS_BENCH_REDIS_PEER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "testing/local_cluster.h"

struct redisContext;

namespace shelf::bench {

// Whether this build can talk to Redis at all.
bool RedisSupported();

// A loopback port that was free a moment ago (a server may lose a race for
// it; RedisServer::Start then tries another).
absl::StatusOr<int> FreeLoopbackPort();

class RedisServer {
 public:
  // Starts `binary` on a free loopback port, logging to work_dir/redis.log,
  // and waits (up to 10 s) until it answers PING. NOT_FOUND when the binary
  // is missing, UNIMPLEMENTED without hiredis, UNAVAILABLE when it does not
  // come up.
  // `extra_args` go after the defaults (e.g. {"--maxmemory", "1gb"}).
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(
      const std::string& binary, const std::string& work_dir,
      const std::vector<std::string>& extra_args = {});
  ~RedisServer();  // SIGTERM, then SIGKILL after 3 s
  int port() const { return port_; }

 private:
  RedisServer(std::unique_ptr<Process> process, int port)
      : process_(std::move(process)), port_(port) {}
  std::unique_ptr<Process> process_;
  int port_;
};

// One value of a pipelined SET. `data` must stay valid for the call.
struct RedisItem {
  std::string key;
  const void* data = nullptr;
  size_t size = 0;
};

class RedisConn {
 public:
  // Connects to 127.0.0.1:port; UNAVAILABLE if it cannot.
  static absl::StatusOr<std::unique_ptr<RedisConn>> Connect(int port);
  ~RedisConn();
  RedisConn(const RedisConn&) = delete;
  RedisConn& operator=(const RedisConn&) = delete;

  // Errors: UNAVAILABLE when the connection broke (the connection is then
  // unusable), INTERNAL for an error reply.
  absl::Status Ping();
  absl::Status Set(const std::string& key, const void* data, size_t size);
  // Copies the value into `buffer`; NOT_FOUND on a missing key,
  // OUT_OF_RANGE when it is larger than `capacity`.
  absl::Status GetInto(const std::string& key, void* buffer, size_t capacity, size_t* size);
  // One pipeline: every SET is sent before the first reply is read.
  absl::Status PipelinedSet(const std::vector<RedisItem>& items);
  // One pipeline of GETs; values[i] is empty for a missing key, and
  // `missing` counts them.
  absl::Status PipelinedGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                            size_t* missing);
  absl::Status FlushAll();
  // The halves of a pipeline: send every command, then read every reply
  // (values[i] as PipelinedGet's). Lets a caller keep several connections'
  // pipelines in flight at once.
  absl::Status AppendSets(const std::vector<const RedisItem*>& items);
  absl::Status ReadSetReplies(size_t n);
  absl::Status AppendGets(const std::vector<const std::string*>& keys);
  absl::Status ReadGetReplies(const std::vector<std::string*>& values, size_t* missing);

 private:
  explicit RedisConn(redisContext* ctx) : ctx_(ctx) {}
  redisContext* ctx_;
};

// One bench thread's view of several redis-servers: a connection to each,
// keys sharded by hash, as a client library shards a Redis fleet. Batches
// are cut into pipelines of at most `pipeline_bytes` of values (the most
// one Shelf data-plane request carries); each round sends one pipeline to
// every server that has one left before reading any reply, so the servers
// work in parallel as Shelf's stores do. One thread at a time.
class RedisShards {
 public:
  // Connects to every port; UNAVAILABLE if one cannot be reached.
  static absl::StatusOr<std::unique_ptr<RedisShards>> Connect(const std::vector<int>& ports,
                                                              size_t pipeline_bytes);
  size_t Shard(const std::string& key) const;
  RedisConn* conn(size_t shard) { return conns_[shard].get(); }
  absl::Status Set(const std::string& key, const void* data, size_t size) {
    return conns_[Shard(key)]->Set(key, data, size);
  }
  absl::Status GetInto(const std::string& key, void* buffer, size_t capacity, size_t* size) {
    return conns_[Shard(key)]->GetInto(key, buffer, capacity, size);
  }
  absl::Status PipelinedSet(const std::vector<RedisItem>& items);
  // values[i] is empty for a missing key; `missing` counts them.
  absl::Status PipelinedGet(const std::vector<std::string>& keys, size_t value_bytes,
                            std::vector<std::string>* values, size_t* missing);
  // FLUSHALL on every server.
  absl::Status FlushAll();

 private:
  // The items of each pipeline round: per shard, the indexes it sends.
  std::vector<std::vector<std::vector<size_t>>> Rounds(const std::vector<size_t>& shard_of,
                                                       size_t value_bytes) const;
  std::vector<std::unique_ptr<RedisConn>> conns_;
  size_t pipeline_bytes_ = 0;
};

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_REDIS_PEER_H_
