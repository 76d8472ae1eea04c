// Internal to shelf-resp: the command table and small helpers shared by
// resp_commands.cc (the data commands) and resp_admin.cc (the connection
// and server commands).
#ifndef SHELF_SERVER_RESP_RESP_COMMAND_TABLE_H_
#define SHELF_SERVER_RESP_RESP_COMMAND_TABLE_H_

#include <cstdint>
#include <string>

#include "shelf/status.h"

namespace shelf::resp::internal {

// Commands this front end knows: name, arity (negative: at least), flags.
struct CommandInfo {
  const char* name;
  int arity;
  const char* flag;
  int first_key, last_key, step;
};
inline constexpr CommandInfo kCommands[] = {
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

// The entry of `lower` (a lower-case command name); null when unknown.
const CommandInfo* FindCommand(const std::string& lower);
int64_t NowUnixS();
std::string Upper(const std::string& s);
// How a Shelf status reads to a Redis client (docs/resp.md, "Errors").
std::string ErrorText(const Status& s);

}  // namespace shelf::resp::internal

#endif  // SHELF_SERVER_RESP_RESP_COMMAND_TABLE_H_
