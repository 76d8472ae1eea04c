#include "tools/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/flags.h"
#include "common/json.h"

namespace shelf::plan {
namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Capacities are computed in doubles and must round back into 64 bits.
constexpr double kBytesMax = 1.8e19;

// 98304000000 -> "98,304,000,000".
std::string Commas(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// "98,304,000,000 B (98.30 GB, 91.55 GiB)": decimal units for buying disks,
// binary ones for --dram-size.
std::string Bytes(uint64_t n) {
  double d = static_cast<double>(n);
  if (d >= 1e12) {
    return absl::StrFormat("%s B (%.2f TB, %.2f TiB)", Commas(n), d / 1e12, d / (kGiB * 1024));
  }
  if (d >= 1e9) return absl::StrFormat("%s B (%.2f GB, %.2f GiB)", Commas(n), d / kGB, d / kGiB);
  if (d >= 1e6) {
    return absl::StrFormat("%s B (%.2f MB, %.2f MiB)", Commas(n), d / 1e6, d / (1024.0 * 1024));
  }
  if (d >= 1e3) return absl::StrFormat("%s B (%.2f KiB)", Commas(n), d / 1024.0);
  return absl::StrCat(n, " B");
}

// Seconds, with a unit that keeps three significant digits readable.
std::string Seconds(double s) {
  if (s >= 1.0) return absl::StrFormat("%.3g s", s);
  if (s >= 1e-3) return absl::StrFormat("%.3g ms", s * 1e3);
  return absl::StrFormat("%.3g us", s * 1e6);
}

std::string DtypeName(uint64_t bytes) {
  switch (bytes) {
    case 1:
      return "fp8";
    case 2:
      return "fp16";
    case 4:
      return "fp32";
    default:
      return absl::StrCat(bytes, "-byte");
  }
}

// Rounds up, except that a value within rounding error of a whole number
// is that number: 6553600000 / 0.8 is 8192000000, not 8192000001.
uint64_t CeilBytes(double bytes) {
  double nearest = std::round(bytes);
  if (std::fabs(bytes - nearest) <= 1e-9 * std::max(1.0, bytes)) {
    return static_cast<uint64_t>(nearest);
  }
  return static_cast<uint64_t>(std::ceil(bytes));
}

double ResolvedKnee(const PlanInputs& in) {
  return in.knee_tokens == 0 ? KneeTokensFromShape(in.model) : in.knee_tokens;
}

}  // namespace

const std::vector<ModelShape>& ModelPresets() {
  // Shapes from each model's published config (num_hidden_layers,
  // num_key_value_heads, head_dim, hidden_size); active_params counts the
  // parameters one token passes through (for a mixture of experts, the
  // routed experts only).
  static const std::vector<ModelShape>* const kPresets = new std::vector<ModelShape>{
      {"llama-3-8b", 32, 8, 128, 2, 4096, 8.03e9},
      {"llama-3-70b", 80, 8, 128, 2, 8192, 70.6e9},
      {"llama-3-405b", 126, 8, 128, 2, 16384, 405.9e9},
      {"llama-2-7b", 32, 32, 128, 2, 4096, 6.74e9},
      {"llama-2-70b", 80, 8, 128, 2, 8192, 69.0e9},
      {"mistral-7b", 32, 8, 128, 2, 4096, 7.24e9},
      {"mixtral-8x7b", 32, 8, 128, 2, 4096, 12.9e9},
      {"qwen2-7b", 28, 4, 128, 2, 3584, 7.62e9},
      {"qwen2-72b", 80, 8, 128, 2, 8192, 72.7e9},
  };
  return *kPresets;
}

absl::StatusOr<ModelShape> FindPreset(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  std::vector<std::string> names;
  for (const ModelShape& m : ModelPresets()) {
    if (m.name == lower) return m;
    names.push_back(m.name);
  }
  return absl::NotFoundError(absl::StrCat("unknown model '", name,
                                          "'; presets: ", absl::StrJoin(names, ", "),
                                          " (or give --layers, --kv-heads and --head-dim)"));
}

absl::StatusOr<uint64_t> DtypeBytes(absl::string_view dtype) {
  std::string d = absl::AsciiStrToLower(dtype);
  if (d == "fp16" || d == "bf16" || d == "float16" || d == "bfloat16") return 2;
  if (d == "fp8" || d == "int8" || d == "e4m3" || d == "e5m2") return 1;
  if (d == "fp32" || d == "float32") return 4;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", dtype, "'; use fp16, bf16, fp8, int8 or fp32"));
}

double KneeTokensFromShape(const ModelShape& model) {
  if (model.active_params <= 0 || model.hidden == 0 || model.layers == 0) return 0;
  return model.active_params / (static_cast<double>(model.layers) * model.hidden);
}

absl::Status Validate(const PlanInputs& in) {
  const ModelShape& m = in.model;
  if (m.layers == 0 || m.kv_heads == 0 || m.head_dim == 0) {
    return absl::InvalidArgumentError(
        "model shape incomplete: give a preset or all of --layers, --kv-heads, --head-dim");
  }
  if (m.dtype_bytes == 0) return absl::InvalidArgumentError("dtype bytes must be positive");
  if (in.context_tokens == 0) return absl::InvalidArgumentError("--context must be positive");
  if (in.concurrent == 0) return absl::InvalidArgumentError("--concurrent must be positive");
  // Far beyond any cluster; keeps 10 * concurrent and the products below exact.
  constexpr uint64_t kContextsMax = 1'000'000'000'000;
  if (in.concurrent > kContextsMax || in.window > kContextsMax) {
    return absl::InvalidArgumentError("--concurrent and --window must be at most 1e12");
  }
  if (!(in.reuse >= 0 && in.reuse <= 1)) {
    return absl::InvalidArgumentError("--reuse must lie in [0, 1]");
  }
  if (in.replicas == 0) return absl::InvalidArgumentError("--replicas must be positive");
  if (in.nodes == 0) return absl::InvalidArgumentError("--nodes must be positive");
  if (!(in.evict_high > 0 && in.evict_high <= 1)) {
    return absl::InvalidArgumentError("--evict-high must lie in (0, 1]");
  }
  if (!(in.link_gbps > 0 && std::isfinite(in.link_gbps))) {
    return absl::InvalidArgumentError("--link-gbps must be positive");
  }
  if (!(in.prefill_tps > 0 && std::isfinite(in.prefill_tps))) {
    return absl::InvalidArgumentError("--prefill-tps must be positive");
  }
  if (!(in.fetch_overhead_s >= 0 && std::isfinite(in.fetch_overhead_s))) {
    return absl::InvalidArgumentError("--fetch-overhead-ms must be >= 0");
  }
  if (!std::isfinite(in.knee_tokens)) {
    return absl::InvalidArgumentError("--knee-tokens must be finite");
  }
  if (ResolvedKnee(in) == 0) {
    return absl::InvalidArgumentError(
        "the attention knee of a custom model is unknown: give --knee-tokens N "
        "(or --knee-tokens -1 to ignore the quadratic term)");
  }
  // 2 * layers * kv_heads * head_dim * dtype_bytes * context must fit in 64 bits.
  uint64_t per_token = 2;
  for (uint64_t f : {m.layers, m.kv_heads, m.head_dim, m.dtype_bytes}) {
    if (__builtin_mul_overflow(per_token, f, &per_token)) {
      return absl::InvalidArgumentError("KV bytes per token overflow 64 bits");
    }
  }
  uint64_t per_context = 0;
  if (__builtin_mul_overflow(per_token, in.context_tokens, &per_context)) {
    return absl::InvalidArgumentError("KV bytes per context overflow 64 bits");
  }
  uint64_t window = in.window != 0 ? in.window : in.concurrent * 10;
  double biggest = static_cast<double>(per_context) * static_cast<double>(in.replicas) *
                   static_cast<double>(std::max(in.concurrent, window)) / in.evict_high;
  if (!(biggest < kBytesMax)) {
    return absl::InvalidArgumentError("capacity overflows 64 bits; check the inputs");
  }
  return absl::OkStatus();
}

double RecomputeSeconds(const PlanInputs& in, double tokens) {
  double knee = ResolvedKnee(in);
  double quadratic = knee > 0 ? tokens / knee : 0;
  return tokens / in.prefill_tps * (1 + quadratic);
}

double FetchSeconds(const PlanInputs& in, uint64_t kv_bytes_per_token, double tokens) {
  return in.fetch_overhead_s +
         tokens * static_cast<double>(kv_bytes_per_token) / (in.link_gbps * kGB);
}

Plan ComputePlan(const PlanInputs& input) {
  Plan p;
  p.in = input;
  PlanInputs& in = p.in;
  if (in.window == 0) in.window = in.concurrent * 10;
  in.knee_tokens = ResolvedKnee(in);
  const ModelShape& m = in.model;

  p.kv_bytes_per_token = 2 * m.layers * m.kv_heads * m.head_dim * m.dtype_bytes;
  p.kv_bytes_per_context = p.kv_bytes_per_token * in.context_tokens;

  const double context = static_cast<double>(p.kv_bytes_per_context);
  const double replicas = static_cast<double>(in.replicas);
  p.dram_bytes = CeilBytes(static_cast<double>(in.concurrent) * context * replicas / in.evict_high);
  p.ssd_bytes = CeilBytes(static_cast<double>(in.window) * (1 - in.reuse) * context * replicas /
                          in.evict_high);
  p.dram_bytes_per_node = (p.dram_bytes + in.nodes - 1) / in.nodes;
  p.ssd_bytes_per_node = (p.ssd_bytes + in.nodes - 1) / in.nodes;

  const double s = static_cast<double>(in.context_tokens);
  p.t_recompute_s = RecomputeSeconds(in, s);
  p.t_fetch_s = FetchSeconds(in, p.kv_bytes_per_token, s);

  // Fetching s tokens wins when t_recompute(s) > t_fetch(s), that is when
  //   a*s^2 + b*s - o > 0,  a = 1/(knee*P), b = 1/P - kv/B, o = overhead.
  // Each root below is the form of the quadratic formula that does not
  // subtract nearly equal numbers.
  const double a = in.knee_tokens > 0 ? 1 / (in.knee_tokens * in.prefill_tps) : 0;
  const double b =
      1 / in.prefill_tps - static_cast<double>(p.kv_bytes_per_token) / (in.link_gbps * kGB);
  const double o = in.fetch_overhead_s;
  if (a > 0) {
    double root = std::sqrt(b * b + 4 * a * o);
    if (o == 0) {
      p.break_even_tokens = b >= 0 ? 0 : -b / a;
    } else if (b >= 0) {
      p.break_even_tokens = 2 * o / (b + root);
    } else {
      p.break_even_tokens = (-b + root) / (2 * a);
    }
  } else if (b > 0) {
    p.break_even_tokens = o / b;
  } else {
    p.fetch_never_wins = true;
  }

  p.reused_tokens = static_cast<uint64_t>(std::floor(in.reuse * s));
  if (p.reused_tokens > 0) {
    double reused = static_cast<double>(p.reused_tokens);
    p.saved_s = RecomputeSeconds(in, reused) - FetchSeconds(in, p.kv_bytes_per_token, reused);
  }
  return p;
}

std::string FormatReport(const Plan& p) {
  const PlanInputs& in = p.in;
  const ModelShape& m = in.model;
  std::string out;
  absl::StrAppendFormat(&out, "Shelf sizing plan: %s (%d layers, %d KV heads, head dim %d, %s)\n\n",
                        m.name, m.layers, m.kv_heads, m.head_dim, DtypeName(m.dtype_bytes));

  absl::StrAppend(&out, "KV cache\n");
  absl::StrAppendFormat(
      &out,
      "  bytes per token   = 2 (K and V) x %d layers x %d KV heads x %d head dim x %d bytes\n"
      "                    = %s\n",
      m.layers, m.kv_heads, m.head_dim, m.dtype_bytes, Bytes(p.kv_bytes_per_token));
  absl::StrAppendFormat(&out,
                        "  bytes per context = %s B/token x %s tokens\n"
                        "                    = %s\n\n",
                        Commas(p.kv_bytes_per_token), Commas(in.context_tokens),
                        Bytes(p.kv_bytes_per_context));

  absl::StrAppendFormat(&out, "Capacity (cluster-wide, %d replica%s, tiers filled to %.2f)\n",
                        in.replicas, in.replicas == 1 ? "" : "s", in.evict_high);
  absl::StrAppendFormat(&out,
                        "  DRAM (hot set)    = %d concurrent contexts x %s B x %d / %.2f\n"
                        "                    = %s\n",
                        in.concurrent, Commas(p.kv_bytes_per_context), in.replicas, in.evict_high,
                        Bytes(p.dram_bytes));
  absl::StrAppendFormat(&out,
                        "  SSD (reuse window)= %d contexts x (1 - %.2f reused) x %s B x %d / %.2f\n"
                        "                    = %s\n",
                        in.window, in.reuse, Commas(p.kv_bytes_per_context), in.replicas,
                        in.evict_high, Bytes(p.ssd_bytes));
  absl::StrAppendFormat(&out,
                        "  per store (%d node%s):\n"
                        "    --dram-size >= %s\n"
                        "    --ssd-size  >= %s\n\n",
                        in.nodes, in.nodes == 1 ? "" : "s", Bytes(p.dram_bytes_per_node),
                        Bytes(p.ssd_bytes_per_node));

  absl::StrAppend(&out, "Fetch or recompute\n");
  if (in.knee_tokens > 0) {
    absl::StrAppendFormat(&out,
                          "  t_recompute(s) = s / %.6g tokens/s x (1 + s / %.0f knee tokens)\n",
                          in.prefill_tps, in.knee_tokens);
  } else {
    absl::StrAppendFormat(&out, "  t_recompute(s) = s / %.6g tokens/s (no attention term)\n",
                          in.prefill_tps);
  }
  absl::StrAppendFormat(&out, "  t_fetch(s)     = %s + s x %s B / %.6g GB/s\n",
                        Seconds(in.fetch_overhead_s), Commas(p.kv_bytes_per_token), in.link_gbps);
  absl::StrAppendFormat(&out, "  at s = %s: t_recompute = %s, t_fetch = %s",
                        Commas(in.context_tokens), Seconds(p.t_recompute_s), Seconds(p.t_fetch_s));
  if (p.t_fetch_s < p.t_recompute_s) {
    absl::StrAppendFormat(&out, " -> fetching is %.1fx faster\n", p.t_recompute_s / p.t_fetch_s);
  } else {
    absl::StrAppendFormat(&out, " -> recomputing is %.1fx faster\n", p.t_fetch_s / p.t_recompute_s);
  }
  if (p.fetch_never_wins) {
    absl::StrAppend(&out,
                    "  break-even: none; the link moves KV slower than prefill makes it at any "
                    "length\n");
  } else {
    absl::StrAppendFormat(&out, "  break-even: fetching wins for prefixes longer than %s tokens\n",
                          Commas(CeilBytes(p.break_even_tokens)));
  }
  if (p.reused_tokens > 0) {
    absl::StrAppendFormat(
        &out,
        "  reuse %.2f: p = %s cached tokens per context; t_recompute(p) - t_fetch(p) = %s %s\n",
        in.reuse, Commas(p.reused_tokens), Seconds(std::fabs(p.saved_s)),
        p.saved_s >= 0 ? "saved" : "LOST (fetching this prefix is slower)");
  }
  return out;
}

std::string FormatJson(const Plan& p) {
  const PlanInputs& in = p.in;
  const ModelShape& m = in.model;
  Json model = Json::object();
  model["name"] = m.name;
  model["layers"] = m.layers;
  model["kv_heads"] = m.kv_heads;
  model["head_dim"] = m.head_dim;
  model["dtype_bytes"] = m.dtype_bytes;
  model["hidden"] = m.hidden;
  model["active_params"] = m.active_params;
  Json inputs = Json::object();
  inputs["context_tokens"] = in.context_tokens;
  inputs["concurrent"] = in.concurrent;
  inputs["reuse"] = in.reuse;
  inputs["window"] = in.window;
  inputs["replicas"] = in.replicas;
  inputs["nodes"] = in.nodes;
  inputs["evict_high"] = in.evict_high;
  inputs["link_gbps"] = in.link_gbps;
  inputs["prefill_tps"] = in.prefill_tps;
  inputs["knee_tokens"] = in.knee_tokens;
  inputs["fetch_overhead_s"] = in.fetch_overhead_s;
  Json o = Json::object();
  o["model"] = std::move(model);
  o["inputs"] = std::move(inputs);
  o["kv_bytes_per_token"] = p.kv_bytes_per_token;
  o["kv_bytes_per_context"] = p.kv_bytes_per_context;
  o["dram_bytes"] = p.dram_bytes;
  o["ssd_bytes"] = p.ssd_bytes;
  o["dram_bytes_per_node"] = p.dram_bytes_per_node;
  o["ssd_bytes_per_node"] = p.ssd_bytes_per_node;
  o["t_recompute_s"] = p.t_recompute_s;
  o["t_fetch_s"] = p.t_fetch_s;
  o["break_even_tokens"] = p.fetch_never_wins ? Json(nullptr) : Json(p.break_even_tokens);
  o["reused_tokens"] = p.reused_tokens;
  o["saved_s"] = p.saved_s;
  return JsonDump(o);
}

namespace {

// The flags of `shelfctl plan`, bound to a PlanInputs and a few extras.
struct PlanFlags {
  Flags flags{"shelfctl plan", "sizes a Shelf cluster for a model and workload"};
  PlanInputs in;
  std::string model, dtype;
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  int64_t context, concurrent, window, replicas, nodes;
  double overhead_ms;
  bool list_models = false;
  bool json = false;

  PlanFlags() {
    context = static_cast<int64_t>(in.context_tokens);
    concurrent = static_cast<int64_t>(in.concurrent);
    window = static_cast<int64_t>(in.window);
    replicas = static_cast<int64_t>(in.replicas);
    nodes = static_cast<int64_t>(in.nodes);
    overhead_ms = in.fetch_overhead_s * 1000;
    flags.AddString("model", &model, "a preset (see --list-models); also the first argument");
    flags.AddInt("layers", &layers, "transformer layers (overrides the preset)");
    flags.AddInt("kv-heads", &kv_heads, "KV heads per layer (overrides the preset)");
    flags.AddInt("head-dim", &head_dim, "elements per head (overrides the preset)");
    flags.AddString("dtype", &dtype, "KV element type: fp16, bf16, fp8, int8, fp32 (default fp16)");
    flags.AddInt("context", &context, "tokens per context");
    flags.AddInt("concurrent", &concurrent, "contexts in flight at once, cluster-wide");
    flags.AddDouble("reuse", &in.reuse, "fraction of a context's tokens already cached (0..1)");
    flags.AddInt("window", &window, "contexts kept for reuse on SSD (0: 10 x --concurrent)");
    flags.AddInt("replicas", &replicas, "copies of each block");
    flags.AddInt("nodes", &nodes, "stores the capacity is spread over");
    flags.AddDouble("evict-high", &in.evict_high, "the master's --evict-high");
    flags.AddDouble("link-gbps", &in.link_gbps, "client-to-store bandwidth in GB/s (1e9 B/s)");
    flags.AddDouble("prefill-tps", &in.prefill_tps,
                    "prefill throughput of one engine at short contexts, tokens/s");
    flags.AddDouble("knee-tokens", &in.knee_tokens,
                    "length where attention costs as much as the weights (0: from the preset; "
                    "-1: ignore attention)");
    flags.AddDouble("fetch-overhead-ms", &overhead_ms, "fixed cost of one fetch in ms");
    flags.AddBool("list-models", &list_models, "print the presets and exit");
    flags.AddBool("json", &json, "print the plan as one JSON object");
    flags.set_epilog(
        "Example: shelfctl plan llama-3-70b --context 300000 --concurrent 8 --link-gbps 25\n");
  }
};

absl::Status NonNegative(const char* name, int64_t v) {
  if (v < 0) return absl::InvalidArgumentError(absl::StrCat("--", name, " must be >= 0"));
  return absl::OkStatus();
}

// Parses into `pf`; sets *help when --help was given (nothing else is checked then).
absl::Status ParseInto(const std::vector<std::string>& args, PlanFlags* pf, bool* help) {
  std::vector<const char*> argv = {"shelfctl plan"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  absl::StatusOr<std::vector<std::string>> positional =
      pf->flags.Parse(static_cast<int>(argv.size()), argv.data());
  if (!positional.ok()) return positional.status();
  *help = pf->flags.help_requested();
  if (*help || pf->list_models) return absl::OkStatus();
  if (positional->size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", (*positional)[1], "'; one model at most"));
  }
  if (!positional->empty()) {
    if (!pf->model.empty()) {
      return absl::InvalidArgumentError("give the model either as an argument or as --model");
    }
    pf->model = (*positional)[0];
  }
  PlanInputs& in = pf->in;
  if (!pf->model.empty()) {
    absl::StatusOr<ModelShape> preset = FindPreset(pf->model);
    if (!preset.ok()) return preset.status();
    in.model = *preset;
  } else {
    in.model.name = "custom";
  }
  for (auto [name, v] : {std::pair<const char*, int64_t>{"layers", pf->layers},
                         {"kv-heads", pf->kv_heads},
                         {"head-dim", pf->head_dim},
                         {"context", pf->context},
                         {"concurrent", pf->concurrent},
                         {"window", pf->window},
                         {"replicas", pf->replicas},
                         {"nodes", pf->nodes}}) {
    if (absl::Status s = NonNegative(name, v); !s.ok()) return s;
  }
  bool shape_changed = false;
  if (pf->layers > 0) {
    in.model.layers = static_cast<uint64_t>(pf->layers);
    shape_changed = true;
  }
  if (pf->kv_heads > 0) {
    in.model.kv_heads = static_cast<uint64_t>(pf->kv_heads);
    shape_changed = true;
  }
  if (pf->head_dim > 0) {
    in.model.head_dim = static_cast<uint64_t>(pf->head_dim);
    shape_changed = true;
  }
  if (shape_changed && !pf->model.empty()) in.model.name += " (modified)";
  if (!pf->dtype.empty()) {
    absl::StatusOr<uint64_t> bytes = DtypeBytes(pf->dtype);
    if (!bytes.ok()) return bytes.status();
    in.model.dtype_bytes = *bytes;
  }
  in.context_tokens = static_cast<uint64_t>(pf->context);
  in.concurrent = static_cast<uint64_t>(pf->concurrent);
  in.window = static_cast<uint64_t>(pf->window);
  in.replicas = static_cast<uint64_t>(pf->replicas);
  in.nodes = static_cast<uint64_t>(pf->nodes);
  in.fetch_overhead_s = pf->overhead_ms / 1000;
  return Validate(in);
}

std::string PresetTable() {
  std::string out = absl::StrFormat("%-14s %7s %9s %9s %7s %14s %11s\n", "model", "layers",
                                    "kv_heads", "head_dim", "hidden", "active_params", "B/token");
  for (const ModelShape& m : ModelPresets()) {
    absl::StrAppendFormat(&out, "%-14s %7d %9d %9d %7d %13.2fB %11s\n", m.name, m.layers,
                          m.kv_heads, m.head_dim, m.hidden, m.active_params / 1e9,
                          Commas(2 * m.layers * m.kv_heads * m.head_dim * m.dtype_bytes));
  }
  return out;
}

}  // namespace

absl::StatusOr<PlanInputs> ParsePlanArgs(const std::vector<std::string>& args) {
  PlanFlags pf;
  bool help = false;
  if (absl::Status s = ParseInto(args, &pf, &help); !s.ok()) return s;
  if (help || pf.list_models) {
    return absl::InvalidArgumentError("--help and --list-models produce no inputs");
  }
  return pf.in;
}

std::string PlanHelp() {
  PlanFlags pf;
  return absl::StrCat(pf.flags.Help(), "\nPresets (fp16 KV):\n", PresetTable());
}

absl::StatusOr<std::string> RunPlanCommand(const std::vector<std::string>& args, bool json) {
  PlanFlags pf;
  bool help = false;
  if (absl::Status s = ParseInto(args, &pf, &help); !s.ok()) return s;
  if (help) return PlanHelp();
  if (pf.list_models) return PresetTable();
  Plan p = ComputePlan(pf.in);
  return json || pf.json ? FormatJson(p) + "\n" : FormatReport(p);
}

}  // namespace shelf::plan
