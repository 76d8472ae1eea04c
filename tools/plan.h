// Capacity planning for a Shelf cluster: how many bytes of KV cache a model
// produces, how much DRAM and SSD the cluster needs to hold it, and from
// which context length on fetching a prefix's KV beats recomputing it.
// `shelfctl plan` is a thin shell around this library; docs/operations.md
// ("Capacity planning") explains the model and every input.
//
//   absl::StatusOr<shelf::plan::PlanInputs> in =
//       shelf::plan::ParsePlanArgs({"llama-3-70b", "--context", "300000"});
//   shelf::plan::Plan p = shelf::plan::ComputePlan(*in);
//   // p.kv_bytes_per_token == 327680, p.kv_bytes_per_context == 98304000000
//   std::cout << shelf::plan::FormatReport(p);   // or FormatJson(p)
//
// The model, in short (s = context tokens):
//   KV_bytes(s)     = 2 * layers * kv_heads * head_dim * dtype_bytes * s
//   t_recompute(s)  = s / prefill_tps * (1 + s / knee_tokens)
//                     (a linear term for the weights, a quadratic one for
//                      attention; knee_tokens is where the two are equal)
//   t_fetch(s)      = fetch_overhead + KV_bytes(s) / link_bandwidth
//   DRAM            = concurrent * KV_bytes(s) * replicas / evict_high
//   SSD             = window * (1 - reuse) * KV_bytes(s) * replicas / evict_high
//
// Everything here is pure arithmetic: thread-safe, no I/O.
#ifndef SHELF_TOOLS_PLAN_H_
#define SHELF_TOOLS_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shelf::plan {

// The shape of a model's attention KV, and what its prefill costs.
struct ModelShape {
  std::string name;          // a preset name, or "custom"
  uint64_t layers = 0;       // transformer layers
  uint64_t kv_heads = 0;     // key/value heads per layer (GQA: fewer than query heads)
  uint64_t head_dim = 0;     // elements per head
  uint64_t dtype_bytes = 2;  // bytes per KV element: fp16/bf16 2, fp8 1, fp32 4
  uint64_t hidden = 0;       // model width d_model; 0 when unknown
  double active_params = 0;  // parameters used per token; 0 when unknown
};

// The built-in presets, in a stable order (fp16 KV).
const std::vector<ModelShape>& ModelPresets();
// The preset called `name` (case-insensitive); NOT_FOUND naming the known ones.
absl::StatusOr<ModelShape> FindPreset(absl::string_view name);
// Bytes per element for "fp16", "bf16", "fp8", "int8", "fp32" or "float32";
// INVALID_ARGUMENT otherwise.
absl::StatusOr<uint64_t> DtypeBytes(absl::string_view dtype);

// Where the attention term of prefill equals the weights term, from the
// FLOP counts: 2 * active_params per token for the weights, 4 * layers *
// hidden * i for token i's attention, so the sum over s tokens is
// 2*P*s + 2*L*d*s^2 and the two are equal at s = P / (L * d).
// Returns 0 when the model lacks active_params or hidden.
double KneeTokensFromShape(const ModelShape& model);

struct PlanInputs {
  ModelShape model;
  uint64_t context_tokens = 32768;  // s: tokens per context
  uint64_t concurrent = 16;         // contexts in flight at once, cluster-wide
  double reuse = 0.5;               // fraction of a context's tokens that are a prefix seen before
  uint64_t window = 0;              // contexts kept for reuse on SSD; 0: 10 * concurrent
  uint64_t replicas = 1;            // copies of each block
  uint64_t nodes = 1;               // stores sharing the load
  double evict_high = 0.95;         // the master's --evict-high: usable fill of a tier
  double link_gbps = 25.0;          // GB/s (1e9 bytes/s) between a client and a store
  double prefill_tps = 10000.0;     // prefill tokens/s of one engine at short contexts
  double knee_tokens = 0;           // 0: KneeTokensFromShape(model); < 0: no quadratic term
  double fetch_overhead_s = 0.001;  // fixed cost of one fetch: lookup RPC, first byte
};

// OK iff the inputs are usable: a complete shape, positive counts and
// rates, 0 <= reuse <= 1, 0 < evict_high <= 1, a knee known or disabled,
// and byte counts that fit in 64 bits. INVALID_ARGUMENT naming the first
// bad input otherwise.
absl::Status Validate(const PlanInputs& in);

// The result. Byte counts are exact integers where the inputs are; times
// are seconds.
struct Plan {
  PlanInputs in;                      // as given, with window and knee resolved
  uint64_t kv_bytes_per_token = 0;    // 2 * layers * kv_heads * head_dim * dtype_bytes
  uint64_t kv_bytes_per_context = 0;  // kv_bytes_per_token * context_tokens
  // Capacities, rounded up to whole bytes.
  uint64_t dram_bytes = 0;           // cluster-wide DRAM for the hot working set
  uint64_t ssd_bytes = 0;            // cluster-wide SSD for the reuse window
  uint64_t dram_bytes_per_node = 0;  // dram_bytes / nodes, rounded up
  uint64_t ssd_bytes_per_node = 0;
  double t_recompute_s = 0;  // t_recompute(context_tokens)
  double t_fetch_s = 0;      // t_fetch(context_tokens)
  // Fetching a prefix of s tokens is faster than recomputing it for every
  // s > break_even_tokens. `fetch_never_wins` when no length qualifies
  // (only possible without a quadratic term); then break_even_tokens is 0.
  double break_even_tokens = 0;
  bool fetch_never_wins = false;
  uint64_t reused_tokens = 0;  // p = reuse * context_tokens, rounded down
  double saved_s = 0;          // t_recompute(p) - t_fetch(p); negative: fetching loses
};

// Seconds to prefill `tokens` from scratch: tokens / prefill_tps * (1 + tokens / knee).
// The cost of computing tokens p..s with p already cached is
// RecomputeSeconds(s) - RecomputeSeconds(p).
double RecomputeSeconds(const PlanInputs& in, double tokens);
// Seconds to fetch the KV of `tokens`: fetch_overhead + bytes / link bandwidth.
double FetchSeconds(const PlanInputs& in, uint64_t kv_bytes_per_token, double tokens);

// REQUIRES: Validate(in).ok().
Plan ComputePlan(const PlanInputs& in);

// A report for people, with the arithmetic written out.
std::string FormatReport(const Plan& plan);
// The same numbers as one JSON object (break_even_tokens is null when
// fetching never wins).
std::string FormatJson(const Plan& plan);

// Parses `shelfctl plan` arguments (everything after the word "plan"):
//   [MODEL] [--model NAME] [--layers N --kv-heads N --head-dim N]
//   [--dtype fp16|bf16|fp8|fp32] [--context N] [--concurrent N] [--reuse F]
//   [--window N] [--replicas N] [--nodes N] [--evict-high F] [--link-gbps F]
//   [--prefill-tps F] [--knee-tokens F] [--fetch-overhead-ms F] [--json]
// A preset gives the shape; --layers/--kv-heads/--head-dim override it or,
// without a preset, describe a custom model. Returns validated inputs, or
// INVALID_ARGUMENT / NOT_FOUND with a message for the operator.
absl::StatusOr<PlanInputs> ParsePlanArgs(const std::vector<std::string>& args);
// The flag list ParsePlanArgs accepts, and the presets, for --help.
std::string PlanHelp();

// What `shelfctl plan ARGS` prints: the report, the JSON with `json` (or
// --json among the arguments), the
// help on --help, the preset table on --list-models. Errors as ParsePlanArgs.
absl::StatusOr<std::string> RunPlanCommand(const std::vector<std::string>& args, bool json);

}  // namespace shelf::plan

#endif  // SHELF_TOOLS_PLAN_H_
