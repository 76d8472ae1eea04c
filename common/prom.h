// Shelf's thin layer over prometheus-cpp (Debian prometheus-cpp-dev, core
// only): the registry, the metric types and the text serializer are
// prometheus-cpp's. What this adds is what every Shelf component needs around
// them: registration that aborts instead of throwing, children resolved once
// for hot paths, gauges computed at scrape time, and one Render() that a
// `/metrics` handler (common/http_server.h) or Client::MetricsText() serves.
// docs/metrics.md is the catalogue of names.
//
//   prom::Exposition& metrics = shelf::DefaultExposition();
//   prom::Family<prom::Counter>& reads = prom::AddCounter(
//       metrics.registry(), "shelf_store_read_bytes_total", "Bytes served.");
//   prom::Counter& dram_tcp =
//       prom::Child(reads, {{"tier", "dram"}, {"transport", "tcp"}});  // once
//   dram_tcp.Increment(block_bytes);                                  // hot path
//
//   prom::Histogram& rpc = prom::Child(
//       prom::AddHistogram(metrics.registry(), "shelf_master_rpc_seconds", "RPC latency."),
//       {{"method", "Lookup"}}, prom::LatencyBuckets());
//   { prom::ScopedTimer timer(rpc); ...work... }
//
//   prom::CallbackHandle objects = metrics.AddCallbackGauge(
//       "shelf_master_objects", "Objects in the index.", [this] { return ObjectCount(); });
//
//   std::string body = metrics.Render();
//
// Thread-safety: everything here is safe to call from any thread. Updates of
// a prometheus-cpp Counter, Gauge or Histogram are lock-free; Family::Add
// takes the family's lock, so resolve a child once and keep the reference
// (or a LazyChild, for label values known only at the call). prometheus-cpp
// never removes a child unless asked, and nothing here asks.
//
// Errors: a bad metric or label name, or registering one name twice with a
// different type or help, is a programming error; it aborts the process with
// a message in every build type (prometheus-cpp throws; Shelf has no
// exceptions across its APIs).
#ifndef SHELF_COMMON_PROM_H_
#define SHELF_COMMON_PROM_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace shelf {
namespace prom {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;
template <typename T>
using Family = prometheus::Family<T>;
using Buckets = prometheus::Histogram::BucketBoundaries;

// Latency buckets in seconds, 50us to 10s (17 bounds, roughly 1-2.5-5 steps).
const Buckets& LatencyBuckets();
// `count` bounds: start, start*factor, ... Aborts unless start > 0,
// factor > 1 and count >= 1.
Buckets ExponentialBuckets(double start, double factor, int count);

// Create the family `name` in `registry` or, when it exists with the same
// type and help, return it; anything else aborts. Label names are checked
// when a child is added. Escapes `help` for the text format (prometheus-cpp
// 1.0.1 writes it verbatim, so a newline would break the exposition).
Family<Counter>& AddCounter(prometheus::Registry& registry, const std::string& name,
                            const std::string& help);
Family<Gauge>& AddGauge(prometheus::Registry& registry, const std::string& name,
                        const std::string& help);
Family<Histogram>& AddHistogram(prometheus::Registry& registry, const std::string& name,
                                const std::string& help);

// The single child of an unlabelled family, created now so that it renders 0
// before the first update.
Counter& AddUnlabelledCounter(prometheus::Registry& registry, const std::string& name,
                              const std::string& help);

// family.Add(labels[, buckets]), aborting (not throwing) on a bad label name.
Counter& Child(Family<Counter>& family, const Labels& labels);
Gauge& Child(Family<Gauge>& family, const Labels& labels);
Histogram& Child(Family<Histogram>& family, const Labels& labels,
                 const Buckets& buckets = LatencyBuckets());

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

// A child of a family resolved on first use and then read with one atomic
// load: for hot paths whose label values come from a small fixed set known
// only at the call (an RPC method, a status code), so that only the first
// call of each takes the family's lock. Keep one per label-value tuple, e.g.
// in an array indexed by method and code. Two threads racing on the first
// call both resolve the same child (Family::Add returns an existing one).
template <typename T>
class LazyChild {
 public:
  template <typename... Args>
  T& Get(Family<T>& family, const Labels& labels, const Args&... args) {
    T* child = child_.load(std::memory_order_acquire);
    if (child == nullptr) {
      child = &Child(family, labels, args...);
      child_.store(child, std::memory_order_release);
    }
    return *child;
  }

 private:
  std::atomic<T*> child_{nullptr};
};

// One sample of a labelled callback gauge.
struct GaugeSample {
  std::vector<std::string> labels;  // one per label name of the gauge
  double value = 0;
};

class Exposition;

namespace internal {
class CallbackGauge;
}  // namespace internal

// Keeps a callback gauge registered; destroying (or Reset()ting) it
// unregisters the callback, waiting for a scrape that is running it to
// finish. So: destroy it before anything the callback reads, and not while
// holding a lock the callback takes. Movable, not copyable. The Exposition
// must outlive it.
class CallbackHandle {
 public:
  CallbackHandle() = default;
  ~CallbackHandle() { Reset(); }
  CallbackHandle(CallbackHandle&& other) noexcept;
  CallbackHandle& operator=(CallbackHandle&& other) noexcept;
  CallbackHandle(const CallbackHandle&) = delete;
  CallbackHandle& operator=(const CallbackHandle&) = delete;

  void Reset();
  bool active() const { return gauge_ != nullptr; }

 private:
  friend class Exposition;
  CallbackHandle(Exposition* exposition, std::shared_ptr<internal::CallbackGauge> gauge);
  Exposition* exposition_ = nullptr;
  std::shared_ptr<internal::CallbackGauge> gauge_;
};

// What one `/metrics` endpoint serves: a prometheus::Registry for counters,
// gauges and histograms, and the gauges computed at scrape time (each a
// prometheus::Collectable), rendered together by prometheus-cpp's
// TextSerializer.
class Exposition {
 public:
  Exposition();
  ~Exposition();
  Exposition(const Exposition&) = delete;
  Exposition& operator=(const Exposition&) = delete;

  prometheus::Registry& registry() { return *registry_; }

  // A gauge evaluated at scrape time, for values owned elsewhere (objects in
  // the index, nodes by state). Several callbacks may share one name (same
  // help and labels); their samples are merged, and a label set seen twice
  // keeps the first value. Callbacks run on the scraping thread with no
  // Exposition lock held but with their own gauge's lock held: they may take
  // the caller's own locks, must be quick, and must not call into the
  // Exposition. A sample with the wrong number of label values aborts.
  [[nodiscard]] CallbackHandle AddCallbackGauge(const std::string& name, const std::string& help,
                                                std::function<double()> fn);
  [[nodiscard]] CallbackHandle AddCallbackGauge(const std::string& name, const std::string& help,
                                                std::vector<std::string> label_names,
                                                std::function<std::vector<GaugeSample>()> fn);

  // Every family with at least one sample, sorted by name, each family's
  // samples sorted by labels (prometheus-cpp keeps children unordered).
  std::vector<prometheus::MetricFamily> Collect() const ABSL_LOCKS_EXCLUDED(mu_);
  // Collect() in the text format 0.0.4 (content type kContentType).
  std::string Render() const;

  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  friend class CallbackHandle;
  void Remove(const internal::CallbackGauge* gauge) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<prometheus::Registry> registry_;
  mutable shelf::Mutex mu_;
  std::vector<std::shared_ptr<internal::CallbackGauge>> gauges_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prom

// The process-wide Exposition that `/metrics` serves by default. Never
// destroyed. A component that can exist more than once per process (as in
// tests) should take a prom::Exposition& instead, so instances do not share
// series.
prom::Exposition& DefaultExposition();

}  // namespace shelf

#endif  // SHELF_COMMON_PROM_H_
