// Logprobs on rank 0 for the tokens the workers sampled, from the logit rows a step
// returns when a request asks for them. Tested by tests/sampling_params_test.cc.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/engine/request.h"  // TokenLogprob
#include "kernels/row_sampling.h"

namespace tpserve {

// The log-softmax, at `token_id` and at the `top_n` largest ids (largest first, lowest id
// first on ties), of `logits` [vocab] after the row's penalty entries (rule 1 of
// kernels/row_sampling.h, as the workers applied them: penalties and the min_tokens
// mask) and before temperature and the filters: the model's distribution as adjusted for
// repetition, not the truncated one sampled from (vLLM's default). Errors: a NaN or +inf
// logit (a broken forward pass), every logit -inf, an id outside the vocabulary.
absl::StatusOr<TokenLogprob> ComputeLogprobs(absl::Span<const float> logits, const RowSampling& row,
                                             absl::Span<const int32_t> penalty_tokens,
                                             absl::Span<const int32_t> penalty_counts, int32_t token_id,
                                             int32_t top_n);

}  // namespace tpserve
