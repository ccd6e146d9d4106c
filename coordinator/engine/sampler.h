// The rank-0 CPU sampler: per-request SamplingParams, a counter-based per-request RNG,
// and Sampler, which picks the next token from one fp32 logits row. Tested by
// tests/sampler_test.cc (argmax, chi-square against exact distributions, penalties).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tpserve {

// One request's sampling and stopping settings, with vLLM's meanings and defaults.
// Filters run in the order penalties -> temperature -> top-k -> top-p -> min-p.
struct SamplingParams {
  // >= 0; 0 (or below 1e-5, as vLLM) = greedy: the argmax, lowest id on ties.
  float temperature = 1.0f;
  int32_t top_k = 0;  // 0 or -1 = off; else keep tokens whose logit >= the k-th largest
  // (0, 1]; keep the most likely tokens whose mass reaches top_p: a token stays when
  // the tokens more likely than it weigh less than top_p (1 = off).
  float top_p = 1.0f;
  float min_p = 0.0f;  // [0, 1]; drop tokens with prob < min_p * max prob (0 = off)
  // Reproducible sampling: the same seed (and stream) gives the same tokens however the
  // request is batched. Unset: a key drawn from a global entropy source (SamplingRng).
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
  // tokens were generated (StopChecker says when stop strings start to count).
  int32_t min_tokens = 0;
  std::vector<std::string> stop;         // non-empty strings that end the output (not emitted)
  std::vector<int32_t> stop_token_ids;   // ids in [0, vocab) that end it, besides EOS
  bool ignore_eos = false;               // keep going past the model's EOS ids
  // Unset: no logprobs. N in 0..20: the chosen token's logprob and the top N (id,
  // logprob) pairs (vLLM's `logprobs`; OpenAI's logprobs=true, top_logprobs=N).
  std::optional<int32_t> logprobs;

  // Checks every field; the message names the field, the allowed range and the value,
  // e.g. "top_p must be in (0, 1] (1 = off), got 0".
  absl::Status Validate(int64_t vocab_size) const;
};

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// as Random123 defines it.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A request's random numbers. Counter-based: the draw for output position `step` is a
// pure function of (seed, stream, step), so nothing is carried from step to step and a
// seeded request samples the same tokens however it is batched, scheduled, preempted
// or recomputed. `stream` tells apart the sequences of one request (n > 1).
class SamplingRng {
 public:
  explicit SamplingRng(uint64_t seed, uint32_t stream = 0) : seed_(seed), stream_(stream) {}
  // params.seed when set, else a seed drawn from a process-wide entropy source.
  static SamplingRng ForRequest(const SamplingParams& params, uint32_t stream = 0);

  // Uniform in [0, 1) with 53 random bits.
  double Uniform(uint64_t step) const;
  uint64_t seed() const { return seed_; }
  uint32_t stream() const { return stream_; }

 private:
  uint64_t seed_;
  uint32_t stream_;
};

struct SampleResult {
  int32_t token_id = -1;
  // Set when params.logprobs is: log-softmax of the logits after penalties (and the
  // min_tokens mask) but before temperature, top-k, top-p and min-p, i.e. the model's
  // distribution as adjusted for repetition, not the truncated one sampled from.
  float logprob = 0.0f;
  // The params.logprobs largest (id, logprob) pairs, largest first, lowest id first on ties.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Samples one token from one logits row. Cost per row for vocab V, no full sort
// anywhere: greedy is one argmax pass. Sampling with a top_k up to 4096 adds two
// compare passes (a k-heap, then gathering the survivors) and weighs only those;
// otherwise one vectorized exp pass, plus for top-p a gather of the candidates and a
// quickselect on them. Logprobs add an exp pass (shared when T = 1 without top-k) and
// a top-N scan; penalties copy the row and touch each prompt/output token once.
//
// Holds scratch buffers reused across calls, so it is not thread-safe: use one per
// thread. Results do not depend on which Sampler, or which other rows it saw before.
class Sampler {
 public:
  // `eos_token_ids`: the model's EOS ids, masked while a request is short of min_tokens
  // (unless it ignores EOS).
  Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids);

  // logits: [vocab_size] fp32, the model's output for the request's next position.
  // `params` must have passed Validate(vocab_size). The random draw is
  // rng.Uniform(output_ids.size()). Fails when prompt/output ids are outside the
  // vocabulary or the row has a NaN, a +inf, or no finite value.
  absl::StatusOr<SampleResult> Sample(absl::Span<const float> logits, const SamplingParams& params,
                                      absl::Span<const int32_t> prompt_ids,
                                      absl::Span<const int32_t> output_ids, const SamplingRng& rng);

  // The logprobs Sample would report for `token_id` (picked elsewhere: by the workers'
  // sampling) from the same row; params.logprobs must be set. Same failures as Sample.
  absl::StatusOr<SampleResult> Logprobs(absl::Span<const float> logits, const SamplingParams& params,
                                        absl::Span<const int32_t> prompt_ids, absl::Span<const int32_t> output_ids,
                                        int32_t token_id);

  int64_t vocab_size() const { return vocab_size_; }

 private:
  // The row the filters and logprobs read (the logits, or row_ after penalties and the
  // min_tokens mask) and its argmax; fails on NaN, +inf or no finite value.
  absl::StatusOr<const float*> ProcessedRow(absl::Span<const float> logits, const SamplingParams& params,
                                            absl::Span<const int32_t> prompt_ids,
                                            absl::Span<const int32_t> output_ids, int32_t* argmax);
  // r.logprob of r.token_id and the top_n largest; sum_exp < 0: computed here.
  void FillLogprobs(const float* x, float max_logit, double sum_exp, int32_t top_n, SampleResult& r) const;
  // Copies `logits` to row_ and applies the penalties and the min_tokens mask.
  absl::Status PrepareRow(absl::Span<const float> logits, const SamplingParams& params,
                          absl::Span<const int32_t> prompt_ids, absl::Span<const int32_t> output_ids,
                          bool mask_stop_ids);
  // Temperature, top-k, top-p, min-p and the draw; row max `max_logit` is finite.
  // Sets *sum_exp to sum(exp(x - max)) when that is what the pass computed (T = 1,
  // no top-k), for the logprobs to reuse; else leaves it alone.
  int32_t SampleFiltered(const float* x, float max_logit, const SamplingParams& params, double u,
                         double* sum_exp);

  int64_t vocab_size_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<float> row_;             // [V] penalized logits
  std::vector<float> weights_;         // [V] exp((x - max) / T), 0 where filtered out
  std::vector<double> block_sums_;     // sums of weights_ over blocks of 256 tokens
  std::vector<uint32_t> stamp_;        // [V] == epoch_: token seen in this call
  std::vector<int32_t> output_count_;  // [V] occurrences in the output (valid where stamped)
  std::vector<int32_t> touched_;       // distinct output tokens of this call
  std::vector<float> top_k_scratch_;   // the top-k heap or selection copy
  std::vector<int32_t> kept_ids_;      // top-k survivors, ascending
  std::vector<float> kept_weights_;    // their weights
  std::vector<float> select_;          // [V + 8] top-p candidate weights
  std::vector<double> top_p_bins_;     // weight per float-bits bin of the candidates
  uint32_t epoch_ = 0;
};

}  // namespace tpserve
