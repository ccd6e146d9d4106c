// Step message size and the coordinator's planning time at scale, no model needed: the
// scheduler plans steps for B sequences of C-token prompts (Gemma 4 31B's KV layout: a
// full-attention group and a 1024-token sliding group, blocks of 16), and each decode
// step is measured both ways in the same run: the StepDelta that rank 0 now broadcasts
// (only what changed) against the whole StepPlan it broadcast before (every block table,
// slot mapping and position), with the time to build, serialize and expand each.
//   build/bench/step_message_bench --seqs 256 --context 8192
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/median.h"
#include "coordinator/engine/scheduler.h"
#include "worker/persistent_batch.h"

ABSL_FLAG(int, seqs, 256, "Sequences decoding together");
ABSL_FLAG(int, context, 8192, "Prompt tokens per sequence");
ABSL_FLAG(int, steps, 32, "Decode steps measured");
ABSL_FLAG(int, window, 1024, "The sliding group's window");

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;
double UsSince(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

using bench::Median;

int Run() {
  const int seqs = absl::GetFlag(FLAGS_seqs), context = absl::GetFlag(FLAGS_context);
  const int steps = absl::GetFlag(FLAGS_steps);
  SchedulerConfig c;
  c.max_num_seqs = seqs;
  c.max_num_batched_tokens = 1 << 16;
  // Sequences finish prefill over many steps; those done first decode meanwhile, so each
  // may generate this many tokens before the last one joins, then `steps` more together.
  const int32_t max_tokens = static_cast<int32_t>(int64_t{seqs} * context / c.max_num_batched_tokens) + steps + 8;
  c.max_model_len = context + max_tokens;
  c.block_size = 16;
  c.enable_prefix_caching = false;  // distinct prompts
  c.kv_watermark = 0;
  const int64_t blocks = static_cast<int64_t>(seqs) * ((c.max_model_len + 15) / 16 + 1);
  c.num_kv_blocks = {blocks, blocks};
  c.kv_group_windows = {absl::GetFlag(FLAGS_window), 0};
  c.vocab_size = 262144;
  if (absl::Status st = c.Validate(); !st.ok()) {
    std::fprintf(stderr, "step_message_bench: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  Scheduler s(c);
  for (int i = 0; i < seqs; ++i) {
    std::vector<int32_t> prompt(context);
    for (int k = 0; k < context; ++k) prompt[k] = 1 + (k * 7919 + i * 104729) % 262000;
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_p = 0.9f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    if (!s.AddRequest(SequenceRequest{"r" + std::to_string(i), std::move(prompt), p, static_cast<uint64_t>(i)}).ok()) {
      return 1;
    }
  }
  PersistentBatch batch(2, c.block_size);
  StepPlan expanded;  // as every rank keeps it: buffers reused step to step
  std::vector<double> delta_bytes, plan_bytes, schedule_us, delta_ser_us, expand_us, plan_ser_us, plan_de_us;
  int prefill_steps = 0;
  while (static_cast<int>(delta_bytes.size()) < steps) {
    const auto t0 = Clock::now();
    SchedulerOutput out = s.Schedule();  // includes building the delta
    const double sched = UsSince(t0);
    if (out.empty()) break;
    auto t1 = Clock::now();
    const std::vector<uint8_t> delta = out.plan.Serialize();
    const double dser = UsSince(t1);
    t1 = Clock::now();
    const absl::Status applied = batch.ApplyInto(out.plan, expanded);
    const double expand = UsSince(t1);
    if (!applied.ok()) {
      std::fprintf(stderr, "step_message_bench: %s\n", std::string(applied.message()).c_str());
      return 1;
    }
    const StepPlan* plan = &expanded;
    const bool decode = out.num_batched_tokens == seqs && static_cast<int>(out.scheduled.size()) == seqs;
    if (decode) {
      // The message of before: the whole plan, serialized on rank 0 and parsed on a worker.
      t1 = Clock::now();
      const std::vector<uint8_t> whole = plan->Serialize();
      plan_ser_us.push_back(UsSince(t1));
      t1 = Clock::now();
      absl::StatusOr<StepPlan> parsed = StepPlan::Deserialize(whole);
      plan_de_us.push_back(UsSince(t1));
      if (!parsed.ok()) return 1;
      delta_bytes.push_back(static_cast<double>(delta.size()));
      plan_bytes.push_back(static_cast<double>(whole.size()));
      schedule_us.push_back(sched);
      delta_ser_us.push_back(dser);
      expand_us.push_back(expand);
    } else {
      ++prefill_steps;
    }
    std::vector<int32_t> sampled(out.num_logit_rows(), 17);
    s.Update(out, sampled);
  }
  if (delta_bytes.empty()) {
    std::fprintf(stderr, "step_message_bench: no step had every sequence decoding\n");
    return 1;
  }
  std::printf("%d sequences x %d-token prompts, 2 KV groups (window %d, full), blocks of 16; %d prefill steps, "
              "%zu decode steps measured (medians)\n\n",
              seqs, context, absl::GetFlag(FLAGS_window), prefill_steps, delta_bytes.size());
  const double before = Median(plan_bytes), after = Median(delta_bytes);
  std::printf("%-44s %14s %14s\n", "", "before (plan)", "after (delta)");
  std::printf("%-44s %14.0f %14.0f   %.1fx smaller\n", "bytes per decode step", before, after, before / after);
  std::printf("%-44s %14.1f %14.1f\n", "bytes per sequence", before / seqs, after / seqs);
  std::printf("%-44s %14.1f %14.1f\n", "serialize on rank 0, us", Median(plan_ser_us), Median(delta_ser_us));
  std::printf("%-44s %14.1f %14.1f\n", "parse (before) / expand (after) per rank, us", Median(plan_de_us),
              Median(expand_us));
  std::printf("%-44s %14s %14.1f\n", "schedule + build the delta, us", "", Median(schedule_us));
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tpserve::Run();
}
