// The sampling rule the workers apply when a step plan asks them to pick the next
// tokens themselves (so that only token ids cross to the host): one RowSampling per
// logits row. One rule, two implementations: cpu::SampleRows (kernels/cpu/sampling.cc)
// and cuda::ApplyPenalties + cuda::Sample (kernels/cuda/sampling.cu). Tested by
// tests/cpu_sampling_test.cc and tests/cuda_sampling_test.cc against the plain reference
// in tests/sampling_reference.h.
//
// For one row with logits l[0..V):
//  0. Rank 0's host-side edits, where the plan has them (worker/step.h's LogitEdits:
//     OpenAI's logit_bias and structured output's allowed tokens; cpu::ApplyLogitEdits):
//       l[t] += bias for each (t, bias) of the row; then, with a mask, l[t] = -inf for
//       every t whose bit is clear.
//  1. Penalty entries (token, count), tokens unique per row; count = occurrences in the
//     generated output, 0 for a token seen only in the prompt, kMaskedCount for a token
//     that must not be sampled (EOS before min_tokens):
//       masked:                l = -inf
//       repetition r != 1:     l = l > 0 ? l / r : l * r
//       then                   l -= presence * (count > 0) + frequency * count
//  2. temperature < 1e-5: greedy, the first index of the maximum. Otherwise
//     s = l / temperature, m = max s, weight w_i = exp(s_i - m).
//  3. A token is kept iff s_i >= threshold, threshold = the largest of:
//       top_k in (0, V):  the k-th largest s (ties at the threshold are all kept)
//       top_p < 1:        the largest t such that the weight of {s >= max(t, top-k thr)}
//                         is >= top_p * the weight of {s >= top-k thr}
//       min_p > 0:        m + log(min_p)            (w_i >= min_p * max w)
//  4. u = SampleUniform(seed, step) in [0, 1); the sample is the first token id i (in id
//     order) whose running kept weight sum_{kept j <= i} w_j exceeds u * (total kept weight).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TP_HOST_DEVICE __host__ __device__
#else
#define TP_HOST_DEVICE
#endif

namespace tpserve {

struct RowSampling {
  float temperature = 1.0f;  // < 1e-5: greedy
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // >= 1: off; <= 0 keeps only the top token(s)
  float min_p = 0.0f;        // <= 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;  // per request
  uint64_t step = 0;  // e.g. the number of tokens generated so far: a new draw each step
};

// A penalty entry's count that masks its token out (rule 1).
inline constexpr int32_t kMaskedCount = -1;

// splitmix64 of (seed, step) -> 24 random bits -> [0, 1). Host and device agree bit for bit.
TP_HOST_DEVICE inline float SampleUniform(uint64_t seed, uint64_t step) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + step + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// Rule 1 for one entry.
TP_HOST_DEVICE inline float PenalizedLogit(float l, const RowSampling& p, int32_t count) {
  if (count == kMaskedCount) return -INFINITY;
  float v = l;
  if (p.repetition_penalty != 1.0f) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
  return v - (p.presence_penalty * (count > 0 ? 1.0f : 0.0f) + p.frequency_penalty * static_cast<float>(count));
}

}  // namespace tpserve
