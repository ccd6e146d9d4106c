// Built-in model shapes for --load-format dummy, written as config.json text so they go
// through the same parser as real checkpoints. Tested by tests/model_config_test.cc.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/model_config.h"

namespace tpserve {
namespace {

// Gemma 4 31B dense (google/gemma-4-31b): 60 layers, 5 sliding then 1 full, repeated.
constexpr char kGemma4_31B[] = R"({
  "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "torch_dtype": "bfloat16",
  "vocab_size": 262144, "hidden_size": 5376, "intermediate_size": 21504,
  "num_hidden_layers": 60, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256,
  "global_head_dim": 512, "num_global_key_value_heads": 4, "attention_k_eq_v": true,
  "sliding_window": 1024, "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-6,
  "max_position_embeddings": 262144, "hidden_size_per_layer_input": 0, "tie_word_embeddings": true,
  "hidden_activation": "gelu_pytorch_tanh", "bos_token_id": 2, "eos_token_id": [1, 106],
  "rope_parameters": {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}
})";

// About 1B parameters with the 31B's structure, for CPU benchmarks.
constexpr char kGemma4_1B[] = R"({
  "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "torch_dtype": "bfloat16",
  "vocab_size": 262144, "hidden_size": 1536, "intermediate_size": 8192,
  "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
  "global_head_dim": 512, "num_global_key_value_heads": 2, "attention_k_eq_v": true,
  "sliding_window": 1024, "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-6,
  "max_position_embeddings": 32768, "hidden_size_per_layer_input": 0, "tie_word_embeddings": true,
  "hidden_activation": "gelu_pytorch_tanh", "bos_token_id": 2, "eos_token_id": [1, 106]
})";

// A few MB, for tests and the README's demo.
constexpr char kGemma4Tiny[] = R"({
  "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "torch_dtype": "float32",
  "vocab_size": 4096, "hidden_size": 128, "intermediate_size": 256,
  "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "global_head_dim": 64, "num_global_key_value_heads": 1, "attention_k_eq_v": true,
  "sliding_window": 16, "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-6,
  "max_position_embeddings": 4096, "hidden_size_per_layer_input": 0, "tie_word_embeddings": true,
  "hidden_activation": "gelu_pytorch_tanh", "bos_token_id": 2, "eos_token_id": 1
})";

const std::map<std::string, const char*>& Presets() {
  static const auto* m = new std::map<std::string, const char*>{
      {"gemma-4-31b", kGemma4_31B}, {"gemma-4-1b", kGemma4_1B}, {"gemma-4-tiny", kGemma4Tiny}};
  return *m;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [k, v] : Presets()) names.push_back(k);
  return names;
}

absl::StatusOr<ModelConfig> PresetModelConfig(std::string_view name) {
  auto it = Presets().find(std::string(name));
  if (it == Presets().end()) {
    return absl::NotFoundError(absl::StrCat("unknown built-in model \"", std::string(name), "\"; built-in models: ",
                                            absl::StrJoin(PresetNames(), ", ")));
  }
  return ParseModelConfig(it->second, absl::StrCat("built-in model ", std::string(name)));
}

}  // namespace tpserve
