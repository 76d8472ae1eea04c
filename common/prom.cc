#include "common/prom.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "prometheus/collectable.h"
#include "prometheus/text_serializer.h"

namespace shelf {
namespace prom {
namespace {

// Registration errors are bugs in the caller; see the header's "Errors".
[[noreturn]] void Die(const std::string& message) {
  SHELF_LOG(ERROR) << "metrics: " << message;
  std::abort();
}

// Runs `fn`, turning a prometheus-cpp exception (bad name, conflicting
// registration) into an abort that names the metric.
template <typename Fn>
auto OrDie(const std::string& name, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    Die(absl::StrCat(name, ": ", e.what()));
  }
}

// HELP text as the text format wants it: backslash and newline escaped.
std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

bool LabelsLess(const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
  return std::lexicographical_compare(
      a.label.begin(), a.label.end(), b.label.begin(), b.label.end(),
      [](const prometheus::ClientMetric::Label& x, const prometheus::ClientMetric::Label& y) {
        return std::tie(x.name, x.value) < std::tie(y.name, y.value);
      });
}

bool SameLabels(const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
  return !LabelsLess(a, b) && !LabelsLess(b, a);
}

}  // namespace

namespace internal {

// One AddCallbackGauge: a Collectable whose samples come from a callback,
// until the handle detaches it.
class CallbackGauge final : public prometheus::Collectable {
 public:
  using Fn = std::function<std::vector<GaugeSample>()>;
  CallbackGauge(std::string name, const std::string& help, std::vector<std::string> label_names,
                Fn fn)
      : name_(std::move(name)),
        help_(EscapeHelp(help)),
        label_names_(std::move(label_names)),
        fn_(std::move(fn)) {}

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Waits for a Collect() running the callback, then drops the callback.
  void Detach() ABSL_LOCKS_EXCLUDED(mu_) {
    Fn dead;  // destroyed after the lock is released
    shelf::MutexLock lock(&mu_);
    dead = std::move(fn_);
    fn_ = nullptr;
  }

  std::vector<prometheus::MetricFamily> Collect() const override ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<GaugeSample> samples;
    {
      // Held while the callback runs, so Detach() waits for it.
      shelf::MutexLock lock(&mu_);
      if (fn_ == nullptr) return {};
      samples = fn_();
    }
    prometheus::MetricFamily family;
    family.name = name_;
    family.help = help_;
    family.type = prometheus::MetricType::Gauge;
    for (const GaugeSample& s : samples) {
      if (s.labels.size() != label_names_.size()) {
        Die(absl::StrCat(name_, ": ", s.labels.size(), " label values given, labels are {",
                         absl::StrJoin(label_names_, ","), "}"));
      }
      prometheus::ClientMetric metric;
      for (size_t i = 0; i < label_names_.size(); ++i) {
        metric.label.push_back({label_names_[i], s.labels[i]});
      }
      metric.gauge.value = s.value;
      family.metric.push_back(std::move(metric));
    }
    return {std::move(family)};
  }

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  mutable shelf::Mutex mu_;
  Fn fn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal

// ---------------------------------------------------------------------------
// Buckets and registration.

const Buckets& LatencyBuckets() {
  static const Buckets* const kBuckets =
      new Buckets{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                  0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
  return *kBuckets;
}

Buckets ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) {
    Die(absl::StrCat("ExponentialBuckets(", start, ", ", factor, ", ", count, "): bad arguments"));
  }
  Buckets out;
  out.reserve(count);
  double v = start;
  for (int i = 0; i < count; ++i) {
    out.push_back(v);
    v *= factor;
  }
  return out;
}

Family<Counter>& AddCounter(prometheus::Registry& registry, const std::string& name,
                            const std::string& help) {
  return OrDie(name, [&]() -> Family<Counter>& {
    return prometheus::BuildCounter().Name(name).Help(EscapeHelp(help)).Register(registry);
  });
}

Family<Gauge>& AddGauge(prometheus::Registry& registry, const std::string& name,
                        const std::string& help) {
  return OrDie(name, [&]() -> Family<Gauge>& {
    return prometheus::BuildGauge().Name(name).Help(EscapeHelp(help)).Register(registry);
  });
}

Family<Histogram>& AddHistogram(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return OrDie(name, [&]() -> Family<Histogram>& {
    return prometheus::BuildHistogram().Name(name).Help(EscapeHelp(help)).Register(registry);
  });
}

Counter& AddUnlabelledCounter(prometheus::Registry& registry, const std::string& name,
                              const std::string& help) {
  return Child(AddCounter(registry, name, help), {});
}

Counter& Child(Family<Counter>& family, const Labels& labels) {
  return OrDie(family.GetName(), [&]() -> Counter& { return family.Add(labels); });
}

Gauge& Child(Family<Gauge>& family, const Labels& labels) {
  return OrDie(family.GetName(), [&]() -> Gauge& { return family.Add(labels); });
}

Histogram& Child(Family<Histogram>& family, const Labels& labels, const Buckets& buckets) {
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i]) || (i > 0 && !(buckets[i - 1] < buckets[i]))) {
      Die(absl::StrCat(family.GetName(), ": bucket bounds must be finite and increasing"));
    }
  }
  return OrDie(family.GetName(), [&]() -> Histogram& { return family.Add(labels, buckets); });
}

// ---------------------------------------------------------------------------
// Callback handles.

CallbackHandle::CallbackHandle(Exposition* exposition,
                               std::shared_ptr<internal::CallbackGauge> gauge)
    : exposition_(exposition), gauge_(std::move(gauge)) {}

CallbackHandle::CallbackHandle(CallbackHandle&& other) noexcept
    : exposition_(std::exchange(other.exposition_, nullptr)), gauge_(std::move(other.gauge_)) {}

CallbackHandle& CallbackHandle::operator=(CallbackHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    exposition_ = std::exchange(other.exposition_, nullptr);
    gauge_ = std::move(other.gauge_);
  }
  return *this;
}

void CallbackHandle::Reset() {
  if (gauge_ == nullptr) return;
  exposition_->Remove(gauge_.get());
  // A scrape may still hold the gauge; Detach waits for its callback and
  // stops later ones.
  gauge_->Detach();
  gauge_.reset();
  exposition_ = nullptr;
}

// ---------------------------------------------------------------------------
// Exposition.

Exposition::Exposition() : registry_(std::make_shared<prometheus::Registry>()) {}
Exposition::~Exposition() = default;

CallbackHandle Exposition::AddCallbackGauge(const std::string& name, const std::string& help,
                                            std::function<double()> fn) {
  return AddCallbackGauge(name, help, {}, [fn = std::move(fn)]() {
    return std::vector<GaugeSample>{GaugeSample{{}, fn()}};
  });
}

CallbackHandle Exposition::AddCallbackGauge(const std::string& name, const std::string& help,
                                            std::vector<std::string> label_names,
                                            std::function<std::vector<GaugeSample>()> fn) {
  // Let prometheus-cpp validate the names: a throwaway registry and child.
  {
    prometheus::Registry check;
    Labels labels;
    for (const std::string& l : label_names) labels[l] = "";
    if (labels.size() != label_names.size()) Die(absl::StrCat(name, ": a label name twice"));
    Child(AddGauge(check, name, help), labels);
  }
  auto gauge =
      std::make_shared<internal::CallbackGauge>(name, help, std::move(label_names), std::move(fn));
  shelf::MutexLock lock(&mu_);
  for (const auto& g : gauges_) {
    if (g->name() == gauge->name() &&
        (g->help() != gauge->help() || g->label_names() != gauge->label_names())) {
      Die(absl::StrCat(name, ": registered again with another help text or label set"));
    }
  }
  gauges_.push_back(gauge);
  return CallbackHandle(this, std::move(gauge));
}

void Exposition::Remove(const internal::CallbackGauge* gauge) {
  shelf::MutexLock lock(&mu_);
  gauges_.erase(std::remove_if(gauges_.begin(), gauges_.end(),
                               [gauge](const auto& g) { return g.get() == gauge; }),
                gauges_.end());
}

std::vector<prometheus::MetricFamily> Exposition::Collect() const {
  // The callbacks run without mu_, so they may take locks of their own that
  // are also held around AddCallbackGauge.
  std::vector<std::shared_ptr<internal::CallbackGauge>> gauges;
  {
    shelf::MutexLock lock(&mu_);
    gauges = gauges_;
  }
  std::map<std::string, prometheus::MetricFamily> by_name;
  auto merge = [&by_name](std::vector<prometheus::MetricFamily> families) {
    for (prometheus::MetricFamily& f : families) {
      auto it = by_name.find(f.name);
      if (it == by_name.end()) {
        std::string name = f.name;
        by_name.emplace(std::move(name), std::move(f));
        continue;
      }
      for (prometheus::ClientMetric& m : f.metric) it->second.metric.push_back(std::move(m));
    }
  };
  merge(registry_->Collect());
  for (const auto& g : gauges) merge(g->Collect());

  std::vector<prometheus::MetricFamily> out;
  out.reserve(by_name.size());
  for (auto& [name, family] : by_name) {
    std::vector<prometheus::ClientMetric>& m = family.metric;
    std::stable_sort(m.begin(), m.end(), LabelsLess);
    m.erase(std::unique(m.begin(), m.end(), SameLabels), m.end());
    if (!m.empty()) out.push_back(std::move(family));
  }
  return out;
}

std::string Exposition::Render() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, Collect());
  return out.str();
}

}  // namespace prom

prom::Exposition& DefaultExposition() {
  static prom::Exposition* const exposition = new prom::Exposition();
  return *exposition;
}

}  // namespace shelf
