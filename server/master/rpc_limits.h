// The largest request body each master RPC accepts (docs/security.md,
// "Message size limits"). gRPC itself takes messages up to
// kRpcReceiveBytesMax, the largest of these (a store's registration carries
// its whole inventory); each handler then refuses a body above its own
// method's limit with RESOURCE_EXHAUSTED before acting on it, so a lookup or
// a heartbeat cannot carry what only a registration needs.
#ifndef SHELF_SERVER_MASTER_RPC_LIMITS_H_
#define SHELF_SERVER_MASTER_RPC_LIMITS_H_

#include <array>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "common/check.h"
#include "common/log.h"
#include "server/master/master_metrics.h"
#include "shelf/limits.h"

namespace shelf::master {

struct RpcRequestLimit {
  const char* method;  // as in MasterMetrics::kRpcMethods
  size_t bytes_max;
};

// Calls that name keys: a batch of the longest keys, with room for options.
inline constexpr size_t kSmallRequestBytesMax = size_t{1} << 20;
static_assert(kBatchItemsMax * (kKeyBytesMax + 8) < kSmallRequestBytesMax / 2,
              "a full batch of the longest keys must fit a small request");
// A put carries the token ids of its block's events (kBlockEventTokenIdsMax,
// up to 5 bytes each as varints).
inline constexpr size_t kPutStartBytesMax = size_t{1} << 20;
static_assert(kBlockEventTokenIdsMax * 5 + kKeyBytesMax < kPutStartBytesMax,
              "a put with the most event tokens must fit");
inline constexpr size_t kBatchPutStartBytesMax = size_t{16} << 20;
// Heartbeats report the results of tier moves since the last one.
inline constexpr size_t kHeartbeatBytesMax = size_t{16} << 20;
// A registration lists everything the store holds.
inline constexpr size_t kRegisterStoreBytesMax = size_t{64} << 20;
inline constexpr size_t kRpcReceiveBytesMax = kRegisterStoreBytesMax;

inline constexpr std::array<RpcRequestLimit, MasterMetrics::kRpcMethods.size()> kRpcRequestLimits =
    {{
        {"RegisterStore", kRegisterStoreBytesMax}, {"Heartbeat", kHeartbeatBytesMax},
        {"PutStart", kPutStartBytesMax},           {"BatchPutStart", kBatchPutStartBytesMax},
        {"PutCommit", kSmallRequestBytesMax},      {"PutAbort", kSmallRequestBytesMax},
        {"Lookup", kSmallRequestBytesMax},         {"MatchPrefix", kSmallRequestBytesMax},
        {"ReleaseLeases", kSmallRequestBytesMax},  {"Remove", kSmallRequestBytesMax},
        {"ListKeys", kSmallRequestBytesMax},       {"RemoveMatching", kSmallRequestBytesMax},
        {"Promote", kSmallRequestBytesMax},        {"PromoteCommit", kSmallRequestBytesMax},
        {"Status", kSmallRequestBytesMax},         {"Segments", kSmallRequestBytesMax},
        {"Stat", kSmallRequestBytesMax},           {"Drain", kSmallRequestBytesMax},
        {"Evict", kSmallRequestBytesMax},          {"Pin", kSmallRequestBytesMax},
        {"Locate", kSmallRequestBytesMax},         {"ReportDataLoss", kSmallRequestBytesMax},
    }};

// The limit of `method`; a method without one is a bug (aborts). Called
// once per handler (a function-local static).
inline size_t RpcRequestBytesMax(const char* method) {
  for (const RpcRequestLimit& l : kRpcRequestLimits) {
    if (l.method != nullptr && std::strcmp(l.method, method) == 0) {
      SHELF_CHECK(l.bytes_max <= kRpcReceiveBytesMax);
      return l.bytes_max;
    }
  }
  SHELF_LOG(ERROR) << "RPC method " << method << " missing from kRpcRequestLimits";
  std::abort();
}

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_RPC_LIMITS_H_
