// spec_decode_bench --mode mtp-cost (see the header). Two clocks per step: wall time, and
// the process's CPU time (every thread, the forward's OpenMP workers included), which the
// shared machine's other load barely moves: a preempted thread neither runs nor counts,
// and OpenMP's waits beyond a short spin sleep.
#include "bench/spec_decode_mtp_cost.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/cpu_time.h"
#include "bench/median.h"
#include "coordinator/engine/engine_core.h"
#include "coordinator/engine/speculative.h"

namespace tpserve {
namespace {

// The inner proposer's ProposeAll, its process CPU time added to *cpu_s.
class CpuTimedProposer : public DraftProposer {
 public:
  CpuTimedProposer(std::unique_ptr<DraftProposer> inner, double* cpu_s) : inner_(std::move(inner)), cpu_s_(cpu_s) {}
  absl::Status ProposeAll(absl::Span<const DraftRequest> requests, Scheduler& scheduler) override {
    const double c0 = bench::ProcessCpuSeconds();
    absl::Status st = inner_->ProposeAll(requests, scheduler);
    *cpu_s_ += bench::ProcessCpuSeconds() - c0;
    return st;
  }

 private:
  std::unique_ptr<DraftProposer> inner_;
  double* cpu_s_;
};

// One engine step of a run, on both clocks.
struct TimedStep {
  StepSummary summary;
  double cpu_ms = 0;        // the whole Step, its draft pass included
  double draft_cpu_ms = 0;  // the draft pass at its end
};

struct Run {
  std::vector<TimedStep> steps;  // every step that ran a forward, prefill included
  int64_t drafts = 0, accepted = 0;
};

// One request of `prompt` through a fresh engine core, greedy, EOS ignored.
absl::StatusOr<Run> RunOne(StepExecutor& exec, const Model& model, const std::vector<int32_t>& prompt,
                           int32_t max_tokens, const SpeculativeConfig& spec) {
  SchedulerConfig sc = SchedulerConfigFor(model, 1, 2048);
  sc.enable_prefix_caching = false;  // each run computes its prompt
  double draft_cpu_s = 0;
  std::unique_ptr<DraftProposer> proposer = MakeDraftProposer(spec, exec);
  if (proposer != nullptr) proposer = std::make_unique<CpuTimedProposer>(std::move(proposer), &draft_cpu_s);
  EngineCore core(exec, WithSpeculation(sc, spec), std::nullopt, std::move(proposer));
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  TP_RETURN_IF_ERROR(core.AddRequest("0", prompt, p, absl::Now()));
  Run run;
  while (core.HasUnfinished()) {
    draft_cpu_s = 0;
    const double c0 = bench::ProcessCpuSeconds();
    EngineStep step = core.Step();
    const double cpu_ms = (bench::ProcessCpuSeconds() - c0) * 1e3;
    if (!step.error.ok()) return step.error;
    for (const EngineOutput& o : step.outputs) {
      if (o.finish == FinishReason::kError) return absl::InternalError(o.error);
    }
    if (step.num_seqs == 0) continue;
    run.drafts += step.num_draft_tokens;
    run.accepted += step.num_accepted_tokens;
    run.steps.push_back(TimedStep{step, cpu_ms, draft_cpu_s * 1e3});
  }
  return run;
}

// (a), (b), (c) of one round on one clock: the fastest of the run's steps of each kind
// (they have the same shape; the fastest is the one the machine's other load disturbed least).
struct Costs {
  double one_ms = 0, verify_ms = 0, draft_ms = 0;
};

double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

using bench::Median;

// "1.62 (1.50-1.71)": the median over rounds and the range.
std::string MedianAndRange(const std::vector<double>& v, int digits) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return absl::StrFormat("%.*f (%.*f-%.*f)", digits, Median(v), digits, *lo, digits, *hi);
}

// Costs from a run without drafts (its decode steps) and one with: decode steps that
// verified K drafts, and the passes whose drafts the next step verified (K drafter steps).
absl::StatusOr<std::pair<Costs, Costs>> RoundCosts(const Run& plain, const Run& drafting, int k) {
  std::vector<double> one_wall, one_cpu, verify_wall, verify_cpu, draft_wall, draft_cpu;
  for (const TimedStep& s : plain.steps) {
    if (s.summary.num_prefill_tokens > 0) continue;
    one_wall.push_back(s.summary.forward_ms + s.summary.coordinator_ms);
    one_cpu.push_back(s.cpu_ms);
  }
  for (size_t i = 0; i < drafting.steps.size(); ++i) {
    const TimedStep& s = drafting.steps[i];
    if (s.summary.num_prefill_tokens > 0) continue;
    if (s.summary.num_draft_tokens == k) {
      verify_wall.push_back(s.summary.forward_ms + s.summary.coordinator_ms);
      verify_cpu.push_back(s.cpu_ms - s.draft_cpu_ms);
    }
    if (i + 1 < drafting.steps.size() && drafting.steps[i + 1].summary.num_draft_tokens == k) {
      draft_wall.push_back(s.summary.draft_ms / k);
      draft_cpu.push_back(s.draft_cpu_ms / k);
    }
  }
  if (one_wall.empty() || verify_wall.empty() || draft_wall.empty()) {
    return absl::InternalError(absl::StrCat("K ", k, ": nothing measured (", one_wall.size(), " 1-token steps, ",
                                            verify_wall.size(), " verifying K drafts, ", draft_wall.size(),
                                            " K-step draft passes); raise --decode_steps"));
  }
  return std::make_pair(Costs{Min(one_wall), Min(verify_wall), Min(draft_wall)},
                        Costs{Min(one_cpu), Min(verify_cpu), Min(draft_cpu)});
}

// Per-round values of one clock, reduced to the report's line.
struct Column {
  std::vector<double> one, verify, draft, verify_ratio, draft_ratio;
  std::vector<std::vector<double>> speedup = std::vector<std::vector<double>>(3);  // a = 2, 3, 4

  void Add(const Costs& c, int k) {
    one.push_back(c.one_ms);
    verify.push_back(c.verify_ms);
    draft.push_back(c.draft_ms);
    verify_ratio.push_back(c.verify_ms / c.one_ms);
    draft_ratio.push_back(c.draft_ms / c.one_ms);
    for (int a = 2; a <= 4; ++a) speedup[a - 2].push_back(a * c.one_ms / (c.verify_ms + k * c.draft_ms));
  }

  void Print(int k, const char* clock) const {
    std::string projected;
    for (int a = 2; a <= 4; ++a) {
      absl::StrAppend(&projected, a > 2 ? " / " : "",
                      a <= k + 1 ? MedianAndRange(speedup[a - 2], 2) : std::string("- (a > K + 1)"));
    }
    std::printf("%4d %-5s %8.1f %8.1f %8.2f  %-19s %-22s %s\n", k, clock, Median(one), Median(verify), Median(draft),
                MedianAndRange(verify_ratio, 2).c_str(), MedianAndRange(draft_ratio, 3).c_str(), projected.c_str());
  }
};

std::string DescribeTarget(const Engine& engine, int full_layers) {
  const ModelConfig& c = engine.model->config();
  const std::string params = absl::StrFormat("%.2fB params", c.ParameterCount() / 1e9);
  if (c.num_layers < full_layers) {
    return absl::StrCat("(", engine.weights_description, ", ", params, ", TRUNCATED to its first ", c.num_layers,
                        " of ", full_layers, " layers)");
  }
  return absl::StrCat("(", engine.weights_description, ", ", params, ", ", c.num_layers, " layers)");
}

}  // namespace

absl::Status RunMtpCost(StepExecutor& exec, const Engine& engine, const MtpCostOptions& o) {
  if (engine.drafter == nullptr) return absl::FailedPreconditionError("mtp-cost: the engine has no MTP drafter");
  if (o.ks.empty() || o.rounds < 1 || o.decode_steps < 2) {
    return absl::InvalidArgumentError("mtp-cost: needs a K, --rounds >= 1 and --decode_steps >= 2");
  }
  const Model& model = *engine.model;
  const MtpDrafterConfig& d = engine.drafter->config();
  std::printf("model %s %s, drafter %s (%.1fM params, hidden %lld, %d layers), tp %d, batch 1, context %zu, greedy; "
              "%d rounds per K, each a run without and one with drafts (order alternating), %d measured decode "
              "steps per run\n",
              o.model_name.c_str(), DescribeTarget(engine, o.full_layers).c_str(), o.drafter_name.c_str(),
              d.ParameterCount() / 1e6, static_cast<long long>(d.text.hidden_size), d.text.num_layers, o.tp,
              o.prompt.size(), o.rounds, o.decode_steps);
  std::printf("t1: the 1-token decode step, tv: the (K+1)-token verification step, td: one drafter step (a K-step "
              "draft pass / K), each the fastest of a run's steps of its kind; ratios and speedups are taken within a "
              "round, then the median over rounds (min-max). wall: wall time; cpu: the process's CPU time (all "
              "threads), which the machine's other load moves least\n");
  std::printf("%4s %-5s %8s %8s %8s  %-19s %-22s %s\n", "K", "clock", "t1 ms", "tv ms", "td ms", "tv/t1", "td/t1",
              "PROJECTED per-user speedup a*t1/(tv+K*td) at mean acceptance length a = 2 / 3 / 4");
  const int max_k = *std::max_element(o.ks.begin(), o.ks.end());
  auto mtp = [&](int k) {
    SpeculativeConfig spec;
    spec.method = SpeculativeConfig::Method::kMtp;
    spec.model = o.drafter_name;
    spec.num_speculative_tokens = k;
    return spec;
  };
  // Untimed: a short run each way at the largest K first (buffers allocated, pages touched).
  TP_RETURN_IF_ERROR(RunOne(exec, model, o.prompt, max_k + 3, SpeculativeConfig{}).status());
  TP_RETURN_IF_ERROR(RunOne(exec, model, o.prompt, max_k + 3, mtp(max_k)).status());
  int64_t drafts = 0, accepted = 0;
  for (const int k : o.ks) {
    Column wall, cpu;
    for (int r = 0; r < o.rounds; ++r) {
      Run plain, drafting;
      for (int pass = 0; pass < 2; ++pass) {
        if ((pass == 0) == (r % 2 == 1)) {
          // Room for K drafts in each of the first decode_steps steps (max_tokens bounds them).
          TP_ASSIGN_OR_RETURN(drafting, RunOne(exec, model, o.prompt, o.decode_steps + k + 1, mtp(k)));
        } else {
          TP_ASSIGN_OR_RETURN(plain, RunOne(exec, model, o.prompt, o.decode_steps + 1, SpeculativeConfig{}));
        }
      }
      TP_ASSIGN_OR_RETURN(const auto costs, RoundCosts(plain, drafting, k));
      wall.Add(costs.first, k);
      cpu.Add(costs.second, k);
      drafts += drafting.drafts;
      accepted += drafting.accepted;
    }
    wall.Print(k, "wall");
    cpu.Print(k, "cpu");
  }
  std::printf("A PROJECTION, not a measurement of speculative decoding: %lld of %lld dummy-weight drafts were "
              "accepted; a real drafter's acceptance length decides which column applies.\n",
              static_cast<long long>(accepted), static_cast<long long>(drafts));
  if (model.config().num_layers < o.full_layers) {
    std::printf("TRUNCATED target: its per-layer costs are %d/%d of the full model's while the embedding, the LM "
                "head and the drafter are whole, so td/t1 is larger and the speedups are smaller here than at full "
                "depth (docs/speculative_decoding.md says how the ratios carry).\n",
                model.config().num_layers, o.full_layers);
  }
  return absl::OkStatus();
}

}  // namespace tpserve
