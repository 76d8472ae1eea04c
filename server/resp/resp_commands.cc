#include "server/resp/resp_commands.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/resp/resp_parser.h"

namespace shelf::resp {

namespace {

int64_t NowUnixS() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Upper(const std::string& s) { return absl::AsciiStrToUpper(s); }

// How a Shelf status reads to a Redis client (docs/resp.md, "Errors").
std::string ErrorText(const Status& s) {
  if (s.code() == StatusCode::kResourceExhausted) return "OOM " + s.message();
  return "ERR " + s.message();
}

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Commands this front end knows: name, arity (negative: at least), flags.
struct CommandInfo {
  const char* name;
  int arity;
  const char* flag;
  int first_key, last_key, step;
};
constexpr CommandInfo kCommands[] = {
    {"ping", -1, "fast", 0, 0, 0},       {"echo", 2, "fast", 0, 0, 0},
    {"quit", -1, "fast", 0, 0, 0},       {"reset", 1, "fast", 0, 0, 0},
    {"hello", -1, "fast", 0, 0, 0},      {"auth", -2, "fast", 0, 0, 0},
    {"select", 2, "fast", 0, 0, 0},      {"client", -2, "admin", 0, 0, 0},
    {"command", -1, "loading", 0, 0, 0}, {"info", -1, "loading", 0, 0, 0},
    {"dbsize", 1, "readonly", 0, 0, 0},  {"get", 2, "readonly", 1, 1, 1},
    {"set", -3, "write", 1, 1, 1},       {"setnx", 3, "write", 1, 1, 1},
    {"getdel", 2, "write", 1, 1, 1},     {"mget", -2, "readonly", 1, -1, 1},
    {"mset", -3, "write", 1, -1, 2},     {"exists", -2, "readonly", 1, -1, 1},
    {"del", -2, "write", 1, -1, 1},      {"unlink", -2, "write", 1, -1, 1},
    {"strlen", 2, "readonly", 1, 1, 1},  {"type", 2, "readonly", 1, 1, 1},
    {"ttl", 2, "readonly", 1, 1, 1},     {"pttl", 2, "readonly", 1, 1, 1},
    {"scan", -2, "readonly", 0, 0, 0},   {"keys", 2, "readonly", 0, 0, 0},
    {"flushdb", -1, "write", 0, 0, 0},   {"flushall", -1, "write", 0, 0, 0},
};

const CommandInfo* FindCommand(const std::string& lower) {
  for (const CommandInfo& c : kCommands) {
    if (lower == c.name) return &c;
  }
  return nullptr;
}

}  // namespace

struct CommandHandler::Ctx {
  Session* session;
  std::vector<std::string>* args;
  ReplyChunks* out;
  bool* close;
  std::string name;  // lower case
  RespWriter w() { return RespWriter(out->tail(), session->protocol); }
  const std::string& arg(size_t i) const { return (*args)[i]; }
  size_t argc() const { return args->size(); }
  void Error(const std::string& text) { w().Error(text); }
  void Ok() { w().Simple("OK"); }
  void Syntax() { Error("ERR syntax error"); }
};

ServerStats::ServerStats()
    : commands(DefaultRegistry()
                   .AddCounter("shelf_resp_commands_total", "Commands run by shelf-resp.")
                   .WithLabels()),
      errors(DefaultRegistry()
                 .AddCounter("shelf_resp_errors_total", "Commands answered with an error.")
                 .WithLabels()),
      hits(DefaultRegistry()
               .AddCounter("shelf_resp_keyspace_hits_total", "GET and MGET keys found.")
               .WithLabels()),
      misses(DefaultRegistry()
                 .AddCounter("shelf_resp_keyspace_misses_total", "GET and MGET keys missing.")
                 .WithLabels()),
      total_connections(DefaultRegistry()
                            .AddCounter("shelf_resp_connections_total", "Connections accepted.")
                            .WithLabels()),
      rejected_connections(DefaultRegistry()
                               .AddCounter("shelf_resp_rejected_connections_total",
                                           "Connections refused over --max-clients.")
                               .WithLabels()),
      inflight_rejections(DefaultRegistry()
                              .AddCounter("shelf_resp_inflight_rejections_total",
                                          "Connections closed with -OOM over "
                                          "--max-inflight-bytes.")
                              .WithLabels()),
      bytes_in(DefaultRegistry()
                   .AddCounter("shelf_resp_received_bytes_total", "Bytes read from clients.")
                   .WithLabels()),
      bytes_out(DefaultRegistry()
                    .AddCounter("shelf_resp_sent_bytes_total", "Bytes written to clients.")
                    .WithLabels()) {
  gauges_.push_back(DefaultRegistry().AddCallbackGauge(
      "shelf_resp_connections", "Client connections open.",
      [this] { return static_cast<double>(connected_clients.load()); }));
  gauges_.push_back(DefaultRegistry().AddCallbackGauge(
      "shelf_resp_inflight_bytes", "Request bytes held in memory (--max-inflight-bytes).",
      [this] { return static_cast<double>(inflight_bytes.load()); }));
}

CommandHandler::CommandHandler(Client* client, CommandOptions options, ServerStats* stats)
    : client_(client), options_(std::move(options)), stats_(stats), start_unix_s_(NowUnixS()) {}

void CommandHandler::Execute(Session* session, std::vector<std::string>* args, ReplyChunks* out,
                             bool* close) {
  Ctx c{session, args, out, close, absl::AsciiStrToLower((*args)[0])};
  stats_->commands.Inc(1);
  std::string* tail = out->tail();
  size_t chunks = out->chunks.size(), before = tail->size();
  Dispatch(c);
  // An error reply is one small line, in the tail it started in.
  if (out->chunks.size() == chunks && tail->size() > before && (*tail)[before] == '-') {
    stats_->errors.Inc(1);
  }
}

void CommandHandler::Dispatch(Ctx& c) {
  const std::string& n = c.name;
  const CommandInfo* info = FindCommand(n);
  if (info == nullptr) {
    std::string shown = c.arg(0).substr(0, 128);
    c.Error(absl::StrCat("ERR unknown command '", shown, "'"));
    return;
  }
  int argc = static_cast<int>(c.argc());
  if ((info->arity > 0 && argc != info->arity) || (info->arity < 0 && argc < -info->arity)) {
    c.Error(absl::StrCat("ERR wrong number of arguments for '", n, "' command"));
    return;
  }
  if (!options_.requirepass.empty() && !c.session->authenticated && n != "auth" && n != "hello" &&
      n != "quit" && n != "reset") {
    c.Error("NOAUTH Authentication required.");
    return;
  }
  // Keys Shelf cannot hold are refused before any call.
  if (info->first_key > 0) {
    int last = info->last_key < 0 ? argc - 1 : info->last_key;
    for (int i = info->first_key; i <= last && i < argc; i += info->step) {
      const std::string& key = c.arg(static_cast<size_t>(i));
      if (key.empty() || key.size() > kKeyBytesMax) {
        c.Error(absl::StrCat("ERR key of ", key.size(), " bytes: Shelf keys are 1..", kKeyBytesMax,
                             " bytes"));
        return;
      }
    }
    if (n == "mset" && argc % 2 == 0) {
      c.Error("ERR wrong number of arguments for 'mset' command");
      return;
    }
  }
  if (n == "ping") {
    if (c.argc() > 2) return c.Error("ERR wrong number of arguments for 'ping' command");
    if (c.argc() == 2) return c.w().Bulk(c.arg(1));
    return c.w().Simple("PONG");
  }
  if (n == "echo") return c.w().Bulk(c.arg(1));
  if (n == "quit") {
    *c.close = true;
    return c.Ok();
  }
  if (n == "reset") {
    c.session->protocol = 2;
    c.session->name.clear();
    c.session->authenticated = false;
    return c.w().Simple("RESET");
  }
  if (n == "hello") return Hello(c);
  if (n == "auth") {
    if (options_.requirepass.empty()) {
      return c.Error(
          "ERR AUTH <password> called without any password configured for the default user. "
          "Are you sure your configuration is correct?");
    }
    if (c.argc() > 3) return c.Syntax();
    bool user_ok = c.argc() == 2 || c.arg(1) == "default";
    if (!user_ok || c.arg(c.argc() - 1) != options_.requirepass) {
      return c.Error("WRONGPASS invalid username-password pair or user is disabled.");
    }
    c.session->authenticated = true;
    return c.Ok();
  }
  if (n == "select") {
    if (c.arg(1) != "0") return c.Error("ERR DB index is out of range");
    return c.Ok();
  }
  if (n == "client") return ClientCmd(c);
  if (n == "command") return CommandCmd(c);
  if (n == "info") return Info(c);
  if (n == "dbsize") {
    uint64_t count = 0;
    Status s = CountKeys(&count);
    if (!s.ok()) return c.Error(ErrorText(s));
    return c.w().Integer(static_cast<int64_t>(count));
  }
  if (n == "get") return Get(c, false);
  if (n == "getdel") return Get(c, true);
  if (n == "set") return SetCmd(c, false);
  if (n == "setnx") return SetCmd(c, true);
  if (n == "mget") return MGet(c);
  if (n == "mset") return MSet(c);
  if (n == "exists") return ExistsCmd(c);
  if (n == "del" || n == "unlink") return Del(c);
  if (n == "strlen") return Strlen(c);
  if (n == "type" || n == "ttl" || n == "pttl") return TypeTtl(c);
  if (n == "scan") return Scan(c);
  if (n == "keys") return Keys(c);
  if (n == "flushdb" || n == "flushall") return Flush(c);
  c.Error(absl::StrCat("ERR unknown command '", c.arg(0).substr(0, 128), "'"));
}

void CommandHandler::Hello(Ctx& c) {
  int proto = c.session->protocol;
  size_t i = 1;
  if (c.argc() >= 2) {
    int64_t v = 0;
    if (!ParseRespInt(c.arg(1), &v)) {
      return c.Error("ERR Protocol version is not an integer or out of range");
    }
    if (v != 2 && v != 3) return c.Error("NOPROTO unsupported protocol version");
    proto = static_cast<int>(v);
    i = 2;
  }
  std::string setname;
  bool have_name = false;
  for (; i < c.argc(); ++i) {
    std::string opt = Upper(c.arg(i));
    if (opt == "AUTH" && i + 2 < c.argc()) {
      const std::string& user = c.arg(i + 1);
      const std::string& pass = c.arg(i + 2);
      // With no password configured any AUTH passes, as for Redis's
      // default `nopass` user.
      if (!options_.requirepass.empty() && (user != "default" || pass != options_.requirepass)) {
        return c.Error("WRONGPASS invalid username-password pair or user is disabled.");
      }
      c.session->authenticated = true;
      i += 2;
    } else if (opt == "SETNAME" && i + 1 < c.argc()) {
      setname = c.arg(++i);
      have_name = true;
    } else {
      return c.Error(absl::StrCat("ERR Syntax error in HELLO option '", c.arg(i), "'"));
    }
  }
  if (!options_.requirepass.empty() && !c.session->authenticated) {
    return c.Error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise "
        "the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the "
        "client and select the RESP protocol version at the same time");
  }
  c.session->protocol = proto;
  if (have_name) c.session->name = setname;
  RespWriter w = c.w();
  w.Map(7);
  w.Bulk("server");
  w.Bulk("redis");
  w.Bulk("version");
  w.Bulk("7.0.0");
  w.Bulk("proto");
  w.Integer(proto);
  w.Bulk("id");
  w.Integer(static_cast<int64_t>(c.session->id));
  w.Bulk("mode");
  w.Bulk("standalone");
  w.Bulk("role");
  w.Bulk("master");
  w.Bulk("modules");
  w.Array(0);
}

void CommandHandler::ClientCmd(Ctx& c) {
  std::string sub = Upper(c.arg(1));
  Session* s = c.session;
  auto client_line = [&] {
    return absl::StrCat("id=", s->id, " addr=", s->peer, " laddr=", options_.listen,
                        " fd=0 name=", s->name, " age=", NowUnixS() - s->created_unix_s,
                        " idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 resp=", s->protocol,
                        " lib-name=", s->lib_name, " lib-ver=", s->lib_ver, "\n");
  };
  if (sub == "SETNAME" && c.argc() == 3) {
    for (char ch : c.arg(2)) {
      if (ch <= ' ' || ch > '~') {
        return c.Error("ERR Client names cannot contain spaces, newlines or special characters.");
      }
    }
    s->name = c.arg(2);
    return c.Ok();
  }
  if (sub == "GETNAME" && c.argc() == 2) {
    if (s->name.empty()) return c.w().Null();
    return c.w().Bulk(s->name);
  }
  if (sub == "ID" && c.argc() == 2) return c.w().Integer(static_cast<int64_t>(s->id));
  if (sub == "SETINFO" && c.argc() == 4) {
    std::string attr = Upper(c.arg(2));
    if (attr == "LIB-NAME") {
      s->lib_name = c.arg(3);
    } else if (attr == "LIB-VER") {
      s->lib_ver = c.arg(3);
    } else {
      return c.Error(absl::StrCat("ERR Unrecognized option '", c.arg(2), "'"));
    }
    return c.Ok();
  }
  if ((sub == "INFO" && c.argc() == 2) || (sub == "LIST" && c.argc() == 2)) {
    return c.w().Verbatim(client_line());
  }
  c.Error(absl::StrCat("ERR unknown subcommand '", c.arg(1).substr(0, 64),
                       "'. Try CLIENT SETNAME, GETNAME, ID, SETINFO, INFO."));
}

void CommandHandler::CommandCmd(Ctx& c) {
  constexpr size_t kCount = sizeof(kCommands) / sizeof(kCommands[0]);
  auto write_info = [&](const CommandInfo& ci) {
    RespWriter w = c.w();
    w.Array(10);
    w.Bulk(ci.name);
    w.Integer(ci.arity);
    w.Set(1);
    w.Simple(ci.flag);
    w.Integer(ci.first_key);
    w.Integer(ci.last_key);
    w.Integer(ci.step);
    w.Set(0);    // ACL categories
    w.Set(0);    // tips
    w.Array(0);  // key specs
    w.Array(0);  // subcommands
  };
  if (c.argc() == 1) {
    c.w().Array(kCount);
    for (const CommandInfo& ci : kCommands) write_info(ci);
    return;
  }
  std::string sub = Upper(c.arg(1));
  if (sub == "COUNT") return c.w().Integer(static_cast<int64_t>(kCount));
  if (sub == "INFO") {
    c.w().Array(c.argc() - 2);
    for (size_t i = 2; i < c.argc(); ++i) {
      const CommandInfo* ci = FindCommand(absl::AsciiStrToLower(c.arg(i)));
      if (ci == nullptr) {
        c.w().NullArray();
      } else {
        write_info(*ci);
      }
    }
    return;
  }
  if (sub == "DOCS") {
    std::vector<const CommandInfo*> wanted;
    if (c.argc() == 2) {
      for (const CommandInfo& ci : kCommands) wanted.push_back(&ci);
    } else {
      for (size_t i = 2; i < c.argc(); ++i) {
        const CommandInfo* ci = FindCommand(absl::AsciiStrToLower(c.arg(i)));
        if (ci != nullptr) wanted.push_back(ci);
      }
    }
    RespWriter w = c.w();
    w.Map(wanted.size());
    for (const CommandInfo* ci : wanted) {
      w.Bulk(ci->name);
      w.Map(3);
      w.Bulk("summary");
      w.Bulk(absl::StrCat("Redis '", ci->name, "' on a Shelf cluster (docs/resp.md)"));
      w.Bulk("since");
      w.Bulk("1.0.0");
      w.Bulk("group");
      w.Bulk(ci->first_key > 0 ? "string" : "server");
    }
    return;
  }
  c.Error(absl::StrCat("ERR unknown subcommand '", c.arg(1).substr(0, 64),
                       "'. Try COMMAND COUNT, INFO, DOCS."));
}

void CommandHandler::Info(Ctx& c) {
  std::vector<std::string> sections;
  for (size_t i = 1; i < c.argc(); ++i) sections.push_back(absl::AsciiStrToLower(c.arg(i)));
  auto want = [&](const char* name) {
    if (sections.empty()) return true;
    for (const std::string& s : sections) {
      if (s == name || s == "all" || s == "everything" || s == "default") return true;
    }
    return false;
  };
  std::string text;
  if (want("server")) {
    absl::StrAppend(&text, "# Server\r\nredis_version:7.0.0\r\nshelf_resp_version:0.1.0\r\n",
                    "redis_mode:standalone\r\nos:Linux\r\nprocess_id:", getpid(),
                    "\r\ntcp_listen:", options_.listen,
                    "\r\nuptime_in_seconds:", NowUnixS() - start_unix_s_, "\r\n\r\n");
  }
  if (want("clients")) {
    absl::StrAppend(&text, "# Clients\r\nconnected_clients:", stats_->connected_clients.load(),
                    "\r\n\r\n");
  }
  if (want("memory")) {
    uint64_t rss = ResidentBytes();
    absl::StrAppend(&text, "# Memory\r\nused_memory:", rss, "\r\nused_memory_rss:", rss,
                    "\r\ninflight_bytes:", stats_->inflight_bytes.load(),
                    "\r\nmax_value_size:", options_.max_value_bytes, "\r\n\r\n");
  }
  if (want("stats")) {
    absl::StrAppend(
        &text, "# Stats\r\ntotal_connections_received:", stats_->total_connections.Value(),
        "\r\ntotal_commands_processed:", stats_->commands.Value(),
        "\r\nrejected_connections:", stats_->rejected_connections.Value(),
        "\r\ntotal_net_input_bytes:", stats_->bytes_in.Value(),
        "\r\ntotal_net_output_bytes:", stats_->bytes_out.Value(),
        "\r\nkeyspace_hits:", stats_->hits.Value(), "\r\nkeyspace_misses:", stats_->misses.Value(),
        "\r\ninflight_rejections:", stats_->inflight_rejections.Value(), "\r\n\r\n");
  }
  if (want("keyspace")) {
    uint64_t keys = 0;
    Status s = CountKeys(&keys);
    absl::StrAppend(&text, "# Keyspace\r\n");
    if (s.ok() && keys > 0) absl::StrAppend(&text, "db0:keys=", keys, ",expires=0,avg_ttl=0\r\n");
    absl::StrAppend(&text, "\r\n");
  }
  c.w().Verbatim(text);
}

// ------------------------------------------------------------ storage

Status CommandHandler::Load(const std::string& key, std::string* value) {
  Status s = client_->Get(key, value);
  if (!s.ok()) return s;
  if (value->empty() || value->back() != kValueTrailer) {
    value->clear();
    return Status(StatusCode::kFailedPrecondition,
                  "WRONGTYPE block was not written through shelf-resp");
  }
  value->pop_back();
  return Status::Ok();
}

Status CommandHandler::Store(const std::string& key, std::string* value, bool nx, bool* written) {
  *written = false;
  std::vector<bool> present;
  Status s = client_->Exists({key}, &present);
  if (!s.ok()) return s;
  value->push_back(kValueTrailer);  // in the capacity the parser reserved
  if (present[0]) {
    if (nx) return Status::Ok();
    std::string old;
    s = client_->Get(key, &old);
    if (s.ok() && old == *value) {  // same bytes: nothing to rewrite
      *written = true;
      return Status::Ok();
    }
    // Blocks are immutable: replace = remove, then put. Between the two a
    // reader sees a miss (docs/resp.md, "SET of an existing key").
    s = client_->Remove(key);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
  }
  PutOptions po;
  po.replicas = options_.replicas;
  s = client_->Put(key, value->data(), value->size(), po);
  if (s.ok()) *written = true;
  return s;
}

Status CommandHandler::ExistsMany(const std::vector<std::string>& keys,
                                  std::vector<bool>* present) {
  present->clear();
  for (size_t at = 0; at < keys.size(); at += kBatchItemsMax) {
    size_t end = std::min(keys.size(), at + kBatchItemsMax);
    std::vector<std::string> part(keys.begin() + at, keys.begin() + end);
    std::vector<bool> p;
    Status s = client_->Exists(part, &p);
    if (!s.ok()) return s;
    present->insert(present->end(), p.begin(), p.end());
  }
  return Status::Ok();
}

Status CommandHandler::CountKeys(uint64_t* n) {
  *n = 0;
  std::string cursor, next;
  std::vector<std::string> keys;
  do {
    Status s = client_->ListKeys(cursor, "", kBatchItemsMax, &keys, &next);
    if (!s.ok()) return s;
    *n += keys.size();
    cursor = next;
  } while (!cursor.empty());
  return Status::Ok();
}

void CommandHandler::Get(Ctx& c, bool del) {
  std::string value;
  Status s = Load(c.arg(1), &value);
  if (s.code() == StatusCode::kNotFound) {
    stats_->misses.Inc(1);
    return c.w().Null();
  }
  if (!s.ok())
    return c.Error(s.code() == StatusCode::kFailedPrecondition ? s.message() : ErrorText(s));
  stats_->hits.Inc(1);
  if (del) {
    Status r = client_->Remove(c.arg(1));
    if (!r.ok() && r.code() != StatusCode::kNotFound) return c.Error(ErrorText(r));
  }
  c.w().BulkHeader(value.size());
  c.out->AddOwned(std::move(value));
  c.out->tail()->append("\r\n");
}

void CommandHandler::SetCmd(Ctx& c, bool setnx) {
  bool nx = setnx, xx = false, get = false;
  for (size_t i = 3; i < c.argc(); ++i) {
    std::string opt = Upper(c.arg(i));
    if (opt == "NX") {
      nx = true;
    } else if (opt == "XX") {
      xx = true;
    } else if (opt == "GET") {
      get = true;
    } else if (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT" || opt == "KEEPTTL") {
      if (opt == "KEEPTTL") continue;  // no key has a TTL: keeping none is a no-op
      return c.Error("ERR expiry not supported");
    } else {
      return c.Syntax();
    }
  }
  if (nx && xx) return c.Syntax();
  const std::string& key = c.arg(1);
  std::string* value = &(*c.args)[2];
  if (value->size() > options_.max_value_bytes) {
    return c.Error(
        absl::StrCat("ERR value over --max-value-size (", options_.max_value_bytes, " bytes)"));
  }
  bool have_old = false;
  std::string old;
  if (get || xx) {
    Status s = get ? Load(key, &old) : Status::Ok();
    if (!get) {
      std::vector<bool> present;
      s = client_->Exists({key}, &present);
      if (s.ok() && !present[0]) s = Status(StatusCode::kNotFound, "");
    }
    if (s.ok()) {
      have_old = true;
    } else if (s.code() != StatusCode::kNotFound) {
      return c.Error(s.code() == StatusCode::kFailedPrecondition ? s.message() : ErrorText(s));
    }
  }
  auto reply_old = [&] {
    if (!have_old) return c.w().Null();
    c.w().Bulk(old);
  };
  if (xx && !have_old) return get ? reply_old() : c.w().Null();
  bool written = false;
  Status s = Store(key, value, nx, &written);
  if (!s.ok()) return c.Error(ErrorText(s));
  if (setnx) return c.w().Integer(written ? 1 : 0);
  if (get) return reply_old();
  if (!written) return c.w().Null();
  c.Ok();
}

void CommandHandler::MGet(Ctx& c) {
  std::vector<std::string> keys(c.args->begin() + 1, c.args->end());
  std::vector<std::string> values;
  std::vector<Status> statuses;
  std::vector<std::string> part_values;
  std::vector<Status> part_statuses;
  for (size_t at = 0; at < keys.size(); at += kBatchItemsMax) {
    size_t end = std::min(keys.size(), at + kBatchItemsMax);
    std::vector<std::string> part(keys.begin() + at, keys.begin() + end);
    Status s = client_->BatchGet(part, &part_values, &part_statuses);
    if (!s.ok()) return c.Error(ErrorText(s));
    for (size_t i = 0; i < part.size(); ++i) {
      values.push_back(std::move(part_values[i]));
      statuses.push_back(part_statuses[i]);
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const Status& s = statuses[i];
    if (!s.ok() && s.code() != StatusCode::kNotFound) return c.Error(ErrorText(s));
  }
  c.w().Array(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string& v = values[i];
    if (!statuses[i].ok() || v.empty() || v.back() != kValueTrailer) {
      stats_->misses.Inc(1);
      c.w().Null();
      continue;
    }
    stats_->hits.Inc(1);
    v.pop_back();
    c.w().BulkHeader(v.size());
    c.out->AddOwned(std::move(v));
    c.out->tail()->append("\r\n");
  }
}

void CommandHandler::MSet(Ctx& c) {
  // The last value of a key given twice wins, as in Redis.
  std::unordered_map<std::string, size_t> last;
  for (size_t i = 1; i + 1 < c.argc(); i += 2) last[c.arg(i)] = i + 1;
  std::vector<std::string> keys;
  std::vector<size_t> value_at;
  for (size_t i = 1; i + 1 < c.argc(); i += 2) {
    if (last[c.arg(i)] != i + 1) continue;
    if (c.arg(i + 1).size() > options_.max_value_bytes) {
      return c.Error(
          absl::StrCat("ERR value over --max-value-size (", options_.max_value_bytes, " bytes)"));
    }
    keys.push_back(c.arg(i));
    value_at.push_back(i + 1);
  }
  std::vector<bool> present;
  Status s = ExistsMany(keys, &present);
  if (!s.ok()) return c.Error(ErrorText(s));
  std::vector<PutItem> fresh;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string* value = &(*c.args)[value_at[i]];
    if (present[i]) {  // a replacement: the single-key path
      bool written = false;
      s = Store(keys[i], value, false, &written);
      if (!s.ok()) return c.Error(ErrorText(s));
      continue;
    }
    value->push_back(kValueTrailer);
    fresh.push_back(PutItem{keys[i], value->data(), value->size()});
  }
  PutOptions po;
  po.replicas = options_.replicas;
  std::vector<Status> statuses;
  for (size_t at = 0; at < fresh.size(); at += kBatchItemsMax) {
    size_t end = std::min(fresh.size(), at + kBatchItemsMax);
    std::vector<PutItem> part(fresh.begin() + at, fresh.begin() + end);
    s = client_->BatchPut(part, &statuses, po);
    if (!s.ok()) return c.Error(ErrorText(s));
    for (const Status& st : statuses) {
      if (!st.ok()) return c.Error(ErrorText(st));
    }
  }
  c.Ok();
}

void CommandHandler::ExistsCmd(Ctx& c) {
  std::vector<std::string> keys(c.args->begin() + 1, c.args->end());
  std::vector<bool> present;
  Status s = ExistsMany(keys, &present);
  if (!s.ok()) return c.Error(ErrorText(s));
  c.w().Integer(std::count(present.begin(), present.end(), true));
}

void CommandHandler::Del(Ctx& c) {
  std::vector<std::string> keys(c.args->begin() + 1, c.args->end());
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<bool> present;
  Status s = ExistsMany(keys, &present);
  if (!s.ok()) return c.Error(ErrorText(s));
  int64_t removed = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!present[i]) continue;
    s = client_->Remove(keys[i]);
    if (s.ok()) {
      ++removed;
    } else if (s.code() != StatusCode::kNotFound) {
      return c.Error(ErrorText(s));
    }
  }
  c.w().Integer(removed);
}

void CommandHandler::Strlen(Ctx& c) {
  std::string value;
  Status s = Load(c.arg(1), &value);
  if (s.code() == StatusCode::kNotFound) return c.w().Integer(0);
  if (!s.ok())
    return c.Error(s.code() == StatusCode::kFailedPrecondition ? s.message() : ErrorText(s));
  c.w().Integer(static_cast<int64_t>(value.size()));
}

void CommandHandler::TypeTtl(Ctx& c) {
  std::vector<bool> present;
  Status s = client_->Exists({c.arg(1)}, &present);
  if (!s.ok()) return c.Error(ErrorText(s));
  if (c.name == "type") return c.w().Simple(present[0] ? "string" : "none");
  c.w().Integer(present[0] ? -1 : -2);  // no key expires
}

uint64_t CommandHandler::NewScanCursor(std::string shelf_cursor) {
  absl::MutexLock l(&cursors_mu_);
  uint64_t id = next_cursor_++;
  cursors_[id] = std::move(shelf_cursor);
  while (cursors_.size() > kScanCursorsMax) cursors_.erase(cursors_.begin());
  return id;
}

bool CommandHandler::TakeScanCursor(uint64_t id, std::string* shelf_cursor) {
  absl::MutexLock l(&cursors_mu_);
  auto it = cursors_.find(id);
  if (it == cursors_.end()) return false;
  *shelf_cursor = std::move(it->second);
  cursors_.erase(it);
  return true;
}

void CommandHandler::Scan(Ctx& c) {
  uint64_t cursor_id = 0;
  if (!absl::SimpleAtoi(c.arg(1), &cursor_id)) return c.Error("ERR invalid cursor");
  std::string pattern;
  int64_t count = 10;
  bool type_ok = true;
  for (size_t i = 2; i < c.argc(); i += 2) {
    std::string opt = Upper(c.arg(i));
    if (i + 1 >= c.argc()) return c.Syntax();
    if (opt == "MATCH") {
      pattern = c.arg(i + 1);
      if (pattern == "*") pattern.clear();
    } else if (opt == "COUNT") {
      if (!ParseRespInt(c.arg(i + 1), &count) || count < 1) return c.Syntax();
    } else if (opt == "TYPE") {
      type_ok = absl::AsciiStrToLower(c.arg(i + 1)) == "string";
    } else {
      return c.Syntax();
    }
  }
  std::string shelf_cursor;
  if (cursor_id != 0 && !TakeScanCursor(cursor_id, &shelf_cursor)) {
    return c.Error("ERR invalid cursor");
  }
  std::vector<std::string> keys;
  std::string next;
  size_t want = static_cast<size_t>(std::min<int64_t>(count, kBatchItemsMax));
  Status s = client_->ListKeys(shelf_cursor, pattern, want, &keys, &next);
  if (!s.ok()) return c.Error(ErrorText(s));
  uint64_t next_id = next.empty() ? 0 : NewScanCursor(next);
  RespWriter w = c.w();
  w.Array(2);
  w.Bulk(std::to_string(next_id));
  if (!type_ok) keys.clear();
  w.Array(keys.size());
  for (const std::string& k : keys) w.Bulk(k);
}

void CommandHandler::Keys(Ctx& c) {
  std::string pattern = c.arg(1) == "*" ? "" : c.arg(1);
  std::vector<std::string> all, page;
  std::string cursor, next;
  do {
    Status s = client_->ListKeys(cursor, pattern, kBatchItemsMax, &page, &next);
    if (!s.ok()) return c.Error(ErrorText(s));
    all.insert(all.end(), page.begin(), page.end());
    cursor = next;
  } while (!cursor.empty());
  c.w().Array(all.size());
  for (const std::string& k : all) c.w().Bulk(k);
}

void CommandHandler::Flush(Ctx& c) {
  if (c.argc() > 2 || (c.argc() == 2 && Upper(c.arg(1)) != "SYNC" && Upper(c.arg(1)) != "ASYNC")) {
    return c.Syntax();
  }
  if (!options_.flush_enabled) {
    return c.Error(absl::StrCat("ERR ", Upper(c.arg(0)),
                                " is disabled; start shelf-resp with --enable-flush"));
  }
  uint64_t removed = 0;
  Status s = client_->RemoveMatching("", &removed);
  if (!s.ok()) return c.Error(ErrorText(s));
  c.Ok();
}

}  // namespace shelf::resp
