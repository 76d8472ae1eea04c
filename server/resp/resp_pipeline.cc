// Pipelined runs of GET and SET, executed with one batch call per run
// (CommandHandler::ExecuteRun). redis-benchmark -P and LMCache's pipelines
// send exactly such runs; one master round trip per run instead of one per
// command is what makes pipelining pay off against the cluster.
#include <algorithm>
#include <unordered_set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/resp/resp_command_table.h"
#include "server/resp/resp_commands.h"
#include "server/resp/resp_parser.h"
#include "server/resp/resp_value.h"

namespace shelf::resp {

namespace {

bool IsCommand(const std::string& arg, const char* upper) {
  return absl::EqualsIgnoreCase(arg, upper);
}

}  // namespace

CommandHandler::BatchKind CommandHandler::Batchable(const Session& session,
                                                    const std::vector<std::string>& args) const {
  if (password_.required() && !session.authenticated) return BatchKind::kNone;
  if (args.size() < 2 || !ValidKeyLength(args[1].size())) {
    return BatchKind::kNone;
  }
  if (args.size() == 2 && IsCommand(args[0], "GET")) return BatchKind::kGet;
  if (args.size() == 3 && IsCommand(args[0], "SET") && args[2].size() <= options_.max_value_bytes) {
    return BatchKind::kSet;
  }
  return BatchKind::kNone;
}

void CommandHandler::ExecuteRun(Session* session, BatchKind kind,
                                std::vector<std::vector<std::string>>* commands, ReplyChunks* out) {
  const size_t n = commands->size();
  Client* const client = ClientOf(*session);
  stats_->commands.Increment(n);
  auto writer = [&] { return RespWriter(out->tail(), session->protocol); };
  std::vector<std::string> keys;
  keys.reserve(n);
  for (const auto& c : *commands) keys.push_back(c[1]);

  if (kind == BatchKind::kGet) {
    std::vector<std::string> values;
    std::vector<Status> statuses;
    Status s = client->BatchGet(keys, &values, &statuses);
    for (size_t i = 0; i < n; ++i) {
      std::string& v = values.size() == n ? values[i] : keys[i];  // unused unless ok
      const Status st = DecodeValue(s.ok() ? statuses[i] : s, &v);
      if (st.code() == StatusCode::kNotFound) {
        stats_->misses.Increment(1);
        writer().Null();
      } else if (!st.ok()) {
        stats_->errors.Increment(1);
        writer().Error(ValueErrorText(st));
      } else {
        stats_->hits.Increment(1);
        writer().BulkHeader(v.size());
        out->AddOwned(std::move(v));
        out->tail()->append("\r\n");
      }
    }
    return;
  }

  // SET: a run naming a key twice is set in order, one by one; any other
  // goes in one BatchPut.
  std::unordered_set<std::string> seen;
  bool repeats = false;
  for (const std::string& k : keys) repeats |= !seen.insert(k).second;
  std::vector<Status> results(n);
  if (!repeats) {
    // One BatchPut that replaces what exists (PutOptions.replace).
    std::vector<PutItem> items;
    for (size_t i = 0; i < n; ++i) {
      std::string* value = &(*commands)[i][2];
      EncodeValue(value);
      items.push_back(PutItem{keys[i], value->data(), value->size()});
    }
    PutOptions po;
    po.replicas = options_.replicas;
    po.replace = true;
    std::vector<Status> statuses;
    Status s = client->BatchPut(items, &statuses, po);
    for (size_t i = 0; i < n; ++i) results[i] = s.ok() ? statuses[i] : s;
  }
  for (size_t i = 0; i < n; ++i) {
    if (repeats) {  // in order, one by one: the last value of a key wins
      bool written = false;
      results[i] = Store(client, keys[i], &(*commands)[i][2], false, &written);
    }
    if (results[i].ok()) {
      writer().Simple("OK");
    } else {
      stats_->errors.Increment(1);
      writer().Error(internal::ErrorText(results[i]));
    }
  }
}

}  // namespace shelf::resp
