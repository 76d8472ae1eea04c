// The object index's types (server/master/index/object.h): keys inline up
// to 28 bytes and on the heap beyond, the packed lease and access fields,
// the sizes the master's memory budget rests on, and the shard of a hash.
#include "server/master/index/object.h"

#include <gtest/gtest.h>

#include <string>

namespace shelf::master {
namespace {

TEST(ObjectKeyTest, KeepsEveryLengthExactly) {
  for (size_t len : {0, 1, 17, 27, 28, 29, 64, 4096}) {
    std::string s(len, 'k');
    for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>('a' + i % 26);
    ObjectKey key(s);
    EXPECT_EQ(key.view(), s) << len;
    EXPECT_EQ(key.str(), s) << len;
  }
}

TEST(ObjectKeyTest, KeysWithZeroBytesAndHighBytesSurvive) {
  std::string s("\0\xff\x01tenant/\0key", 14);
  ObjectKey key(s);
  EXPECT_EQ(key.view(), s);
  std::string long_key(300, '\xff');
  ObjectKey heap(long_key);
  EXPECT_EQ(heap.view(), long_key);
}

TEST(ObjectTest, LeaseEndClampsToFortyBits) {
  Object obj("k");
  obj.SetLeaseUntil(12345);
  EXPECT_EQ(obj.lease_until_ms, 12345u);
  obj.SetLeaseUntil(UINT64_MAX);
  EXPECT_EQ(obj.lease_until_ms, Object::kLeaseUntilMax);
}

TEST(ObjectTest, LastAccessKeepsFortyOneBits) {
  Object obj("k");
  const uint64_t t = (uint64_t{1} << 40) + 0x12345678;  // past 32 bits
  obj.Touch(t);
  EXPECT_EQ(obj.last_access_ms(), t);
  obj.Touch(7);
  EXPECT_EQ(obj.last_access_ms(), 7u);
}

TEST(ObjectTest, SoftPinLivesInTheExtra) {
  Object obj("k");
  EXPECT_EQ(obj.pin_until_ms(), 0u);
  obj.extra = std::make_unique<ObjectExtra>();
  obj.extra->pin_until_ms = 99;
  EXPECT_EQ(obj.pin_until_ms(), 99u);
}

TEST(ObjectTest, SizesStayWithinTheirMallocChunks) {
  EXPECT_EQ(sizeof(Object), 104u);
  EXPECT_EQ(sizeof(Replica), 24u);
  EXPECT_EQ(sizeof(ObjectKey), 29u);
}

TEST(ShardTest, EveryHashMapsToAShardByItsHighBits) {
  for (uint64_t high = 0; high < 64; ++high) {
    size_t hash = static_cast<size_t>(high << 32);
    EXPECT_LT(ShardOfHash(hash), kShards);
    EXPECT_EQ(ShardOfHash(hash), ShardOfHash(hash | 0xffffffffu));  // low bits: the set's
  }
  EXPECT_EQ(ShardIndex("some key"), ShardOfHash(KeyHash{}(absl::string_view("some key"))));
}

TEST(IndexSetTest, FindsByKeyHashedKeyAndObject) {
  Shard shard;
  MutexLock lock(&shard.mu);
  auto [it, added] = shard.objects.emplace("alpha");
  ASSERT_TRUE(added);
  EXPECT_FALSE(shard.objects.emplace("alpha").second);
  EXPECT_NE(shard.objects.find(absl::string_view("alpha")), shard.objects.end());
  EXPECT_NE(shard.objects.find(Hashed("alpha")), shard.objects.end());
  EXPECT_EQ(shard.objects.find(Hashed("beta")), shard.objects.end());
  // A prefetch probe never matches.
  EXPECT_EQ(shard.objects.find(PrefetchProbe{KeyHash{}(absl::string_view("alpha"))}),
            shard.objects.end());
  Mut(*it).size = 5;
  EXPECT_EQ(shard.objects.find(absl::string_view("alpha"))->size, 5u);
}

}  // namespace
}  // namespace shelf::master
