// The step plan: what the coordinator decides for one forward step and broadcasts to
// every rank unchanged. Workers execute it and decide nothing. Tested by
// tests/model_test.cc (serialization round trip) and every multi-rank test.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/row_sampling.h"

namespace tpserve {

// One KV cache group's part of a step: where each token's k/v goes, and each sequence's
// physical blocks, [num_seqs, max_blocks_per_seq]. -1 marks a block the sequence does not
// hold (padding, or a sliding-window block that fell out of the window and was freed).
struct KvGroupPlan {
  std::vector<int32_t> slot_mapping;  // per token; slot = block * block_size + offset
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> block_tables;
};

struct StepPlan {
  enum class Kind : int32_t { kForward = 0, kShutdown = 1 };
  Kind kind = Kind::kForward;
  // Per token (a flat batch; prefill chunks and decode tokens mixed):
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> token_seq;  // row of each group's block_tables
  int32_t num_seqs = 0;
  // One entry per KV cache group (layers with the same attention window share one; see
  // ModelConfig::kv_group_windows).
  std::vector<KvGroupPlan> kv;
  // Token indices whose logits rank 0 wants back (usually each sequence's last token).
  std::vector<int32_t> logit_rows;
  // Empty: rank 0 gets the logit rows in fp32 and samples on the host. Else one entry per
  // logit row: the workers sample (kernels/row_sampling.h's rule, on rank 0's device) and
  // rank 0 gets only the token ids. Row r's penalty entries are [penalty_offsets[r],
  // penalty_offsets[r + 1]) of penalty_tokens/penalty_counts (kMaskedCount masks a token).
  std::vector<RowSampling> sampling;
  std::vector<int32_t> penalty_offsets, penalty_tokens, penalty_counts;
  // With sampling rows: rank 0 gets the fp32 logit rows as well as the token ids (for
  // logprobs, computed on the host from the same logits the workers sampled from).
  bool return_logits = false;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  std::vector<uint8_t> Serialize() const;
  static absl::StatusOr<StepPlan> Deserialize(const std::vector<uint8_t>& bytes);
  // Internal consistency (sizes, ranges); num_blocks[g] bounds group g's block ids.
  absl::Status Validate(const std::vector<int64_t>& num_blocks, int32_t block_size) const;
  // Every input and penalty token id is in [0, vocab_size).
  absl::Status ValidateTokenIds(int64_t vocab_size) const;
};

// What a step gives rank 0 (other ranks get nothing): the logit rows, or, when the plan
// asks the workers to sample, one token id per logit row (and the logit rows too when
// the plan says return_logits).
struct StepOutput {
  std::vector<float> logits;       // [logit rows, vocab] fp32
  std::vector<int32_t> token_ids;  // [logit rows]
};

}  // namespace tpserve
