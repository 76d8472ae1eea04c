// Tests of the metrics registry: exact exposition text, bucket math,
// concurrent updates, callback gauges and the registration contract.
#include "common/metrics.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shelf {
namespace metrics {
namespace {

TEST(MetricsTest, RendersExactExposition) {
  Registry registry;
  Family<Counter>& requests =
      registry.AddCounter("test_requests_total", "Requests handled.", {"method", "code"});
  requests.WithLabels({"post", "500"}).Inc();
  requests.WithLabels({"get", "200"}).Inc(3);
  registry.AddCounter("test_events_total", "Help with \\ and\nnewline.");
  registry.AddGauge("test_temperature", "Room temperature.", {"room"})
      .WithLabels({"a\\b\"c\nd"})
      .Set(-1.5);
  registry.AddGauge("test_level", "A level.").WithLabels().Set(42);
  Histogram& latency =
      registry.AddHistogram("test_latency_seconds", "Latency.", {"op"}, {0.5, 1, 10})
          .WithLabels({"read"});
  for (double v : {0.25, 0.5, 0.75, 100.0}) latency.Observe(v);
  CallbackHandle nodes = registry.AddCallbackGauge("test_nodes", "Nodes by state.", {"state"}, [] {
    return std::vector<GaugeSample>{{{"live"}, 3}, {{"dead"}, 1}};
  });
  // A labeled family that never got a child is left out entirely.
  registry.AddCounter("test_unused_total", "Never used.", {"x"});

  const std::string expected =
      "# HELP test_events_total Help with \\\\ and\\nnewline.\n"
      "# TYPE test_events_total counter\n"
      "test_events_total 0\n"
      "# HELP test_latency_seconds Latency.\n"
      "# TYPE test_latency_seconds histogram\n"
      "test_latency_seconds_bucket{op=\"read\",le=\"0.5\"} 2\n"
      "test_latency_seconds_bucket{op=\"read\",le=\"1\"} 3\n"
      "test_latency_seconds_bucket{op=\"read\",le=\"10\"} 3\n"
      "test_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n"
      "test_latency_seconds_sum{op=\"read\"} 101.5\n"
      "test_latency_seconds_count{op=\"read\"} 4\n"
      "# HELP test_level A level.\n"
      "# TYPE test_level gauge\n"
      "test_level 42\n"
      "# HELP test_nodes Nodes by state.\n"
      "# TYPE test_nodes gauge\n"
      "test_nodes{state=\"dead\"} 1\n"
      "test_nodes{state=\"live\"} 3\n"
      "# HELP test_requests_total Requests handled.\n"
      "# TYPE test_requests_total counter\n"
      "test_requests_total{method=\"get\",code=\"200\"} 3\n"
      "test_requests_total{method=\"post\",code=\"500\"} 1\n"
      "# HELP test_temperature Room temperature.\n"
      "# TYPE test_temperature gauge\n"
      "test_temperature{room=\"a\\\\b\\\"c\\nd\"} -1.5\n";
  EXPECT_EQ(registry.Render(), expected);
  // Rendering is deterministic and has no side effects.
  EXPECT_EQ(registry.Render(), expected);
}

TEST(MetricsTest, EscapesAndFormats) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\"b"), "a\\\"b");
  EXPECT_EQ(EscapeLabelValue("a\\b"), "a\\\\b");
  EXPECT_EQ(EscapeLabelValue("a\nb"), "a\\nb");
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(2), "2");
  EXPECT_EQ(FormatValue(0.5), "0.5");
  EXPECT_EQ(FormatValue(-0.25), "-0.25");
  EXPECT_EQ(FormatValue(0.00005), "5e-05");
  // Byte counts stay exact.
  EXPECT_EQ(FormatValue(137438953472.0), "137438953472");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(MetricsTest, HistogramBucketsAreInclusiveAndCumulative) {
  Histogram h({1, 2, 4});
  h.Observe(-3);   // below every bound: first bucket
  h.Observe(1);    // equal to a bound: that bucket (le is <=)
  h.Observe(1.5);  // between bounds: the next one up
  h.Observe(2);
  h.Observe(4.0000001);  // above the last bound: +Inf only
  h.Observe(1e9);
  h.Observe(std::nan(""));  // dropped
  Histogram::Snapshot s = h.Snap();
  ASSERT_EQ(s.buckets.size(), 4u);
  EXPECT_EQ(s.buckets[0], 2u);  // -3, 1
  EXPECT_EQ(s.buckets[1], 4u);  // + 1.5, 2
  EXPECT_EQ(s.buckets[2], 4u);
  EXPECT_EQ(s.buckets[3], 6u);  // + 4.0000001, 1e9
  EXPECT_EQ(s.count, 6u);
  EXPECT_DOUBLE_EQ(s.sum, -3 + 1 + 1.5 + 2 + 4.0000001 + 1e9);
}

TEST(MetricsTest, HistogramWithNoBoundsHasOnlyInf) {
  Registry registry;
  Histogram& h = registry.AddHistogram("test_sizes", "Sizes.", {}, {}).WithLabels();
  h.Observe(7);
  EXPECT_EQ(registry.Render(),
            "# HELP test_sizes Sizes.\n# TYPE test_sizes histogram\n"
            "test_sizes_bucket{le=\"+Inf\"} 1\ntest_sizes_sum 7\ntest_sizes_count 1\n");
}

TEST(MetricsTest, BucketSets) {
  const std::vector<double>& d = DefaultLatencyBuckets();
  ASSERT_FALSE(d.empty());
  EXPECT_DOUBLE_EQ(d.front(), 50e-6);
  EXPECT_DOUBLE_EQ(d.back(), 10.0);
  for (size_t i = 1; i < d.size(); ++i) EXPECT_LT(d[i - 1], d[i]);
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

TEST(MetricsTest, ScopedTimerObservesElapsedSeconds) {
  Histogram h({0.001, 60});
  {
    ScopedTimer timer(h);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Histogram::Snapshot s = h.Snap();
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.buckets[0], 0u);  // took more than 1 ms
  EXPECT_EQ(s.buckets[1], 1u);
  EXPECT_GE(s.sum, 0.005);
  EXPECT_LT(s.sum, 60);
}

TEST(MetricsTest, ConcurrentUpdatesSumExactly) {
  Registry registry;
  Family<Counter>& counters = registry.AddCounter("test_ops_total", "Ops.", {"kind"});
  Family<Gauge>& gauges = registry.AddGauge("test_in_flight", "In flight.", {"kind"});
  Family<Histogram>& histograms = registry.AddHistogram("test_op_seconds", "Ops.", {"kind"}, {1});
  counters.WithLabels({"main"}).Inc();  // so every scrape has something
  constexpr int kThreads = 8;
  constexpr int kIters = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Every thread looks the shared child up itself (racing creation),
      // and also has a child of its own.
      Counter& shared = counters.WithLabels({"shared"});
      Counter& own = counters.WithLabels({"own" + std::to_string(t)});
      Gauge& gauge = gauges.WithLabels({"shared"});
      Histogram& histogram = histograms.WithLabels({"shared"});
      for (int i = 0; i < kIters; ++i) {
        shared.Inc();
        own.Inc(2);
        gauge.Add(1);
        gauge.Add(-0.5);
        histogram.Observe(i % 2 == 0 ? 0.5 : 2.0);
      }
    });
  }
  // Scrapes race with the updates; they must not crash or block them.
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(registry.Render().empty());
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(counters.WithLabels({"main"}).Value(), 1u);
  EXPECT_EQ(counters.WithLabels({"shared"}).Value(), uint64_t{kThreads} * kIters);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(counters.WithLabels({"own" + std::to_string(t)}).Value(), 2u * kIters);
  }
  EXPECT_EQ(gauges.WithLabels({"shared"}).Value(), kThreads * kIters * 0.5);
  Histogram::Snapshot s = histograms.WithLabels({"shared"}).Snap();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kIters);
  EXPECT_EQ(s.buckets[0], uint64_t{kThreads} * kIters / 2);
  EXPECT_EQ(s.sum, kThreads * (kIters / 2) * (0.5 + 2.0));
}

TEST(MetricsTest, ReferencesAreStableAndRegistrationIsIdempotent) {
  Registry registry;
  Family<Counter>& a = registry.AddCounter("test_x_total", "X.", {"tier"});
  Counter& dram = a.WithLabels({"dram"});
  for (int i = 0; i < 1000; ++i) a.WithLabels({"other" + std::to_string(i)});
  Family<Counter>& b = registry.AddCounter("test_x_total", "X.", {"tier"});
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(&b.WithLabels({"dram"}), &dram);
  Family<Histogram>& h1 = registry.AddHistogram("test_h_seconds", "H.", {"op"});
  Family<Histogram>& h2 = registry.AddHistogram("test_h_seconds", "H.", {"op"});
  EXPECT_EQ(&h1, &h2);
  EXPECT_EQ(h1.bounds(), DefaultLatencyBuckets());
}

TEST(MetricsTest, CallbackGaugesMergeAndUnregister) {
  Registry registry;
  std::atomic<int> calls{0};
  CallbackHandle objects = registry.AddCallbackGauge("test_objects", "Objects.", [&calls] {
    ++calls;
    return 12.0;
  });
  EXPECT_EQ(registry.Render(),
            "# HELP test_objects Objects.\n# TYPE test_objects gauge\n"
            "test_objects 12\n");
  EXPECT_EQ(calls.load(), 1);

  // Two sources for one name: samples merge; a duplicate label set keeps
  // the first source's value.
  CallbackHandle first = registry.AddCallbackGauge("test_used_bytes", "Used.", {"tier"}, [] {
    return std::vector<GaugeSample>{{{"ssd"}, 5}, {{"dram"}, 1}};
  });
  CallbackHandle second = registry.AddCallbackGauge("test_used_bytes", "Used.", {"tier"}, [] {
    return std::vector<GaugeSample>{{{"dram"}, 99}, {{"hbm"}, 2}};
  });
  std::string text = registry.Render();
  EXPECT_NE(text.find("test_used_bytes{tier=\"dram\"} 1\n"
                      "test_used_bytes{tier=\"hbm\"} 2\n"
                      "test_used_bytes{tier=\"ssd\"} 5\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("99"), std::string::npos) << text;

  // A moved handle still owns the registration; resetting it unregisters.
  CallbackHandle moved = std::move(objects);
  EXPECT_FALSE(objects.active());
  EXPECT_TRUE(moved.active());
  moved.Reset();
  first.Reset();
  int before = calls.load();
  text = registry.Render();
  EXPECT_EQ(calls.load(), before);
  EXPECT_EQ(text.find("test_objects"), std::string::npos) << text;
  EXPECT_EQ(text.find("ssd"), std::string::npos) << text;
  EXPECT_NE(text.find("test_used_bytes{tier=\"dram\"} 99\n"), std::string::npos) << text;
}

TEST(MetricsTest, DefaultRegistryIsOneObject) {
  EXPECT_EQ(&DefaultRegistry(), &DefaultRegistry());
  Counter& c = DefaultRegistry().AddCounter("test_default_total", "D.").WithLabels();
  c.Inc(5);
  EXPECT_NE(DefaultRegistry().Render().find("test_default_total 5\n"), std::string::npos);
}

TEST(MetricsDeathTest, BadNamesAndMismatchesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Registry registry;
  EXPECT_DEATH(registry.AddCounter("bad-name_total", "h."), "bad metric name");
  EXPECT_DEATH(registry.AddCounter("9lives_total", "h."), "bad metric name");
  EXPECT_DEATH(registry.AddCounter("", "h."), "bad metric name");
  EXPECT_DEATH(registry.AddGauge("test_g", "h.", {"bad label"}), "bad label name");
  EXPECT_DEATH(registry.AddGauge("test_g", "h.", {"__reserved"}), "bad label name");
  EXPECT_DEATH(registry.AddGauge("test_g", "h.", {"a", "a"}), "twice");
  EXPECT_DEATH(registry.AddHistogram("test_h", "h.", {"le"}), "'le'");
  EXPECT_DEATH(registry.AddHistogram("test_h", "h.", {}, {2, 1}), "strictly increasing");

  Family<Counter>& c = registry.AddCounter("test_c_total", "h.", {"a"});
  EXPECT_DEATH(c.WithLabels({"x", "y"}), "2 label values given");
  EXPECT_DEATH(registry.AddGauge("test_c_total", "h.", {"a"}), "another type");
  EXPECT_DEATH(registry.AddCounter("test_c_total", "other.", {"a"}), "another help");
  EXPECT_DEATH(registry.AddCounter("test_c_total", "h.", {"b"}), "labels");
  registry.AddHistogram("test_h2", "h.", {}, {1, 2});
  EXPECT_DEATH(registry.AddHistogram("test_h2", "h.", {}, {1, 3}), "bucket bounds");
  registry.AddGauge("test_plain", "h.");
  EXPECT_DEATH(
      { CallbackHandle h = registry.AddCallbackGauge("test_plain", "h.", [] { return 1.0; }); },
      "another type");
}

}  // namespace
}  // namespace metrics
}  // namespace shelf
