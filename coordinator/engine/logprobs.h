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
// first on ties; masked tokens, at -inf, are never listed, so fewer than top_n when fewer
// can be sampled), of `logits` [vocab] after the row's edits and penalty entries (rules 0
// and 1 of kernels/row_sampling.h, as rank 0 applied them: logit_bias, structured output's
// mask, penalties and the min_tokens mask; the caller applies the edits) and before
// temperature and the filters: the model's distribution as adjusted for
// repetition, not the truncated one sampled from (vLLM's default). Errors: a NaN or +inf
// logit (a broken forward pass), every logit -inf, an id outside the vocabulary.
absl::StatusOr<TokenLogprob> ComputeLogprobs(absl::Span<const float> logits, const RowSampling& row,
                                             absl::Span<const int32_t> penalty_tokens,
                                             absl::Span<const int32_t> penalty_counts, int32_t token_id,
                                             int32_t top_n);

}  // namespace tpserve
