// Offline generation through the engine core, as vLLM's LLM.generate runs its server's
// engine: every prompt is submitted, the core steps until all are finished, the outputs
// are collected. `tpserve generate`, the engine benchmark and the transformers parity
// tests use it. Tested by tests/model_test.cc and tests/engine_core_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine/engine_core.h"

namespace tpserve {

struct GenerationOutput {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::vector<float> output_logprobs;                                // with params.logprobs
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // per token, with params.logprobs > 0
  std::vector<std::vector<float>> logits;                            // per token, with params.return_logits
  std::string finish_reason;                                         // "stop" or "length"
};

struct OfflineResult {
  std::vector<GenerationOutput> outputs;  // in prompt order
  std::vector<StepSummary> steps;  // every step that ran a forward
  int64_t preemptions = 0;  // sequences sent back to wait for KV (and recomputed)
  SpecDecodeStats spec;     // speculative decoding during this call
};

// Runs `prompts` with `params` to completion on an idle core. A request that ends in an
// error (or a failed step) is this call's error, naming the prompt.
absl::StatusOr<OfflineResult> GenerateOffline(EngineCore& core, const std::vector<std::vector<int32_t>>& prompts,
                                              const SamplingParams& params);

}  // namespace tpserve
