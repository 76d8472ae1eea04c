// RespParser: whole commands only, in order, across any split of the input;
// every malformed or oversized input is refused before memory is reserved.
#include "server/resp/resp_parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace shelf::resp {
namespace {

using Args = std::vector<std::string>;

RespLimits SmallLimits() {
  RespLimits l;
  l.args_max = 8;
  l.bulk_bytes_max = 1024;
  l.line_bytes_max = 64;
  return l;
}

// Feeds `input` in pieces of `step` bytes; returns every command parsed and
// the error, if any.
std::vector<Args> ParseAll(const std::string& input, size_t step, std::string* error,
                           RespLimits limits = SmallLimits()) {
  RespParser p(limits);
  std::vector<Args> out;
  error->clear();
  for (size_t at = 0; at < input.size(); at += step) {
    p.Feed(input.data() + at, std::min(step, input.size() - at));
    Args args;
    for (;;) {
      RespParser::Result r = p.Next(&args, error);
      if (r == RespParser::Result::kCommand) {
        out.push_back(args);
        continue;
      }
      if (r == RespParser::Result::kError) return out;
      break;
    }
  }
  return out;
}

TEST(RespParserTest, MultibulkCommandsSplitAnywhere) {
  std::string input = std::string("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\n", 27) +
                      std::string("\0x\r\n", 4) + "*1\r\n$4\r\nPING\r\n";
  // The value is "v\r\n\0x": binary bytes, CRLF inside a value included.
  for (size_t step = 1; step <= input.size(); ++step) {
    std::string error;
    std::vector<Args> cmds = ParseAll(input, step, &error);
    ASSERT_EQ(error, "") << "step " << step;
    ASSERT_EQ(cmds.size(), 2u) << "step " << step;
    EXPECT_EQ(cmds[0], (Args{"SET", "k", std::string("v\r\n\0x", 5)}));
    EXPECT_EQ(cmds[1], (Args{"PING"}));
  }
}

// A large value may be read straight into its argument once its header is
// parsed (BeginBulkFill/EndBulkFill, what the server does with the socket),
// in pieces of any size, mixed with bytes fed the usual way; the command is
// the same as if every byte had been fed. Small values, and a parser still
// holding unparsed input, offer no room.
TEST(RespParserTest, LargeValuesAreFilledInPlace) {
  RespLimits limits;
  const std::string value = [] {
    std::string v(size_t{300} * 1024, '\0');
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>(i * 131 + i / 7);
    return v;
  }();
  for (size_t piece : {size_t{1}, size_t{4096}, size_t{65536}, value.size()}) {
    RespParser p(limits);
    Args args;
    std::string error;
    size_t room = 0;
    const std::string head =
        "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + std::to_string(value.size()) + "\r\n";
    // Header and the first 10 bytes of the value fed, not yet parsed.
    p.Feed(head.data(), head.size());
    p.Feed(value.data(), 10);
    EXPECT_FALSE(p.WantsBulkFill());
    EXPECT_EQ(p.BeginBulkFill(1 << 20, &room), nullptr);
    ASSERT_EQ(p.Next(&args, &error), RespParser::Result::kNeedMore);
    size_t at = 10;
    while (at < value.size()) {
      ASSERT_TRUE(p.WantsBulkFill()) << "at " << at;
      char* into = p.BeginBulkFill(piece, &room);
      ASSERT_NE(into, nullptr);
      ASSERT_EQ(room, std::min(piece, value.size() - at));
      // A short read: half the room (at least a byte) arrives.
      const size_t n = std::max<size_t>(room / 2, 1);
      std::memcpy(into, value.data() + at, n);
      p.EndBulkFill(n);
      at += n;
      EXPECT_EQ(p.announced_bytes(), value.size() - at);
    }
    EXPECT_FALSE(p.WantsBulkFill());  // whole: the CRLF comes the usual way
    ASSERT_EQ(p.Next(&args, &error), RespParser::Result::kNeedMore);
    const std::string rest = "\r\n*1\r\n$4\r\nPING\r\n";
    p.Feed(rest.data(), rest.size());
    ASSERT_EQ(p.Next(&args, &error), RespParser::Result::kCommand) << error;
    ASSERT_EQ(args.size(), 3u);
    EXPECT_EQ(args[0], "SET");
    EXPECT_TRUE(args[2] == value) << "piece " << piece << ": the value differs";
    ASSERT_EQ(p.Next(&args, &error), RespParser::Result::kCommand);
    EXPECT_EQ(args, (Args{"PING"}));
  }
  // A value under kDirectBulkBytesMin goes through Feed alone.
  RespParser small(limits);
  Args args;
  std::string error;
  size_t room = 0;
  const std::string head = "*2\r\n$3\r\nGET\r\n$100\r\n";
  small.Feed(head.data(), head.size());
  ASSERT_EQ(small.Next(&args, &error), RespParser::Result::kNeedMore);
  EXPECT_FALSE(small.WantsBulkFill());
  EXPECT_EQ(small.BeginBulkFill(1 << 20, &room), nullptr);
  EXPECT_EQ(room, 0u);
}

// A placer (here heap memory whose frees are counted) takes the value of a
// large SET, and only that: the argument stays empty, the bytes, fed or
// filled in place, are the value's, with its spare byte. Without room the
// value goes into its argument; the two-argument Next copies a placed
// value into it; a protocol error mid-value gives the room back.
TEST(RespParserTest, LargeSetValuesArePlacedWhereThePlacerSays) {
  const std::string value = [] {
    std::string v(size_t{200} * 1024, '\0');
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>(i * 7 + i / 251);
    return v;
  }();
  int placed = 0, freed = 0;
  bool room = true;
  ValuePlacer placer = [&](size_t capacity) {
    PlacedValue v;
    if (!room) return v;
    ++placed;
    v.memory =
        std::unique_ptr<char, std::function<void(char*)>>(new char[capacity], [&freed](char* p) {
          ++freed;
          delete[] p;
        });
    v.capacity = capacity;
    return v;
  };
  auto encode = [](const Args& args) {
    std::string out = "*" + std::to_string(args.size()) + "\r\n";
    for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    return out;
  };
  std::string error;
  Args args;
  {
    RespParser p(RespLimits{}, placer);
    // Half fed, half filled in place; then a SET with options, lower case.
    const std::string set = encode({"SET", "k", value});
    const size_t head = set.size() - value.size() - 2;
    p.Feed(set.data(), head + 1000);
    PlacedValue v;
    ASSERT_EQ(p.Next(&args, &v, &error), RespParser::Result::kNeedMore);
    size_t at = 1000, n = 0;
    while (at < value.size()) {
      char* into = p.BeginBulkFill(50000, &n);
      ASSERT_NE(into, nullptr);
      std::memcpy(into, value.data() + at, n);
      p.EndBulkFill(n);
      at += n;
    }
    p.Feed("\r\n", 2);
    const std::string more = encode({"set", "k2", value, "NX"});
    p.Feed(more.data(), more.size());
    for (const char* key : {"k", "k2"}) {
      ASSERT_EQ(p.Next(&args, &v, &error), RespParser::Result::kCommand) << error;
      EXPECT_EQ(args[1], key);
      EXPECT_TRUE(args[2].empty()) << "a placed value's argument holds bytes";
      ASSERT_TRUE(v);
      EXPECT_EQ(v.size, value.size());
      EXPECT_EQ(v.capacity, value.size() + 1);  // room for the trailer
      EXPECT_TRUE(std::string(v.data(), v.size) == value) << key;
    }
    EXPECT_EQ(args.size(), 4u);
    v = PlacedValue();
    EXPECT_EQ(placed, 2);
    EXPECT_EQ(freed, 2);

    // Not placed: under kDirectBulkBytesMin, not SET's value, no room.
    const std::string small(RespParser::kDirectBulkBytesMin - 1, 's');
    std::string others = encode({"SET", "k", small}) + encode({"ECHO", value}) +
                         encode({"SET", value.substr(0, 70000), "v"});
    p.Feed(others.data(), others.size());
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(p.Next(&args, &v, &error), RespParser::Result::kCommand) << error;
      EXPECT_FALSE(v) << "command " << i << " placed";
    }
    EXPECT_EQ(args[1], value.substr(0, 70000));
    room = false;
    const std::string full = encode({"SET", "k3", value});
    p.Feed(full.data(), full.size());
    ASSERT_EQ(p.Next(&args, &v, &error), RespParser::Result::kCommand);
    EXPECT_FALSE(v);
    EXPECT_TRUE(args[2] == value) << "the value without room differs";
    room = true;

    // The two-argument Next: the placed value copied into its argument.
    const std::string again = encode({"SET", "k4", value});
    p.Feed(again.data(), again.size());
    ASSERT_EQ(p.Next(&args, &error), RespParser::Result::kCommand);
    EXPECT_TRUE(args[2] == value) << "Next(args) lost the placed value";
    EXPECT_EQ(placed, 3);
    EXPECT_EQ(freed, 3);
  }
  // A value cut short by garbage: the error frees the room.
  RespParser p(RespLimits{}, placer);
  std::string bad = encode({"SET", "k", value});
  bad.replace(bad.size() - 2, 2, "XY");
  p.Feed(bad.data(), bad.size());
  PlacedValue v;
  ASSERT_EQ(p.Next(&args, &v, &error), RespParser::Result::kError);
  EXPECT_FALSE(v);
  EXPECT_EQ(placed, 4);
  EXPECT_EQ(freed, 4);
}

TEST(RespParserTest, EmptyBulkAndEmptyArrays) {
  std::string error;
  std::vector<Args> cmds = ParseAll("*0\r\n*-1\r\n*2\r\n$3\r\nGET\r\n$0\r\n\r\n", 3, &error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0], (Args{"GET", ""}));
}

TEST(RespParserTest, InlineCommands) {
  std::string error;
  std::vector<Args> cmds = ParseAll("PING\r\nset a \"b c\"\n\r\nGET 'x y'\r\n", 1, &error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(cmds.size(), 3u);
  EXPECT_EQ(cmds[0], (Args{"PING"}));
  EXPECT_EQ(cmds[1], (Args{"set", "a", "b c"}));
  EXPECT_EQ(cmds[2], (Args{"GET", "x y"}));
}

// Quoted inline arguments follow Redis (redis-cli sends what it was typed):
// escapes in double quotes, only \' in single quotes.
TEST(RespParserTest, InlineQuotesAndEscapesAreRedis) {
  std::string error;
  std::vector<Args> cmds = ParseAll(
      "SET k \"a\\nb\\t\\x41\\x4a\\\"\\\\\\q\"\r\nSET k 'it\\'s \\n'\r\nSET k \"\\xZZ\"\r\n", 1,
      &error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(cmds.size(), 3u);
  EXPECT_EQ(cmds[0], (Args{"SET", "k", "a\nb\tAJ\"\\q"}));
  EXPECT_EQ(cmds[1], (Args{"SET", "k", "it's \\n"}));
  EXPECT_EQ(cmds[2], (Args{"SET", "k", "xZZ"}));
}

TEST(RespParserTest, MalformedInputIsAnErrorAfterTheGoodCommands) {
  struct Case {
    const char* name;
    std::string input;
    const char* error_has;
  } cases[] = {
      {"bulk longer than said", "*1\r\n$2\r\nPING\r\n", "CRLF"},
      {"missing CRLF after header", "*1\n$4\r\nPING\r\n", "CRLF"},
      {"negative bulk length", "*1\r\n$-5\r\n", "invalid bulk length"},
      {"bulk length with a leading zero", "*1\r\n$04\r\nPING\r\n", "invalid bulk length"},
      {"array length with a leading zero", "*01\r\n$4\r\nPING\r\n", "multibulk length"},
      {"2^63 bulk length", "*1\r\n$9223372036854775808\r\n", "invalid bulk length"},
      {"bulk over the max", "*1\r\n$1025\r\n", "max-value-size"},
      {"1 GiB array header", "*1073741824\r\n", "multibulk length"},
      {"nested array", "*1\r\n*1\r\n$4\r\nPING\r\n", "expected '$'"},
      {"not a number", "*x\r\n", "multibulk length"},
      {"header line too long", "*1\r\n$" + std::string(100, '1'), "too big"},
      {"inline too long", std::string(100, 'a'), "too big"},
      {"unbalanced quote", "SET a \"b\r\n", "quotes"},
      {"text after a closing quote", "ECHO \"abc\"def\r\n", "quotes"},
      {"inline of too many arguments", "a b c d e f g h i\r\n", "arguments"},
  };
  for (const Case& c : cases) {
    std::string error;
    std::vector<Args> cmds = ParseAll("PING\r\n" + c.input + "*1\r\n$4\r\nPING\r\n", 1, &error);
    EXPECT_NE(error.find(c.error_has), std::string::npos) << c.name << ": " << error;
    EXPECT_EQ(cmds.size(), 1u) << c.name;  // the PING before, never the one after
  }
}

TEST(RespParserTest, NothingReservedForAnnouncedBytesUntilTheHeaderPasses) {
  RespParser p(SmallLimits());
  std::string h = "*2\r\n$3\r\nSET\r\n$1000\r\nabc";
  p.Feed(h.data(), h.size());
  Args args;
  std::string error;
  EXPECT_EQ(p.Next(&args, &error), RespParser::Result::kNeedMore);
  EXPECT_EQ(p.announced_bytes(), 997u);
  EXPECT_FALSE(p.idle());
}

TEST(RespParserTest, ErrorIsSticky) {
  RespParser p(SmallLimits());
  std::string bad = "*1\r\n$-1\r\n";
  p.Feed(bad.data(), bad.size());
  Args args;
  std::string error;
  EXPECT_EQ(p.Next(&args, &error), RespParser::Result::kError);
  std::string good = "*1\r\n$4\r\nPING\r\n";
  p.Feed(good.data(), good.size());
  EXPECT_EQ(p.Next(&args, &error), RespParser::Result::kError);
  EXPECT_EQ(p.buffered_bytes(), 0u);
}

TEST(RespParserTest, ParseRespInt) {
  int64_t v = 0;
  EXPECT_TRUE(ParseRespInt("0", &v));
  EXPECT_TRUE(ParseRespInt("-12", &v));
  EXPECT_EQ(v, -12);
  EXPECT_TRUE(ParseRespInt("9223372036854775807", &v));
  EXPECT_FALSE(ParseRespInt("9223372036854775808", &v));
  EXPECT_FALSE(ParseRespInt("99999999999999999999", &v));
  EXPECT_FALSE(ParseRespInt("", &v));
  EXPECT_FALSE(ParseRespInt("-", &v));
  EXPECT_FALSE(ParseRespInt("1 ", &v));
  EXPECT_FALSE(ParseRespInt("+1", &v));
  // Leading zeros are refused, as by Redis.
  EXPECT_FALSE(ParseRespInt("01", &v));
  EXPECT_FALSE(ParseRespInt("-0", &v));
  EXPECT_FALSE(ParseRespInt("-01", &v));
}

TEST(RespWriterTest, Resp2AndResp3Encodings) {
  std::string two, three;
  RespWriter w2(&two, 2), w3(&three, 3);
  for (RespWriter* w : {&w2, &w3}) {
    w->Null();
    w->Map(1);
    w->Bool(true);
    w->Error("ERR a\r\nb");
  }
  EXPECT_EQ(two, "$-1\r\n*2\r\n:1\r\n-ERR a  b\r\n");
  EXPECT_EQ(three, "_\r\n%1\r\n#t\r\n-ERR a  b\r\n");
}

}  // namespace
}  // namespace shelf::resp
