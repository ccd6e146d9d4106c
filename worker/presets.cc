// Built-in model shapes for --load-format dummy, targets and their MTP assistants, written
// as config.json text so they go through the same parsers as real checkpoints. Tested by
// tests/model_config_test.cc and tests/mtp_drafter_test.cc.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base.h"
#include "worker/model_config.h"
#include "worker/mtp_drafter_config.h"

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

// MTP assistants (model_type gemma4_assistant). transformers holds no published assistant's
// sizes; these are assumptions (docs/mtp_drafter.md, "Built-in assistant shapes"): 4 layers
// (3 sliding, then the full one), the target's query heads and K/V geometry, intermediate
// 8 x hidden, the dense tied head. For the 31B, hidden 1024 (as third parties describe the
// published assistant) makes 469.5M parameters, the 470M stated for it (0.94 GB in bf16).
constexpr char kGemma4_31B_Assistant[] = R"({
  "architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant",
  "backbone_hidden_size": 5376, "use_ordered_embeddings": false, "tie_word_embeddings": true,
  "text_config": {
    "model_type": "gemma4_text", "torch_dtype": "bfloat16",
    "vocab_size": 262144, "hidden_size": 1024, "intermediate_size": 8192,
    "num_hidden_layers": 4, "num_kv_shared_layers": 4,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256,
    "global_head_dim": 512, "num_global_key_value_heads": 4, "attention_k_eq_v": true,
    "sliding_window": 1024, "rms_norm_eps": 1e-6, "max_position_embeddings": 262144,
    "hidden_size_per_layer_input": 0, "tie_word_embeddings": true, "hidden_activation": "gelu_pytorch_tanh",
    "rope_parameters": {
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
      "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}}
})";

// For gemma-4-1b (hidden 1536): hidden 256, the published assistants' width for targets
// of hidden 1536 (E2B), with the dense head (the centroid head costs the same on the CPU
// backend, which computes every logit). 79.8M parameters.
constexpr char kGemma4_1B_Assistant[] = R"({
  "architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant",
  "backbone_hidden_size": 1536, "use_ordered_embeddings": false, "tie_word_embeddings": true,
  "text_config": {
    "model_type": "gemma4_text", "torch_dtype": "bfloat16",
    "vocab_size": 262144, "hidden_size": 256, "intermediate_size": 2048,
    "num_hidden_layers": 4, "num_kv_shared_layers": 4,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "global_head_dim": 512, "num_global_key_value_heads": 2, "attention_k_eq_v": true,
    "sliding_window": 1024, "rms_norm_eps": 1e-6, "max_position_embeddings": 32768,
    "hidden_size_per_layer_input": 0, "tie_word_embeddings": true, "hidden_activation": "gelu_pytorch_tanh"}
})";

// For gemma-4-tiny: tests and demos.
constexpr char kGemma4TinyAssistant[] = R"({
  "architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant",
  "backbone_hidden_size": 128, "use_ordered_embeddings": false, "tie_word_embeddings": true,
  "text_config": {
    "model_type": "gemma4_text", "torch_dtype": "float32",
    "vocab_size": 4096, "hidden_size": 64, "intermediate_size": 512,
    "num_hidden_layers": 4, "num_kv_shared_layers": 4,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "global_head_dim": 64, "num_global_key_value_heads": 1, "attention_k_eq_v": true,
    "sliding_window": 16, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096,
    "hidden_size_per_layer_input": 0, "tie_word_embeddings": true, "hidden_activation": "gelu_pytorch_tanh"}
})";

const std::map<std::string, const char*>& AssistantPresets() {
  static const auto* m = new std::map<std::string, const char*>{{"gemma-4-31b-assistant", kGemma4_31B_Assistant},
                                                                {"gemma-4-1b-assistant", kGemma4_1B_Assistant},
                                                                {"gemma-4-tiny-assistant", kGemma4TinyAssistant}};
  return *m;
}

const std::map<std::string, const char*>& Presets() {
  static const auto* m = new std::map<std::string, const char*>{
      {"gemma-4-31b", kGemma4_31B}, {"gemma-4-1b", kGemma4_1B}, {"gemma-4-tiny", kGemma4Tiny}};
  return *m;
}

using PresetTable = std::map<std::string, const char*>;

std::vector<std::string> Names(const PresetTable& table) {
  std::vector<std::string> names;
  for (const auto& [k, v] : table) names.push_back(k);
  return names;
}

// The config.json text of `name` in `table`, or NotFound listing the table's names; `kind`
// ("model", "assistant") names the table in the error.
absl::StatusOr<const char*> FindPreset(const PresetTable& table, std::string_view name, const char* kind) {
  auto it = table.find(std::string(name));
  if (it == table.end()) {
    return absl::NotFoundError(absl::StrCat("unknown built-in ", kind, " \"", std::string(name), "\"; built-in ",
                                            kind, "s: ", absl::StrJoin(Names(table), ", ")));
  }
  return it->second;
}

}  // namespace

std::vector<std::string> PresetNames() { return Names(Presets()); }

absl::StatusOr<ModelConfig> PresetModelConfig(std::string_view name) {
  TP_ASSIGN_OR_RETURN(const char* text, FindPreset(Presets(), name, "model"));
  return ParseModelConfig(text, absl::StrCat("built-in model ", std::string(name)));
}

std::vector<std::string> MtpDrafterPresetNames() { return Names(AssistantPresets()); }

absl::StatusOr<MtpDrafterConfig> PresetMtpDrafterConfig(std::string_view name) {
  TP_ASSIGN_OR_RETURN(const char* text, FindPreset(AssistantPresets(), name, "MTP assistant"));
  return ParseMtpDrafterConfig(text, absl::StrCat("built-in assistant ", std::string(name)));
}

}  // namespace tpserve
