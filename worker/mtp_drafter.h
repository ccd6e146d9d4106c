// The Gemma 4 MTP drafter (transformers' Gemma4AssistantForCausalLM, docs/mtp_drafter.md)
// as one rank's shard beside the target Model: one draft step for a batch of sequences,
// reading the target's paged K/V of its last sliding and last full layer, writing none.
// Sharded like the target's layers (worker/layers.h). Tested by tests/mtp_drafter_test.cc
// against transformers' numbers at TP 1, 2 and 4.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/layers.h"
#include "worker/model.h"
#include "worker/mtp_drafter_config.h"
#include "worker/weight_source.h"

namespace tpserve {

// One draft step's inputs for n sequences; every rank gets the same.
struct MtpDraftStep {
  // Per sequence: the token whose TARGET embedding (times the target's embed scale) is the
  // first half of the input: x_L at a round's first step, the previous step's draft after.
  std::vector<int32_t> token_ids;
  // Per sequence: L, the position of its newest token x_L, the RoPE position of every step
  // of the round. The drafter reads the target's cached K/V of positions [0, L-1] (full
  // layers) and [max(0, L-1-W), L-1] (sliding layers: W + 1 positions, one more than the
  // target's own window), never position L or later (docs/mtp_drafter.md §3.4, the "clean"
  // rule of §4.4). L >= 1.
  std::vector<int32_t> positions;
  // Per target KV group (ModelConfig::kv_group_windows order): block tables
  // [n, max_blocks_per_seq] as in KvGroupPlan. -1 marks a block the sequence no longer
  // holds; the blocks holding the positions above must be held.
  struct Tables {
    int32_t max_blocks_per_seq = 0;
    std::vector<int32_t> block_tables;
  };
  std::vector<Tables> kv;
  // Rank 0 also gets the fp32 logit rows (the centroid head's unselected tokens hold the
  // row's smallest selected logit minus 1, as transformers fills them for one sequence).
  bool return_logits = false;
  // Per sequence, the row of Step's `hidden` it reads (e.g. its row of the target's
  // Model::hidden_rows, which has a row per logit row of the target's step); empty: row i.
  std::vector<int32_t> hidden_rows;
};

struct MtpDraftOutput {
  std::vector<int32_t> token_ids;  // [n] the greedy draft of each row (first maximum), on every rank
  std::vector<float> logits;       // [n, vocab] on rank 0 when the step asked for them
};

class MtpDrafter {
 public:
  // This rank's shard, read from `source` (an assistant checkpoint opened with
  // OpenCheckpointSourceWithPrefix(dir, "")) in the target's weight dtype, on the backend
  // and communicator the target runs on. `target` must outlive the drafter. Validates the
  // pair (ValidateMtpDrafter) and that the checkpoint holds nothing left unread.
  static absl::StatusOr<std::unique_ptr<MtpDrafter>> Load(const MtpDrafterConfig& config, const WeightSource& source,
                                                          const Model& target, Backend& backend, Communicator& comm);
  // The config and weights of the assistant checkpoint in `dir`.
  static absl::StatusOr<std::unique_ptr<MtpDrafter>> LoadDir(const std::string& dir, const Model& target,
                                                             Backend& backend, Communicator& comm);
  ~MtpDrafter();

  // One draft step on every rank (all ranks call it with the same step). `hidden`:
  // [n, backbone_hidden_size] in the activation dtype on this rank's device, the same on
  // every rank: the target's post-norm hidden state at L-1 (Model::hidden_rows) at a
  // round's first step, projected() after (it may be passed as is). With
  // step.hidden_rows, `hidden` has any number of rows and sequence i reads row
  // hidden_rows[i]. Collectives: the
  // embedding's all-reduce, two all-reduces per layer, one all-gather of each rank's best
  // token, and a gather of the logits to rank 0 when asked for.
  absl::StatusOr<MtpDraftOutput> Step(const MtpDraftStep& step, const Tensor& hidden, StepTimes* times = nullptr);
  // The step's own consistency, everything Step checks but `hidden`: sizes, token ids,
  // positions, and that every block the attention reads is held (an error names the
  // sequence, the group and the positions). Rank 0 runs it before sending a draft pass.
  absl::Status Validate(const MtpDraftStep& step) const;
  // Grows the step buffers for `rows` sequences now (they never shrink), so that a GPU's
  // memory planning counts them.
  absl::Status ReserveScratch(int64_t rows) { return EnsureScratch(rows); }

  // Rows of the last Step on this rank's device, valid until the next Step:
  // post_projection(normed), [n, backbone_hidden_size], the next step's `hidden` ...
  Tensor projected() const;
  // ... and the drafter's final-norm state, [n, hidden_size], what the head reads.
  Tensor normed() const;

  const MtpDrafterConfig& config() const { return config_; }
  int64_t weight_bytes() const { return weight_bytes_; }  // this rank's

 private:
  struct Layer;
  struct Scratch;
  MtpDrafter(const MtpDrafterConfig& c, const Model& target, Backend& b, Communicator& comm);
  absl::Status LoadWeights(const WeightSource& source);
  absl::Status CheckStep(const MtpDraftStep& step, const Tensor& hidden) const;
  absl::Status EnsureScratch(int64_t n);
  absl::Status Upload(const MtpDraftStep& step);
  void RunLayer(const Layer& layer, const Layer* next, int64_t n, StepTimes* times);
  // The head on the host: each rank's best selected token per row, one all-gather, and the
  // logits to rank 0 when asked for.
  MtpDraftOutput Head(const MtpDraftStep& step, int64_t n);

  MtpDrafterConfig config_;
  const Model& target_;
  Backend& backend_;
  Communicator& comm_;
  int64_t weight_bytes_ = 0;

  // pre_projection [d, 2D] as its two column blocks: the embedding's and the hidden
  // state's (the input is never concatenated). Replicated, as is post_projection [D, d].
  DeviceTensor pre_projection_embed_, pre_projection_hidden_, post_projection_;
  DeviceTensor final_norm_;
  VocabParallelEmbedding lm_head_;       // the drafter's own embed_tokens (the tied lm_head)
  DeviceTensor centroids_;               // [C, d], centroid head only
  std::vector<int32_t> token_ordering_;  // [V], centroid head only
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<SpanTimer> allreduce_timer_;  // the all-reduces of Step
  int64_t rows_ = 0;  // rows of the last Step
};

}  // namespace tpserve
