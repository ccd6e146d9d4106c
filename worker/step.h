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

// Rank 0's host-side edits of the sampled logit rows (rule 0 of kernels/row_sampling.h):
// OpenAI's logit_bias and structured output's allowed-token masks. Never serialized: only
// rank 0 samples, so the other ranks never need them. Empty: none. With edits, rank 0
// samples the step's rows on the host (cpu::ApplyLogitEdits + cpu::SampleRows), whatever
// the backend.
struct LogitEdits {
  // Row r's biases are [bias_offsets[r], bias_offsets[r + 1]) of bias_tokens/bias_values;
  // bias_offsets is empty (no biases) or has one entry per logit row plus one.
  std::vector<int32_t> bias_offsets, bias_tokens;
  std::vector<float> bias_values;
  // Empty (no masks) or one entry per logit row: -1, or the index of the row's mask in
  // `masks`, each mask_words(vocab) words; bit t of word t / 64 set = token t may be sampled.
  std::vector<int32_t> mask_index;
  std::vector<uint64_t> masks;

  static int64_t mask_words(int64_t vocab) { return (vocab + 63) / 64; }
  bool empty() const { return bias_offsets.empty() && mask_index.empty(); }
  void clear();
  // Shapes against `rows` logit rows and the vocabulary.
  absl::Status Validate(int64_t rows, int64_t vocab) const;
};

struct StepPlan {
  // The first word of every step message: a whole plan, the end of the worker loop, a
  // StepDelta, or a DraftDelta (a draft model's pass after a step).
  enum class Kind : int32_t { kForward = 0, kShutdown = 1, kDelta = 2, kDraft = 3 };
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
  LogitEdits edits;  // rank 0 only (not serialized)
  // Serialized (set from rank 0's edits): rank 0 samples the rows on the host. With pipeline
  // stages, the last stage then sends rank 0 the fp32 logit rows rather than token ids.
  bool host_sampling = false;
  bool samples_on_host() const { return host_sampling || !edits.empty(); }

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  std::vector<uint8_t> Serialize() const;
  static absl::StatusOr<StepPlan> Deserialize(const std::vector<uint8_t>& bytes);
  // Internal consistency (sizes, ranges); num_blocks[g] bounds group g's block ids.
  absl::Status Validate(const std::vector<int64_t>& num_blocks, int32_t block_size) const;
  // Every input and penalty token id is in [0, vocab_size), and the edits fit the vocabulary.
  absl::Status ValidateTokenIds(int64_t vocab_size) const;
};

// The message rank 0 broadcasts for an engine step: only what changed since the last
// one. Every rank keeps a PersistentBatch (worker/persistent_batch.h) of the sequences
// in flight, each with its block tables under a slot number that rank 0 chose, applies
// the delta to it and runs the StepPlan it expands to. A decode step of B sequences
// costs about 56 bytes per sequence, whatever their context: no block tables, only the
// blocks that changed. Tested by tests/persistent_batch_test.cc.
struct StepDelta {
  std::vector<int32_t> removed_slots;  // sequences that left the batch (finished, preempted)
  std::vector<int32_t> added_slots;    // sequences new to it: empty block tables
  // Block-table changes, flat: per edit `slot, group, freed, n, block ids (n)`: append
  // the n ids to the slot's table of that group, then mark its first `freed` entries -1
  // (blocks that left a sliding window: tables only ever lose a prefix).
  std::vector<int32_t> table_edits;
  // The step's sequences, one row each in this order: tokens [start, start + num_tokens)
  // of the sequence in `slot`, whose ids follow row after row in token_ids.
  std::vector<int32_t> slots, starts, num_tokens;
  std::vector<int32_t> token_ids;
  std::vector<int32_t> sampled_rows;  // ascending: rows whose last tokens are sampled
  // Per sampled row, how many of its last tokens get a logit row (speculative decoding
  // verifies a row's K draft tokens and samples after each: K + 1). Empty: 1 each.
  std::vector<int32_t> sampled_counts;
  // As StepPlan's, one per logit row (a sampled row's count of them, in token order).
  std::vector<RowSampling> sampling;
  std::vector<int32_t> penalty_offsets, penalty_tokens, penalty_counts;
  bool return_logits = false;
  LogitEdits edits;  // rank 0 only (not serialized), per logit row
  bool host_sampling = false;  // as StepPlan's
  bool samples_on_host() const { return host_sampling || !edits.empty(); }

  int64_t num_tokens_total() const { return static_cast<int64_t>(token_ids.size()); }
  // Logit rows the step returns: the sum of sampled_counts (or one per sampled row).
  int64_t num_logit_rows() const;
  std::vector<uint8_t> Serialize() const;
  // Checks the message's own shape; PersistentBatch::Apply checks it against the batch.
  static absl::StatusOr<StepDelta> Deserialize(const std::vector<uint8_t>& bytes);
};

// The message rank 0 broadcasts right after a step's update when a draft model (the MTP
// drafter, worker/mtp_drafter.h) proposes the next step's drafts: which sequences draft,
// from which of the step's hidden rows, with which token at which position. Every rank
// runs num_steps drafter steps over them, reading the target's hidden rows of the step
// just run (Model::hidden_rows, valid until the next forward) and its paged K/V through
// the PersistentBatch's block tables; rank 0 gets the drafts. About 16 bytes per sequence
// plus the table edits that bring the batch up to the scheduler's tables (blocks freed
// by the step's update), so that every rank reads exactly the blocks rank 0 holds.
// Tested by tests/persistent_batch_test.cc and tests/mtp_engine_test.cc.
struct DraftDelta {
  // As StepDelta's: `slot, group, freed, n, block ids (n)` per edit.
  std::vector<int32_t> table_edits;
  // Per drafting sequence: its batch slot; the logit row of the step just run that
  // sampled its newest token (the target's final hidden state one position before it);
  // that newest token; and its position L.
  std::vector<int32_t> slots, hidden_rows, token_ids, positions;
  int32_t num_steps = 0;  // drafts per sequence (drafter steps); >= 1

  int64_t num_seqs() const { return static_cast<int64_t>(slots.size()); }
  std::vector<uint8_t> Serialize() const;
  // Checks the message's own shape (equal lengths, num_steps >= 1).
  static absl::StatusOr<DraftDelta> Deserialize(const std::vector<uint8_t>& bytes);
};

// The kind word of a serialized step message (-1 for a malformed one).
int32_t StepMessageKind(const std::vector<uint8_t>& bytes);

// What a step gives rank 0 (other ranks get nothing): the logit rows, or, when the plan
// asks the workers to sample, one token id per logit row (and the logit rows too when
// the plan says return_logits).
struct StepOutput {
  std::vector<float> logits;       // [logit rows, vocab] fp32
  std::vector<int32_t> token_ids;  // [logit rows]
};

}  // namespace tpserve
