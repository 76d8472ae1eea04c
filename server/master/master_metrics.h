// The master's metrics (docs/metrics.md), registered once in a registry and
// updated lock-free on the hot paths. Values that live in the master's
// state (objects, capacity, nodes) are callback gauges owned by Master.
#ifndef SHELF_SERVER_MASTER_MASTER_METRICS_H_
#define SHELF_SERVER_MASTER_MASTER_METRICS_H_

#include "common/metrics.h"

namespace shelf {

struct MasterMetrics {
  explicit MasterMetrics(metrics::Registry& r)
      : lookups(r.AddCounter("shelf_master_lookups_total",
                             "Keys looked up (match_prefix: up to the first miss)", {"op"})),
        lookups_lookup(lookups.WithLabels({"lookup"})),
        lookups_match(lookups.WithLabels({"match_prefix"})),
        hits(r.AddCounter("shelf_master_lookup_hits_total",
                          "Lookups that found the key, by the tier of the best replica", {"tier"})),
        hits_dram(hits.WithLabels({"dram"})),
        hits_ssd(hits.WithLabels({"ssd"})),
        puts(r.AddCounter("shelf_master_puts_total", "Puts by outcome", {"result"})),
        puts_started(puts.WithLabels({"started"})),
        puts_committed(puts.WithLabels({"committed"})),
        puts_aborted(puts.WithLabels({"aborted"})),
        puts_expired(puts.WithLabels({"expired"})),
        dedup_hits(puts.WithLabels({"dedup"})),
        evictions(r.AddCounter("shelf_master_evictions_total", "Replicas dropped by eviction")
                      .WithLabels()),
        demotions(r.AddCounter("shelf_master_demotions_total",
                               "DRAM-to-SSD demotions reported by stores", {"result"})),
        demotions_ok(demotions.WithLabels({"ok"})),
        demotions_failed(demotions.WithLabels({"failed"})),
        leases_granted(r.AddCounter("shelf_master_leases_granted_total",
                                    "Read leases granted or extended by lookups")
                           .WithLabels()),
        leases_released(r.AddCounter("shelf_master_leases_released_total",
                                     "Leases ended early: every holder gave its lease back")
                            .WithLabels()),
        promotions(r.AddCounter("shelf_master_promotions_total", "SSD-to-DRAM promotions committed")
                       .WithLabels()),
        removes(r.AddCounter("shelf_master_removes_total", "Keys removed").WithLabels()),
        nodes_died(r.AddCounter("shelf_master_nodes_died_total",
                                "Stores declared dead after missing heartbeats")
                       .WithLabels()),
        rpc_seconds(r.AddHistogram("shelf_master_rpc_seconds", "gRPC handling time", {"method"})),
        rpc_errors(r.AddCounter("shelf_master_rpc_errors_total", "gRPC calls that failed",
                                {"method", "code"})) {}

  metrics::Family<metrics::Counter>& lookups;
  metrics::Counter& lookups_lookup;
  metrics::Counter& lookups_match;
  metrics::Family<metrics::Counter>& hits;
  metrics::Counter& hits_dram;
  metrics::Counter& hits_ssd;
  metrics::Family<metrics::Counter>& puts;
  metrics::Counter& puts_started;
  metrics::Counter& puts_committed;
  metrics::Counter& puts_aborted;
  metrics::Counter& puts_expired;
  metrics::Counter& dedup_hits;
  metrics::Counter& evictions;
  metrics::Family<metrics::Counter>& demotions;
  metrics::Counter& demotions_ok;
  metrics::Counter& demotions_failed;
  metrics::Counter& leases_granted;
  metrics::Counter& leases_released;
  metrics::Counter& promotions;
  metrics::Counter& removes;
  metrics::Counter& nodes_died;
  metrics::Family<metrics::Histogram>& rpc_seconds;
  metrics::Family<metrics::Counter>& rpc_errors;
};

}  // namespace shelf

#endif  // SHELF_SERVER_MASTER_MASTER_METRICS_H_
