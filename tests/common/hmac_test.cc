// HmacKey (a prepared HMAC-SHA256 key) gives exactly HmacSha256's MACs:
// RFC 4231's test vectors, and every key length around the block size.
#include "common/hmac.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/escaping.h"

namespace shelf {
namespace {

TEST(HmacTest, Rfc4231TestCase2) {
  const std::string want =
      absl::HexStringToBytes("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(HmacSha256("Jefe", "what do ya want for nothing?"), want);
  EXPECT_EQ(HmacKey("Jefe").Mac({"what do ya ", "want for nothing?"}), want);
}

TEST(HmacTest, APreparedKeyMatchesTheOneShotForEveryKeyLength) {
  const std::string message(300, 'm');
  for (size_t len : {0, 1, 31, 32, 63, 64, 65, 128, 200}) {
    const std::string key(len, static_cast<char>('a' + len % 26));
    HmacKey prepared(key);
    EXPECT_EQ(prepared.Mac({message}), HmacSha256(key, message)) << len;
    EXPECT_EQ(prepared.Mac({message.substr(0, 7), "", message.substr(7)}), HmacSha256(key, message))
        << len;
  }
}

}  // namespace
}  // namespace shelf
