// The connection and server commands of shelf-resp (HELLO, CLIENT,
// COMMAND, INFO), its command table, and the figures INFO and /metrics
// report. The data commands are in resp_commands.cc.
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/resp/resp_command_table.h"
#include "server/resp/resp_commands.h"
#include "server/resp/resp_parser.h"

namespace shelf::resp {

namespace internal {

const CommandInfo* FindCommand(const std::string& lower) {
  for (const CommandInfo& c : kCommands) {
    if (lower == c.name) return &c;
  }
  return nullptr;
}

int64_t NowUnixS() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Upper(const std::string& s) { return absl::AsciiStrToUpper(s); }

std::string ErrorText(const Status& s) {
  if (s.code() == StatusCode::kResourceExhausted) return "OOM " + s.message();
  return "ERR " + s.message();
}

}  // namespace internal

namespace {

using internal::CommandInfo;
using internal::FindCommand;
using internal::kCommands;
using internal::NowUnixS;
using internal::Upper;

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// A counter's value as INFO prints it (prometheus-cpp keeps doubles).
uint64_t Count(const prom::Counter& c) { return static_cast<uint64_t>(c.Value()); }

}  // namespace

ServerStats::ServerStats()
    : commands(prom::AddUnlabelledCounter(DefaultExposition().registry(),
                                          "shelf_resp_commands_total",
                                          "Commands run by shelf-resp.")),
      errors(prom::AddUnlabelledCounter(DefaultExposition().registry(), "shelf_resp_errors_total",
                                        "Commands answered with an error.")),
      hits(prom::AddUnlabelledCounter(DefaultExposition().registry(),
                                      "shelf_resp_keyspace_hits_total",
                                      "GET and MGET keys found.")),
      misses(prom::AddUnlabelledCounter(DefaultExposition().registry(),
                                        "shelf_resp_keyspace_misses_total",
                                        "GET and MGET keys missing.")),
      total_connections(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_connections_total", "Connections accepted.")),
      rejected_connections(prom::AddUnlabelledCounter(DefaultExposition().registry(),
                                                      "shelf_resp_rejected_connections_total",
                                                      "Connections refused over --max-clients.")),
      inflight_rejections(prom::AddUnlabelledCounter(DefaultExposition().registry(),
                                                     "shelf_resp_inflight_rejections_total",
                                                     "Connections closed with -OOM over "
                                                     "--max-inflight-bytes.")),
      bytes_in(prom::AddUnlabelledCounter(DefaultExposition().registry(),
                                          "shelf_resp_received_bytes_total",
                                          "Bytes read from clients.")),
      bytes_out(prom::AddUnlabelledCounter(DefaultExposition().registry(),
                                           "shelf_resp_sent_bytes_total",
                                           "Bytes written to clients.")),
      tls_handshakes(prom::AddUnlabelledCounter(DefaultExposition().registry(),
                                                "shelf_resp_tls_handshakes_total",
                                                "TLS connections that completed the handshake.")),
      tls_handshake_failures(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_tls_handshake_failures_total",
          "TLS connections closed in the handshake (plaintext clients, bad or missing client "
          "certificates, garbage).")),
      auth_failures(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_auth_failures_total",
          "AUTH and HELLO AUTH attempts with a wrong user name or password.")),
      auth_backoffs(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_auth_backoffs_total",
          "AUTH and HELLO AUTH attempts refused unchecked, during their address's back-off "
          "after failures.")),
      values_in_place(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_values_in_place_total",
          "GET values read where they lie, in the mapped segment of a store on this host "
          "(not copied into shelf-resp).")),
      direct_sent_bytes(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_direct_sent_bytes_total",
          "Reply bytes sent to the socket by the thread that made them, not queued for the "
          "event loop to write: GET values from where they lie (a worker) or from the loop's "
          "copies, and a worker's reply to a connection's last command when nothing of the "
          "connection waits to be sent (part of shelf_resp_sent_bytes_total).")),
      direct_cut(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_direct_cut_total",
          "GET replies a client's socket took only part of in time: the rest was copied and "
          "queued.")),
      direct_received_bytes(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_direct_received_bytes_total",
          "Value bytes (bulks of 64 KiB and more) read from the socket straight into their "
          "command's argument (part of shelf_resp_received_bytes_total).")),
      placed_values(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_placed_values_total",
          "SET values of 64 KiB and more read into the value arena (--value-arena-size): "
          "shared memory a store on this host copies the put from, once.")),
      unplaced_values(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_unplaced_values_total",
          "SET values of 64 KiB and more that found no room in the value arena (full, or "
          "the value over a quarter of it): read into heap memory, their puts copied once "
          "more.")),
      loop_gets(prom::AddUnlabelledCounter(
          DefaultExposition().registry(), "shelf_resp_loop_gets_total",
          "GETs answered on the event loop, with no hand-off to a worker: their values were "
          "read without a round trip (a cached location a same-host store's key board "
          "vouched for).")) {
  gauges_.push_back(DefaultExposition().AddCallbackGauge(
      "shelf_resp_connections", "Client connections open.",
      [this] { return static_cast<double>(connected_clients.load()); }));
  gauges_.push_back(DefaultExposition().AddCallbackGauge(
      "shelf_resp_inflight_bytes", "Request bytes held in memory (--max-inflight-bytes).",
      [this] { return static_cast<double>(inflight_bytes.load()); }));
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
      // With no password configured (none for the default user, no named
      // user) any AUTH passes, as for Redis's default `nopass` user.
      if (!Authenticate(c, c.arg(i + 1), c.arg(i + 2))) return;
      i += 2;
    } else if (opt == "SETNAME" && i + 1 < c.argc()) {
      setname = c.arg(++i);
      have_name = true;
    } else {
      return c.Error(absl::StrCat("ERR Syntax error in HELLO option '", c.arg(i), "'"));
    }
  }
  if (password_.required() && !c.session->authenticated) {
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
                        " idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 user=", s->user,
                        " resp=", s->protocol, " lib-name=", s->lib_name, " lib-ver=", s->lib_ver,
                        "\n");
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
        &text, "# Stats\r\ntotal_connections_received:", Count(stats_->total_connections),
        "\r\ntotal_commands_processed:", Count(stats_->commands),
        "\r\nrejected_connections:", Count(stats_->rejected_connections),
        "\r\ntotal_net_input_bytes:", Count(stats_->bytes_in),
        "\r\ntotal_net_output_bytes:", Count(stats_->bytes_out),
        "\r\nkeyspace_hits:", Count(stats_->hits), "\r\nkeyspace_misses:", Count(stats_->misses),
        "\r\ninflight_rejections:", Count(stats_->inflight_rejections),
        "\r\ntls_handshakes:", Count(stats_->tls_handshakes),
        "\r\ntls_handshake_failures:", Count(stats_->tls_handshake_failures), "\r\n\r\n");
  }
  if (want("keyspace")) {
    uint64_t keys = 0;
    Status s = CountKeys(c.client, &keys);
    absl::StrAppend(&text, "# Keyspace\r\n");
    if (s.ok() && keys > 0) absl::StrAppend(&text, "db0:keys=", keys, ",expires=0,avg_ttl=0\r\n");
    absl::StrAppend(&text, "\r\n");
  }
  c.w().Verbatim(text);
}

}  // namespace shelf::resp
