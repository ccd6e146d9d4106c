// config.json parsing: every architecture's fields and defaults, both Gemma 4 config
// forms, legacy RoPE fields, presets, and clear errors that name the file and field.
#include "worker/model_config.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(ModelConfig, Gemma4PublishedForm) {
  auto c = LoadModelConfig(std::string(TPSERVE_FIXTURES) + "/models/gemma4_text");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Arch::kGemma4);
  ASSERT_EQ(c->num_layers, 6);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(c->layers[i].sliding);
    EXPECT_EQ(c->layers[i].sliding_window, 8);
    EXPECT_EQ(c->layers[i].head_dim, 16);
    EXPECT_EQ(c->layers[i].num_kv_heads, 4);
    EXPECT_FALSE(c->layers[i].k_eq_v);
    EXPECT_EQ(c->layers[i].rope.type, "default");
  }
  EXPECT_FALSE(c->layers[5].sliding);
  EXPECT_EQ(c->layers[5].head_dim, 32);
  EXPECT_EQ(c->layers[5].num_kv_heads, 2);
  EXPECT_TRUE(c->layers[5].k_eq_v);
  EXPECT_EQ(c->layers[5].rope.type, "proportional");
  EXPECT_EQ(c->kv_group_windows, (std::vector<int32_t>{8, 0}));
  EXPECT_EQ(c->layers[5].kv_group, 1);
  EXPECT_FLOAT_EQ(c->final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c->attn_scale, 1.0f);
  EXPECT_TRUE(c->v_norm && c->layer_scalar && c->sandwich_norms && c->tie_word_embeddings);
}

TEST(ModelConfig, Gemma4PerLayerConfigForm) {
  const char* json = R"({"model_type": "gemma4_text", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "hidden_size_per_layer_input": 0, "attention_k_eq_v": true,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
    "per_layer_config": {"2": {"head_dim": 16, "num_key_value_heads": 1}}})";
  auto c = ParseModelConfig(json, "x/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layers[2].head_dim, 16);
  EXPECT_EQ(c->layers[2].num_kv_heads, 1);
  EXPECT_TRUE(c->layers[2].k_eq_v);
  EXPECT_EQ(c->layers[0].head_dim, 8);
}

TEST(ModelConfig, ProportionalRopeFrequencies) {
  RopeConfig r;
  r.type = "proportional";
  r.theta = 1e6;
  r.partial_rotary_factor = 0.25;
  std::vector<float> f = RopeInvFreq(r, 512);
  ASSERT_EQ(f.size(), 256u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[63], 1.0 / std::pow(1e6, 126.0 / 512.0), 1e-9);
  for (int i = 64; i < 256; ++i) EXPECT_EQ(f[i], 0.0f) << i;
}

TEST(ModelConfig, LegacyRopeFieldsAndQwen) {
  const char* llama = R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}})";
  auto c = ParseModelConfig(llama, "llama/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layers[0].rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c->layers[0].rope.theta, 500000.0);
  EXPECT_EQ(c->layers[0].head_dim, 8);
  EXPECT_FALSE(c->tie_word_embeddings);
  const char* gemma3 = R"({"model_type": "gemma3_text", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "sliding_window": 16, "sliding_window_pattern": 3, "rope_local_base_freq": 10000.0,
    "rope_theta": 1000000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "query_pre_attn_scalar": 64})";
  auto g = ParseModelConfig(gemma3, "g/config.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->layers[0].sliding);
  EXPECT_FALSE(g->layers[2].sliding);
  EXPECT_EQ(g->layers[2].rope.type, "linear");
  EXPECT_DOUBLE_EQ(g->layers[0].rope.theta, 10000.0);
  EXPECT_FLOAT_EQ(g->attn_scale, 0.125f);
  EXPECT_EQ(g->norm_kind, cpu::NormKind::kOnePlusScale);
}

TEST(ModelConfig, ErrorsNameFileAndField) {
  auto bad_json = ParseModelConfig("{not json", "m/config.json");
  ASSERT_FALSE(bad_json.ok());
  EXPECT_NE(Msg(bad_json.status()).find("m/config.json"), std::string::npos);

  auto arch = ParseModelConfig(R"({"model_type": "mamba", "vocab_size": 1})", "m/config.json");
  ASSERT_FALSE(arch.ok());
  EXPECT_NE(Msg(arch.status()).find("unsupported architecture"), std::string::npos);
  EXPECT_NE(Msg(arch.status()).find("mamba"), std::string::npos);

  auto missing = ParseModelConfig(R"({"model_type": "llama", "vocab_size": 64})", "m/config.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(Msg(missing.status()).find("\"hidden_size\""), std::string::npos) << missing.status();

  auto wrong_type = ParseModelConfig(R"({"model_type": "llama", "vocab_size": "many", "hidden_size": 8})", "m/config.json");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(Msg(wrong_type.status()).find("\"vocab_size\""), std::string::npos);

  auto moe = ParseModelConfig(R"({"model_type": "gemma4_text", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "hidden_size_per_layer_input": 0,
    "enable_moe_block": true})", "m/config.json");
  ASSERT_FALSE(moe.ok());
  EXPECT_NE(Msg(moe.status()).find("enable_moe_block"), std::string::npos);

  auto ple = ParseModelConfig(R"({"model_type": "gemma4_text", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4})", "m/config.json");
  ASSERT_FALSE(ple.ok());
  EXPECT_NE(Msg(ple.status()).find("hidden_size_per_layer_input"), std::string::npos);

  auto rope = ParseModelConfig(R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})", "m/config.json");
  ASSERT_FALSE(rope.ok());
  EXPECT_NE(Msg(rope.status()).find("yarn"), std::string::npos);

  auto missing_file = LoadModelConfig("/nonexistent/model");
  ASSERT_FALSE(missing_file.ok());
  EXPECT_NE(Msg(missing_file.status()).find("/nonexistent/model/config.json"), std::string::npos);
}

// attention_bias puts a bias on o_proj as well as q/k/v, except in Qwen2 (q/k/v only,
// whatever the config says), as in transformers' modeling files.
TEST(ModelConfig, AttentionBiasCoversOProjExceptQwen2) {
  for (const char* name : {"llama3_attn_bias", "gemma3_attn_bias"}) {
    auto c = LoadModelConfig(std::string(TPSERVE_FIXTURES) + "/models/" + name);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->qkv_bias) << name;
    EXPECT_TRUE(c->o_proj_bias) << name;
  }
  for (const char* name : {"llama3", "qwen3", "gemma3_text", "gemma4_text"}) {
    auto c = LoadModelConfig(std::string(TPSERVE_FIXTURES) + "/models/" + name);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FALSE(c->qkv_bias || c->o_proj_bias) << name;
  }
  auto qwen2 = LoadModelConfig(std::string(TPSERVE_FIXTURES) + "/models/qwen2");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_FALSE(qwen2->o_proj_bias);
  const std::string base = R"({"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "attention_bias": true, "model_type": )";
  auto qwen2_bias = ParseModelConfig(base + R"("qwen2"})", "q/config.json");
  ASSERT_TRUE(qwen2_bias.ok()) << qwen2_bias.status();
  EXPECT_FALSE(qwen2_bias->o_proj_bias);
  auto qwen3_bias = ParseModelConfig(base + R"("qwen3"})", "q/config.json");
  ASSERT_TRUE(qwen3_bias.ok()) << qwen3_bias.status();
  EXPECT_TRUE(qwen3_bias->qkv_bias && qwen3_bias->o_proj_bias);
  // One bias of hidden_size per layer on top of q/k/v's.
  auto llama = ParseModelConfig(base + R"("llama"})", "l/config.json");
  auto llama_plain = ParseModelConfig(R"({"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "model_type": "llama"})", "l/config.json");
  ASSERT_TRUE(llama.ok() && llama_plain.ok());
  EXPECT_EQ(llama->ParameterCount() - llama_plain->ParameterCount(), 32 + 32 + 32 + 32);
  // MLP biases are not implemented.
  auto mlp_bias = ParseModelConfig(R"({"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "model_type": "llama", "mlp_bias": true})", "l/config.json");
  ASSERT_FALSE(mlp_bias.ok());
  EXPECT_NE(Msg(mlp_bias.status()).find("mlp_bias"), std::string::npos) << mlp_bias.status();
}

// EmbeddingGemma-style bidirectional attention would be computed causally: refused.
TEST(ModelConfig, Gemma3BidirectionalAttentionIsRefused) {
  const std::string base = R"({"model_type": "gemma3_text", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8)";
  auto bidi = ParseModelConfig(base + R"(, "use_bidirectional_attention": true})", "embeddinggemma/config.json");
  ASSERT_FALSE(bidi.ok());
  EXPECT_EQ(bidi.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(bidi.status()).find("embeddinggemma/config.json"), std::string::npos) << bidi.status();
  EXPECT_NE(Msg(bidi.status()).find("\"use_bidirectional_attention\" is true"), std::string::npos) << bidi.status();
  EXPECT_NE(Msg(bidi.status()).find("not support"), std::string::npos) << bidi.status();
  for (const char* ok : {"false", "null"}) {
    auto causal = ParseModelConfig(base + ", \"use_bidirectional_attention\": " + ok + "}", "g/config.json");
    EXPECT_TRUE(causal.ok()) << ok << ": " << causal.status();
  }
  EXPECT_TRUE(ParseModelConfig(base + "}", "g/config.json").ok());
}

TEST(ModelConfig, Presets) {
  auto c = PresetModelConfig("gemma-4-31b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_layers, 60);
  int full = 0;
  for (const auto& l : c->layers) full += !l.sliding;
  EXPECT_EQ(full, 10);
  EXPECT_EQ(c->layers[5].head_dim, 512);
  EXPECT_EQ(c->layers[5].num_kv_heads, 4);
  EXPECT_EQ(c->layers[0].num_kv_heads, 16);
  EXPECT_EQ(c->layers[0].sliding_window, 1024);
  const double billions = c->ParameterCount() / 1e9;
  EXPECT_GT(billions, 29.0);
  EXPECT_LT(billions, 33.0);
  // Attention over a 2048-token prompt: 50 sliding layers (32 heads x 256, window 1024:
  // 1024 * 1025 / 2 + 1024 * 1024 keys seen) and 10 full ones (32 x 512, 2048 * 2049 / 2).
  const double sliding = 4.0 * 32 * 256 * (1024.0 * 1025 / 2 + 1024.0 * 1024);
  const double global = 4.0 * 32 * 512 * (2048.0 * 2049 / 2);
  EXPECT_DOUBLE_EQ(c->PrefillAttentionFlops(2048), 50 * sliding + 10 * global);
  EXPECT_DOUBLE_EQ(c->PrefillAttentionFlops(1), 50 * 4.0 * 32 * 256 + 10 * 4.0 * 32 * 512);  // one key each
  EXPECT_EQ(c->PrefillAttentionFlops(0), 0.0);
  auto small = PresetModelConfig("gemma-4-1b");
  ASSERT_TRUE(small.ok());
  EXPECT_NEAR(small->ParameterCount() / 1e9, 1.0, 0.25);
  auto unknown = PresetModelConfig("gpt-5");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(Msg(unknown.status()).find("gemma-4-31b"), std::string::npos);
}

// Benchmarks truncate shapes that do not fit (spec_decode_bench --layers, engine_bench
// --num_layers): the first n layers, each KV group keeping one.
TEST(ModelConfig, KeepFirstLayers) {
  auto c = PresetModelConfig("gemma-4-31b");
  ASSERT_TRUE(c.ok()) << c.status();
  const ModelConfig full = *c;
  ASSERT_TRUE(KeepFirstLayers(*c, 0).ok());
  EXPECT_EQ(c->num_layers, 60);
  ASSERT_TRUE(KeepFirstLayers(*c, 6).ok());
  EXPECT_EQ(c->num_layers, 6);
  ASSERT_EQ(c->layers.size(), 6u);
  int sliding = 0;
  for (const auto& l : c->layers) sliding += l.sliding;
  EXPECT_EQ(sliding, 5);
  EXPECT_EQ(c->kv_group_windows, full.kv_group_windows);
  // Everything but the layers stays: 6 of 60 layers, the embedding whole.
  const int64_t embedding = full.vocab_size * full.hidden_size + full.hidden_size;
  EXPECT_EQ(c->ParameterCount() - embedding, (full.ParameterCount() - embedding) / 10);
  // Five sliding layers leave the full-attention group without a layer.
  ModelConfig five = full;
  const absl::Status st = KeepFirstLayers(five, 5);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(st).find("window 0"), std::string::npos) << st;
  EXPECT_EQ(five.num_layers, 60);
}

}  // namespace
}  // namespace tpserve
