// Model's loading: the head split across ranks, its validation, and each rank reading its
// slices of every weight. Tested by tests/model_test.cc (TP 1, 2, 4) and
// tests/model_config_test.cc (uneven splits).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/model.h"
#include "worker/model_layer.h"

namespace tpserve {

absl::StatusOr<HeadShard> ShardHeads(int32_t num_heads, int32_t num_kv_heads, int rank, int tp, int layer) {
  if (num_heads % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_attention_heads ", num_heads,
                                                   " is not divisible by tensor-parallel size ", tp));
  }
  HeadShard s;
  s.q_heads = num_heads / tp;
  s.q_head0 = rank * s.q_heads;
  if (num_kv_heads % tp == 0) {
    s.kv_heads = num_kv_heads / tp;
    s.kv_head0 = rank * s.kv_heads;
  } else if (tp % num_kv_heads == 0) {
    // More ranks than KV heads: each rank keeps the one KV head its query heads read.
    s.kv_heads = 1;
    s.kv_head0 = rank / (tp / num_kv_heads);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": num_key_value_heads ", num_kv_heads,
                                                   " and tensor-parallel size ", tp,
                                                   " do not divide one another"));
  }
  return s;
}

absl::Status ValidateTensorParallel(const ModelConfig& c, int tp) {
  if (tp < 1) return absl::InvalidArgumentError("tensor-parallel size must be at least 1");
  if (c.intermediate_size % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("intermediate_size ", c.intermediate_size,
                                                   " is not divisible by tensor-parallel size ", tp));
  }
  if (c.vocab_size < tp) return absl::InvalidArgumentError("vocab_size is smaller than the tensor-parallel size");
  for (int i = 0; i < c.num_layers; ++i) {
    TP_RETURN_IF_ERROR(ShardHeads(c.num_heads, c.layers[i].num_kv_heads, 0, tp, i).status());
  }
  return absl::OkStatus();
}

absl::Status Model::LoadWeights(const WeightSource& source) {
  const ModelConfig& c = config_;
  const int rank = comm_.rank(), tp = comm_.size();
  weight_dtype_ = options_.weight_dtype.value_or(c.torch_dtype);
  LoadContext ctx{source, backend_, weight_dtype_, options_.keep_quantized, &weight_formats_};
  const int64_t H = c.hidden_size;

  // transformers multiplies by the scale cast to the weight dtype (sqrt(5376) -> 73.5 in bf16).
  embed_scale_ = c.embed_scale;
  if (weight_dtype_ == DType::kBF16) embed_scale_ = Bf16ToF32(F32ToBf16(embed_scale_));
  if (weight_dtype_ == DType::kF16) embed_scale_ = F16ToF32(F32ToF16(embed_scale_));

  // Pipeline stages: the first embeds; the last holds the final norm and the LM head (the
  // embedding itself when tied). One stage is both.
  const PipelineStage& stage = options_.pipeline;
  if (OwnsTensor(c, stage, "embed_tokens.weight")) {
    TP_ASSIGN_OR_RETURN(embed_, VocabParallelEmbedding::Load(ctx, "embed_tokens.weight", c.vocab_size, H, rank, tp));
  }
  if (stage.last() && !c.tie_word_embeddings) {
    if (!source.Has("lm_head.weight")) {
      return absl::NotFoundError(absl::StrCat(source.Describe(),
                                              ": missing tensor \"lm_head.weight\" (tie_word_embeddings is false)"));
    }
    TP_ASSIGN_OR_RETURN(auto head, VocabParallelEmbedding::Load(ctx, "lm_head.weight", c.vocab_size, H, rank, tp));
    lm_head_.emplace(std::move(head));
  }
  if (stage.last()) {
    TP_ASSIGN_OR_RETURN(final_norm_, LoadVector(ctx, "norm.weight", H));
  }

  const int64_t I = c.intermediate_size / tp;
  for (int i = stage.layer_begin; i < stage.layer_end; ++i) {
    auto L = std::make_unique<Layer>();
    L->cfg = c.layers[i];
    const int32_t D = L->cfg.head_dim;
    TP_ASSIGN_OR_RETURN(L->heads, ShardHeads(c.num_heads, L->cfg.num_kv_heads, rank, tp, i));
    const std::string p = absl::StrCat("layers.", i, ".");
    const std::string a = p + "self_attn.";
    TP_ASSIGN_OR_RETURN(L->input_norm, LoadVector(ctx, p + "input_layernorm.weight", H));
    TP_ASSIGN_OR_RETURN(L->post_attn_norm, LoadVector(ctx, p + "post_attention_layernorm.weight", H));
    if (c.sandwich_norms) {
      TP_ASSIGN_OR_RETURN(L->pre_ffn_norm, LoadVector(ctx, p + "pre_feedforward_layernorm.weight", H));
      TP_ASSIGN_OR_RETURN(L->post_ffn_norm, LoadVector(ctx, p + "post_feedforward_layernorm.weight", H));
    }
    if (c.qk_norm) {
      TP_ASSIGN_OR_RETURN(L->q_norm, LoadVector(ctx, a + "q_norm.weight", D));
      TP_ASSIGN_OR_RETURN(L->k_norm, LoadVector(ctx, a + "k_norm.weight", D));
    }
    const int64_t q_rows = static_cast<int64_t>(c.num_heads) * D;
    const int64_t kv_rows = static_cast<int64_t>(L->cfg.num_kv_heads) * D;
    auto bias = [&](const char* n) {
      return c.qkv_bias ? std::vector<std::string>{a + n + "_proj.bias"} : std::vector<std::string>{};
    };
    // One fused projection: decode reads the three weights in one pass.
    std::vector<RowRange> qkv = {{a + "q_proj.weight", q_rows, L->heads.q_head0 * D, L->heads.q_heads * D},
                                 {a + "k_proj.weight", kv_rows, L->heads.kv_head0 * D, L->heads.kv_heads * D}};
    std::vector<std::string> qkv_bias = bias("q"), k_bias = bias("k"), v_bias = bias("v");
    qkv_bias.insert(qkv_bias.end(), k_bias.begin(), k_bias.end());
    if (!L->cfg.k_eq_v) {
      qkv.push_back({a + "v_proj.weight", kv_rows, L->heads.kv_head0 * D, L->heads.kv_heads * D});
      qkv_bias.insert(qkv_bias.end(), v_bias.begin(), v_bias.end());
    }
    TP_ASSIGN_OR_RETURN(L->qkv_proj, ColumnParallelLinear::Load(ctx, qkv, H, qkv_bias, /*split_outputs=*/true));
    TP_ASSIGN_OR_RETURN(L->o_proj,
                        RowParallelLinear::Load(ctx, a + "o_proj.weight", H, q_rows, L->heads.q_head0 * D,
                                                L->heads.q_heads * D, c.o_proj_bias ? a + "o_proj.bias" : ""));
    const int64_t full_i = c.intermediate_size;
    TP_ASSIGN_OR_RETURN(L->gate_up_proj,
                        ColumnParallelLinear::Load(ctx,
                                                   {{p + "mlp.gate_proj.weight", full_i, rank * I, I},
                                                    {p + "mlp.up_proj.weight", full_i, rank * I, I}},
                                                   H, {}));
    TP_ASSIGN_OR_RETURN(L->down_proj, RowParallelLinear::Load(ctx, p + "mlp.down_proj.weight", H, full_i, rank * I, I));
    if (c.layer_scalar) {
      TP_RETURN_IF_ERROR(source.Read(SliceRequest{p + "layer_scalar", {1}, 0, 1, 0, 1}, DType::kF32, &L->layer_scalar));
    }
    TP_ASSIGN_OR_RETURN(L->inv_freq, UploadF32(backend_, RopeInvFreq(L->cfg.rope, D)));
    layers_.push_back(std::move(L));
  }
  weight_bytes_ = weight_formats_.total_bytes();
  return absl::OkStatus();
}

}  // namespace tpserve
