// Pipeline parallelism's layout: which layers each stage holds. Stage s is a contiguous
// range of layers chosen so that the slowest stage is as fast as it can be: a layer costs
// the weights it reads per token (decode reads every weight once), the last stage also the
// LM head's; stage 0's embedding lookup reads one row per token and costs nothing. The
// first stage embeds, the last one holds the final norm and the LM head and produces the
// step's logits or sampled ids. Tested by tests/pipeline_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model_config.h"

namespace tpserve {

struct PipelineStage {
  int32_t stages = 1;  // pipeline-parallel size
  int32_t stage = 0;
  int32_t layer_begin = 0, layer_end = 0;  // this stage's layers: [layer_begin, layer_end)

  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// What a layer costs to run on every rank of a stage alike: its weight elements (q, k, v,
// o, gate, up, down; norms are negligible).
int64_t LayerCost(const ModelConfig& c, int layer);
// The LM head's cost (vocab x hidden), on the last stage.
int64_t HeadCost(const ModelConfig& c);

// Layer boundaries of `stages` stages ([begin_s, begin_{s+1}) is stage s; stages + 1
// entries, the first 0, the last num_layers): contiguous ranges, at least one layer each,
// minimizing the largest stage cost (ties: the earliest split). An error when the model
// has fewer layers than stages.
absl::StatusOr<std::vector<int32_t>> SplitLayers(const ModelConfig& c, int stages);

// Stage `stage` of the split.
absl::StatusOr<PipelineStage> MakePipelineStage(const ModelConfig& c, int stages, int stage);

// Whether a stage reads the tensor of this engine name ("layers.7.mlp.up_proj.weight",
// "embed_tokens.weight", "lm_head.weight", "norm.weight"): its layers', the embedding on
// the first stage (and on the last when the LM head is the tied embedding), the LM head
// and final norm on the last. Names of no layer and no known tensor: every stage.
bool OwnsTensor(const ModelConfig& c, const PipelineStage& stage, std::string_view name);

// "layers 0-29 | 30-59" for logs and ModelInfo.
std::string DescribeStages(const std::vector<int32_t>& bounds);

}  // namespace tpserve
