// One transformer layer's shard on this rank: what Model's loading (worker/model_load.cc)
// fills in and its forward pass (worker/model.cc) reads. Private to those two files.
#pragma once

#include <memory>

#include "worker/layers.h"
#include "worker/model.h"
#include "worker/model_config.h"

namespace tpserve {

struct Model::Layer {
  LayerConfig cfg;
  HeadShard heads;
  DeviceTensor input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;
  DeviceTensor q_norm, k_norm;
  ColumnParallelLinear qkv_proj;  // q | k | v rows of this rank's heads (no v when K = V)
  RowParallelLinear o_proj;
  ColumnParallelLinear gate_up_proj;
  RowParallelLinear down_proj;
  float layer_scalar = 1.0f;
  DeviceTensor inv_freq;
  std::unique_ptr<Buffer> k_cache, v_cache;
};

}  // namespace tpserve
