// GPU sampling: the rule of kernels/row_sampling.h (penalties and masks, temperature,
// top-k, top-p, min-p, a seeded draw), one row of logits per request, plus the assembly
// of a vocab-parallel head's gathered shards into full rows. Tested by
// tests/cuda_sampling_test.cc against tests/sampling_reference.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/base.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/row_sampling.h"

namespace tpserve::cuda {

using SamplingParams = RowSampling;
using ::tpserve::SampleUniform;

// logits[r, c] (fp32 [rows, vocab]) from `shards`: tp consecutive bf16 blocks
// [rows, shard_cols] (block k holds token ids [k * shard_cols, ...), the last block's rows
// cut at vocab, i.e. stored [rows, min(shard_cols, vocab - k * shard_cols)]).
void AssembleLogits(const bf16* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab, float* logits,
                    cudaStream_t stream);

// Rule 1 in place on fp32 logits [rows, vocab]. Row r's entries are
// [offsets[r], offsets[r + 1]) of token_ids/counts (device arrays, CSR form).
// params: device array [rows].
void ApplyPenalties(float* logits, int64_t rows, int64_t vocab, const SamplingParams* params,
                    const int32_t* offsets, const int32_t* token_ids, const int32_t* counts, cudaStream_t stream);

// Steps 2-4: out[r] = the sampled token of row r. logits: fp32 [rows, vocab] (not
// modified); params: device array [rows]. One block per row.
void Sample(const float* logits, int64_t rows, int64_t vocab, const SamplingParams* params, int32_t* out,
            cudaStream_t stream);

}  // namespace tpserve::cuda
