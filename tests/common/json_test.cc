// common/json.h: what shelfctl --json, /health and the benchmarks write must
// parse back whatever bytes a key or node id holds, and never throw.
#include "common/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace shelf {
namespace {

// Bytes that broke the hand-written quoter: NUL, DEL, 0xff, a lone
// continuation byte, a truncated two-byte sequence, an encoded surrogate,
// and valid UTF-8 (which must come through unchanged).
const std::string kNastyKey(
    "a\x00"
    "b\x7f\xff\x80\xc3(\xed\xa0\x80\"\\\n\xc3\xa9",
    16);

TEST(JsonTest, ArbitraryKeyBytesYieldValidJsonAndExactHex) {
  Json o = Json::object();
  AddBytesField(&o, "key", kNastyKey);
  o["size"] = 4096;
  std::string text;
  ASSERT_NO_THROW(text = JsonDump(o));
  const Json back = JsonParse(text);
  ASSERT_FALSE(back.is_discarded()) << text;
  EXPECT_EQ(back["key_hex"],
            "610062"
            "7fff80c328eda080225c0ac3a9");
  EXPECT_EQ(back["size"], 4096);
  // The text field keeps every valid character; the bad bytes become U+FFFD.
  const std::string key = back["key"].get<std::string>();
  EXPECT_EQ(key.substr(0, 4), std::string("a\x00"
                                          "b\x7f",
                                          4));
  EXPECT_NE(key.find("\xef\xbf\xbd"), std::string::npos);
  EXPECT_NE(key.find("\"\\\n\xc3\xa9"), std::string::npos);
  // Valid UTF-8 is written as is, not escaped byte by byte.
  EXPECT_NE(text.find("\xc3\xa9"), std::string::npos) << text;
  EXPECT_EQ(text.find("\\u00c3"), std::string::npos) << text;
}

TEST(JsonTest, OneLineForAnyInput) {
  Json o = Json::object();
  o["node"] = std::string("store\n\"1\"\xff\0", 11);
  const std::string text = JsonDump(o);
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_FALSE(JsonParse(text).is_discarded()) << text;
}

TEST(JsonTest, NonFiniteNumbersAreNull) {
  Json o = Json::object();
  o["nan"] = std::nan("");
  o["inf"] = std::numeric_limits<double>::infinity();
  o["ratio"] = 0.5;
  EXPECT_EQ(JsonDump(o), R"({"nan":null,"inf":null,"ratio":0.5})");
}

TEST(JsonTest, FieldsKeepTheirOrder) {
  Json o = Json::object();
  o["z"] = 1;
  o["a"] = true;
  EXPECT_EQ(JsonDump(o), R"({"z":1,"a":true})");
}

TEST(JsonTest, ParseNeverThrows) {
  EXPECT_TRUE(JsonParse("{\"a\": ").is_discarded());
  EXPECT_TRUE(JsonParse("[1] x").is_discarded());
  EXPECT_TRUE(JsonParse("\"\xff\"").is_discarded());
  EXPECT_EQ(JsonParse(R"({"a": [1, 4294967295]})")["a"][1], 4294967295u);
}

}  // namespace
}  // namespace shelf
