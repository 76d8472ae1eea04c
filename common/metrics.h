// In-process metrics: counters, gauges and histograms with labels, rendered in
// the Prometheus text exposition format 0.0.4 for a `/metrics` endpoint (see
// common/http_server.h and docs/metrics.md for the catalogue of names).
//
//   metrics::Registry& registry = shelf::DefaultRegistry();
//   metrics::Family<metrics::Counter>& reads = registry.AddCounter(
//       "shelf_store_read_bytes_total", "Bytes served to clients.", {"tier", "transport"});
//   metrics::Counter& dram_tcp = reads.WithLabels({"dram", "tcp"});  // cache this
//   dram_tcp.Inc(block_bytes);                                       // hot path
//
//   metrics::Histogram& rpc = registry
//       .AddHistogram("shelf_master_rpc_seconds", "RPC latency.", {"method"},
//                     metrics::DefaultLatencyBuckets())
//       .WithLabels({"Lookup"});
//   { metrics::ScopedTimer timer(rpc); ...work... }
//
//   metrics::CallbackHandle objects = registry.AddCallbackGauge(
//       "shelf_master_objects", "Objects in the index.", [this] { return ObjectCount(); });
//
//   std::string body = registry.Render();
//
// Thread-safety: everything here is safe to call from any thread. Updates of a
// Counter, Gauge or Histogram are lock-free (relaxed atomics): cheap enough for
// the data path. Add* and WithLabels take a mutex: call them once and keep the
// reference. Families and their children are never removed, so every reference
// stays valid for the life of the Registry.
//
// Errors: a bad metric or label name, a wrong number of label values, or
// registering one name twice with a different type, help, label set or bucket
// set is a programming error; it aborts the process with a message (in every
// build type: registration is not a hot path, and a silently broken exposition
// would hide the bug until someone looks at a dashboard).
#ifndef SHELF_COMMON_METRICS_H_
#define SHELF_COMMON_METRICS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace shelf {
namespace metrics {

// Label values of one child, in the order of the family's label names.
using LabelValues = std::vector<std::string>;

// A monotonically increasing integer (events, bytes). Starts at 0.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down (bytes used, connections open). Starts at 0.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta);
  void Inc() { Add(1); }
  void Dec() { Add(-1); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Counts observations into fixed buckets. `bounds` are the buckets' upper
// bounds (inclusive, as Prometheus's `le`), finite and strictly increasing;
// an implicit +Inf bucket catches the rest. NaN observations are dropped
// (they would poison `_sum` forever).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);

  // A consistent-enough copy for rendering and tests: `buckets[i]` is the
  // number of observations <= bounds[i] (cumulative); `buckets.back()` is
  // the +Inf bucket and equals `count`.
  struct Snapshot {
    std::vector<uint64_t> buckets;
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot Snap() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  // Per-bucket (not cumulative) counts; bounds_.size() + 1 entries.
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// Observes the seconds between its construction and destruction into a
// histogram. Not thread-safe (one scope, one thread).
class ScopedTimer {
 public:
  explicit ScopedTimer(Histogram& histogram)
      : histogram_(histogram), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    histogram_.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Histogram& histogram_;
  const std::chrono::steady_clock::time_point start_;
};

// Latency buckets in seconds, 50us to 10s (17 bounds, roughly 1-2.5-5 steps).
const std::vector<double>& DefaultLatencyBuckets();
// `count` bounds: start, start*factor, ... REQUIRES: start > 0, factor > 1,
// count >= 1.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class MetricType { kCounter, kGauge, kHistogram };

namespace internal {

// What the Registry keeps per metric name. Not for direct use.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type,
             std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends the family's HELP, TYPE and sample lines to `out`; nothing when
  // it has no samples. Runs callbacks (for callback families) on the calling
  // thread.
  virtual void RenderTo(std::string* out) const = 0;

 protected:
  // Aborts unless `values` has one entry per label name.
  void CheckLabelCount(const LabelValues& values) const;

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
};

class CallbackFamily;

}  // namespace internal

// All children of one metric name, one per distinct set of label values.
// T is Counter, Gauge or Histogram. Created by Registry::Add*; lives as long
// as the registry.
template <typename T>
class Family final : public internal::FamilyBase {
 public:
  // The child for `values` (one per label name, any UTF-8 text), created on
  // first use. The reference is stable for the registry's life: look it up
  // once and keep it on hot paths. Aborts on a wrong number of values.
  T& WithLabels(const LabelValues& values = {}) ABSL_LOCKS_EXCLUDED(mu_);

  void RenderTo(std::string* out) const override ABSL_LOCKS_EXCLUDED(mu_);

  // The bucket bounds of every child (histograms only; empty otherwise).
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> bounds);

  const std::vector<double> bounds_;
  mutable shelf::Mutex mu_;
  std::map<LabelValues, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

// Defined in metrics.cc for these three types only.
extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

// One sample of a labeled callback gauge.
struct GaugeSample {
  LabelValues labels;  // one per label name of the family
  double value = 0;
};

// Keeps a callback registered; destroying (or Reset()ting) it unregisters the
// callback, waiting for a scrape that is running it to finish. So: destroy it
// before anything the callback reads, and not while holding a lock the
// callback takes. Movable, not copyable. The Registry must outlive it.
class CallbackHandle {
 public:
  CallbackHandle() = default;
  ~CallbackHandle() { Reset(); }
  CallbackHandle(CallbackHandle&& other) noexcept;
  CallbackHandle& operator=(CallbackHandle&& other) noexcept;
  CallbackHandle(const CallbackHandle&) = delete;
  CallbackHandle& operator=(const CallbackHandle&) = delete;

  void Reset();
  bool active() const { return family_ != nullptr; }

 private:
  friend class Registry;
  CallbackHandle(internal::CallbackFamily* family, uint64_t id) : family_(family), id_(id) {}
  internal::CallbackFamily* family_ = nullptr;
  uint64_t id_ = 0;
};

// A set of metric families, rendered together.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Create the family `name` or, when it already exists with the same type,
  // help, label names (and bounds), return it; anything else aborts.
  // `name` must match [a-zA-Z_:][a-zA-Z0-9_:]*; label names must match
  // [a-zA-Z_][a-zA-Z0-9_]*, must not start with "__", be distinct, and (for
  // histograms) not be "le". A family with no labels starts with its single
  // child, so it renders 0 before the first update.
  Family<Counter>& AddCounter(absl::string_view name, absl::string_view help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(absl::string_view name, absl::string_view help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(absl::string_view name, absl::string_view help,
                                  std::vector<std::string> label_names = {},
                                  std::vector<double> bounds = DefaultLatencyBuckets());

  // A gauge evaluated at scrape time, for values owned elsewhere (objects in
  // the index, nodes by state). Several callbacks may share one name (same
  // help and labels); their samples are merged, and a label set seen twice
  // keeps the first value (and logs a warning). Callbacks run on the
  // scraping thread with no registry lock held but with this family's lock
  // held: they may take the caller's own locks, must be quick, and must not
  // call into the registry. A labeled callback returning samples with the
  // wrong number of label values aborts.
  [[nodiscard]] CallbackHandle AddCallbackGauge(absl::string_view name, absl::string_view help,
                                                std::function<double()> fn);
  [[nodiscard]] CallbackHandle AddCallbackGauge(absl::string_view name, absl::string_view help,
                                                std::vector<std::string> label_names,
                                                std::function<std::vector<GaugeSample>()> fn);

  // The Prometheus text format 0.0.4 (content type kContentType): families
  // sorted by name, children sorted by label values, histogram buckets in
  // increasing order ending with +Inf. Families with no samples are left out.
  std::string Render() const ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  internal::FamilyBase* FindOrAdd(absl::string_view name, absl::string_view help, MetricType type,
                                  std::vector<std::string> label_names, std::vector<double> bounds,
                                  bool callback) ABSL_LOCKS_EXCLUDED(mu_);

  mutable shelf::Mutex mu_;
  std::map<std::string, std::unique_ptr<internal::FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
};

// Escapes a label value for the text format: backslash, double quote and
// newline become \\, \" and \n.
std::string EscapeLabelValue(absl::string_view value);
// A sample value as the text format writes it: shortest round-trip decimal,
// "+Inf", "-Inf" or "NaN".
std::string FormatValue(double value);

}  // namespace metrics

// The process-wide registry that `/metrics` serves by default. Never
// destroyed. A component that can exist more than once per process (as in
// tests) should take a metrics::Registry& instead, so instances do not share
// series.
metrics::Registry& DefaultRegistry();

}  // namespace shelf

#endif  // SHELF_COMMON_METRICS_H_
