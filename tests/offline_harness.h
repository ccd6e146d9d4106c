// Greedy offline generation through the engine core, as `tpserve generate` runs it, for
// the tests that compare a model with transformers (tests/model_test.cc and friends).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine/offline.h"

namespace tpserve::testing {

struct OfflineOptions {
  int32_t max_num_batched_tokens = 2048;  // the prefill chunk
  int32_t max_num_seqs = 256;
  bool scramble_blocks = false;  // KV blocks in a scrambled order: attention must follow the tables
  bool enable_prefix_caching = true;
  // Fewer KV blocks per group than the model has (0: all): forces preemption.
  int64_t kv_blocks = 0;
};

// Greedy tokens with every step's logits, EOS ignored, `max_tokens` per prompt.
inline absl::StatusOr<OfflineResult> GreedyGenerate(Model& model, StepExecutor& exec,
                                                    const std::vector<std::vector<int32_t>>& prompts,
                                                    int32_t max_tokens, const OfflineOptions& o = {}) {
  SchedulerConfig sc = SchedulerConfigFor(model, o.max_num_seqs, o.max_num_batched_tokens);
  sc.scramble_blocks = o.scramble_blocks;
  sc.enable_prefix_caching = o.enable_prefix_caching;
  if (o.kv_blocks > 0) {
    for (int64_t& n : sc.num_kv_blocks) n = std::min(n, o.kv_blocks);
  }
  TP_RETURN_IF_ERROR(sc.Validate());
  EngineCore core(exec, sc);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.return_logits = true;
  return GenerateOffline(core, prompts, p);
}

}  // namespace tpserve::testing
