// The decoder-only transformer (Llama, Qwen2/3, Gemma 3, Gemma 4) as one rank's shard:
// loads its slices, owns its paged KV cache, and runs a StepPlan. The model file reads
// like the math; sharding lives in worker/layers.h. Tested by tests/model_test.cc against
// transformers' logits at TP = 1, 2, 4.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/layers.h"
#include "worker/model_config.h"
#include "worker/step.h"
#include "worker/weight_source.h"

namespace tpserve {

struct ModelOptions {
  // Dtype of weight matrices on the device; nullopt = the checkpoint's torch_dtype.
  std::optional<DType> weight_dtype;
  int32_t block_size = 16;  // KV cache block size in tokens
};

struct StepTimes {
  double total_us = 0;
  double allreduce_us = 0;  // time inside all-reduce calls (includes waiting for peers)
};

// How one layer's heads split across ranks: this rank's query heads, and the KV heads it
// holds (replicated when ranks outnumber KV heads).
struct HeadShard {
  int32_t q_heads = 0, q_head0 = 0;
  int32_t kv_heads = 0, kv_head0 = 0;
};
// Validates that the split divides evenly; the error names the field and the tp size.
absl::StatusOr<HeadShard> ShardHeads(int32_t num_heads, int32_t num_kv_heads, int rank, int tp, int layer);
absl::Status ValidateTensorParallel(const ModelConfig& c, int tp);

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Load(const ModelConfig& config, const WeightSource& source,
                                                     Backend& backend, Communicator& comm,
                                                     const ModelOptions& options);
  ~Model();

  // Bytes one block of KV group g takes on this rank (all of the group's layers), per group.
  std::vector<int64_t> KvBytesPerBlock() const;
  // (Re)allocates the paged KV cache: num_blocks[g] blocks for group g.
  absl::Status AllocateKvCache(const std::vector<int64_t>& num_blocks);
  // The same number of blocks for every group.
  absl::Status AllocateKvCache(int64_t num_blocks);
  // Frees the KV cache (Forward needs AllocateKvCache again).
  void FreeKvCache();
  // Grows the step inputs and activations for steps of up to `tokens` tokens and
  // `logit_rows` logit rows now (they never shrink), so a failure is an error here rather
  // than inside a step's collectives.
  absl::Status ReserveScratch(int64_t tokens, int64_t logit_rows) { return EnsureScratch(tokens, logit_rows); }
  const std::vector<int64_t>& num_kv_blocks() const { return num_blocks_; }
  int64_t weight_bytes() const { return weight_bytes_; }  // this rank's
  DType weight_dtype() const { return weight_dtype_; }

  // Runs one step on every rank (all ranks call it with the same plan). Rank 0 gets the
  // logits [plan.logit_rows.size(), vocab] in fp32, or, when the plan has sampling rows,
  // one sampled token id per logit row; other ranks get an empty output.
  absl::StatusOr<StepOutput> Forward(const StepPlan& plan, StepTimes* times);

  const ModelConfig& config() const { return config_; }
  int32_t block_size() const { return options_.block_size; }

 private:
  struct Layer;
  Model(const ModelConfig& c, Backend& b, Communicator& comm, const ModelOptions& o);
  absl::Status LoadWeights(const WeightSource& source);
  absl::Status EnsureScratch(int64_t tokens, int64_t logit_rows);
  void RunLayer(Layer& layer, int64_t tokens, const StepPlan& plan, StepTimes* times);

  ModelConfig config_;
  Backend& backend_;
  Communicator& comm_;
  ModelOptions options_;
  DType weight_dtype_ = DType::kF32;
  int64_t weight_bytes_ = 0;
  float embed_scale_ = 1.0f;

  VocabParallelEmbedding embed_;
  std::optional<VocabParallelEmbedding> lm_head_;  // untied models only
  DeviceTensor final_norm_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int64_t> num_blocks_;

  // Step inputs on the device and scratch activations, grown on demand.
  struct Scratch;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace tpserve
