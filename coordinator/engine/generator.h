// Offline generation on rank 0: plans prefill (chunked) and decode steps for a batch of
// prompts over the paged KV cache, runs them through the StepExecutor and samples
// greedily. Tested by tests/model_test.cc (greedy tokens vs transformers at TP 1/2/4).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model.h"
#include "worker/worker_loop.h"

namespace tpserve {

struct GenerateParams {
  int32_t max_tokens = 16;
  int32_t top_logprobs = 0;  // top-N (id, logprob) per generated token
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  bool return_logits = false;           // keep each step's full logits (tests)
};

struct GenerationOutput {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::vector<float> output_logprobs;                                // of each chosen token
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // per generated token
  std::vector<std::vector<float>> logits;                            // when return_logits
  std::string finish_reason;                                         // "stop" or "length"
};

struct GeneratorOptions {
  int64_t max_num_batched_tokens = 2048;  // tokens per step (prefill chunk size)
  // Hand out KV blocks in a scrambled order (tests: proves attention follows block tables).
  bool scramble_blocks = false;
};

struct StepRecord {
  int64_t tokens = 0;  // tokens in the step
  double step_ms = 0;
  double allreduce_ms = 0;
  bool prefill = false;
};

class Generator {
 public:
  Generator(Model& model, StepExecutor& executor, GeneratorOptions options)
      : model_(model), executor_(executor), options_(options) {}

  absl::StatusOr<std::vector<GenerationOutput>> Generate(const std::vector<std::vector<int32_t>>& prompts,
                                                         const GenerateParams& params);
  // Per-step times of the last Generate call.
  const std::vector<StepRecord>& steps() const { return steps_; }

 private:
  Model& model_;
  StepExecutor& executor_;
  GeneratorOptions options_;
  std::vector<StepRecord> steps_;
};

// log-softmax of `logits` at `id`, and the top `n` (id, logprob) pairs, largest first.
float LogProbOf(const float* logits, int64_t vocab, int32_t id);
std::vector<std::pair<int32_t, float>> TopLogProbs(const float* logits, int64_t vocab, int32_t n);

}  // namespace tpserve
