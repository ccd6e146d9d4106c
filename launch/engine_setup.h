// Start-up shared by `tpserve generate`, `tpserve serve` and the engine benchmark: resolve
// the model (directory or built-in preset), load this rank's shard, agree on the KV cache
// size across ranks. Every failure is agreed on by all ranks, so none is left waiting.
// Tested by tests/model_test.cc and tests/cli_test.sh.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/model.h"
#include "worker/weight_source.h"

namespace tpserve {

struct EngineOptions {
  std::string model;                 // checkpoint directory, or a built-in preset name
  std::string load_format = "auto";  // auto | safetensors | dummy
  std::string dtype = "auto";        // auto (checkpoint's) | bfloat16 | float16 | float32
  int threads = 0;                   // CPU threads per rank; 0 = cores / local ranks
  int64_t kv_cache_bytes = int64_t{1} << 30;  // per rank
  int64_t max_model_len = 0;         // 0 = the model's max_position_embeddings
  int32_t block_size = 16;
  int32_t max_num_batched_tokens = 2048;  // the scheduler's tokens per step (sizes sliding KV groups)
  // true: the KV budget is split between KV groups by what max-length sequences need
  // (SplitKvBlocks; the serving scheduler frees blocks that left a sliding window).
  // false: every group gets the same number of blocks, as the offline Generator needs
  // (it gives all groups one block layout).
  bool split_kv_by_need = true;
  uint64_t dummy_seed = 0;
};

struct Engine {
  ModelConfig config;
  std::unique_ptr<WeightSource> source;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::string weights_description;
  double load_seconds = 0;
};

// Resolves config (from DIR/config.json or a preset). Pure: no collectives.
absl::StatusOr<ModelConfig> ResolveModelConfig(const EngineOptions& options);

// Loads the engine on this rank. Collective: every rank must call it; all ranks return the
// same error when any rank fails.
absl::StatusOr<Engine> StartEngine(const EngineOptions& options, const WorldConfig& world, Communicator& comm);
// The same for a config resolved (and perhaps adjusted, as benchmarks do) by the caller.
absl::StatusOr<Engine> StartEngine(const ModelConfig& config, const EngineOptions& options, const WorldConfig& world,
                                   Communicator& comm);

// Parses "1073741824", "512MiB", "2GiB", "1.5GB", "64K".
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace tpserve
