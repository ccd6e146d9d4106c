// One request's sampling and stopping settings, from the APIs (OpenAI JSON, gRPC) down to
// the step plan's sampling rows (row_sampling_plan.h) and the kernels' rule
// (kernels/row_sampling.h). Tested by tests/sampling_params_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace tpserve {

class CompiledGrammar;  // coordinator/structured/compiled_grammar.h

// vLLM's meanings and defaults. The workers apply them in the order penalties ->
// temperature -> top-k -> top-p -> min-p (kernels/row_sampling.h).
struct SamplingParams {
  // >= 0; 0 (or below 1e-5, as vLLM) = greedy: the argmax, lowest id on ties.
  float temperature = 1.0f;
  int32_t top_k = 0;  // 0 or -1 = off; else keep tokens whose logit >= the k-th largest
  // (0, 1]; keep the most likely tokens whose mass reaches top_p: a token stays when
  // the tokens more likely than it weigh less than top_p (1 = off).
  float top_p = 1.0f;
  float min_p = 0.0f;  // [0, 1]; drop tokens with prob < min_p * max prob (0 = off)
  // Reproducible sampling: the draw for output position i is a pure function of (seed, i)
  // (kernels/row_sampling.h's SampleUniform), so a seeded request samples the same
  // tokens however it is batched, preempted or sharded, on the CPU and on a GPU. Unset:
  // the engine draws a seed for the request (ResolveSeed).
  std::optional<uint64_t> seed;
  // > 0; over tokens in the prompt or the output: positive logits are divided by it,
  // negative ones multiplied (transformers / vLLM). 1 = off.
  float repetition_penalty = 1.0f;
  // [-2, 2]; over output tokens only (OpenAI): logit -= presence if the token occurred,
  // and -= frequency * its count.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t max_tokens = 16;  // >= 1 generated tokens; then finish reason "length"
  // 0..max_tokens: EOS (unless ignore_eos) and stop_token_ids are masked until this many
  // tokens were generated, and stop strings count only from then on.
  int32_t min_tokens = 0;
  std::vector<std::string> stop;        // non-empty strings that end the output (not emitted)
  std::vector<int32_t> stop_token_ids;  // ids in [0, vocab) that end it, besides EOS
  bool ignore_eos = false;              // keep going past the model's EOS ids
  // Unset: no logprobs. N in 0..20: the chosen token's logprob and the top N (id,
  // logprob) pairs (vLLM's `logprobs`; OpenAI's logprobs=true, top_logprobs=N).
  std::optional<int32_t> logprobs;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to those logits before
  // anything else (rule 0 of kernels/row_sampling.h); ids unique and in [0, vocab).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured output (response_format): every sampled token keeps the output a prefix of
  // a document this grammar accepts, and EOS comes only once it is complete
  // (coordinator/structured/). Null: free text. Compiled by the front end for the model's
  // tokenizer; ids past the model's vocabulary are never sampled.
  std::shared_ptr<const CompiledGrammar> grammar;
  // The output text leaves out special tokens (vLLM's skip_special_tokens). Off for tool
  // calling, whose markers are special tokens in some vocabularies (Gemma 4's <|tool_call>).
  bool skip_special_tokens = true;
  // Engine-internal, not settable from the APIs: every sampled token's whole fp32 logits
  // row comes back with it (the transformers parity tests and the engine benchmark).
  bool return_logits = false;

  // Checks every field; the message names the field, the allowed range and the value,
  // e.g. "top_p must be in (0, 1] (1 = off), got 0".
  absl::Status Validate(int64_t vocab_size) const;
};

// params.seed when set, else a seed drawn from a process-wide entropy source.
uint64_t ResolveSeed(const SamplingParams& params);

}  // namespace tpserve
