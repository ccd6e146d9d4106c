// Worker-side sampling rows from request settings. Tested by tests/row_sampling_plan_test.cc.
#include "coordinator/engine/row_sampling_plan.h"

#include <algorithm>

namespace tpserve {

RowSamplingPlanner::RowSamplingPlanner(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size), eos_token_ids_(std::move(eos_token_ids)) {}

void RowSamplingPlanner::Entry(int32_t token, int32_t count, StepDelta& plan) {
  if (token < 0 || token >= vocab_size_) {  // kept as is: the executor names the bad id
    plan.penalty_tokens.push_back(token);
    plan.penalty_counts.push_back(count);
    return;
  }
  int32_t& at = entry_of_[token];
  if (at < 0) {
    at = static_cast<int32_t>(plan.penalty_tokens.size());
    touched_.push_back(token);
    plan.penalty_tokens.push_back(token);
    plan.penalty_counts.push_back(count);
  } else if (count == kMaskedCount || plan.penalty_counts[at] != kMaskedCount) {
    plan.penalty_counts[at] = count == kMaskedCount ? kMaskedCount : plan.penalty_counts[at] + count;
  }
}

void RowSamplingPlanner::AddRow(const SamplingParams& params, uint64_t seed,
                                absl::Span<const int32_t> prompt_ids, absl::Span<const int32_t> output_ids,
                                StepDelta& plan, absl::Span<const int32_t> drafts, const TokenMatcher* grammar) {
  if (entry_of_.empty()) entry_of_.assign(vocab_size_, -1);
  if (plan.penalty_offsets.empty()) plan.penalty_offsets.push_back(0);
  RowSampling r;
  r.temperature = params.temperature;
  r.top_k = params.top_k > 0 ? params.top_k : 0;
  r.top_p = params.top_p;
  r.min_p = params.min_p;
  r.repetition_penalty = params.repetition_penalty;
  r.presence_penalty = params.presence_penalty;
  r.frequency_penalty = params.frequency_penalty;
  r.seed = seed;
  const int64_t num_output = static_cast<int64_t>(output_ids.size() + drafts.size());
  r.step = static_cast<uint64_t>(num_output);
  plan.sampling.push_back(r);

  const bool counts = params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
                      params.frequency_penalty != 0.0f;
  if (counts) {
    for (int32_t t : output_ids) Entry(t, 1, plan);
    for (int32_t t : drafts) Entry(t, 1, plan);
    if (params.repetition_penalty != 1.0f) {
      for (int32_t t : prompt_ids) Entry(t, 0, plan);
    }
  }
  if (num_output < params.min_tokens) {
    for (int32_t t : params.stop_token_ids) Entry(t, kMaskedCount, plan);
    if (!params.ignore_eos) {
      for (int32_t t : eos_token_ids_) Entry(t, kMaskedCount, plan);
    }
  }
  for (int32_t t : touched_) entry_of_[t] = -1;
  touched_.clear();
  plan.penalty_offsets.push_back(static_cast<int32_t>(plan.penalty_tokens.size()));
  AddEdits(params, grammar, plan);
}

void RowSamplingPlanner::AddEdits(const SamplingParams& params, const TokenMatcher* grammar, StepDelta& plan) {
  LogitEdits& e = plan.edits;
  const size_t row = plan.sampling.size() - 1;
  if (!params.logit_bias.empty() && e.bias_offsets.empty()) e.bias_offsets.assign(row + 1, 0);
  if (!e.bias_offsets.empty()) {
    for (const auto& [id, bias] : params.logit_bias) {
      e.bias_tokens.push_back(id);
      e.bias_values.push_back(bias);
    }
    e.bias_offsets.push_back(static_cast<int32_t>(e.bias_tokens.size()));
  }
  const bool masked_before = !e.mask_index.empty();
  if (grammar == nullptr && !masked_before) return;
  if (!masked_before) e.mask_index.assign(row, -1);
  if (grammar == nullptr) {
    e.mask_index.push_back(-1);
    return;
  }
  const int64_t words = LogitEdits::mask_words(vocab_size_);
  e.mask_index.push_back(static_cast<int32_t>(e.masks.size() / words));
  FillNextTokenMask(*grammar, &mask_);
  const absl::Span<const uint64_t> allowed = mask_.words();
  // The grammar's vocabulary (the tokenizer's) may be shorter than the model's: the ids
  // past it are never allowed.
  const size_t n = std::min<size_t>(allowed.size(), words);
  e.masks.insert(e.masks.end(), allowed.begin(), allowed.begin() + n);
  e.masks.resize(e.masks.size() + (words - n), 0);
}

}  // namespace tpserve
