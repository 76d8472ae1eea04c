// CommandHandler: runs one Redis command against a Shelf cluster through
// libshelf and encodes its reply (docs/resp.md lists the commands and their
// semantics). The network side (resp_server.h) owns the connections and
// calls Execute for each parsed command of a connection, one at a time, in
// order.
//
// A value is stored as one Shelf block with a trailer byte
// (server/resp/resp_value.h).
//
// Thread-safety: Execute may run on many threads at once for distinct
// sessions; one Session is used by one thread at a time.
#ifndef SHELF_SERVER_RESP_RESP_COMMANDS_H_
#define SHELF_SERVER_RESP_RESP_COMMANDS_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/prom.h"
#include "server/resp/resp_auth.h"
#include "server/resp/resp_parser.h"
#include "server/resp/resp_value.h"
#include "shelf/client.h"

namespace shelf::resp {

// SCAN cursors handed out and not yet finished, over all connections; the
// oldest is forgotten beyond this (its next SCAN gets "-ERR invalid cursor").
inline constexpr size_t kScanCursorsMax = 65536;

struct CommandOptions {
  std::string requirepass;  // the default user's password; empty: none
  // Named users (docs/resp.md, "Users"): name -> password, and how to open
  // the libshelf client a session authenticated as one runs its commands
  // with (called once per user, on its first AUTH).
  std::map<std::string, std::string> users;
  std::function<absl::StatusOr<std::unique_ptr<Client>>(const std::string& user)> open_user;
  uint32_t replicas = 1;
  bool flush_enabled = false;  // FLUSHDB / FLUSHALL
  uint64_t max_value_bytes = 512ull << 20;
  // The values one MGET may hold (--max-inflight-bytes).
  uint64_t max_inflight_bytes = 2ull << 30;
  // The largest value a GET the event loop serves may have
  // (--max-loop-get-bytes; ReplyCachedGets): one whose location is cached
  // is copied out of the store's memory, checked and sent by the loop; a
  // larger one goes to a worker, which leases it and sends it from where
  // it lies.
  static constexpr uint64_t kLoopGetBytesMaxDefault = 4 << 20;
  uint64_t loop_get_bytes_max = kLoopGetBytesMaxDefault;
  std::string listen;  // for INFO
};

// Figures INFO reports and /metrics serves (docs/metrics.md, "Front end").
// The counters live in DefaultExposition(); the gauges are read by callbacks.
struct ServerStats {
  ServerStats();
  ServerStats(const ServerStats&) = delete;
  ServerStats& operator=(const ServerStats&) = delete;

  prom::Counter& commands;
  prom::Counter& errors;  // commands answered with an error
  prom::Counter& hits;
  prom::Counter& misses;
  prom::Counter& total_connections;
  prom::Counter& rejected_connections;  // over --max-clients
  prom::Counter& inflight_rejections;   // -OOM for --max-inflight-bytes
  prom::Counter& bytes_in;
  prom::Counter& bytes_out;
  prom::Counter& tls_handshakes;          // TLS connections that completed the handshake
  prom::Counter& tls_handshake_failures;  // TLS connections closed in the handshake
  prom::Counter& auth_failures;           // AUTH or HELLO AUTH with a wrong password
  prom::Counter& auth_backoffs;           // ... refused during an address's back-off
  prom::Counter& values_in_place;         // GET values read in a store's mapped segment
  prom::Counter& direct_sent_bytes;       // ... sent by a worker itself (DirectSink)
  prom::Counter& direct_cut;              // ... replies the socket took part of in time
  prom::Counter& direct_received_bytes;   // value bytes read straight into their argument
  prom::Counter& placed_values;           // SET values read into the value arena
  prom::Counter& unplaced_values;         // ... that found no room there
  prom::Counter& loop_gets;               // GETs answered on the event loop (ServeCached)
  std::atomic<int64_t> connected_clients{0};
  std::atomic<int64_t> inflight_bytes{0};

 private:
  std::vector<prom::CallbackHandle> gauges_;
};

// Per-connection state.
struct Session {
  uint64_t id = 0;
  int protocol = 2;
  bool authenticated = false;
  std::string user = "default";
  Client* client = nullptr;  // a named user's client; null: the default user's
  std::string name;
  std::string lib_name, lib_ver;
  std::string peer;
  int64_t created_unix_s = 0;
};

// The connection's socket, for replies sent from where their bytes lie
// (a value in a store's mapped segment) instead of through the reply
// queue. The server gives one to a command of a plain (not TLS)
// connection.
class DirectSink {
 public:
  virtual ~DirectSink() = default;
  // Writes a prefix of `iov` to the client now, when none of the
  // connection's earlier replies waits to be sent (else nothing), waiting
  // for the socket to take it until `until_mono_ms` (MonoMs) at the
  // latest. Returns the bytes written; the caller queues the rest, copied,
  // in ReplyChunks.
  virtual size_t Send(const iovec* iov, int iovcnt, uint64_t until_mono_ms) = 0;
};

// The reply of one command: small parts are appended to the last string,
// a large value is moved in as its own chunk (no copy).
struct ReplyChunks {
  std::deque<std::string> chunks;
  size_t bytes = 0;
  DirectSink* direct = nullptr;  // null: queue everything
  // Nothing added yet.
  bool empty() const {
    for (const std::string& c : chunks) {
      if (!c.empty()) return false;
    }
    return true;
  }
  std::string* tail() {
    if (chunks.empty()) chunks.emplace_back();
    return &chunks.back();
  }
  void AddOwned(std::string&& s) {
    bytes += s.size();
    chunks.push_back(std::move(s));
    chunks.emplace_back();
  }
};

class CommandHandler {
 public:
  CommandHandler(Client* client, CommandOptions options, ServerStats* stats);

  // Runs `args` (args[0] the command name) for `session`, appending the reply
  // to `out`. Sets `*close` after QUIT. May block on the cluster. `value`
  // (optional): the SET's value the parser placed (args[2] then empty).
  void Execute(Session* session, std::vector<std::string>* args, ReplyChunks* out, bool* close,
               PlacedValue* value = nullptr);

  // Pipelines (resp_pipeline.cc). A run of consecutive plain `GET key` or
  // plain `SET key value` commands of one connection may be executed
  // together, with one batch call for the run instead of one call per
  // command; the replies are exactly those of running them one by one.
  enum class BatchKind { kNone, kGet, kSet };
  // Whether `args` may join a run, for `session` (authenticated, key valid).
  // `placed_bytes`: the size of the SET's placed value, if any.
  BatchKind Batchable(const Session& session, const std::vector<std::string>& args,
                      size_t placed_bytes = 0) const;
  // Runs `commands`, all of `kind`, appending one reply per command.
  // `values` (optional, one per command): the SETs' placed values.
  void ExecuteRun(Session* session, BatchKind kind, std::vector<std::vector<std::string>>* commands,
                  ReplyChunks* out, std::vector<PlacedValue>* values = nullptr);
  // The most commands one run takes: SETs up to libshelf's batch limit
  // (their values are in memory already, under --max-inflight-bytes); GETs
  // fewer, as a run holds all its values at once before they are sent.
  static constexpr size_t kSetRunCommandsMax = kBatchItemsMax;
  static constexpr size_t kGetRunCommandsMax = 32;
  // The most value bytes ReplyCachedGets copies for one run: the event
  // loop serves every connection, and a larger run goes to a worker, which
  // sends large values from where they lie under a lease.
  static constexpr uint64_t kCachedRunBytesMax = 16 << 20;
  // Replies to a run of plain GETs (Batchable kGet; `keys` one per
  // command) if none of their values needs a round trip to read
  // (Client::BatchGetViewsCached), appending one reply each to `out`, as
  // ExecuteRun would: true. False, with nothing appended and nothing
  // counted, when any does, when one is over loop_get_bytes_max, or when
  // together they are over kCachedRunBytesMax; the caller then runs them
  // as usual. Never waits on the network: the event loop calls it.
  bool ReplyCachedGets(const Session& session, const std::vector<std::string>& keys,
                       ReplyChunks* out);

  const CommandOptions& options() const { return options_; }

 private:
  // One command being run.
  struct Ctx {
    Session* session;
    std::vector<std::string>* args;
    ReplyChunks* out;
    bool* close;
    std::string name;              // lower case
    Client* client;                // the session user's
    PlacedValue* value = nullptr;  // SET's value, when placed (arg(2) then empty)
    RespWriter w() { return RespWriter(out->tail(), session->protocol); }
    const std::string& arg(size_t i) const { return (*args)[i]; }
    size_t argc() const { return args->size(); }
    void Error(const std::string& text) { w().Error(text); }
    void Ok() { w().Simple("OK"); }
    void Syntax() { Error("ERR syntax error"); }
  };
  void Dispatch(Ctx& c);
  // AUTH's and HELLO's check of `user` and `password` (resp_auth.h): true
  // when they pass; otherwise the error reply is written.
  bool Authenticate(Ctx& c, const std::string& user, const std::string& password);
  void Hello(Ctx& c);
  void ClientCmd(Ctx& c);
  void CommandCmd(Ctx& c);
  void Info(Ctx& c);
  void Get(Ctx& c, bool del);
  void SetCmd(Ctx& c, bool nx_only);
  void MGet(Ctx& c);
  void MSet(Ctx& c);
  void ExistsCmd(Ctx& c);
  void Del(Ctx& c);
  void Strlen(Ctx& c);
  void TypeTtl(Ctx& c);
  void Scan(Ctx& c);
  void Keys(Ctx& c);
  void Flush(Ctx& c);

  // The client `session`'s commands run with.
  Client* ClientOf(const Session& session) const {
    return session.client != nullptr ? session.client : client_;
  }
  // A named user's client, opened on its first use and kept.
  absl::StatusOr<Client*> UserClient(const std::string& user) ABSL_LOCKS_EXCLUDED(users_mu_);

  // Stores `block` (a value with its trailer: EncodeValue) as `key` through
  // `client`, replacing a different existing value unless `nx`. *written
  // false when nx and the key exists.
  Status Store(Client* client, const std::string& key, absl::string_view block, bool nx,
               bool* written);
  // Reads `key` into *value without the trailer.
  Status Load(Client* client, const std::string& key, std::string* value);
  // GET's reply for each of `keys`, in order (kGets), or MGET's for all
  // of them (kMget), appended to `out`: read with
  // Client::BatchGetViews, and sent from where the values lie through
  // out->direct when it takes them (a reply of errors and nils alone is
  // queued), the rest copied into `out`. Counts hits and misses; returns
  // the error replies, for the caller to count.
  // kMget: one array (nil for a miss or another client's block), or one
  // error for the command; its values bounded by --max-inflight-bytes.
  enum class ValuesReply { kGets, kMget };
  size_t ReplyValues(const Session& session, Client* client, const std::vector<std::string>& keys,
                     ValuesReply kind, ReplyChunks* out);
  // ReplyValues's replies from views `read` hands to its callback (as
  // BatchGetViews does): `read`'s status, the replies appended and their
  // errors added to *errors only when it is OK.
  Status ReplyFromViews(const Session& session,
                        const std::function<Status(const Client::ViewsFn&)>& read, ValuesReply kind,
                        ReplyChunks* out, size_t* errors);
  Status CountKeys(Client* client, uint64_t* n);
  Status ExistsMany(Client* client, const std::vector<std::string>& keys,
                    std::vector<bool>* present);
  // SCAN cursors: numbers for positions in the master's key listing of one
  // user, the newest kScanCursorsMax kept (used ones too: they may be
  // retried). Another user's cursor is not found.
  uint64_t NewScanCursor(const std::string& user, std::string shelf_cursor);
  bool FindScanCursor(const std::string& user, uint64_t id, std::string* shelf_cursor);

  Client* const client_;  // the default user's
  const CommandOptions options_;
  ServerStats* const stats_;
  const int64_t start_unix_s_;
  PasswordCheck password_;

  Mutex users_mu_;
  std::map<std::string, std::unique_ptr<Client>> user_clients_ ABSL_GUARDED_BY(users_mu_);

  struct ScanCursor {
    std::string user;
    std::string shelf_cursor;
  };
  Mutex cursors_mu_;
  uint64_t next_cursor_ ABSL_GUARDED_BY(cursors_mu_) = 1;
  std::map<uint64_t, ScanCursor> cursors_ ABSL_GUARDED_BY(cursors_mu_);
};

}  // namespace shelf::resp

#endif  // SHELF_SERVER_RESP_RESP_COMMANDS_H_
