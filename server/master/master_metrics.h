// The master's metrics (docs/metrics.md), registered once in a
// prom::Exposition and updated lock-free on the hot paths: every child is
// resolved at construction, or (RPC method and code) on its first use and
// cached. Values that live in the master's state (objects, capacity, nodes)
// are callback gauges owned by Master.
#ifndef SHELF_SERVER_MASTER_MASTER_METRICS_H_
#define SHELF_SERVER_MASTER_MASTER_METRICS_H_

#include <array>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "common/log.h"
#include "common/prom.h"

namespace shelf::master {

struct MasterMetrics {
  // Every gRPC method that service.cc times (the `method` label): the
  // MasterService and AdminService handlers, by their C++ name (__func__).
  static constexpr std::array<const char*, 22> kRpcMethods = {
      "RegisterStore", "Heartbeat",      "PutStart",    "BatchPutStart", "PutCommit",
      "PutAbort",      "Lookup",         "MatchPrefix", "ReleaseLeases", "Remove",
      "ListKeys",      "RemoveMatching", "Promote",     "PromoteCommit", "Status",
      "Segments",      "Stat",           "Drain",       "Evict",         "Pin",
      "Locate",        "ReportDataLoss"};
  // gRPC status codes are 0 (OK) .. 16 (UNAUTHENTICATED).
  static constexpr size_t kRpcCodes = 17;

  // The index of `method` in kRpcMethods; a handler missing from the list is
  // a bug (aborts). Called once per handler (a function-local static).
  static size_t RpcIndex(const char* method) {
    for (size_t i = 0; i < kRpcMethods.size(); ++i) {
      if (std::strcmp(kRpcMethods[i], method) == 0) return i;
    }
    SHELF_LOG(ERROR) << "RPC method " << method << " missing from MasterMetrics::kRpcMethods";
    std::abort();
  }

  explicit MasterMetrics(prom::Exposition& e)
      : lookups(prom::AddCounter(e.registry(), "shelf_master_lookups_total",
                                 "Keys looked up (match_prefix: up to the first miss)")),
        lookups_lookup(prom::Child(lookups, {{"op", "lookup"}})),
        lookups_match(prom::Child(lookups, {{"op", "match_prefix"}})),
        hits(prom::AddCounter(e.registry(), "shelf_master_lookup_hits_total",
                              "Lookups that found the key, by the tier of the best replica")),
        hits_dram(prom::Child(hits, {{"tier", "dram"}})),
        hits_ssd(prom::Child(hits, {{"tier", "ssd"}})),
        puts(prom::AddCounter(e.registry(), "shelf_master_puts_total", "Puts by outcome")),
        puts_started(prom::Child(puts, {{"result", "started"}})),
        puts_committed(prom::Child(puts, {{"result", "committed"}})),
        puts_aborted(prom::Child(puts, {{"result", "aborted"}})),
        puts_expired(prom::Child(puts, {{"result", "expired"}})),
        dedup_hits(prom::Child(puts, {{"result", "dedup"}})),
        replaces(prom::Child(puts, {{"result", "replaced"}})),
        evictions(prom::AddUnlabelledCounter(e.registry(), "shelf_master_evictions_total",
                                             "Replicas dropped by eviction")),
        data_loss_reports(prom::AddUnlabelledCounter(
            e.registry(), "shelf_master_data_loss_reports_total",
            "Replicas dropped from the index: a reader reported them corrupt and their store "
            "found their bytes bad")),
        data_loss_refuted(prom::AddUnlabelledCounter(
            e.registry(), "shelf_master_data_loss_refuted_total",
            "Reports of corrupt replicas whose store found their bytes intact: nothing "
            "dropped")),
        demotions(prom::AddCounter(e.registry(), "shelf_master_demotions_total",
                                   "DRAM-to-SSD demotions reported by stores")),
        demotions_ok(prom::Child(demotions, {{"result", "ok"}})),
        demotions_failed(prom::Child(demotions, {{"result", "failed"}})),
        demotions_stale(prom::Child(demotions, {{"result", "stale"}})),
        demotion_reports_unnamed(prom::AddUnlabelledCounter(
            e.registry(), "shelf_master_demotion_reports_unnamed_total",
            "Demotion reports that named no commit (a store of an older version), matched by key")),
        room_waits(prom::AddUnlabelledCounter(
            e.registry(), "shelf_master_put_room_waits_total",
            "Puts that waited for demotions to make room: writers faster than the SSD tier")),
        room_wait_seconds(prom::AddUnlabelledCounter(
            e.registry(), "shelf_master_put_room_wait_seconds_total",
            "Time puts spent waiting for demotions to make room (up to --demote-wait each)")),
        put_drops(prom::AddUnlabelledCounter(
            e.registry(), "shelf_master_put_drops_total",
            "DRAM blocks dropped to place a put with no copy left on their store's SSD: the "
            "wait for demotions ran out, or nothing could be demoted")),
        leases_granted(prom::AddUnlabelledCounter(e.registry(), "shelf_master_leases_granted_total",
                                                  "Read leases granted or extended by lookups")),
        leases_released(
            prom::AddUnlabelledCounter(e.registry(), "shelf_master_leases_released_total",
                                       "Leases ended early: every holder gave its lease back")),
        removed_leases_released(prom::AddUnlabelledCounter(
            e.registry(), "shelf_master_removed_leases_released_total",
            "Leases on removed or replaced objects ended early: every holder gave its lease "
            "back, and the object's space was freed at once")),
        moved_leases_released(prom::AddUnlabelledCounter(
            e.registry(), "shelf_master_moved_leases_released_total",
            "Leases on objects whose DRAM copy went while read (demoted to SSD, or dropped as "
            "corrupt) ended early: every holder gave its lease back, and the DRAM range was "
            "freed at once")),
        heartbeat_orders_resent(
            prom::AddUnlabelledCounter(e.registry(), "shelf_master_heartbeat_orders_resent_total",
                                       "Tier orders and notices sent again: an answer that carried "
                                       "them was not acknowledged")),
        promotions(prom::AddUnlabelledCounter(e.registry(), "shelf_master_promotions_total",
                                              "SSD-to-DRAM promotions committed")),
        removes(
            prom::AddUnlabelledCounter(e.registry(), "shelf_master_removes_total", "Keys removed")),
        nodes_died(prom::AddUnlabelledCounter(e.registry(), "shelf_master_nodes_died_total",
                                              "Stores declared dead after missing heartbeats")),
        call_streams(prom::Child(
            prom::AddGauge(e.registry(), "shelf_master_call_streams",
                           "Calls streams open: clients' hot calls on long-lived streams "
                           "(docs/master.md, \"Call streams\")"),
            {})),
        rpc_seconds(
            prom::AddHistogram(e.registry(), "shelf_master_rpc_seconds", "gRPC handling time")),
        rpc_errors(prom::AddCounter(e.registry(), "shelf_master_rpc_errors_total",
                                    "gRPC calls that failed")) {}

  // shelf_master_rpc_seconds{method} of kRpcMethods[method]; created on the
  // method's first call, so methods never called export nothing.
  prom::Histogram& RpcSeconds(size_t method) const {
    return rpc[method].seconds.Get(rpc_seconds, {{"method", kRpcMethods[method]}},
                                   prom::LatencyBuckets());
  }
  // shelf_master_rpc_errors_total{method,code}.
  prom::Counter& RpcErrors(size_t method, int code) const {
    size_t c = code >= 0 && static_cast<size_t>(code) < kRpcCodes ? code : 2;  // 2: UNKNOWN
    return rpc[method].errors[c].Get(
        rpc_errors, {{"method", kRpcMethods[method]},
                     {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}});
  }

  prom::Family<prom::Counter>& lookups;
  prom::Counter& lookups_lookup;
  prom::Counter& lookups_match;
  prom::Family<prom::Counter>& hits;
  prom::Counter& hits_dram;
  prom::Counter& hits_ssd;
  prom::Family<prom::Counter>& puts;
  prom::Counter& puts_started;
  prom::Counter& puts_committed;
  prom::Counter& puts_aborted;
  prom::Counter& puts_expired;
  prom::Counter& dedup_hits;
  prom::Counter& replaces;  // commits that replaced another commit of the key
  prom::Counter& evictions;
  prom::Counter& data_loss_reports;
  prom::Counter& data_loss_refuted;
  prom::Family<prom::Counter>& demotions;
  prom::Counter& demotions_ok;
  prom::Counter& demotions_failed;
  // Reports for a commit removed or replaced while the store worked.
  prom::Counter& demotions_stale;
  prom::Counter& demotion_reports_unnamed;
  prom::Counter& room_waits;
  prom::Counter& room_wait_seconds;
  prom::Counter& put_drops;
  prom::Counter& leases_granted;
  prom::Counter& leases_released;
  prom::Counter& removed_leases_released;
  prom::Counter& moved_leases_released;
  prom::Counter& heartbeat_orders_resent;
  prom::Counter& promotions;
  prom::Counter& removes;
  prom::Counter& nodes_died;
  prom::Gauge& call_streams;
  prom::Family<prom::Histogram>& rpc_seconds;
  prom::Family<prom::Counter>& rpc_errors;

 private:
  struct Rpc {
    prom::LazyChild<prom::Histogram> seconds;
    std::array<prom::LazyChild<prom::Counter>, kRpcCodes> errors;
  };
  mutable std::array<Rpc, kRpcMethods.size()> rpc;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_MASTER_METRICS_H_
