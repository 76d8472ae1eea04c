// RespParser: an incremental, bounded parser of the commands a Redis client
// sends (RESP2 "multibulk" arrays of bulk strings, and inline commands typed
// by hand), and RespWriter, which encodes replies in RESP2 or RESP3.
//
//   RespParser parser(limits);
//   parser.Feed(bytes, n);
//   std::vector<std::string> args;
//   std::string error;
//   while (parser.Next(&args, &error) == RespParser::Result::kCommand) Run(args);
//   // kError: reply `error` and close; the stream cannot be resynchronised.
//
// Every length a client announces is checked against RespLimits before any
// memory is reserved for it, so a "*1073741824\r\n" header or a
// "$9223372036854775808\r\n" bulk costs nothing. A command is returned only
// when all of its bytes have arrived: a value is always whole.
//
// Not thread-safe: one parser per connection.
#ifndef SHELF_SERVER_RESP_RESP_PARSER_H_
#define SHELF_SERVER_RESP_RESP_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace shelf::resp {

struct RespLimits {
  size_t args_max = size_t{1024} * 1024;      // elements of one command array
  uint64_t bulk_bytes_max = 512ull << 20;     // one argument (--max-value-size)
  size_t line_bytes_max = size_t{64} * 1024;  // an inline command, a header line
  // The limits of a client that has not authenticated: errors say so.
  bool unauthenticated = false;
};

// What an argument costs in memory besides its bytes: the string object
// and its allocation's overhead. Counted against --max-inflight-bytes, so
// that a flood of empty arguments is not free.
inline constexpr size_t kArgOverheadBytes = 48;

// Memory a large SET value is read into instead of its argument string.
// shelf-resp places values in shared host memory, which a store on the same
// host copies the put from directly (resp_value_arena.h). Freed by
// `memory`'s deleter.
struct PlacedValue {
  std::unique_ptr<char, std::function<void(char*)>> memory;
  size_t size = 0;      // bytes of the value received so far
  size_t capacity = 0;  // the value's length and one spare byte (its trailer)
  char* data() const { return memory.get(); }
  explicit operator bool() const { return memory != nullptr; }
};
// Room for `capacity` bytes, or an empty PlacedValue when there is none
// (the value then goes into its argument, as any other).
using ValuePlacer = std::function<PlacedValue(size_t capacity)>;

class RespParser {
 public:
  enum class Result { kNeedMore, kCommand, kError };

  // `placer` (optional) places the value of each `SET key value ...` of
  // kDirectBulkBytesMin bytes or more, when it has room.
  explicit RespParser(const RespLimits& limits, ValuePlacer placer = nullptr)
      : limits_(limits), placer_(std::move(placer)) {}

  // The limits from the next header on (shelf-resp tightens them while a
  // client has not authenticated).
  void set_limits(const RespLimits& limits) { limits_ = limits; }

  // Appends bytes received from the client.
  void Feed(const char* data, size_t size);
  // The next whole command into `args` (cleared first). kError sets `error`
  // (a message without the leading '-') and stays in error from then on.
  // A placed value is copied into its argument.
  Result Next(std::vector<std::string>* args, std::string* error);
  // The same, a placed value left where it is: in *value, its argument
  // (args[2]) empty. *value is empty for every other command.
  Result Next(std::vector<std::string>* args, PlacedValue* value, std::string* error);

  // Bytes this parser holds: unparsed input plus the arguments of the
  // command being assembled (kArgOverheadBytes each besides their bytes).
  // What the server counts against --max-inflight-bytes.
  size_t buffered_bytes() const {
    return (buf_.size() - pos_) + partial_bytes_ + partial_.size() * kArgOverheadBytes;
  }
  // Bytes announced by the bulk header being read but not yet received.
  uint64_t announced_bytes() const { return state_ == State::kBulkData ? bulk_left_ : 0; }
  // True between commands, with no partial input held.
  bool idle() const { return state_ == State::kStart && pos_ == buf_.size(); }

  // Reading a bulk straight into its argument: while a bulk of at least
  // kDirectBulkBytesMin is being received and no input waits to be parsed
  // (the socket's next bytes are the bulk's), BeginBulkFill gives room for
  // up to `max` of its bytes (never past its end) in the argument itself
  // (or its placed memory),
  // and EndBulkFill(n) takes the first n as received, as Feed would have;
  // the server reads the socket into it, where Feed would cost two copies
  // (its buffer, then the argument). nullptr, *room 0, when not so.
  static constexpr size_t kDirectBulkBytesMin = size_t{64} * 1024;
  bool WantsBulkFill() const {
    return state_ == State::kBulkData && bulk_left_ > 0 && pos_ == buf_.size() &&
           bulk_len_ >= kDirectBulkBytesMin;
  }
  char* BeginBulkFill(size_t max, size_t* room);
  // REQUIRES: BeginBulkFill returned room >= n just before.
  void EndBulkFill(size_t n);

 private:
  enum class State { kStart, kBulkHeader, kBulkData, kError };

  // Finds a CRLF-terminated line starting at pos_; false when incomplete.
  // Sets `error` for a line over the limit or a bare LF.
  bool TakeLine(absl::string_view* line, std::string* error);
  Result Fail(std::string message, std::string* error);
  Result ParseInline(std::vector<std::string>* args, std::string* error);
  void Compact();
  // Appends `n` received bytes to the bulk being read.
  void AppendBulk(const char* data, size_t n);

  RespLimits limits_;
  ValuePlacer placer_;
  PlacedValue placed_;    // the value of the SET being read, when placed
  bool placing_ = false;  // the bulk being read goes to placed_
  std::string buf_;
  size_t pos_ = 0;
  State state_ = State::kStart;
  std::string error_;
  std::vector<std::string> partial_;  // arguments of the command being read
  size_t partial_bytes_ = 0;
  size_t args_left_ = 0;
  uint64_t bulk_left_ = 0;  // bytes of the current bulk still to read
  uint64_t bulk_len_ = 0;   // the current bulk's whole length
  size_t fill_from_ = 0;    // BeginBulkFill: the argument's size before it
};

// Parses a RESP integer: optional '-', then 1..19 digits, no overflow.
bool ParseRespInt(absl::string_view text, int64_t* value);

// Builds replies. RESP3 (after HELLO 3) has nulls, maps, booleans and
// doubles of its own; in RESP2 they fall back to their usual encodings.
class RespWriter {
 public:
  explicit RespWriter(std::string* out, int protocol) : out_(out), protocol_(protocol) {}

  void Simple(absl::string_view s);  // +s
  void Error(absl::string_view s);   // -s (newlines replaced)
  void Integer(int64_t v);
  void Bulk(absl::string_view s);
  void BulkHeader(size_t size);  // "$size\r\n"; the caller adds the bytes and CRLF
  void Null();                   // RESP2 $-1, RESP3 _
  void NullArray();              // RESP2 *-1, RESP3 _
  void Array(size_t n);
  void Map(size_t n);                  // n pairs; RESP2: an array of 2n
  void Set(size_t n);                  // RESP2: an array
  void Bool(bool b);                   // RESP2: integer 0/1
  void Verbatim(absl::string_view s);  // RESP3 "=N\r\ntxt:..." ; RESP2 bulk

  int protocol() const { return protocol_; }

 private:
  std::string* out_;
  int protocol_;
};

}  // namespace shelf::resp

#endif  // SHELF_SERVER_RESP_RESP_PARSER_H_
