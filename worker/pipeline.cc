// Pipeline stages' layer split (see pipeline.h).
#include "worker/pipeline.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_join.h"

namespace tpserve {

int64_t LayerCost(const ModelConfig& c, int layer) {
  const LayerConfig& L = c.layers[layer];
  const int64_t H = c.hidden_size, D = L.head_dim;
  const int64_t q = static_cast<int64_t>(c.num_heads) * D, kv = static_cast<int64_t>(L.num_kv_heads) * D;
  return H * (2 * q + kv * (L.k_eq_v ? 1 : 2)) + 3 * H * c.intermediate_size;
}

int64_t HeadCost(const ModelConfig& c) { return c.vocab_size * c.hidden_size; }

absl::StatusOr<std::vector<int32_t>> SplitLayers(const ModelConfig& c, int stages) {
  const int n = c.num_layers;
  if (stages < 1) return absl::InvalidArgumentError("--pipeline-parallel-size must be at least 1");
  if (n < stages) {
    return absl::InvalidArgumentError(absl::StrCat("the model has ", n, " layers, fewer than the ", stages,
                                                   " pipeline stages asked for (--pipeline-parallel-size): ",
                                                   "every stage needs at least one layer"));
  }
  // prefix[i]: cost of layers [0, i).
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + LayerCost(c, i);
  const int64_t head = HeadCost(c);
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // best[s][i]: the least possible largest cost of stages 0..s-1 holding layers [0, i);
  // cut[s][i]: where stage s-1 begins in that split. The last stage adds the head.
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, kInf));
  std::vector<std::vector<int32_t>> cut(stages + 1, std::vector<int32_t>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      for (int j = s - 1; j < i; ++j) {
        if (best[s - 1][j] == kInf) continue;
        const int64_t stage_cost = prefix[i] - prefix[j] + (s == stages ? head : 0);
        const int64_t worst = std::max(best[s - 1][j], stage_cost);
        if (worst < best[s][i]) {
          best[s][i] = worst;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<int32_t> bounds(stages + 1, 0);
  bounds[stages] = n;
  for (int s = stages, i = n; s > 0; --s) {
    i = cut[s][i];
    bounds[s - 1] = i;
  }
  return bounds;
}

absl::StatusOr<PipelineStage> MakePipelineStage(const ModelConfig& c, int stages, int stage) {
  TP_ASSIGN_OR_RETURN(std::vector<int32_t> bounds, SplitLayers(c, stages));
  if (stage < 0 || stage >= stages) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline stage ", stage, " of ", stages, " does not exist"));
  }
  PipelineStage p;
  p.stages = stages;
  p.stage = stage;
  p.layer_begin = bounds[stage];
  p.layer_end = bounds[stage + 1];
  return p;
}

bool OwnsTensor(const ModelConfig& c, const PipelineStage& stage, std::string_view full) {
  absl::string_view name(full.data(), full.size());
  if (absl::ConsumePrefix(&name, "layers.")) {
    const size_t dot = name.find('.');
    int layer = 0;
    if (dot == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dot), &layer)) return true;
    return layer >= stage.layer_begin && layer < stage.layer_end;
  }
  if (name == "embed_tokens.weight") return stage.first() || (stage.last() && c.tie_word_embeddings);
  if (name == "lm_head.weight" || name == "norm.weight") return stage.last();
  return true;
}

std::string DescribeStages(const std::vector<int32_t>& bounds) {
  std::vector<std::string> parts;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    parts.push_back(bounds[s + 1] - bounds[s] == 1 ? absl::StrCat(bounds[s])
                                                   : absl::StrCat(bounds[s], "-", bounds[s + 1] - 1));
  }
  return absl::StrCat("layers ", absl::StrJoin(parts, " | "));
}

}  // namespace tpserve
