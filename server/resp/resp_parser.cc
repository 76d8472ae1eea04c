#include "server/resp/resp_parser.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shelf::resp {

bool ParseRespInt(absl::string_view text, int64_t* value) {
  bool negative = false;
  if (!text.empty() && text[0] == '-') {
    negative = true;
    text.remove_prefix(1);
  }
  if (text.empty() || text.size() > 19) return false;
  // As Redis's string2ll: no leading zeros ("01", "-0"), so one number has
  // one spelling.
  if (text[0] == '0' && (text.size() > 1 || negative)) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');  // 19 digits cannot wrap a uint64_t
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  *value = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

void RespParser::Feed(const char* data, size_t size) {
  if (state_ == State::kError) return;
  buf_.append(data, size);
}

char* RespParser::BeginBulkFill(size_t max, size_t* room) {
  *room = 0;
  if (!WantsBulkFill() || max == 0) return nullptr;
  *room = static_cast<size_t>(std::min<uint64_t>(bulk_left_, max));
  if (placing_) return placed_.data() + placed_.size;
  std::string& arg = partial_.back();
  fill_from_ = arg.size();
  // Within the capacity reserved at the bulk's header: no reallocation.
  arg.resize(fill_from_ + *room);
  return arg.data() + fill_from_;
}

void RespParser::EndBulkFill(size_t n) {
  if (placing_) {
    placed_.size += n;
  } else {
    partial_.back().resize(fill_from_ + n);
  }
  partial_bytes_ += n;
  bulk_left_ -= n;
}

void RespParser::AppendBulk(const char* data, size_t n) {
  if (placing_) {
    std::memcpy(placed_.data() + placed_.size, data, n);
    placed_.size += n;
  } else {
    partial_.back().append(data, n);
  }
  partial_bytes_ += n;
  bulk_left_ -= n;
}

void RespParser::Compact() {
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > size_t{64} * 1024 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

RespParser::Result RespParser::Fail(std::string message, std::string* error) {
  state_ = State::kError;
  error_ = std::move(message);
  *error = error_;
  partial_.clear();
  partial_bytes_ = 0;
  placed_ = PlacedValue();
  placing_ = false;
  buf_.clear();
  buf_.shrink_to_fit();
  pos_ = 0;
  return Result::kError;
}

bool RespParser::TakeLine(absl::string_view* line, std::string* error) {
  const char* start = buf_.data() + pos_;
  size_t avail = buf_.size() - pos_;
  size_t scan = avail < limits_.line_bytes_max + 2 ? avail : limits_.line_bytes_max + 2;
  const void* nl = std::memchr(start, '\n', scan);
  if (nl == nullptr) {
    if (avail > limits_.line_bytes_max + 1) *error = "Protocol error: too big inline request";
    return false;
  }
  size_t len = static_cast<const char*>(nl) - start;
  if (len == 0 || start[len - 1] != '\r') {
    *error = "Protocol error: expected CRLF at the end of a line";
    return false;
  }
  *line = absl::string_view(start, len - 1);
  pos_ += len + 1;
  return true;
}

RespParser::Result RespParser::ParseInline(std::vector<std::string>* args, std::string* error) {
  absl::string_view line;
  std::string e;
  // Inline commands (telnet, `redis-cli` never) may end in a bare LF.
  const char* start = buf_.data() + pos_;
  const size_t avail = buf_.size() - pos_;
  const size_t nl = buf_.find('\n', pos_);
  if (nl == std::string::npos) {
    if (avail > limits_.line_bytes_max)
      return Fail("Protocol error: too big inline request", error);
    return Result::kNeedMore;
  }
  const size_t len = nl - pos_;
  if (len > limits_.line_bytes_max) return Fail("Protocol error: too big inline request", error);
  line = absl::string_view(start, len);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  pos_ += len + 1;
  args->clear();
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i >= line.size()) break;
    std::string arg;
    if (line[i] == '"' || line[i] == '\'') {
      // As Redis splits them (sdssplitargs): in double quotes \xHH and
      // \n \r \t \b \a stand for their bytes and \ escapes any other;
      // in single quotes only \' is an escape. A closing quote must end the
      // argument.
      const char quote = line[i++];
      bool closed = false;
      while (i < line.size()) {
        char c = line[i++];
        if (c == quote) {
          closed = true;
          break;
        }
        if (c == '\\' && i < line.size()) {
          const char esc = line[i];
          if (quote == '\'') {
            if (esc == '\'') c = line[i++];
          } else if (esc == 'x' && i + 2 < line.size() && absl::ascii_isxdigit(line[i + 1]) &&
                     absl::ascii_isxdigit(line[i + 2])) {
            auto hex = [](char h) {
              return absl::ascii_isdigit(h) ? h - '0' : (h | 0x20) - 'a' + 10;
            };
            c = static_cast<char>(hex(line[i + 1]) * 16 + hex(line[i + 2]));
            i += 3;
          } else {
            ++i;
            switch (esc) {
              case 'n':
                c = '\n';
                break;
              case 'r':
                c = '\r';
                break;
              case 't':
                c = '\t';
                break;
              case 'b':
                c = '\b';
                break;
              case 'a':
                c = '\a';
                break;
              default:
                c = esc;
            }
          }
        }
        arg.push_back(c);
      }
      if (!closed || (i < line.size() && line[i] != ' ' && line[i] != '\t')) {
        return Fail("Protocol error: unbalanced quotes in request", error);
      }
    } else {
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') arg.push_back(line[i++]);
    }
    args->push_back(std::move(arg));
    if (args->size() > limits_.args_max) {
      return Fail(
          absl::StrCat("Protocol error: inline request of over ", limits_.args_max, " arguments"),
          error);
    }
  }
  Compact();
  return Result::kCommand;  // empty for an empty line: Next skips it
}

RespParser::Result RespParser::Next(std::vector<std::string>* args, std::string* error) {
  PlacedValue value;
  Result r = Next(args, &value, error);
  if (value) (*args)[2].assign(value.data(), value.size);
  return r;
}

RespParser::Result RespParser::Next(std::vector<std::string>* args, PlacedValue* value,
                                    std::string* error) {
  *value = PlacedValue();
  if (state_ == State::kError) {
    *error = error_;
    return Result::kError;
  }
  for (;;) {
    if (state_ == State::kStart) {
      if (pos_ == buf_.size()) {
        Compact();
        return Result::kNeedMore;
      }
      if (buf_[pos_] != '*') {
        Result r = ParseInline(args, error);
        if (r == Result::kCommand && args->empty()) continue;  // an empty line
        return r;
      }
      absl::string_view line;
      std::string e;
      if (!TakeLine(&line, &e)) {
        if (!e.empty()) return Fail(e, error);
        return Result::kNeedMore;
      }
      int64_t n = 0;
      if (!ParseRespInt(line.substr(1), &n) || n > static_cast<int64_t>(limits_.args_max)) {
        if (limits_.unauthenticated)
          return Fail("Protocol error: unauthenticated multibulk length", error);
        return Fail(absl::StrCat("Protocol error: invalid multibulk length (at most ",
                                 limits_.args_max, " arguments)"),
                    error);
      }
      if (n <= 0) continue;  // "*0" and "*-1": nothing to run, as Redis
      partial_.clear();
      partial_bytes_ = 0;
      args_left_ = static_cast<size_t>(n);
      state_ = State::kBulkHeader;
    }
    if (state_ == State::kBulkHeader) {
      if (pos_ == buf_.size()) return Result::kNeedMore;
      if (buf_[pos_] != '$') {
        return Fail(
            absl::StrCat("Protocol error: expected '$', got '",
                         std::string(1, buf_[pos_]) == "\r" ? "\\r" : std::string(1, buf_[pos_]),
                         "'"),
            error);
      }
      absl::string_view line;
      std::string e;
      if (!TakeLine(&line, &e)) {
        if (!e.empty()) return Fail(e, error);
        return Result::kNeedMore;
      }
      int64_t len = 0;
      if (!ParseRespInt(line.substr(1), &len) || len < 0) {
        return Fail("Protocol error: invalid bulk length", error);
      }
      if (static_cast<uint64_t>(len) > limits_.bulk_bytes_max) {
        if (limits_.unauthenticated)
          return Fail("Protocol error: unauthenticated bulk length", error);
        return Fail(absl::StrCat("value of ", len, " bytes is over --max-value-size (",
                                 limits_.bulk_bytes_max, " bytes)"),
                    error);
      }
      partial_.emplace_back();
      // One spare byte: the command layer appends the value's trailer byte
      // in place (server/resp/resp_commands.cc) without a reallocation.
      const size_t capacity = static_cast<size_t>(len) + 1;
      if (placer_ && partial_.size() == 3 && static_cast<size_t>(len) >= kDirectBulkBytesMin &&
          absl::EqualsIgnoreCase(partial_[0], "set")) {
        placed_ = placer_(capacity);
        placing_ = static_cast<bool>(placed_);
      }
      if (!placing_) partial_.back().reserve(capacity);
      bulk_left_ = static_cast<uint64_t>(len);
      bulk_len_ = bulk_left_;
      state_ = State::kBulkData;
    }
    if (state_ == State::kBulkData) {
      size_t avail = buf_.size() - pos_;
      if (bulk_left_ > 0) {
        size_t take = avail < bulk_left_ ? avail : static_cast<size_t>(bulk_left_);
        AppendBulk(buf_.data() + pos_, take);
        pos_ += take;
        avail -= take;
        if (bulk_left_ > 0) {
          Compact();
          return Result::kNeedMore;
        }
      }
      if (avail < 2) {
        Compact();
        return Result::kNeedMore;
      }
      if (buf_[pos_] != '\r' || buf_[pos_ + 1] != '\n') {
        return Fail("Protocol error: bulk string not followed by CRLF (wrong length?)", error);
      }
      pos_ += 2;
      placing_ = false;
      if (--args_left_ > 0) {
        state_ = State::kBulkHeader;
        continue;
      }
      state_ = State::kStart;
      args->swap(partial_);
      partial_.clear();
      partial_bytes_ = 0;
      *value = std::move(placed_);
      placed_ = PlacedValue();
      Compact();
      return Result::kCommand;
    }
  }
}

// ------------------------------------------------------------ RespWriter

void RespWriter::Simple(absl::string_view s) { absl::StrAppend(out_, "+", s, "\r\n"); }

void RespWriter::Error(absl::string_view s) {
  std::string clean(s);
  for (char& c : clean) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  absl::StrAppend(out_, "-", clean, "\r\n");
}

void RespWriter::Integer(int64_t v) { absl::StrAppend(out_, ":", v, "\r\n"); }

void RespWriter::Bulk(absl::string_view s) {
  absl::StrAppend(out_, "$", s.size(), "\r\n");
  out_->append(s.data(), s.size());
  out_->append("\r\n");
}

void RespWriter::BulkHeader(size_t size) { absl::StrAppend(out_, "$", size, "\r\n"); }

void RespWriter::Null() { out_->append(protocol_ >= 3 ? "_\r\n" : "$-1\r\n"); }

void RespWriter::NullArray() { out_->append(protocol_ >= 3 ? "_\r\n" : "*-1\r\n"); }

void RespWriter::Array(size_t n) { absl::StrAppend(out_, "*", n, "\r\n"); }

void RespWriter::Map(size_t n) {
  if (protocol_ >= 3) {
    absl::StrAppend(out_, "%", n, "\r\n");
  } else {
    absl::StrAppend(out_, "*", 2 * n, "\r\n");
  }
}

void RespWriter::Set(size_t n) { absl::StrAppend(out_, protocol_ >= 3 ? "~" : "*", n, "\r\n"); }

void RespWriter::Bool(bool b) {
  if (protocol_ >= 3) {
    out_->append(b ? "#t\r\n" : "#f\r\n");
  } else {
    Integer(b ? 1 : 0);
  }
}

void RespWriter::Verbatim(absl::string_view s) {
  if (protocol_ >= 3) {
    absl::StrAppend(out_, "=", s.size() + 4, "\r\ntxt:");
    out_->append(s.data(), s.size());
    out_->append("\r\n");
  } else {
    Bulk(s);
  }
}

}  // namespace shelf::resp
