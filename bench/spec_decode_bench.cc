// Speculative decoding, measured side by side in one run (ranks as threads, the engine as
// `tpserve generate` starts it). Not a test: numbers go to docs/speculative_decoding.md.
//
// --mode ngram (a real model with a tokenizer): per-user decode speed at batch 1 with and
//   without n-gram drafting on input-grounded prompts (rewrite or correct a given passage),
//   runs alternated, --rounds rounds; decode tok/s counts every output token after the
//   first over the decode steps' wall time (forward and the coordinator's work, drafting
//   included), and the mean acceptance length; per prompt (the median speed-up and its range
//   over the rounds) and over all runs.
// --mode cost (any model, dummy weights for a preset): the time of a decode step that
//   verifies K drafts (K + 1 tokens of one sequence) over a 1-token step, at each --k, and
//   the per-user speedup that ratio allows at acceptance lengths 2..4 (a projection: it
//   assumes drafts cost nothing, true of n-gram lookup and not of a drafter model).
// --mode mtp-cost (a built-in model and assistant with dummy weights, or checkpoints): per
//   K, alternated runs without and with the MTP drafter's (--drafter) drafts: (a) the
//   1-token decode step, (b) the (K + 1)-token verification step and (c) one drafter step
//   (a draft pass of K steps at batch 1, its planning and broadcast included, over K), and
//   the projected per-user speedup at mean acceptance lengths 2..4 with the drafter's cost
//   included: a x (a) / ((b) + K x (c)); wall time and process CPU time
//   (bench/spec_decode_mtp_cost.h).
//
// --layers N keeps the target's first N layers (a shape that does not fit, e.g. the 31B's
// 62 GB): per-layer costs shrink, the embedding, the LM head and the drafter stay whole, so
// the ratios are not the full model's (docs/speculative_decoding.md says how they carry).
//
//   build/bench/spec_decode_bench --mode ngram --model ~/.cache/tpserve/models/gemma-3-270m --rounds 10
//   build/bench/spec_decode_bench --mode cost --model gemma-4-1b --k 2,4,8
//   build/bench/spec_decode_bench --mode mtp-cost --model gemma-4-1b --k 2,4,8 --rounds 2
//   build/bench/spec_decode_bench --mode mtp-cost --model gemma-4-31b --layers 6 --k 2,4,8 --rounds 2
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/median.h"
#include "bench/spec_decode_mtp_cost.h"
#include "coordinator/engine/offline.h"
#include "coordinator/engine/speculative.h"
#include "coordinator/text/tokenizer.h"
#include "launch/engine_setup.h"
#include "launch/model_text.h"
#include "launch/ranks.h"
#include "worker/step_executor.h"
#include "worker/worker_loop.h"

ABSL_FLAG(std::string, mode, "ngram", "ngram | cost | mtp-cost (see the file's comment)");
ABSL_FLAG(std::string, model, "gemma-4-1b", "Checkpoint directory, GGUF file or built-in preset (dummy weights)");
ABSL_FLAG(int, tp, 1, "Tensor-parallel size (ranks as threads)");
ABSL_FLAG(int, threads, 0, "CPU threads per rank (0: cores / ranks)");
ABSL_FLAG(int, rounds, 10, "ngram: rounds, each running every prompt without and with drafts (order alternates); "
          "cost: runs per K with and without drafts, alternated");
ABSL_FLAG(bool, adaptive_too, false,
          "ngram: also run the same drafts with \"adaptive\": true, as a third run of each round");
ABSL_FLAG(int, max_tokens, 96, "ngram: tokens generated per prompt");
ABSL_FLAG(std::string, speculative_config, R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4})",
          "ngram: the --speculative-config measured");
ABSL_FLAG(std::string, k, "2,4,8", "cost, mtp-cost: draft lengths K, comma-separated");
ABSL_FLAG(int, context, 256, "cost, mtp-cost: prompt tokens before decoding");
ABSL_FLAG(int, decode_steps, 24, "cost, mtp-cost: decode steps measured per K and run");
ABSL_FLAG(std::string, drafter, "",
          "mtp-cost: the MTP drafter, a built-in assistant shape (dummy weights) or an assistant directory; "
          "empty: --model's built-in assistant (MODEL-assistant)");
ABSL_FLAG(int, layers, 0, "Built-in models: keep the target's first N layers (0: all); see the file's comment");

namespace tpserve {
namespace {

using bench::Median;

// Input-grounded prompts: the answer repeats much of the prompt, as in the rewriting and
// editing work n-gram drafting is for.
const char* const kPassages[] = {
    "The old lighthouse stood at the edge of the cliff for more than two hundred years. Every night its keeper "
    "climbed the one hundred and twelve steps to light the lamp, and every morning he climbed them again to put "
    "it out. Ships passing the rocks below relied on its beam to find the safe channel into the harbour.",
    "To reset the router, unplug the power cable and wait thirty seconds. Plug the cable back in and wait until "
    "the status light turns solid green. Then open a browser, go to the address printed on the label, and sign "
    "in with the administrator password printed below it.",
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n\n"
    "def variance(values):\n    m = mean(values)\n    total = 0\n    for v in values:\n        total += (v - m) ** 2\n"
    "    return total / len(values)\n",
};
const char* const kTasks[] = {
    "Copy the passage above exactly, word for word:\n\n",
    "Rewrite the passage above, keeping every sentence:\n\n",
    "Repeat the code above with the same names:\n\n",
};
const char* const kTaskNames[] = {"copy", "rewrite", "code"};
static_assert(std::size(kTaskNames) == std::size(kTasks) && std::size(kTasks) == std::size(kPassages));

struct Decode {
  int64_t tokens = 0;  // output tokens after the first
  double ms = 0;       // decode steps' forward + coordinator time
  int64_t steps = 0;
  std::vector<double> step_ms;  // each decode step's
  SpecDecodeStats spec;
  std::vector<int32_t> output_ids;
};

absl::StatusOr<Decode> RunOnce(StepExecutor& exec, const Model& model, const std::vector<int32_t>& prompt,
                               const SamplingParams& params, const SpeculativeConfig& spec,
                               std::unique_ptr<DraftProposer> proposer = nullptr) {
  SchedulerConfig sc = SchedulerConfigFor(model, 1, 2048);
  sc.enable_prefix_caching = false;  // each run computes its prompt
  if (proposer == nullptr) proposer = MakeDraftProposer(spec, exec);
  EngineCore core(exec, WithSpeculation(sc, spec), std::nullopt, std::move(proposer));
  TP_ASSIGN_OR_RETURN(OfflineResult r, GenerateOffline(core, {prompt}, params));
  Decode d;
  d.tokens = std::max<int64_t>(0, static_cast<int64_t>(r.outputs[0].output_ids.size()) - 1);
  d.output_ids = r.outputs[0].output_ids;
  for (const StepSummary& s : r.steps) {
    if (s.num_prefill_tokens > 0) continue;
    d.ms += s.forward_ms + s.coordinator_ms + s.draft_ms;
    d.step_ms.push_back(s.forward_ms + s.coordinator_ms + s.draft_ms);
    ++d.steps;
  }
  d.spec = r.spec;
  return d;
}

absl::Status RunNgram(StepExecutor& exec, const Model& model, const std::string& model_path) {
  TP_ASSIGN_OR_RETURN(ModelText text, LoadModelText(model_path, "", /*with_chat=*/false));
  TP_ASSIGN_OR_RETURN(SpeculativeConfig spec, ParseSpeculativeConfig(absl::GetFlag(FLAGS_speculative_config)));
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  p.ignore_eos = true;
  std::printf("model %s, tp %d, %s, batch 1, greedy, %d tokens per prompt\n", model_path.c_str(),
              absl::GetFlag(FLAGS_tp), spec.ToJson().c_str(), p.max_tokens);
  // --adaptive_too: the same drafts with "adaptive": true as a third run of each round.
  const bool both = absl::GetFlag(FLAGS_adaptive_too) && !spec.adaptive;
  SpeculativeConfig adaptive = spec;
  adaptive.adaptive = true;
  std::printf("%-8s %6s %10s %10s %8s %10s %8s", "prompt", "round", "plain t/s", "spec t/s", "ratio", "accept len",
              "same");
  if (both) std::printf(" %10s %8s %10s %8s", "adapt t/s", "ratio", "accept len", "same");
  std::printf("\n");
  // One speculative configuration's runs against plain decoding's, per prompt (the issue's
  // target is per workload); the overall line merges the prompts'.
  struct Series {
    std::vector<double> plain_tps, tps, ratios, accept;
    // Records the run and prints its part of the round's row.
    void Add(const Decode& d, const Decode& plain, double plain_run_tps) {
      const double t = d.tokens / (d.ms / 1e3);
      plain_tps.push_back(plain_run_tps);
      tps.push_back(t);
      ratios.push_back(t / plain_run_tps);
      accept.push_back(d.spec.mean_acceptance_length());
      std::printf(" %10.1f %8.2f %10.2f %8s", t, ratios.back(), accept.back(),
                  plain.output_ids == d.output_ids ? "yes" : "NO");
    }
    void Merge(const Series& o) {
      for (auto [into, from] : {std::pair{&plain_tps, &o.plain_tps}, {&tps, &o.tps}, {&ratios, &o.ratios},
                                {&accept, &o.accept}}) {
        into->insert(into->end(), from->begin(), from->end());
      }
    }
    // The speed-up's median and range, the acceptance length's median.
    std::string Summary() const {
      return absl::StrFormat("speculative %.1f tok/s, ratio %.2f (%.2f-%.2f), mean acceptance length %.2f",
                             Median(tps), Median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                             *std::max_element(ratios.begin(), ratios.end()), Median(accept));
    }
  };
  std::vector<Series> fixed(std::size(kPassages)), adaptive_series(std::size(kPassages));
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (size_t i = 0; i < std::size(kPassages); ++i) {
      const std::vector<int32_t> prompt =
          text.tokenizer->Encode(absl::StrCat(kPassages[i], "\n\n", kTasks[i]), /*add_special_tokens=*/true);
      // 0: plain, 1: speculative, 2: adaptive (with --adaptive_too). The order rotates by
      // round so that a drifting machine favours none.
      const int runs = both ? 3 : 2;
      Decode d[3];
      for (int pass = 0; pass < runs; ++pass) {
        const int which = (pass + round) % runs;
        const SpeculativeConfig& c = which == 0 ? SpeculativeConfig{} : which == 1 ? spec : adaptive;
        TP_ASSIGN_OR_RETURN(d[which], RunOnce(exec, model, prompt, p, c));
      }
      const double plain_tps = d[0].tokens / (d[0].ms / 1e3);
      std::printf("%-8zu %6d %10.1f", i, round, plain_tps);
      fixed[i].Add(d[1], d[0], plain_tps);
      if (both) adaptive_series[i].Add(d[2], d[0], plain_tps);
      std::printf("\n");
    }
  }
  Series fixed_all, adaptive_all;
  for (size_t i = 0; i < std::size(kPassages); ++i) {
    std::printf("prompt %zu (%s): plain %.1f tok/s, %s\n", i, kTaskNames[i], Median(fixed[i].plain_tps),
                fixed[i].Summary().c_str());
    if (both) std::printf("prompt %zu adaptive: %s\n", i, adaptive_series[i].Summary().c_str());
    fixed_all.Merge(fixed[i]);
    adaptive_all.Merge(adaptive_series[i]);
  }
  std::printf("median over %zu runs: plain %.1f tok/s, %s\n", fixed_all.plain_tps.size(),
              Median(fixed_all.plain_tps), fixed_all.Summary().c_str());
  if (both) std::printf("adaptive: %s\n", adaptive_all.Summary().c_str());
  return absl::OkStatus();
}

// Proposes K copies of one token: every decode step verifies exactly K drafts.
class FixedProposer : public SequenceProposer {
 public:
  std::vector<int32_t> Propose(absl::Span<const int32_t>, int32_t max_tokens) override {
    return std::vector<int32_t>(max_tokens, 7);
  }
};

absl::StatusOr<std::vector<int>> ParseKs() {
  std::vector<int> ks;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_k), ',', absl::SkipWhitespace())) {
    int k = 0;
    if (!absl::SimpleAtoi(part, &k) || k < 1 || k > 64) {
      return absl::InvalidArgumentError(absl::StrCat("--k: bad value \"", part, "\" (draft lengths 1..64)"));
    }
    ks.push_back(k);
  }
  if (ks.empty()) return absl::InvalidArgumentError("--k: no draft length given");
  return ks;
}

std::vector<int32_t> CostPrompt(const Model& model) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < absl::GetFlag(FLAGS_context); ++i) {
    prompt.push_back(static_cast<int32_t>((1000 + 7919 * i) % model.config().vocab_size));
  }
  return prompt;
}

absl::Status RunCost(StepExecutor& exec, const Model& model) {
  const int context = absl::GetFlag(FLAGS_context);
  const std::vector<int32_t> prompt = CostPrompt(model);
  TP_ASSIGN_OR_RETURN(const std::vector<int> ks, ParseKs());
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = absl::GetFlag(FLAGS_decode_steps) + 1;
  p.ignore_eos = true;
  std::printf("model %s, tp %d, batch 1, context %d: decode step time verifying K drafts over a 1-token step\n",
              absl::GetFlag(FLAGS_model).c_str(), absl::GetFlag(FLAGS_tp), context);
  std::printf("%4s %12s %14s %8s   %s\n", "K", "1-token ms", "K+1-token ms", "ratio",
              "projected speedup at acceptance length 2 / 3 / 4 (free drafts)");
  for (const int k : ks) {
    SpeculativeConfig spec;
    spec.method = SpeculativeConfig::Method::kNgram;
    spec.num_speculative_tokens = k;
    // Alternated runs; the median over all their decode steps.
    std::vector<double> one, many;
    for (int pass = 0; pass < 2 * absl::GetFlag(FLAGS_rounds); ++pass) {
      const bool speculative = pass % 2 == 1;
      TP_ASSIGN_OR_RETURN(Decode d, RunOnce(exec, model, prompt, p, speculative ? spec : SpeculativeConfig{},
                                            speculative ? std::make_unique<FixedProposer>() : nullptr));
      std::vector<double>& into = speculative ? many : one;
      into.insert(into.end(), d.step_ms.begin(), d.step_ms.end());
    }
    const double t1 = Median(one), tk = Median(many), ratio = tk / t1;
    std::printf("%4d %12.2f %14.2f %8.2f   %.2f / %.2f / %.2f\n", k, t1, tk, ratio, std::min(2, k + 1) / ratio,
                std::min(3, k + 1) / ratio, std::min(4, k + 1) / ratio);
  }
  return absl::OkStatus();
}

int Main() {
  EngineOptions eo;
  eo.model = absl::GetFlag(FLAGS_model);
  eo.threads = absl::GetFlag(FLAGS_threads);
  eo.device = "cpu";
  eo.max_num_seqs = 1;
  eo.kv_cache_bytes = int64_t{256} << 20;
  const bool preset = PresetModelConfig(eo.model).ok();
  if (preset) eo.load_format = "dummy";  // a built-in shape
  const std::string mode = absl::GetFlag(FLAGS_mode);
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(st.message()).c_str());
    return 2;
  };
  if (mode != "ngram" && mode != "cost" && mode != "mtp-cost") {
    return fail(absl::InvalidArgumentError("--mode must be ngram, cost or mtp-cost"));
  }
  absl::StatusOr<ModelConfig> config = ResolveModelConfig(eo);
  if (!config.ok()) return fail(config.status());
  const int full_layers = config->num_layers;
  if (absl::GetFlag(FLAGS_layers) > 0) {
    if (!preset) return fail(absl::InvalidArgumentError("--layers needs a built-in model (dummy weights)"));
    if (absl::Status st = KeepFirstLayers(*config, absl::GetFlag(FLAGS_layers)); !st.ok()) {
      return fail(absl::InvalidArgumentError(absl::StrCat("--layers: ", st.message())));
    }
  }
  if (mode != "ngram") {
    // The KV split sizes groups for max-length sequences: one request of a few hundred
    // tokens needs far fewer positions than the 31B's 262144, and a truncated 31B's
    // fp32 sliding group (a window of 1024) more than 256 MiB at 12 layers.
    eo.max_model_len = std::min<int64_t>(config->max_position_embeddings, 4096);
    eo.kv_cache_bytes = int64_t{1} << 30;
  }
  std::string drafter = absl::GetFlag(FLAGS_drafter);
  if (mode == "mtp-cost") {
    absl::StatusOr<std::vector<int>> ks = ParseKs();
    if (!ks.ok()) return fail(ks.status());
    if (drafter.empty()) drafter = eo.model + "-assistant";
    eo.speculative.method = SpeculativeConfig::Method::kMtp;
    eo.speculative.model = drafter;
    eo.speculative.num_speculative_tokens = *std::max_element(ks->begin(), ks->end());
  }
  return RunOnRanks(WorldConfig{}, ParallelSizes{absl::GetFlag(FLAGS_tp), 1}, [&](const WorldConfig& world, Communicator& comm) {
    auto engine = StartEngine(*config, eo, world, comm);
    if (!engine.ok()) {
      if (comm.rank() == 0) std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(engine.status().message()).c_str());
      return 1;
    }
    if (comm.rank() != 0) return RunWorkerLoop(*engine->model, comm, engine->drafter.get()).ok() ? 0 : 1;
    StepExecutor exec(*engine->model, comm, engine->drafter.get());
    absl::Status st;
    if (mode == "ngram") {
      st = RunNgram(exec, *engine->model, eo.model);
    } else if (mode == "cost") {
      st = RunCost(exec, *engine->model);
    } else {
      MtpCostOptions mo;
      mo.ks = *ParseKs();  // checked above
      mo.rounds = absl::GetFlag(FLAGS_rounds);
      mo.decode_steps = absl::GetFlag(FLAGS_decode_steps);
      mo.prompt = CostPrompt(*engine->model);
      mo.model_name = eo.model;
      mo.drafter_name = drafter;
      mo.full_layers = full_layers;
      mo.tp = absl::GetFlag(FLAGS_tp);
      st = RunMtpCost(exec, *engine, mo);
    }
    exec.Shutdown();
    if (!st.ok()) std::fprintf(stderr, "spec_decode_bench: %s\n", std::string(st.message()).c_str());
    return st.ok() ? 0 : 1;
  });
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tpserve::Main();
}
