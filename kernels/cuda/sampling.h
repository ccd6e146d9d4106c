// GPU sampling: penalties, temperature, top-k, top-p, min-p and a seeded draw, one row of
// logits per request. The exact rule is written here once; tests/cuda_sampling_test.cc
// holds a plain C++ reference of it and checks the kernels against it.
//
// For one row with logits l[0..V):
//  1. Penalties, for each (token, count) entry of the row (tokens unique per row; count =
//     occurrences in the generated output, 0 for a token seen only in the prompt):
//       repetition r != 1: l = l > 0 ? l / r : l * r         (every entry)
//       l -= presence * (count > 0) + frequency * count
//  2. temperature <= 0 (or < 1e-5): greedy, the first index of the maximum. Otherwise
//     s = l / temperature, m = max s, weight w_i = exp(s_i - m).
//  3. A token is kept iff s_i >= threshold, threshold = the largest of:
//       top_k in (0, V):  the k-th largest s (ties at the threshold are all kept)
//       top_p < 1:        the largest t such that the weight of {s >= max(t, top-k thr)}
//                         is >= top_p * the weight of {s >= top-k thr}
//       min_p > 0:        m + log(min_p)            (w_i >= min_p * max w)
//  4. u = SampleUniform(seed, step) in [0, 1); the sample is the first token id i (in id
//     order) whose running kept weight sum_{kept j <= i} w_j exceeds u * (total kept weight).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/base.h"

namespace tpserve::cuda {

struct SamplingParams {
  float temperature = 1.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // >= 1: off; <= 0 keeps only the top token(s)
  float min_p = 0.0f;        // <= 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;  // per request
  uint64_t step = 0;  // e.g. the number of tokens generated so far: a new draw each step
};

// splitmix64 of (seed, step) -> 24 random bits -> [0, 1). Host and device agree bit for bit.
__host__ __device__ inline float SampleUniform(uint64_t seed, uint64_t step) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + step + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// Step 1 in place on fp32 logits [rows, vocab]. Row r's entries are
// [offsets[r], offsets[r + 1]) of token_ids/counts (device arrays, CSR form).
// params: device array [rows].
void ApplyPenalties(float* logits, int64_t rows, int64_t vocab, const SamplingParams* params,
                    const int32_t* offsets, const int32_t* token_ids, const int32_t* counts, cudaStream_t stream);

// Steps 2-4: out[r] = the sampled token of row r. logits: fp32 [rows, vocab] (not
// modified); params: device array [rows]. One block per row.
void Sample(const float* logits, int64_t rows, int64_t vocab, const SamplingParams* params, int32_t* out,
            cudaStream_t stream);

}  // namespace tpserve::cuda
