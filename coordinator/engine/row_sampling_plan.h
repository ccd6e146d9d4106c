// Turns a request's sampling settings into the step plan's sampling row
// (kernels/row_sampling.h), the one rule every backend samples by: the filters, the
// request's seed with its output position as the draw index, and its penalty entries
// (output tokens with their counts, prompt tokens for the repetition penalty, EOS and
// stop_token_ids masked while short of min_tokens). Tested by
// tests/row_sampling_plan_test.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "coordinator/engine/sampling_params.h"
#include "coordinator/structured/bit_mask.h"
#include "coordinator/structured/token_matcher.h"
#include "worker/step.h"

namespace tpserve {

class RowSamplingPlanner {
 public:
  RowSamplingPlanner(int64_t vocab_size, std::vector<int32_t> eos_token_ids);

  // Appends one sampling row (and its penalty entries) to `plan`; call once per logit
  // row, in logit-row order. Ids outside the vocabulary are left for the executor to
  // reject.
  // `drafts`: draft tokens taken as accepted after output_ids (speculative decoding's row
  // after them); the row then samples output position output_ids.size() + drafts.size().
  // `grammar`: structured output's state before this row's token (the drafts before it
  // included); the row then samples only what it allows (plan.edits' mask). The request's
  // logit_bias goes to plan.edits too.
  void AddRow(const SamplingParams& params, uint64_t seed, absl::Span<const int32_t> prompt_ids,
              absl::Span<const int32_t> output_ids, StepDelta& plan, absl::Span<const int32_t> drafts = {},
              const TokenMatcher* grammar = nullptr);

 private:
  void Entry(int32_t token, int32_t count, StepDelta& plan);
  // plan.edits for the row just added (rows before the first edit get none).
  void AddEdits(const SamplingParams& params, const TokenMatcher* grammar, StepDelta& plan);

  int64_t vocab_size_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<int32_t> entry_of_;  // [V] index into plan.penalty_tokens of this row, or -1
  std::vector<int32_t> touched_;   // tokens with an entry in this row
  BitMask mask_;                   // scratch for a grammar's mask
};

}  // namespace tpserve
