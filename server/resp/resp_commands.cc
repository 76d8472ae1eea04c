// The data commands of shelf-resp (GET, SET, MGET, MSET, EXISTS, DEL, SCAN,
// ...) and the dispatch of every command. The connection and server
// commands are in resp_admin.cc, pipelined runs in resp_pipeline.cc.
#include "server/resp/resp_commands.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "server/resp/resp_command_table.h"
#include "server/resp/resp_parser.h"

namespace shelf::resp {
namespace {

using internal::CommandInfo;
using internal::ErrorText;
using internal::FindCommand;
using internal::NowUnixS;
using internal::Upper;

}  // namespace

CommandHandler::CommandHandler(Client* client, CommandOptions options, ServerStats* stats)
    : client_(client),
      options_(std::move(options)),
      stats_(stats),
      start_unix_s_(NowUnixS()),
      password_(options_.requirepass, options_.users) {}

absl::StatusOr<Client*> CommandHandler::UserClient(const std::string& user) {
  MutexLock l(&users_mu_);
  std::unique_ptr<Client>& client = user_clients_[user];
  if (client == nullptr) {
    if (!options_.open_user) return absl::FailedPreconditionError("no named users");
    absl::StatusOr<std::unique_ptr<Client>> opened = options_.open_user(user);
    if (!opened.ok()) return opened.status();
    client = *std::move(opened);
  }
  return client.get();
}

bool CommandHandler::Authenticate(Ctx& c, const std::string& user, const std::string& password) {
  uint64_t retry_ms = 0;
  switch (password_.Check(c.session->peer, user, password, MonoMs(), &retry_ms)) {
    case PasswordCheck::Verdict::kOk: {
      Client* client = nullptr;  // the default user's
      if (user != "default") {
        absl::StatusOr<Client*> opened = UserClient(user);
        if (!opened.ok()) {
          c.Error(absl::StrCat("ERR cannot reach the cluster as user '", user,
                               "': ", opened.status().message()));
          return false;
        }
        client = *opened;
      }
      c.session->authenticated = true;
      c.session->user = user;
      c.session->client = client;
      c.client = ClientOf(*c.session);
      return true;
    }
    case PasswordCheck::Verdict::kWrongPass:
      stats_->auth_failures.Increment(1);
      c.Error("WRONGPASS invalid username-password pair or user is disabled.");
      return false;
    case PasswordCheck::Verdict::kBackoff:
      stats_->auth_backoffs.Increment(1);
      c.Error(absl::StrCat("ERR too many failed authentications from this address: retry in ",
                           retry_ms, " ms"));
      return false;
  }
  return false;
}

void CommandHandler::Execute(Session* session, std::vector<std::string>* args, ReplyChunks* out,
                             bool* close, PlacedValue* value) {
  Ctx c{session, args, out, close, absl::AsciiStrToLower((*args)[0]), ClientOf(*session), value};
  stats_->commands.Increment(1);
  std::string* tail = out->tail();
  size_t chunks = out->chunks.size(), before = tail->size();
  Dispatch(c);
  // An error reply is one small line, in the tail it started in.
  if (out->chunks.size() == chunks && tail->size() > before && (*tail)[before] == '-') {
    stats_->errors.Increment(1);
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
  // Before authentication only these run (the server reads such a client's
  // commands one at a time, under kUnauthenticatedLimits: resp_server.h).
  if (password_.required() && !c.session->authenticated && n != "auth" && n != "hello" &&
      n != "ping" && n != "quit") {
    c.Error("NOAUTH Authentication required.");
    return;
  }
  // Keys Shelf cannot hold are refused before any call.
  if (info->first_key > 0) {
    int last = info->last_key < 0 ? argc - 1 : info->last_key;
    for (int i = info->first_key; i <= last && i < argc; i += info->step) {
      const std::string& key = c.arg(static_cast<size_t>(i));
      if (std::string why = KeyLengthError(key.size()); !why.empty()) {
        c.Error("ERR " + why);
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
    c.session->user = "default";
    c.session->client = nullptr;
    return c.w().Simple("RESET");
  }
  if (n == "hello") return Hello(c);
  if (n == "auth") {
    if (options_.requirepass.empty() && (c.argc() == 2 || options_.users.empty())) {
      return c.Error(
          "ERR AUTH <password> called without any password configured for the default user. "
          "Are you sure your configuration is correct?");
    }
    if (c.argc() > 3) return c.Syntax();
    static const std::string kDefaultUser = "default";
    if (!Authenticate(c, c.argc() == 2 ? kDefaultUser : c.arg(1), c.arg(c.argc() - 1))) return;
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
    Status s = CountKeys(c.client, &count);
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

// ------------------------------------------------------------ storage

Status CommandHandler::Load(Client* client, const std::string& key, std::string* value) {
  return DecodeValue(client->Get(key, value), value);
}

Status CommandHandler::Store(Client* client, const std::string& key, absl::string_view block,
                             bool nx, bool* written) {
  *written = false;
  if (nx) {
    std::vector<bool> present;
    Status s = client->Exists({key}, &present);
    if (!s.ok()) return s;
    if (present[0]) return Status::Ok();
  }
  // An existing key is replaced in one step at the put's commit: readers
  // get the old value until then, and keep it if the put fails (docs/resp.md,
  // "SET of an existing key"). The same bytes again cost no write.
  PutOptions po;
  po.replicas = options_.replicas;
  po.replace = !nx;  // NX: a value someone set meanwhile stays
  Status s = client->Put(key, block.data(), block.size(), po);
  if (s.ok()) *written = true;
  return s;
}

Status CommandHandler::ExistsMany(Client* client, const std::vector<std::string>& keys,
                                  std::vector<bool>* present) {
  present->clear();
  Status s;
  ForEachBatchSlice(keys.size(), [&](size_t begin, size_t end) {
    std::vector<std::string> part(keys.begin() + begin, keys.begin() + end);
    std::vector<bool> p;
    s = client->Exists(part, &p);
    present->insert(present->end(), p.begin(), p.end());
    return s.ok();
  });
  return s;
}

Status CommandHandler::CountKeys(Client* client, uint64_t* n) {
  *n = 0;
  std::string cursor, next;
  std::vector<std::string> keys;
  do {
    Status s = client->ListKeys(cursor, "", kBatchItemsMax, &keys, &next);
    if (!s.ok()) return s;
    *n += keys.size();
    cursor = next;
  } while (!cursor.empty());
  return Status::Ok();
}

void CommandHandler::Get(Ctx& c, bool del) {
  if (!del) {
    // Execute counts an error reply (never sent directly: ReplyValues
    // queues a reply without a value).
    ReplyValues(*c.session, c.client, {c.arg(1)}, ValuesReply::kGets, c.out);
    return;
  }
  std::string value;
  Status s = Load(c.client, c.arg(1), &value);
  if (s.code() == StatusCode::kNotFound) {
    stats_->misses.Increment(1);
    return c.w().Null();
  }
  if (!s.ok()) return c.Error(ValueErrorText(s));
  stats_->hits.Increment(1);
  if (del) {
    Status r = c.client->Remove(c.arg(1));
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
  const bool placed = c.value != nullptr && *c.value;
  if ((placed ? c.value->size : c.arg(2).size()) > options_.max_value_bytes) {
    return c.Error(
        absl::StrCat("ERR value over --max-value-size (", options_.max_value_bytes, " bytes)"));
  }
  bool have_old = false;
  std::string old;
  if (get || xx) {
    Status s = get ? Load(c.client, key, &old) : Status::Ok();
    if (!get) {
      std::vector<bool> present;
      s = c.client->Exists({key}, &present);
      if (s.ok() && !present[0]) s = Status(StatusCode::kNotFound, "");
    }
    if (s.ok()) {
      have_old = true;
    } else if (s.code() != StatusCode::kNotFound) {
      return c.Error(ValueErrorText(s));
    }
  }
  auto reply_old = [&] {
    if (!have_old) return c.w().Null();
    c.w().Bulk(old);
  };
  if (xx && !have_old) return get ? reply_old() : c.w().Null();
  bool written = false;
  Status s = Store(c.client, key, EncodeValue(&(*c.args)[2], c.value), nx, &written);
  if (!s.ok()) return c.Error(ErrorText(s));
  if (setnx) return c.w().Integer(written ? 1 : 0);
  if (get) return reply_old();
  if (!written) return c.w().Null();
  c.Ok();
}

void CommandHandler::MGet(Ctx& c) {
  std::vector<std::string> keys(c.args->begin() + 1, c.args->end());
  if (keys.size() <= kBatchItemsMax) {
    // One batch: values sent from where they lie, as GET's (Execute counts
    // an error reply).
    ReplyValues(*c.session, c.client, keys, ValuesReply::kMget, c.out);
    return;
  }
  // More keys than one batch takes: read slice by slice, every value held
  // (copied) until the reply is sent.
  std::vector<std::string> values;
  std::vector<Status> statuses;
  std::vector<std::string> part_values;
  std::vector<Status> part_statuses;
  // The values are held until the reply is sent: at most
  // --max-inflight-bytes of them (a key named a thousand times is a
  // thousand copies), known from their sizes before any is read.
  uint64_t held = 0;
  std::string error;  // the reply, when a slice fails
  ForEachBatchSlice(keys.size(), [&](size_t begin, size_t end) {
    std::vector<std::string> part(keys.begin() + begin, keys.begin() + end);
    // (A bound of 0 would be none.)
    const uint64_t room = std::max<uint64_t>(options_.max_inflight_bytes - held, 1);
    Status s = c.client->BatchGetAtMost(part, room, &part_values, &part_statuses);
    if (!s.ok()) {
      error = ErrorText(s);
      return false;
    }
    for (size_t i = 0; i < part.size(); ++i) {
      if (part_statuses[i].code() == StatusCode::kResourceExhausted) {
        stats_->inflight_rejections.Increment(1);
        error = absl::StrCat(
            "OOM command not allowed: the values this MGET names are over "
            "--max-inflight-bytes (",
            options_.max_inflight_bytes, " bytes)");
        return false;
      }
      held += part_values[i].size();
      values.push_back(std::move(part_values[i]));
      statuses.push_back(part_statuses[i]);
    }
    return true;
  });
  if (!error.empty()) return c.Error(error);
  for (size_t i = 0; i < keys.size(); ++i) {
    const Status& s = statuses[i];
    if (!s.ok() && s.code() != StatusCode::kNotFound) return c.Error(ErrorText(s));
  }
  c.w().Array(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    // A block of another client is a nil here, as Redis's MGET answers
    // a key holding another type.
    std::string& v = values[i];
    if (!DecodeValue(statuses[i], &v).ok()) {
      stats_->misses.Increment(1);
      c.w().Null();
      continue;
    }
    stats_->hits.Increment(1);
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
  std::vector<PutItem> items;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string* value = &(*c.args)[value_at[i]];
    EncodeValue(value);
    items.push_back(PutItem{keys[i], value->data(), value->size()});
  }
  // Existing keys are replaced, each in one step (Store).
  PutOptions po;
  po.replicas = options_.replicas;
  po.replace = true;
  Status failed;
  ForEachBatchSlice(items.size(), [&](size_t begin, size_t end) {
    std::vector<PutItem> part(items.begin() + begin, items.begin() + end);
    std::vector<Status> statuses;
    failed = c.client->BatchPut(part, &statuses, po);
    for (size_t i = 0; i < statuses.size() && failed.ok(); ++i) failed = statuses[i];
    return failed.ok();
  });
  if (!failed.ok()) return c.Error(ErrorText(failed));
  c.Ok();
}

void CommandHandler::ExistsCmd(Ctx& c) {
  std::vector<std::string> keys(c.args->begin() + 1, c.args->end());
  std::vector<bool> present;
  Status s = ExistsMany(c.client, keys, &present);
  if (!s.ok()) return c.Error(ErrorText(s));
  c.w().Integer(std::count(present.begin(), present.end(), true));
}

void CommandHandler::Del(Ctx& c) {
  std::vector<std::string> keys(c.args->begin() + 1, c.args->end());
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  // One master round trip per kBatchItemsMax keys; an absent key counts
  // nothing, any other failure (a pinned key) is the reply.
  int64_t removed = 0;
  Status failed, call;
  ForEachBatchSlice(keys.size(), [&](size_t begin, size_t end) {
    std::vector<std::string> part(keys.begin() + begin, keys.begin() + end);
    std::vector<Status> statuses;
    call = c.client->BatchRemove(part, &statuses);
    for (const Status& st : statuses) {
      if (st.ok()) {
        ++removed;
      } else if (st.code() != StatusCode::kNotFound && failed.ok()) {
        failed = st;
      }
    }
    return call.ok();
  });
  if (!call.ok()) return c.Error(ErrorText(call));
  if (!failed.ok()) return c.Error(ErrorText(failed));
  c.w().Integer(removed);
}

void CommandHandler::Strlen(Ctx& c) {
  std::string value;
  Status s = Load(c.client, c.arg(1), &value);
  if (s.code() == StatusCode::kNotFound) return c.w().Integer(0);
  if (!s.ok()) return c.Error(ValueErrorText(s));
  c.w().Integer(static_cast<int64_t>(value.size()));
}

void CommandHandler::TypeTtl(Ctx& c) {
  std::vector<bool> present;
  Status s = c.client->Exists({c.arg(1)}, &present);
  if (!s.ok()) return c.Error(ErrorText(s));
  if (c.name == "type") return c.w().Simple(present[0] ? "string" : "none");
  c.w().Integer(present[0] ? -1 : -2);  // no key expires
}

uint64_t CommandHandler::NewScanCursor(const std::string& user, std::string shelf_cursor) {
  MutexLock l(&cursors_mu_);
  uint64_t id = next_cursor_++;
  cursors_[id] = ScanCursor{user, std::move(shelf_cursor)};
  while (cursors_.size() > kScanCursorsMax) cursors_.erase(cursors_.begin());
  return id;
}

bool CommandHandler::FindScanCursor(const std::string& user, uint64_t id,
                                    std::string* shelf_cursor) {
  // Kept after use, as Redis's cursors stay valid: a scan step that failed
  // (the master unreachable) can be retried, and a cursor replayed.
  MutexLock l(&cursors_mu_);
  auto it = cursors_.find(id);
  if (it == cursors_.end() || it->second.user != user) return false;
  *shelf_cursor = it->second.shelf_cursor;
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
  if (cursor_id != 0 && !FindScanCursor(c.session->user, cursor_id, &shelf_cursor)) {
    return c.Error("ERR invalid cursor");
  }
  std::vector<std::string> keys;
  std::string next;
  size_t want = static_cast<size_t>(std::min<int64_t>(count, kBatchItemsMax));
  Status s = c.client->ListKeys(shelf_cursor, pattern, want, &keys, &next);
  if (!s.ok()) return c.Error(ErrorText(s));
  uint64_t next_id = next.empty() ? 0 : NewScanCursor(c.session->user, next);
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
    Status s = c.client->ListKeys(cursor, pattern, kBatchItemsMax, &page, &next);
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
  Status s = c.client->RemoveMatching("", &removed);
  if (!s.ok()) return c.Error(ErrorText(s));
  c.Ok();
}

}  // namespace shelf::resp
