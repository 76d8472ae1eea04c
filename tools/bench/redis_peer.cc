#include "tools/bench/redis_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

#ifdef SHELF_BENCH_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace shelf::bench {

absl::StatusOr<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError("socket failed");
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::UnavailableError("cannot bind a loopback port");
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

#ifdef SHELF_BENCH_HAVE_HIREDIS

bool RedisSupported() { return true; }

namespace {

// Takes ownership of a reply; frees it on scope exit.
struct Reply {
  explicit Reply(void* reply) : r(static_cast<redisReply*>(reply)) {}
  ~Reply() {
    if (r != nullptr) freeReplyObject(r);
  }
  redisReply* r;
};

absl::Status ContextError(redisContext* ctx, const char* what) {
  return absl::UnavailableError(
      absl::StrCat("redis ", what, ": ", ctx->errstr[0] ? ctx->errstr : "connection lost"));
}

absl::Status ReplyError(const redisReply* r, const char* what) {
  return absl::InternalError(absl::StrCat("redis ", what, ": ", r->str ? r->str : "error"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(
    const std::string& binary, const std::string& work_dir,
    const std::vector<std::string>& extra_args) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no redis-server at ", binary));
  }
  absl::Status last = absl::UnavailableError("redis-server did not start");
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<int> port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    std::vector<std::string> argv = {binary,   "--port",       std::to_string(*port),
                                     "--bind", "127.0.0.1",    "--save",
                                     "",       "--appendonly", "no",
                                     "--dir",  work_dir,       "--daemonize",
                                     "no",     "--loglevel",   "warning"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    auto proc = Process::Spawn(argv, work_dir + "/redis.log");
    if (!proc.ok()) return proc.status();
    uint64_t until = MonoMs() + 10000;
    while (MonoMs() < until && (*proc)->Running()) {
      absl::StatusOr<std::unique_ptr<RedisConn>> conn = RedisConn::Connect(*port);
      if (conn.ok() && (*conn)->Ping().ok()) {
        return std::unique_ptr<RedisServer>(new RedisServer(*std::move(proc), *port));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    last = absl::UnavailableError(absl::StrCat("redis-server did not answer on port ", *port,
                                               "; see ", work_dir, "/redis.log"));
  }
  return last;
}

RedisServer::~RedisServer() = default;  // Process's destructor stops it

absl::StatusOr<std::unique_ptr<RedisConn>> RedisConn::Connect(int port) {
  struct timeval tv = {30, 0};
  redisContext* ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (ctx == nullptr) return absl::UnavailableError("redis: out of memory");
  if (ctx->err != 0) {
    absl::Status s = ContextError(ctx, "connect");
    redisFree(ctx);
    return s;
  }
  redisSetTimeout(ctx, tv);
  return std::unique_ptr<RedisConn>(new RedisConn(ctx));
}

RedisConn::~RedisConn() { redisFree(ctx_); }

absl::Status RedisConn::Ping() {
  Reply rep(redisCommand(ctx_, "PING"));
  if (rep.r == nullptr) return ContextError(ctx_, "PING");
  if (rep.r->type == REDIS_REPLY_ERROR) return ReplyError(rep.r, "PING");
  return absl::OkStatus();
}

absl::Status RedisConn::Set(const std::string& key, const void* data, size_t size) {
  Reply rep(redisCommand(ctx_, "SET %b %b", key.data(), key.size(), data, size));
  if (rep.r == nullptr) return ContextError(ctx_, "SET");
  if (rep.r->type == REDIS_REPLY_ERROR) return ReplyError(rep.r, "SET");
  return absl::OkStatus();
}

absl::Status RedisConn::GetInto(const std::string& key, void* buffer, size_t capacity,
                                size_t* size) {
  Reply rep(redisCommand(ctx_, "GET %b", key.data(), key.size()));
  if (rep.r == nullptr) return ContextError(ctx_, "GET");
  if (rep.r->type == REDIS_REPLY_ERROR) return ReplyError(rep.r, "GET");
  if (rep.r->type == REDIS_REPLY_NIL) return absl::NotFoundError("no such key");
  *size = rep.r->len;
  if (rep.r->len > capacity) return absl::OutOfRangeError("value larger than the buffer");
  std::memcpy(buffer, rep.r->str, rep.r->len);
  return absl::OkStatus();
}

absl::Status RedisConn::PipelinedSet(const std::vector<RedisItem>& items) {
  for (const RedisItem& it : items) {
    if (redisAppendCommand(ctx_, "SET %b %b", it.key.data(), it.key.size(), it.data, it.size) !=
        REDIS_OK) {
      return ContextError(ctx_, "SET");
    }
  }
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < items.size(); ++i) {
    void* r = nullptr;
    if (redisGetReply(ctx_, &r) != REDIS_OK) return ContextError(ctx_, "SET");
    Reply rep(r);
    if (rep.r->type == REDIS_REPLY_ERROR && first.ok()) first = ReplyError(rep.r, "SET");
  }
  return first;
}

absl::Status RedisConn::PipelinedGet(const std::vector<std::string>& keys,
                                     std::vector<std::string>* values, size_t* missing) {
  for (const std::string& k : keys) {
    if (redisAppendCommand(ctx_, "GET %b", k.data(), k.size()) != REDIS_OK) {
      return ContextError(ctx_, "GET");
    }
  }
  values->resize(keys.size());
  *missing = 0;
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < keys.size(); ++i) {
    void* r = nullptr;
    if (redisGetReply(ctx_, &r) != REDIS_OK) return ContextError(ctx_, "GET");
    Reply rep(r);
    if (rep.r->type == REDIS_REPLY_STRING) {
      (*values)[i].assign(rep.r->str, rep.r->len);
    } else {
      (*values)[i].clear();
      if (rep.r->type == REDIS_REPLY_NIL) {
        ++*missing;
      } else if (first.ok()) {
        first = ReplyError(rep.r, "GET");
      }
    }
  }
  return first;
}

absl::Status RedisConn::FlushAll() {
  Reply rep(redisCommand(ctx_, "FLUSHALL"));
  if (rep.r == nullptr) return ContextError(ctx_, "FLUSHALL");
  if (rep.r->type == REDIS_REPLY_ERROR) return ReplyError(rep.r, "FLUSHALL");
  return absl::OkStatus();
}

absl::Status RedisConn::AppendSets(const std::vector<const RedisItem*>& items) {
  for (const RedisItem* it : items) {
    if (redisAppendCommand(ctx_, "SET %b %b", it->key.data(), it->key.size(), it->data, it->size) !=
        REDIS_OK) {
      return ContextError(ctx_, "SET");
    }
  }
  return absl::OkStatus();
}

absl::Status RedisConn::ReadSetReplies(size_t n) {
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < n; ++i) {
    void* r = nullptr;
    if (redisGetReply(ctx_, &r) != REDIS_OK) return ContextError(ctx_, "SET");
    Reply rep(r);
    if (rep.r->type == REDIS_REPLY_ERROR && first.ok()) first = ReplyError(rep.r, "SET");
  }
  return first;
}

absl::Status RedisConn::AppendGets(const std::vector<const std::string*>& keys) {
  for (const std::string* k : keys) {
    if (redisAppendCommand(ctx_, "GET %b", k->data(), k->size()) != REDIS_OK) {
      return ContextError(ctx_, "GET");
    }
  }
  return absl::OkStatus();
}

absl::Status RedisConn::ReadGetReplies(const std::vector<std::string*>& values, size_t* missing) {
  absl::Status first = absl::OkStatus();
  for (std::string* v : values) {
    void* r = nullptr;
    if (redisGetReply(ctx_, &r) != REDIS_OK) return ContextError(ctx_, "GET");
    Reply rep(r);
    if (rep.r->type == REDIS_REPLY_STRING) {
      v->assign(rep.r->str, rep.r->len);
    } else {
      v->clear();
      if (rep.r->type == REDIS_REPLY_NIL) {
        ++*missing;
      } else if (first.ok()) {
        first = ReplyError(rep.r, "GET");
      }
    }
  }
  return first;
}

#else  // !SHELF_BENCH_HAVE_HIREDIS

bool RedisSupported() { return false; }

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(const std::string&,
                                                                const std::string&,
                                                                const std::vector<std::string>&) {
  (void)FreeLoopbackPort;
  return absl::UnimplementedError("shelf-bench was built without hiredis (libhiredis-dev)");
}
RedisServer::~RedisServer() = default;
absl::StatusOr<std::unique_ptr<RedisConn>> RedisConn::Connect(int) {
  return absl::UnimplementedError("built without hiredis");
}
RedisConn::~RedisConn() = default;
absl::Status RedisConn::Ping() { return absl::UnimplementedError("built without hiredis"); }
absl::Status RedisConn::Set(const std::string&, const void*, size_t) {
  return absl::UnimplementedError("built without hiredis");
}
absl::Status RedisConn::GetInto(const std::string&, void*, size_t, size_t*) {
  return absl::UnimplementedError("built without hiredis");
}
absl::Status RedisConn::PipelinedSet(const std::vector<RedisItem>&) {
  return absl::UnimplementedError("built without hiredis");
}
absl::Status RedisConn::PipelinedGet(const std::vector<std::string>&, std::vector<std::string>*,
                                     size_t*) {
  return absl::UnimplementedError("built without hiredis");
}
absl::Status RedisConn::FlushAll() { return absl::UnimplementedError("built without hiredis"); }
absl::Status RedisConn::AppendSets(const std::vector<const RedisItem*>&) {
  return absl::UnimplementedError("built without hiredis");
}
absl::Status RedisConn::ReadSetReplies(size_t) {
  return absl::UnimplementedError("built without hiredis");
}
absl::Status RedisConn::AppendGets(const std::vector<const std::string*>&) {
  return absl::UnimplementedError("built without hiredis");
}
absl::Status RedisConn::ReadGetReplies(const std::vector<std::string*>&, size_t*) {
  return absl::UnimplementedError("built without hiredis");
}

#endif  // SHELF_BENCH_HAVE_HIREDIS

absl::StatusOr<std::unique_ptr<RedisShards>> RedisShards::Connect(const std::vector<int>& ports,
                                                                  size_t pipeline_bytes) {
  if (ports.empty()) return absl::InvalidArgumentError("no redis-servers");
  auto shards = std::make_unique<RedisShards>();
  shards->pipeline_bytes_ = pipeline_bytes;
  for (int port : ports) {
    absl::StatusOr<std::unique_ptr<RedisConn>> c = RedisConn::Connect(port);
    if (!c.ok()) return c.status();
    shards->conns_.push_back(*std::move(c));
  }
  return shards;
}

size_t RedisShards::Shard(const std::string& key) const {
  return std::hash<std::string>{}(key) % conns_.size();
}

std::vector<std::vector<std::vector<size_t>>> RedisShards::Rounds(
    const std::vector<size_t>& shard_of, size_t value_bytes) const {
  const size_t per_pipeline =
      std::max<size_t>(1, pipeline_bytes_ / std::max<size_t>(1, value_bytes));
  std::vector<std::vector<size_t>> by_shard(conns_.size());
  for (size_t i = 0; i < shard_of.size(); ++i) by_shard[shard_of[i]].push_back(i);
  std::vector<std::vector<std::vector<size_t>>> rounds;
  for (size_t s = 0; s < by_shard.size(); ++s) {
    for (size_t start = 0, r = 0; start < by_shard[s].size(); start += per_pipeline, ++r) {
      if (rounds.size() <= r) rounds.emplace_back(conns_.size());
      size_t end = std::min(by_shard[s].size(), start + per_pipeline);
      rounds[r][s].assign(by_shard[s].begin() + start, by_shard[s].begin() + end);
    }
  }
  return rounds;
}

absl::Status RedisShards::PipelinedSet(const std::vector<RedisItem>& items) {
  std::vector<size_t> shard_of(items.size());
  for (size_t i = 0; i < items.size(); ++i) shard_of[i] = Shard(items[i].key);
  absl::Status first = absl::OkStatus();
  for (const auto& round : Rounds(shard_of, items.empty() ? 1 : items[0].size)) {
    for (size_t s = 0; s < round.size(); ++s) {
      if (round[s].empty()) continue;
      std::vector<const RedisItem*> part;
      for (size_t i : round[s]) part.push_back(&items[i]);
      if (absl::Status st = conns_[s]->AppendSets(part); !st.ok()) return st;
    }
    for (size_t s = 0; s < round.size(); ++s) {
      if (round[s].empty()) continue;
      absl::Status st = conns_[s]->ReadSetReplies(round[s].size());
      if (!st.ok() && first.ok()) first = st;
    }
  }
  return first;
}

absl::Status RedisShards::PipelinedGet(const std::vector<std::string>& keys, size_t value_bytes,
                                       std::vector<std::string>* values, size_t* missing) {
  values->resize(keys.size());
  *missing = 0;
  std::vector<size_t> shard_of(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) shard_of[i] = Shard(keys[i]);
  absl::Status first = absl::OkStatus();
  for (const auto& round : Rounds(shard_of, value_bytes)) {
    for (size_t s = 0; s < round.size(); ++s) {
      if (round[s].empty()) continue;
      std::vector<const std::string*> part;
      for (size_t i : round[s]) part.push_back(&keys[i]);
      if (absl::Status st = conns_[s]->AppendGets(part); !st.ok()) return st;
    }
    for (size_t s = 0; s < round.size(); ++s) {
      if (round[s].empty()) continue;
      std::vector<std::string*> out;
      for (size_t i : round[s]) out.push_back(&(*values)[i]);
      absl::Status st = conns_[s]->ReadGetReplies(out, missing);
      if (!st.ok() && first.ok()) first = st;
    }
  }
  return first;
}

absl::Status RedisShards::FlushAll() {
  absl::Status first = absl::OkStatus();
  for (auto& c : conns_) {
    absl::Status st = c->FlushAll();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

}  // namespace shelf::bench
