// Pipelined runs of GET and SET, executed with one batch call per run
// (CommandHandler::ExecuteRun). redis-benchmark -P and LMCache's pipelines
// send exactly such runs; one master round trip per run instead of one per
// command is what makes pipelining pay off against the cluster. A run of
// GETs, a single GET and an MGET of one batch all reply through
// ReplyValues, which hands values to the socket from where they lie.
#include <sys/uio.h>

#include <algorithm>
#include <deque>
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
                                                    const std::vector<std::string>& args,
                                                    size_t placed_bytes) const {
  if (password_.required() && !session.authenticated) return BatchKind::kNone;
  if (args.size() < 2 || !ValidKeyLength(args[1].size())) {
    return BatchKind::kNone;
  }
  if (args.size() == 2 && IsCommand(args[0], "GET")) return BatchKind::kGet;
  if (args.size() == 3 && IsCommand(args[0], "SET") &&
      std::max(args[2].size(), placed_bytes) <= options_.max_value_bytes) {
    return BatchKind::kSet;
  }
  return BatchKind::kNone;
}

bool CommandHandler::ReplyCachedGets(const Session& session, const std::vector<std::string>& keys,
                                     ReplyChunks* out) {
  Client* const client = ClientOf(session);
  size_t errors = 0;
  const Status read = ReplyFromViews(
      session,
      [&](const Client::ViewsFn& use) {
        // A stored value is the client's bytes and a trailer (EncodeValue).
        return client->BatchGetViewsCached(
            keys, use, std::min<uint64_t>(kCachedRunBytesMax, options_.max_inflight_bytes),
            options_.loop_get_bytes_max + sizeof(kValueTrailer));
      },
      ValuesReply::kGets, out, &errors);
  if (!read.ok()) return false;
  stats_->loop_gets.Increment(static_cast<double>(keys.size()));
  stats_->commands.Increment(static_cast<double>(keys.size()));
  stats_->errors.Increment(static_cast<double>(errors));
  return true;
}

void CommandHandler::ExecuteRun(Session* session, BatchKind kind,
                                std::vector<std::vector<std::string>>* commands, ReplyChunks* out,
                                std::vector<PlacedValue>* values) {
  const size_t n = commands->size();
  Client* const client = ClientOf(*session);
  stats_->commands.Increment(n);
  auto writer = [&] { return RespWriter(out->tail(), session->protocol); };
  std::vector<std::string> keys;
  keys.reserve(n);
  for (const auto& c : *commands) keys.push_back(c[1]);

  if (kind == BatchKind::kGet) {
    stats_->errors.Increment(
        static_cast<double>(ReplyValues(*session, client, keys, ValuesReply::kGets, out)));
    return;
  }

  // SET: a run naming a key twice is set in order, one by one; any other
  // goes in one BatchPut.
  std::unordered_set<std::string> seen;
  bool repeats = false;
  for (const std::string& k : keys) repeats |= !seen.insert(k).second;
  std::vector<absl::string_view> blocks(n);
  for (size_t i = 0; i < n; ++i) {
    PlacedValue* placed = values != nullptr && i < values->size() ? &(*values)[i] : nullptr;
    blocks[i] = EncodeValue(&(*commands)[i][2], placed);
  }
  std::vector<Status> results(n);
  if (!repeats) {
    // One BatchPut that replaces what exists (PutOptions.replace).
    std::vector<PutItem> items;
    for (size_t i = 0; i < n; ++i) {
      items.push_back(PutItem{keys[i], blocks[i].data(), blocks[i].size()});
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
      results[i] = Store(client, keys[i], blocks[i], false, &written);
    }
    if (results[i].ok()) {
      writer().Simple("OK");
    } else {
      stats_->errors.Increment(1);
      writer().Error(internal::ErrorText(results[i]));
    }
  }
}

Status CommandHandler::ReplyFromViews(const Session& session,
                                      const std::function<Status(const Client::ViewsFn&)>& read,
                                      ValuesReply kind, ReplyChunks* out, size_t* errors_out) {
  const bool mget = kind == ValuesReply::kMget;
  size_t errors = 0;
  auto reply = [&](const std::vector<BlockView>& views, uint64_t use_by_mono_ms) {
    if (mget) {
      // MGET answers one array, or one error for the whole command: a
      // failed read other than a miss (a value over the bound: -OOM).
      for (const BlockView& v : views) {
        if (v.status.ok() || v.status.code() == StatusCode::kNotFound) continue;
        std::string line = internal::ErrorText(v.status);
        if (v.status.code() == StatusCode::kResourceExhausted) {
          stats_->inflight_rejections.Increment(1);
          line = absl::StrCat(
              "OOM command not allowed: the values this MGET names are over "
              "--max-inflight-bytes (",
              options_.max_inflight_bytes, " bytes)");
        }
        RespWriter(out->tail(), session.protocol).Error(line);
        ++errors;
        return;
      }
    }
    // The reply as parts in order: text of our own (headers, nils, errors,
    // CRLFs), in `text` (a deque: its strings stay put), and the values
    // where BatchGetViews holds them.
    std::deque<std::string> text;
    std::vector<iovec> parts;
    std::vector<bool> is_value;   // per part
    std::string* open = nullptr;  // the text part being written
    auto writer = [&] {
      if (open == nullptr) open = &text.emplace_back();
      return RespWriter(open, session.protocol);
    };
    auto close_text = [&] {
      if (open == nullptr) return;
      parts.push_back(iovec{open->data(), open->size()});
      is_value.push_back(false);
      open = nullptr;
    };
    bool values = false;
    if (mget) writer().Array(views.size());
    for (const BlockView& v : views) {
      size_t size = 0;
      const Status st = DecodeValue(v.status, v.data, v.size, &size);
      // A block of another client is a nil in an MGET, as Redis's MGET
      // answers a key holding another type.
      if (st.code() == StatusCode::kNotFound || (mget && !st.ok())) {
        stats_->misses.Increment(1);
        writer().Null();
      } else if (!st.ok()) {
        ++errors;
        writer().Error(ValueErrorText(st));
      } else {
        stats_->hits.Increment(1);
        if (v.in_place) stats_->values_in_place.Increment(1);
        writer().BulkHeader(size);
        if (size > 0) {
          close_text();
          parts.push_back(iovec{const_cast<char*>(v.data), size});
          is_value.push_back(true);
          values = true;
        }
        if (open == nullptr) open = &text.emplace_back();
        open->append("\r\n");
      }
    }
    close_text();
    size_t sent = 0;
    if (values && out->direct != nullptr && out->empty()) {
      sent = out->direct->Send(parts.data(), static_cast<int>(parts.size()), use_by_mono_ms);
      size_t total = 0;
      for (const iovec& part : parts) total += part.iov_len;
      if (sent > 0 && sent < total) stats_->direct_cut.Increment(1);
    }
    // What the socket did not take now goes through the queue, copied:
    // each value a chunk of its own, text into the tail.
    for (size_t i = 0; i < parts.size(); ++i) {
      const iovec& part = parts[i];
      if (sent >= part.iov_len) {
        sent -= part.iov_len;
        continue;
      }
      const char* p = static_cast<const char*>(part.iov_base) + sent;
      const size_t len = part.iov_len - sent;
      sent = 0;
      if (is_value[i]) {
        out->AddOwned(std::string(p, len));
      } else {
        out->tail()->append(p, len);
      }
    }
  };
  Status batch = read(reply);
  if (batch.ok()) *errors_out += errors;
  return batch;
}

size_t CommandHandler::ReplyValues(const Session& session, Client* client,
                                   const std::vector<std::string>& keys, ValuesReply kind,
                                   ReplyChunks* out) {
  const bool mget = kind == ValuesReply::kMget;
  size_t errors = 0;
  // What an MGET holds, in place or copied, is bounded as its copies were:
  // a client that reads nothing leaves it all queued.
  const Status batch = ReplyFromViews(
      session,
      [&](const Client::ViewsFn& use) {
        return client->BatchGetViews(keys, use, Deadline(), mget ? options_.max_inflight_bytes : 0);
      },
      kind, out, &errors);
  if (batch.ok()) return errors;
  if (mget) {
    RespWriter(out->tail(), session.protocol).Error(internal::ErrorText(batch));
    return errors + 1;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (batch.code() == StatusCode::kNotFound) {
      stats_->misses.Increment(1);
      RespWriter(out->tail(), session.protocol).Null();
    } else {
      ++errors;
      RespWriter(out->tail(), session.protocol).Error(ValueErrorText(batch));
    }
  }
  return errors;
}

}  // namespace shelf::resp
