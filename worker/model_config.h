// The model's architecture as the engine needs it, parsed from a Hugging Face
// config.json (or a built-in preset) and validated. Tested by tests/model_config_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve {

enum class Arch : uint8_t { kLlama, kQwen2, kQwen3, kGemma3, kGemma4 };
std::string_view ArchName(Arch a);

// One layer's rotary embedding, reduced to what the kernel needs.
struct RopeConfig {
  std::string type = "default";  // default | linear | llama3 | proportional
  double theta = 10000.0;
  double factor = 1.0;               // linear, llama3, proportional
  double low_freq_factor = 1.0;      // llama3
  double high_freq_factor = 4.0;     // llama3
  int64_t original_max_position = 8192;  // llama3
  double partial_rotary_factor = 1.0;    // proportional only
  // inv_freq[i] /= freq_factors[i] when not empty (head_dim / 2 entries): the per-frequency
  // divisors a GGUF file stores as rope_freqs.weight in place of Llama 3's rope parameters.
  std::vector<float> freq_factors;
};

struct LayerConfig {
  bool sliding = false;        // sliding-window attention layer
  int32_t sliding_window = 0;  // > 0 on sliding layers: key j visible to query i iff i - j < window
  int32_t head_dim = 0;
  int32_t num_kv_heads = 0;
  bool k_eq_v = false;  // no v_proj: values are the raw key projection (Gemma 4 full layers)
  RopeConfig rope;
  int32_t kv_group = 0;  // index into ModelConfig::kv_group_windows
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string model_type;    // as in config.json (text part)
  std::string architecture;  // architectures[0], e.g. Gemma4ForConditionalGeneration
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;  // query heads (same on every layer)
  float rms_norm_eps = 1e-6f;
  int64_t max_position_embeddings = 0;

  cpu::NormKind norm_kind = cpu::NormKind::kScale;
  cpu::Activation activation = cpu::Activation::kSilu;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;      // q/k/v_proj biases (Qwen2; attention_bias elsewhere)
  bool o_proj_bias = false;   // o_proj bias (attention_bias: Llama, Qwen3, Gemma 3/4; never Qwen2)
  bool qk_norm = false;       // per-head RMSNorm on q and k (Qwen3, Gemma 3/4)
  bool v_norm = false;        // weightless per-head RMSNorm on v (Gemma 4)
  bool sandwich_norms = false;  // post-attention and post-feedforward norms (Gemma)
  bool layer_scalar = false;  // per-layer scalar multiplying the layer output (Gemma 4)
  float embed_scale = 1.0f;   // multiplies the embedding (Gemma: sqrt(hidden_size))
  float attn_scale = 1.0f;    // multiplies q·k
  float attn_softcap = 0.0f;  // 0: none
  float final_softcap = 0.0f; // 0: none

  std::vector<LayerConfig> layers;
  // KV cache groups: layers with the same attention window share block tables. Entry g
  // is group g's window (0 = full attention). Gemma 4: {0, 1024}; Llama: {0}.
  std::vector<int32_t> kv_group_windows;

  DType torch_dtype = DType::kBF16;  // checkpoint's declared dtype
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;

  int64_t ParameterCount() const;  // text model only
  // FLOPs of attention's two products (Q·K^T and P·V, 2 per multiply-add) over a causal
  // prompt of `tokens` tokens from position 0, every layer, sliding windows counted: what
  // 2 x params x tokens leaves out of a prefill's work.
  double PrefillAttentionFlops(int64_t tokens) const;
  int32_t max_head_dim() const;
};

// Parses config.json text. `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source);
// Reads DIR/config.json (and DIR/generation_config.json for eos ids when present).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);
// Built-in shapes for --load-format dummy: "gemma-4-31b", "gemma-4-1b" (a Gemma 4-shaped
// model of about 1B parameters for CPU benchmarks), "gemma-4-tiny" (tests, demos).
absl::StatusOr<ModelConfig> PresetModelConfig(std::string_view name);
std::vector<std::string> PresetNames();

// Truncates `config` to its first n layers (benchmarks of shapes that do not fit: per-layer
// costs scale with the layer count, the embedding and LM head stay whole). n <= 0 or
// n >= num_layers keeps them all. An InvalidArgument error when the first n layers leave a
// KV group without a layer (for Gemma 4: at least one sliding and one full layer).
absl::Status KeepFirstLayers(ModelConfig& config, int32_t n);

// inv_freq[head_dim / 2] for the layer's RoPE, computed as transformers computes it.
std::vector<float> RopeInvFreq(const RopeConfig& rope, int32_t head_dim);

}  // namespace tpserve
