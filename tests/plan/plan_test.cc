// Tests of the sizing calculator (tools/plan.h): the KV byte counts every
// operator relies on, the capacity model, the fetch-or-recompute break-even
// and the `shelfctl plan` argument parsing.
#include "tools/plan.h"

#include <gtest/gtest.h>

#include <cmath>

namespace shelf::plan {
namespace {

PlanInputs Llama70b(uint64_t context) {
  PlanInputs in;
  in.model = *FindPreset("llama-3-70b");
  in.context_tokens = context;
  return in;
}

TEST(PlanTest, Llama3_70bAt300kTokens) {
  PlanInputs in = Llama70b(300000);
  ASSERT_TRUE(Validate(in).ok());
  Plan p = ComputePlan(in);
  EXPECT_EQ(p.kv_bytes_per_token, 327680u);  // 2 * 80 * 8 * 128 * 2
  EXPECT_EQ(p.kv_bytes_per_context, 98304000000u);
  EXPECT_NEAR(p.kv_bytes_per_context / 1e9, 98.3, 0.01);
  EXPECT_NEAR(p.kv_bytes_per_context / (1024.0 * 1024 * 1024), 91.6, 0.05);
  std::string report = FormatReport(p);
  EXPECT_NE(report.find("327,680 B"), std::string::npos) << report;
  EXPECT_NE(report.find("98,304,000,000 B (98.30 GB, 91.55 GiB)"), std::string::npos) << report;
  std::string json = FormatJson(p);
  EXPECT_NE(json.find("\"kv_bytes_per_token\":327680,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"kv_bytes_per_context\":98304000000,"), std::string::npos) << json;
}

TEST(PlanTest, PresetShapes) {
  struct Case {
    const char* name;
    uint64_t bytes_per_token;
  };
  for (const Case& c : {Case{"llama-3-8b", 131072},    // 2*32*8*128*2
                        Case{"llama-3-405b", 516096},  // 2*126*8*128*2
                        Case{"llama-2-7b", 524288},    // 2*32*32*128*2: no GQA
                        Case{"mistral-7b", 131072}, Case{"qwen2-72b", 327680},
                        Case{"qwen2-7b", 57344}}) {  // 2*28*4*128*2
    absl::StatusOr<ModelShape> m = FindPreset(c.name);
    ASSERT_TRUE(m.ok()) << c.name;
    PlanInputs in;
    in.model = *m;
    in.context_tokens = 1;
    EXPECT_EQ(ComputePlan(in).kv_bytes_per_token, c.bytes_per_token) << c.name;
  }
  EXPECT_TRUE(FindPreset("LLAMA-3-70B").ok());
  absl::StatusOr<ModelShape> missing = FindPreset("gpt-9");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("llama-3-70b"), absl::string_view::npos);
}

TEST(PlanTest, KneeFollowsFlopCounts) {
  // 70.6e9 / (80 * 8192): attention costs as much as the weights near 108k tokens.
  EXPECT_NEAR(KneeTokensFromShape(*FindPreset("llama-3-70b")), 107727, 1);
  ModelShape custom{"custom", 10, 2, 64, 2, 0, 0};
  EXPECT_EQ(KneeTokensFromShape(custom), 0);
}

TEST(PlanTest, CapacityModel) {
  PlanInputs in = Llama70b(1000);  // 327,680,000 B per context
  in.concurrent = 10;
  in.window = 0;  // 10 x concurrent
  in.reuse = 0.75;
  in.replicas = 2;
  in.nodes = 3;
  in.evict_high = 0.8;
  Plan p = ComputePlan(in);
  EXPECT_EQ(p.in.window, 100u);
  // DRAM = 10 * 327,680,000 * 2 / 0.8
  EXPECT_EQ(p.dram_bytes, 8192000000u);
  // SSD = 100 * 0.25 * 327,680,000 * 2 / 0.8
  EXPECT_EQ(p.ssd_bytes, 20480000000u);
  EXPECT_EQ(p.dram_bytes_per_node, 2730666667u);  // rounded up
  EXPECT_EQ(p.ssd_bytes_per_node, 6826666667u);
}

TEST(PlanTest, RecomputeIsLinearPlusQuadratic) {
  PlanInputs in = Llama70b(1);
  in.prefill_tps = 1000;
  in.knee_tokens = 5000;
  EXPECT_DOUBLE_EQ(RecomputeSeconds(in, 1000), 1.0 * 1.2);
  EXPECT_DOUBLE_EQ(RecomputeSeconds(in, 5000), 5.0 * 2);  // the knee doubles the cost
  in.knee_tokens = -1;
  EXPECT_DOUBLE_EQ(RecomputeSeconds(in, 5000), 5.0);
  in.link_gbps = 1;
  in.fetch_overhead_s = 0.5;
  EXPECT_DOUBLE_EQ(FetchSeconds(in, 1000, 1e6), 0.5 + 1.0);
}

// At the break-even length the two times are equal; just above it fetching
// wins, just below it recomputing does.
void ExpectBreakEven(const PlanInputs& in) {
  ASSERT_TRUE(Validate(in).ok());
  Plan p = ComputePlan(in);
  ASSERT_FALSE(p.fetch_never_wins);
  double s = p.break_even_tokens;
  double rec = RecomputeSeconds(p.in, s), fetch = FetchSeconds(p.in, p.kv_bytes_per_token, s);
  EXPECT_NEAR(rec, fetch, 1e-9 * std::max(1.0, rec));
  EXPECT_GT(RecomputeSeconds(p.in, s * 1.01 + 1),
            FetchSeconds(p.in, p.kv_bytes_per_token, s * 1.01 + 1));
  if (s > 2) {
    EXPECT_LT(RecomputeSeconds(p.in, s * 0.99), FetchSeconds(p.in, p.kv_bytes_per_token, s * 0.99));
  }
}

TEST(PlanTest, BreakEvenFastLinkIsShort) {
  // 25 GB/s moves a token's 327,680 B in 13.1 us; prefill at 10k tokens/s
  // takes 100 us a token, so only the 1 ms fixed cost needs amortizing:
  // s* ~ 0.001 / (100e-6 - 13.1e-6) ~ 11.5 tokens.
  PlanInputs in = Llama70b(300000);
  in.link_gbps = 25;
  in.prefill_tps = 10000;
  in.fetch_overhead_s = 0.001;
  Plan p = ComputePlan(in);
  EXPECT_NEAR(p.break_even_tokens, 11.5, 0.2);
  EXPECT_GT(p.t_recompute_s / p.t_fetch_s, 20);
  ExpectBreakEven(in);
}

TEST(PlanTest, BreakEvenSlowLinkNeedsLongContexts) {
  // 1.25 GB/s (10 GbE): 262 us a token to fetch against 100 us to compute at
  // short lengths. Fetching wins only once attention makes prefill slower:
  // (1 + s/K) * 100us > 262.144us  ->  s > 1.62144 * K.
  PlanInputs in = Llama70b(32768);
  in.link_gbps = 1.25;
  in.prefill_tps = 10000;
  in.knee_tokens = 100000;
  in.fetch_overhead_s = 0;
  Plan p = ComputePlan(in);
  EXPECT_NEAR(p.break_even_tokens, 162144, 1);
  EXPECT_GT(p.t_fetch_s, p.t_recompute_s);  // at 32k tokens, recompute
  ExpectBreakEven(in);
  in.fetch_overhead_s = 0.002;
  ExpectBreakEven(in);
  EXPECT_GT(ComputePlan(in).break_even_tokens, 162144);
}

TEST(PlanTest, BreakEvenWithoutAttentionTerm) {
  PlanInputs in = Llama70b(1000);
  in.knee_tokens = -1;
  in.link_gbps = 25;
  in.prefill_tps = 10000;
  in.fetch_overhead_s = 0.001;
  ExpectBreakEven(in);
  in.link_gbps = 1;  // 327.68 us a token to fetch > 100 us to compute, at every length
  Plan p = ComputePlan(in);
  EXPECT_TRUE(p.fetch_never_wins);
  EXPECT_NE(FormatJson(p).find("\"break_even_tokens\":null"), std::string::npos);
  EXPECT_NE(FormatReport(p).find("break-even: none"), std::string::npos);
}

TEST(PlanTest, ReuseSaving) {
  PlanInputs in = Llama70b(200000);
  in.reuse = 0.5;
  Plan p = ComputePlan(in);
  EXPECT_EQ(p.reused_tokens, 100000u);
  EXPECT_DOUBLE_EQ(
      p.saved_s, RecomputeSeconds(p.in, 100000) - FetchSeconds(p.in, p.kv_bytes_per_token, 100000));
  EXPECT_GT(p.saved_s, 0);
  in.reuse = 0;
  EXPECT_EQ(ComputePlan(in).saved_s, 0);
}

TEST(PlanTest, ValidateRejectsBadInputs) {
  PlanInputs ok = Llama70b(1000);
  ASSERT_TRUE(Validate(ok).ok());
  auto expect_bad = [&](auto mutate, const char* what) {
    PlanInputs in = ok;
    mutate(in);
    absl::Status s = Validate(in);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
  };
  expect_bad([](PlanInputs& in) { in.model.layers = 0; }, "layers");
  expect_bad([](PlanInputs& in) { in.context_tokens = 0; }, "context");
  expect_bad([](PlanInputs& in) { in.concurrent = 0; }, "concurrent");
  expect_bad([](PlanInputs& in) { in.reuse = 1.5; }, "reuse");
  expect_bad([](PlanInputs& in) { in.reuse = std::nan(""); }, "reuse nan");
  expect_bad([](PlanInputs& in) { in.evict_high = 0; }, "evict_high");
  expect_bad([](PlanInputs& in) { in.link_gbps = 0; }, "link");
  expect_bad([](PlanInputs& in) { in.prefill_tps = -1; }, "prefill");
  expect_bad([](PlanInputs& in) { in.replicas = 0; }, "replicas");
  expect_bad([](PlanInputs& in) { in.fetch_overhead_s = -1; }, "overhead");
  expect_bad([](PlanInputs& in) { in.context_tokens = 1ull << 60; }, "overflow");
  expect_bad([](PlanInputs& in) { in.concurrent = 1ull << 62; }, "window overflow");
  expect_bad([](PlanInputs& in) { in.model = ModelShape{"custom", 10, 2, 64, 2, 0, 0}; },
             "custom model without a knee");
}

TEST(PlanArgsTest, PresetAsArgument) {
  absl::StatusOr<PlanInputs> in = ParsePlanArgs({"llama-3-70b", "--context", "300000"});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->model.layers, 80u);
  EXPECT_EQ(in->context_tokens, 300000u);
  EXPECT_EQ(ComputePlan(*in).kv_bytes_per_context, 98304000000u);
}

TEST(PlanArgsTest, CustomShapeAndDtype) {
  absl::StatusOr<PlanInputs> in =
      ParsePlanArgs({"--layers", "80", "--kv-heads", "8", "--head-dim", "128", "--dtype", "fp8",
                     "--context=1000", "--knee-tokens", "-1", "--fetch-overhead-ms", "0.5",
                     "--link-gbps", "50", "--reuse", "0.25"});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->model.name, "custom");
  EXPECT_EQ(ComputePlan(*in).kv_bytes_per_token, 163840u);  // fp8 halves it
  EXPECT_DOUBLE_EQ(in->fetch_overhead_s, 0.0005);
  EXPECT_DOUBLE_EQ(in->link_gbps, 50);
  EXPECT_DOUBLE_EQ(in->reuse, 0.25);

  in = ParsePlanArgs({"--model", "llama-3-8b", "--layers", "40"});
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->model.layers, 40u);
  EXPECT_EQ(in->model.name, "llama-3-8b (modified)");
}

TEST(PlanArgsTest, Errors) {
  EXPECT_EQ(ParsePlanArgs({"gpt-9"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParsePlanArgs({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePlanArgs({"llama-3-8b", "mistral-7b"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePlanArgs({"llama-3-8b", "--context", "-5"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePlanArgs({"llama-3-8b", "--dtype", "fp7"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePlanArgs({"llama-3-8b", "--bogus", "1"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanArgsTest, RunPlanCommand) {
  absl::StatusOr<std::string> out = RunPlanCommand({"llama-3-70b", "--context", "300000"}, false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(out->find("break-even"), std::string::npos) << *out;
  out = RunPlanCommand({"llama-3-70b", "--json"}, false);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->front(), '{');
  out = RunPlanCommand({"llama-3-70b"}, true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->front(), '{');
  out = RunPlanCommand({"--help"}, false);
  ASSERT_TRUE(out.ok());
  EXPECT_NE(out->find("--link-gbps"), std::string::npos);
  EXPECT_NE(out->find("llama-3-405b"), std::string::npos);
  out = RunPlanCommand({"--list-models"}, false);
  ASSERT_TRUE(out.ok());
  EXPECT_NE(out->find("qwen2-72b"), std::string::npos);
  EXPECT_FALSE(RunPlanCommand({"nope"}, false).ok());
}

}  // namespace
}  // namespace shelf::plan
