#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"

namespace shelf {
namespace metrics {
namespace {

// Registration errors are bugs in the caller; see the header's "Errors".
[[noreturn]] void Die(const std::string& message) {
  SHELF_LOG(ERROR) << "metrics: " << message;
  std::abort();
}

bool IsMetricName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsLabelName(absl::string_view name) {
  if (name.empty() || absl::string_view(name).substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string EscapeHelp(absl::string_view help) {
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

void AppendHeader(const internal::FamilyBase& family, std::string* out) {
  absl::StrAppend(out, "# HELP ", family.name(), " ", EscapeHelp(family.help()), "\n", "# TYPE ",
                  family.name(), " ", TypeName(family.type()), "\n");
}

// Appends `name{l1="v1",...,extra_name="extra_value"} ` (braces only when
// there is a label); the caller appends the value and newline.
void AppendSeries(absl::string_view name, const std::vector<std::string>& label_names,
                  const LabelValues& values, absl::string_view extra_name,
                  absl::string_view extra_value, std::string* out) {
  out->append(name.data(), name.size());
  bool any = !label_names.empty() || !extra_name.empty();
  if (any) out->push_back('{');
  for (size_t i = 0; i < label_names.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, label_names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    if (!label_names.empty()) out->push_back(',');
    absl::StrAppend(out, extra_name, "=\"", EscapeLabelValue(extra_value), "\"");
  }
  if (any) out->push_back('}');
  out->push_back(' ');
}

template <typename T>
MetricType TypeOf();
template <>
MetricType TypeOf<Counter>() {
  return MetricType::kCounter;
}
template <>
MetricType TypeOf<Gauge>() {
  return MetricType::kGauge;
}
template <>
MetricType TypeOf<Histogram>() {
  return MetricType::kHistogram;
}

template <typename T>
std::unique_ptr<T> NewChild(const std::vector<double>& bounds);
template <>
std::unique_ptr<Counter> NewChild<Counter>(const std::vector<double>&) {
  return std::make_unique<Counter>();
}
template <>
std::unique_ptr<Gauge> NewChild<Gauge>(const std::vector<double>&) {
  return std::make_unique<Gauge>();
}
template <>
std::unique_ptr<Histogram> NewChild<Histogram>(const std::vector<double>& bounds) {
  return std::make_unique<Histogram>(bounds);
}

void AppendChild(const internal::FamilyBase& family, const LabelValues& labels,
                 const Counter& counter, std::string* out) {
  AppendSeries(family.name(), family.label_names(), labels, "", "", out);
  absl::StrAppend(out, counter.Value(), "\n");
}

void AppendChild(const internal::FamilyBase& family, const LabelValues& labels, const Gauge& gauge,
                 std::string* out) {
  AppendSeries(family.name(), family.label_names(), labels, "", "", out);
  absl::StrAppend(out, FormatValue(gauge.Value()), "\n");
}

void AppendChild(const internal::FamilyBase& family, const LabelValues& labels,
                 const Histogram& histogram, std::string* out) {
  Histogram::Snapshot snap = histogram.Snap();
  const std::vector<double>& bounds = histogram.bounds();
  std::string bucket = absl::StrCat(family.name(), "_bucket");
  for (size_t i = 0; i < snap.buckets.size(); ++i) {
    std::string le = i < bounds.size() ? FormatValue(bounds[i]) : "+Inf";
    AppendSeries(bucket, family.label_names(), labels, "le", le, out);
    absl::StrAppend(out, snap.buckets[i], "\n");
  }
  AppendSeries(absl::StrCat(family.name(), "_sum"), family.label_names(), labels, "", "", out);
  absl::StrAppend(out, FormatValue(snap.sum), "\n");
  AppendSeries(absl::StrCat(family.name(), "_count"), family.label_names(), labels, "", "", out);
  absl::StrAppend(out, snap.count, "\n");
}

}  // namespace

// ---------------------------------------------------------------------------
// Values.

void Gauge::Add(double delta) {
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i])) Die("histogram bounds must be finite");
    if (i > 0 && !(bounds_[i - 1] < bounds_[i])) {
      Die("histogram bounds must be strictly increasing");
    }
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  // First bound >= v: Prometheus buckets are "less than or equal".
  size_t index = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[index].fetch_add(1, std::memory_order_relaxed);
  double sum = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(sum, sum + v, std::memory_order_relaxed)) {
  }
}

Histogram::Snapshot Histogram::Snap() const {
  Snapshot snap;
  snap.buckets.resize(bounds_.size() + 1);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    snap.buckets[i] = cumulative;
  }
  snap.count = cumulative;
  snap.sum = sum_.load(std::memory_order_relaxed);
  return snap;
}

const std::vector<double>& DefaultLatencyBuckets() {
  static const std::vector<double>* const kBuckets =
      new std::vector<double>{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                              0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
  return *kBuckets;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) {
    Die(absl::StrCat("ExponentialBuckets(", start, ", ", factor, ", ", count, "): bad arguments"));
  }
  std::vector<double> out;
  out.reserve(count);
  double v = start;
  for (int i = 0; i < count; ++i) {
    out.push_back(v);
    v *= factor;
  }
  return out;
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, r.ptr);
}

// ---------------------------------------------------------------------------
// Families.

namespace internal {

FamilyBase::FamilyBase(std::string name, std::string help, MetricType type,
                       std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)) {}

void FamilyBase::CheckLabelCount(const LabelValues& values) const {
  if (values.size() != label_names_.size()) {
    Die(absl::StrCat(name_, ": ", values.size(), " label values given, labels are {",
                     absl::StrJoin(label_names_, ","), "}"));
  }
}

// The family behind AddCallbackGauge: no stored children, only callbacks.
class CallbackFamily final : public FamilyBase {
 public:
  using Fn = std::function<std::vector<GaugeSample>()>;
  CallbackFamily(std::string name, std::string help, std::vector<std::string> label_names)
      : FamilyBase(std::move(name), std::move(help), MetricType::kGauge, std::move(label_names)) {}

  uint64_t Add(Fn fn) ABSL_LOCKS_EXCLUDED(mu_) {
    shelf::MutexLock lock(&mu_);
    uint64_t id = next_id_++;
    callbacks_.emplace(id, std::move(fn));
    return id;
  }

  void Remove(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_) {
    Fn dead;  // destroyed after the lock is released
    shelf::MutexLock lock(&mu_);
    auto it = callbacks_.find(id);
    if (it == callbacks_.end()) return;
    dead = std::move(it->second);
    callbacks_.erase(it);
  }

  void RenderTo(std::string* out) const override ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<GaugeSample> samples;
    {
      // Held while the callbacks run, so Remove() waits for a running one.
      shelf::MutexLock lock(&mu_);
      for (const auto& [id, fn] : callbacks_) {
        std::vector<GaugeSample> some = fn();
        for (GaugeSample& s : some) {
          CheckLabelCount(s.labels);
          samples.push_back(std::move(s));
        }
      }
    }
    if (samples.empty()) return;
    std::stable_sort(
        samples.begin(), samples.end(),
        [](const GaugeSample& a, const GaugeSample& b) { return a.labels < b.labels; });
    AppendHeader(*this, out);
    for (size_t i = 0; i < samples.size(); ++i) {
      if (i > 0 && samples[i].labels == samples[i - 1].labels) {
        SHELF_LOG(WARNING) << "metrics: duplicate callback sample dropped" << Kv("name", name())
                           << Kv("labels", absl::StrJoin(samples[i].labels, ","));
        continue;
      }
      AppendSeries(name(), label_names(), samples[i].labels, "", "", out);
      absl::StrAppend(out, FormatValue(samples[i].value), "\n");
    }
  }

 private:
  mutable shelf::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Fn> callbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal

template <typename T>
Family<T>::Family(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds)
    : FamilyBase(std::move(name), std::move(help), TypeOf<T>(), std::move(label_names)),
      bounds_(std::move(bounds)) {
  if (this->label_names().empty()) {
    shelf::MutexLock lock(&mu_);
    children_.emplace(LabelValues{}, NewChild<T>(bounds_));
  }
}

template <typename T>
T& Family<T>::WithLabels(const LabelValues& values) {
  CheckLabelCount(values);
  shelf::MutexLock lock(&mu_);
  std::unique_ptr<T>& child = children_[values];
  if (child == nullptr) child = NewChild<T>(bounds_);
  return *child;
}

template <typename T>
void Family<T>::RenderTo(std::string* out) const {
  // Children are never removed, so the pointers outlive the lock; values are
  // read from the atomics without it.
  std::vector<std::pair<const LabelValues*, const T*>> children;
  {
    shelf::MutexLock lock(&mu_);
    children.reserve(children_.size());
    for (const auto& [labels, child] : children_) children.emplace_back(&labels, child.get());
  }
  if (children.empty()) return;
  AppendHeader(*this, out);
  for (const auto& [labels, child] : children) AppendChild(*this, *labels, *child, out);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---------------------------------------------------------------------------
// Callback handles.

CallbackHandle::CallbackHandle(CallbackHandle&& other) noexcept
    : family_(std::exchange(other.family_, nullptr)), id_(std::exchange(other.id_, 0)) {}

CallbackHandle& CallbackHandle::operator=(CallbackHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    family_ = std::exchange(other.family_, nullptr);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void CallbackHandle::Reset() {
  if (family_ == nullptr) return;
  family_->Remove(id_);
  family_ = nullptr;
  id_ = 0;
}

// ---------------------------------------------------------------------------
// Registry.

Registry::Registry() = default;
Registry::~Registry() = default;

internal::FamilyBase* Registry::FindOrAdd(absl::string_view name, absl::string_view help,
                                          MetricType type, std::vector<std::string> label_names,
                                          std::vector<double> bounds, bool callback) {
  if (!IsMetricName(name)) Die(absl::StrCat("bad metric name '", name, "'"));
  std::set<std::string> seen;
  for (const std::string& label : label_names) {
    if (!IsLabelName(label)) Die(absl::StrCat(name, ": bad label name '", label, "'"));
    if (type == MetricType::kHistogram && label == "le") {
      Die(absl::StrCat(name, ": a histogram cannot have a label named 'le'"));
    }
    if (!seen.insert(label).second) Die(absl::StrCat(name, ": label '", label, "' twice"));
  }

  shelf::MutexLock lock(&mu_);
  auto it = families_.find(std::string(name));
  if (it != families_.end()) {
    internal::FamilyBase* f = it->second.get();
    bool is_callback = dynamic_cast<internal::CallbackFamily*>(f) != nullptr;
    const std::vector<double>* old_bounds = nullptr;
    if (auto* h = dynamic_cast<Family<Histogram>*>(f)) old_bounds = &h->bounds();
    if (f->type() != type || is_callback != callback) {
      Die(absl::StrCat(name, ": registered again with another type"));
    }
    if (f->help() != help) Die(absl::StrCat(name, ": registered again with another help text"));
    if (f->label_names() != label_names) {
      Die(absl::StrCat(name, ": registered again with labels {", absl::StrJoin(label_names, ","),
                       "}, was {", absl::StrJoin(f->label_names(), ","), "}"));
    }
    if (old_bounds != nullptr && *old_bounds != bounds) {
      Die(absl::StrCat(name, ": registered again with other bucket bounds"));
    }
    return f;
  }

  std::unique_ptr<internal::FamilyBase> family;
  std::string n(name), h(help);
  if (callback) {
    family = std::make_unique<internal::CallbackFamily>(n, h, std::move(label_names));
  } else if (type == MetricType::kCounter) {
    family.reset(new Family<Counter>(n, h, std::move(label_names), {}));
  } else if (type == MetricType::kGauge) {
    family.reset(new Family<Gauge>(n, h, std::move(label_names), {}));
  } else {
    // Validate the bounds here (the first child may not exist yet).
    Histogram check(bounds);
    family.reset(new Family<Histogram>(n, h, std::move(label_names), std::move(bounds)));
  }
  internal::FamilyBase* raw = family.get();
  families_.emplace(std::move(n), std::move(family));
  return raw;
}

Family<Counter>& Registry::AddCounter(absl::string_view name, absl::string_view help,
                                      std::vector<std::string> label_names) {
  return *static_cast<Family<Counter>*>(
      FindOrAdd(name, help, MetricType::kCounter, std::move(label_names), {}, false));
}

Family<Gauge>& Registry::AddGauge(absl::string_view name, absl::string_view help,
                                  std::vector<std::string> label_names) {
  return *static_cast<Family<Gauge>*>(
      FindOrAdd(name, help, MetricType::kGauge, std::move(label_names), {}, false));
}

Family<Histogram>& Registry::AddHistogram(absl::string_view name, absl::string_view help,
                                          std::vector<std::string> label_names,
                                          std::vector<double> bounds) {
  return *static_cast<Family<Histogram>*>(FindOrAdd(
      name, help, MetricType::kHistogram, std::move(label_names), std::move(bounds), false));
}

CallbackHandle Registry::AddCallbackGauge(absl::string_view name, absl::string_view help,
                                          std::function<double()> fn) {
  return AddCallbackGauge(name, help, {}, [fn = std::move(fn)]() {
    return std::vector<GaugeSample>{GaugeSample{{}, fn()}};
  });
}

CallbackHandle Registry::AddCallbackGauge(absl::string_view name, absl::string_view help,
                                          std::vector<std::string> label_names,
                                          std::function<std::vector<GaugeSample>()> fn) {
  auto* family = static_cast<internal::CallbackFamily*>(
      FindOrAdd(name, help, MetricType::kGauge, std::move(label_names), {}, true));
  uint64_t id = family->Add(std::move(fn));
  return CallbackHandle(family, id);
}

std::string Registry::Render() const {
  // Families are never removed: render them without the registry lock, so a
  // callback may take locks of its own that are also held around Add*.
  std::vector<const internal::FamilyBase*> families;
  {
    shelf::MutexLock lock(&mu_);
    families.reserve(families_.size());
    for (const auto& [name, family] : families_) families.push_back(family.get());
  }
  std::string out;
  for (const internal::FamilyBase* family : families) family->RenderTo(&out);
  return out;
}

}  // namespace metrics

metrics::Registry& DefaultRegistry() {
  static metrics::Registry* const registry = new metrics::Registry();
  return *registry;
}

}  // namespace shelf
