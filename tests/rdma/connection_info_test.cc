// ConnectionInfo encoding: round trip, the documented byte layout
// (docs/rdma.md), and rejection of malformed records.
#include "transport/rdma/connection_info.h"

#include <gtest/gtest.h>

#include <string>

namespace shelf::transport::rdma {
namespace {

ConnectionInfo Sample() {
  ConnectionInfo info;
  info.rd_atomic_responder = 16;
  info.rd_atomic_initiator = 8;
  for (int i = 0; i < 16; ++i) info.gid[i] = static_cast<uint8_t>(0xf0 + i);
  info.lid = 0x1234;
  info.mtu = 5;  // IBV_MTU_4096
  info.qp_num = 0xabcdef;
  info.psn = 0x123456;
  info.segment.addr = 0x00007f0011223344ull;
  info.segment.length = 64ull << 30;
  info.segment.rkey = 0xdeadbeef;
  return info;
}

TEST(ConnectionInfoTest, RoundTripsEveryField) {
  const ConnectionInfo in = Sample();
  const std::string bytes = EncodeConnectionInfo(in);
  ASSERT_EQ(bytes.size(), kConnectionInfoBytes);
  absl::StatusOr<ConnectionInfo> out = DecodeConnectionInfo(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->version, kConnectionInfoVersion);
  EXPECT_EQ(out->rd_atomic_responder, 16);
  EXPECT_EQ(out->rd_atomic_initiator, 8);
  EXPECT_EQ(out->gid, in.gid);
  EXPECT_EQ(out->lid, in.lid);
  EXPECT_EQ(out->mtu, in.mtu);
  EXPECT_EQ(out->qp_num, in.qp_num);
  EXPECT_EQ(out->psn, in.psn);
  EXPECT_EQ(out->segment.addr, in.segment.addr);
  EXPECT_EQ(out->segment.length, in.segment.length);
  EXPECT_EQ(out->segment.rkey, in.segment.rkey);
}

TEST(ConnectionInfoTest, MatchesDocumentedLayout) {
  const std::string b = EncodeConnectionInfo(Sample());
  auto byte = [&b](size_t i) { return static_cast<uint8_t>(b[i]); };
  EXPECT_EQ(b.substr(0, 4), "SRDM");  // magic
  EXPECT_EQ(byte(4), 2);              // version, little-endian
  EXPECT_EQ(byte(5), 0);
  EXPECT_EQ(byte(6), 16);    // responder READ depth
  EXPECT_EQ(byte(7), 8);     // initiator READ depth
  EXPECT_EQ(byte(8), 0xf0);  // gid, network order as stored
  EXPECT_EQ(byte(23), 0xff);
  EXPECT_EQ(byte(24), 0x34);  // lid
  EXPECT_EQ(byte(25), 0x12);
  EXPECT_EQ(byte(26), 5);     // mtu
  EXPECT_EQ(byte(28), 0xef);  // qpn
  EXPECT_EQ(byte(30), 0xab);
  EXPECT_EQ(byte(31), 0x00);
  EXPECT_EQ(byte(32), 0x56);  // psn
  EXPECT_EQ(byte(36), 0xef);  // rkey
  EXPECT_EQ(byte(39), 0xde);
  EXPECT_EQ(byte(40), 0x44);  // segment address
  EXPECT_EQ(byte(45), 0x7f);
  EXPECT_EQ(byte(52), 0x10);  // segment length: 64 GiB = 0x10'0000'0000
}

TEST(ConnectionInfoTest, RejectsMalformedRecords) {
  const std::string good = EncodeConnectionInfo(Sample());
  auto rejected = [](const std::string& bytes) {
    absl::StatusOr<ConnectionInfo> r = DecodeConnectionInfo(bytes);
    return !r.ok() && r.status().code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(rejected(good.substr(0, kConnectionInfoBytes - 1)));
  EXPECT_TRUE(rejected(good + "x"));
  EXPECT_TRUE(rejected(""));
  std::string bad = good;
  bad[0] = 'X';  // magic
  EXPECT_TRUE(rejected(bad));
  bad = good;
  bad[4] = 3;  // version
  EXPECT_TRUE(rejected(bad));
  bad[4] = 0;
  EXPECT_TRUE(rejected(bad));
  bad = good;
  bad[6] = 0;  // responder depth
  EXPECT_TRUE(rejected(bad));
  bad = good;
  bad[7] = 0;  // initiator depth
  EXPECT_TRUE(rejected(bad));
  bad = good;
  bad[27] = 1;  // reserved
  EXPECT_TRUE(rejected(bad));
  bad = good;
  bad[26] = 0;  // mtu
  EXPECT_TRUE(rejected(bad));
  bad[26] = 6;
  EXPECT_TRUE(rejected(bad));
  bad = good;
  bad[31] = 1;  // qpn over 24 bits
  EXPECT_TRUE(rejected(bad));
  bad = good;
  bad[35] = 1;  // psn over 24 bits
  EXPECT_TRUE(rejected(bad));
  ConnectionInfo wraps = Sample();
  wraps.segment.addr = ~uint64_t{0} - 10;
  wraps.segment.length = 11;
  EXPECT_TRUE(rejected(EncodeConnectionInfo(wraps)));
}

TEST(ConnectionInfoTest, VersionOneHasNoDepthsAndReservedBytesStayZero) {
  ConnectionInfo v1 = Sample();
  v1.version = 1;
  const std::string bytes = EncodeConnectionInfo(v1);
  ASSERT_EQ(bytes.size(), kConnectionInfoBytes);
  EXPECT_EQ(static_cast<uint8_t>(bytes[4]), 1);
  EXPECT_EQ(bytes[6], 0);  // reserved in version 1: the depths are not written
  EXPECT_EQ(bytes[7], 0);
  absl::StatusOr<ConnectionInfo> out = DecodeConnectionInfo(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->version, 1);
  EXPECT_EQ(out->rd_atomic_responder, 0);
  EXPECT_EQ(out->rd_atomic_initiator, 0);
  EXPECT_EQ(out->qp_num, v1.qp_num);
  // A version 1 record with its reserved bytes set is malformed.
  std::string bad = bytes;
  bad[6] = 4;
  EXPECT_FALSE(DecodeConnectionInfo(bad).ok());
  bad = bytes;
  bad[7] = 4;
  EXPECT_FALSE(DecodeConnectionInfo(bad).ok());
}

TEST(ConnectionInfoTest, InitiatorOnlyEndExposesNothing) {
  ConnectionInfo info = Sample();
  info.segment = RemoteSegment{};
  absl::StatusOr<ConnectionInfo> out = DecodeConnectionInfo(EncodeConnectionInfo(info));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->segment.length, 0u);
}

}  // namespace
}  // namespace shelf::transport::rdma
