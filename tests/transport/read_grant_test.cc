// Read grants as the master mints them (wire::MintReadGrant, written in
// place for every replica of every lookup hit) are exactly EncodeReadGrant
// of ReadGrantMac, and verify only for their own key, store incarnation,
// range and time.
#include <gtest/gtest.h>

#include <string>

#include "common/hmac.h"
#include "transport/wire.h"

namespace shelf::wire {
namespace {

constexpr char kGrantKey[] = "0123456789abcdef0123456789abcdef";

ReadGrant Fields() {
  ReadGrant g;
  g.segment_id = 3;
  g.offset = 1 << 20;
  g.length = 64 << 10;
  g.expires_unix_ms = 1'800'000'000'000;
  return g;
}

TEST(ReadGrantTest, AMintedGrantIsTheEncodedGrantWithItsMac) {
  const HmacKey key(kGrantKey);
  for (const std::string& block_key : {std::string("k"), std::string(17, 'c'), std::string(40, 'x'),
                                       std::string(kKeyBytesMax, 'z')}) {
    ReadGrant g = Fields();
    char minted[kReadGrantBytes];
    MintReadGrant(key, 9, block_key, g, minted);
    g.mac = ReadGrantMac(key, "node", 9, block_key, g);
    EXPECT_EQ(std::string(minted, sizeof(minted)), EncodeReadGrant(g)) << block_key.size();
    EXPECT_EQ(g.mac, ReadGrantMac(kGrantKey, "node", 9, block_key, g));

    // decoded_key views the credential: it must outlive the checks.
    const std::string credential = std::string(minted, sizeof(minted)) + block_key;
    absl::string_view decoded_key;
    absl::StatusOr<ReadGrant> back = DecodeReadCredential(credential, &decoded_key);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(decoded_key, block_key);
    const uint64_t now = g.expires_unix_ms - 1;
    EXPECT_TRUE(
        VerifyReadGrant(key, "node", 9, block_key, *back, true, 3, g.offset, g.length, now).ok());
    // Another key, incarnation, store key, range or a later time: refused.
    EXPECT_FALSE(VerifyReadGrant(key, "node", 9, block_key + "!", *back, false, 0, 0, 0, now).ok());
    EXPECT_FALSE(VerifyReadGrant(key, "node", 10, block_key, *back, false, 0, 0, 0, now).ok());
    EXPECT_FALSE(VerifyReadGrant(HmacKey("another store's key"), "node", 9, block_key, *back, false,
                                 0, 0, 0, now)
                     .ok());
    EXPECT_FALSE(
        VerifyReadGrant(key, "node", 9, block_key, *back, true, 4, g.offset, g.length, now).ok());
    EXPECT_FALSE(
        VerifyReadGrant(key, "node", 9, block_key, *back, true, 3, g.offset + 4096, g.length, now)
            .ok());
    EXPECT_FALSE(
        VerifyReadGrant(key, "node", 9, block_key, *back, false, 0, 0, 0, g.expires_unix_ms + 1)
            .ok());
    // Any changed field breaks the MAC.
    ReadGrant longer = *back;
    longer.length += 1;
    EXPECT_FALSE(VerifyReadGrant(key, "node", 9, block_key, longer, false, 0, 0, 0, now).ok());
    ReadGrant later = *back;
    later.expires_unix_ms += 1;
    EXPECT_FALSE(VerifyReadGrant(key, "node", 9, block_key, later, false, 0, 0, 0, now).ok());
  }
}

}  // namespace
}  // namespace shelf::wire
