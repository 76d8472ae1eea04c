// Tests of common/prom.h, Shelf's layer over prometheus-cpp: the exposition
// it renders (through prometheus-cpp's TextSerializer), help escaping, the
// children it resolves once, callback gauges and the registration contract.
#include "common/prom.h"

#include <chrono>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shelf {
namespace prom {
namespace {

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(PromTest, RendersSortedExposition) {
  Exposition e;
  prometheus::Registry& r = e.registry();
  Family<Counter>& requests = AddCounter(r, "test_requests_total", "Requests handled.");
  Child(requests, {{"method", "post"}, {"code", "500"}}).Increment();
  Child(requests, {{"method", "get"}, {"code", "200"}}).Increment(3);
  AddUnlabelledCounter(r, "test_events_total", "Help with \\ and\nnewline.");
  Child(AddGauge(r, "test_level", "A level."), {}).Set(42);
  Histogram& latency =
      Child(AddHistogram(r, "test_latency_seconds", "Latency."), {{"op", "read"}}, {0.5, 1, 10});
  for (double v : {0.25, 0.5, 0.75, 100.0}) latency.Observe(v);
  CallbackHandle nodes = e.AddCallbackGauge("test_nodes", "Nodes by state.", {"state"}, [] {
    return std::vector<GaugeSample>{{{"live"}, 3}, {{"dead"}, 1}};
  });
  // A labelled family that never got a child is left out entirely.
  AddCounter(r, "test_unused_total", "Never used.");

  const std::string text = e.Render();
  // Families sorted by name, children by labels.
  std::vector<std::string> order = {"# HELP test_events_total",
                                    "# HELP test_latency_seconds",
                                    "# HELP test_level",
                                    "# HELP test_nodes",
                                    "test_nodes{state=\"dead\"} 1",
                                    "test_nodes{state=\"live\"} 3",
                                    "# HELP test_requests_total",
                                    "test_requests_total{code=\"200\",method=\"get\"} 3",
                                    "test_requests_total{code=\"500\",method=\"post\"} 1"};
  size_t at = 0;
  for (const std::string& line : order) {
    size_t next = text.find(line, at);
    ASSERT_NE(next, std::string::npos) << line << " not after offset " << at << ":\n" << text;
    at = next;
  }
  EXPECT_TRUE(Contains(text, "# HELP test_events_total Help with \\\\ and\\nnewline.\n")) << text;
  EXPECT_TRUE(Contains(text, "# TYPE test_events_total counter\ntest_events_total 0\n")) << text;
  EXPECT_TRUE(Contains(text, "# TYPE test_latency_seconds histogram\n")) << text;
  EXPECT_TRUE(Contains(text, "test_latency_seconds_bucket{op=\"read\",le=\"0.5\"} 2\n")) << text;
  EXPECT_TRUE(Contains(text, "test_latency_seconds_bucket{op=\"read\",le=\"1\"} 3\n")) << text;
  EXPECT_TRUE(Contains(text, "test_latency_seconds_bucket{op=\"read\",le=\"10\"} 3\n")) << text;
  EXPECT_TRUE(Contains(text, "test_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n")) << text;
  EXPECT_TRUE(Contains(text, "test_latency_seconds_sum{op=\"read\"} 101.5\n")) << text;
  EXPECT_TRUE(Contains(text, "test_latency_seconds_count{op=\"read\"} 4\n")) << text;
  EXPECT_TRUE(Contains(text, "test_level 42\n")) << text;
  EXPECT_FALSE(Contains(text, "test_unused_total")) << text;
}

TEST(PromTest, EscapesLabelValuesAndFormatsValues) {
  Exposition e;
  Family<Gauge>& g = AddGauge(e.registry(), "test_g", "g");
  Child(g, {{"v", "a\\b\"c\nd"}}).Set(-1.5);
  Child(g, {{"v", "big"}}).Set(137438953472.0);
  Child(g, {{"v", "inf"}}).Set(std::numeric_limits<double>::infinity());
  std::string text = e.Render();
  EXPECT_TRUE(Contains(text, "test_g{v=\"a\\\\b\\\"c\\nd\"} -1.5\n")) << text;
  EXPECT_TRUE(Contains(text, "test_g{v=\"big\"} 137438953472\n")) << text;
  EXPECT_TRUE(Contains(text, "test_g{v=\"inf\"} +Inf\n")) << text;
}

TEST(PromTest, BucketSets) {
  EXPECT_EQ(ExponentialBuckets(4096, 4, 3), (Buckets{4096, 16384, 65536}));
  const Buckets& latency = LatencyBuckets();
  ASSERT_EQ(latency.size(), 17u);
  EXPECT_EQ(latency.front(), 0.00005);
  EXPECT_EQ(latency.back(), 10);
  for (size_t i = 1; i < latency.size(); ++i) EXPECT_LT(latency[i - 1], latency[i]);
}

TEST(PromTest, ScopedTimerObservesElapsedSeconds) {
  Exposition e;
  Histogram& h = Child(AddHistogram(e.registry(), "test_timer_seconds", "t"), {});
  {
    ScopedTimer timer(h);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  prometheus::ClientMetric m = h.Collect();
  EXPECT_EQ(m.histogram.sample_count, 1u);
  EXPECT_GE(m.histogram.sample_sum, 0.002);
  EXPECT_LT(m.histogram.sample_sum, 5.0);
}

TEST(PromTest, ChildrenAreStableAndRegistrationIsIdempotent) {
  Exposition e;
  Family<Counter>& a = AddCounter(e.registry(), "test_total", "help");
  Family<Counter>& b = AddCounter(e.registry(), "test_total", "help");
  EXPECT_EQ(&a, &b);
  Counter& x = Child(a, {{"k", "v"}});
  EXPECT_EQ(&x, &Child(b, {{"k", "v"}}));
  LazyChild<Counter> lazy;
  EXPECT_EQ(&lazy.Get(a, {{"k", "v"}}), &x);
  // Resolved once: later calls return the cached child whatever the labels.
  EXPECT_EQ(&lazy.Get(a, {{"k", "other"}}), &x);
  LazyChild<Histogram> lazy_h;
  Family<Histogram>& h = AddHistogram(e.registry(), "test_seconds", "h");
  Histogram& first = lazy_h.Get(h, {{"op", "read"}}, LatencyBuckets());
  EXPECT_EQ(&first, &Child(h, {{"op", "read"}}));
}

TEST(PromTest, CallbackGaugesMergeAndUnregister) {
  Exposition e;
  double value = 5;
  CallbackHandle one = e.AddCallbackGauge("test_value", "v", [&value] { return value; });
  CallbackHandle nodes_a = e.AddCallbackGauge("test_nodes", "n", {"node"}, [] {
    return std::vector<GaugeSample>{{{"b"}, 2}, {{"a"}, 1}};
  });
  CallbackHandle nodes_b = e.AddCallbackGauge("test_nodes", "n", {"node"}, [] {
    return std::vector<GaugeSample>{{{"c"}, 3}, {{"a"}, 9}};  // "a" twice: first wins
  });
  std::string text = e.Render();
  EXPECT_TRUE(Contains(text, "test_value 5\n")) << text;
  EXPECT_TRUE(Contains(text,
                       "# TYPE test_nodes gauge\ntest_nodes{node=\"a\"} 1\ntest_nodes{node=\"b\"} "
                       "2\ntest_nodes{node=\"c\"} 3\n"))
      << text;
  value = 6;
  EXPECT_TRUE(Contains(e.Render(), "test_value 6\n"));

  CallbackHandle moved = std::move(one);
  EXPECT_FALSE(one.active());  // NOLINT(bugprone-use-after-move): testing the move
  EXPECT_TRUE(moved.active());
  moved.Reset();
  nodes_a.Reset();
  text = e.Render();
  EXPECT_FALSE(Contains(text, "test_value")) << text;
  EXPECT_FALSE(Contains(text, "node=\"b\"")) << text;
  EXPECT_TRUE(Contains(text, "test_nodes{node=\"c\"} 3\n")) << text;
  nodes_b.Reset();
  EXPECT_FALSE(Contains(e.Render(), "test_nodes")) << e.Render();
}

TEST(PromTest, DefaultExpositionIsOneObject) {
  EXPECT_EQ(&DefaultExposition(), &DefaultExposition());
}

TEST(PromDeathTest, BadNamesAndMismatchesAbort) {
  Exposition e;
  EXPECT_DEATH(AddCounter(e.registry(), "bad name", "h"), "bad name");
  EXPECT_DEATH(Child(AddCounter(e.registry(), "test_a_total", "h"), {{"bad-label", "x"}}),
               "test_a_total");
  AddCounter(e.registry(), "test_b_total", "h");
  EXPECT_DEATH(AddGauge(e.registry(), "test_b_total", "h"), "test_b_total");
  EXPECT_DEATH(Child(AddHistogram(e.registry(), "test_c_seconds", "h"), {}, {1, 0.5}),
               "increasing");
  EXPECT_DEATH(ExponentialBuckets(0, 2, 3), "bad arguments");
  EXPECT_DEATH(
      {
        CallbackHandle h = e.AddCallbackGauge("test_cb", "h", {"a"}, [] {
          return std::vector<GaugeSample>{{{"x", "y"}, 1}};
        });
        e.Render();
      },
      "label values");
  CallbackHandle h = e.AddCallbackGauge("test_cb2", "h", [] { return 1.0; });
  EXPECT_DEATH(
      {
        CallbackHandle other =
            e.AddCallbackGauge("test_cb2", "h", {"a"}, [] { return std::vector<GaugeSample>{}; });
      },
      "test_cb2");
}

}  // namespace
}  // namespace prom
}  // namespace shelf
