// Gemma 4 GGUF metadata -> config.json fields. The layout is llama.cpp's: its converter
// (conversion/gemma.py Gemma4Model over Gemma3Model and TextModel) writes it, and its loader
// (src/models/gemma4.cpp) reads it. Tested by tests/gguf_test.cc and tests/model_test.cc.
#include "worker/gguf_gemma4.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

using json = nlohmann::json;

std::string Key(absl::string_view suffix) { return absl::StrCat("gemma4.", suffix); }

absl::Status KeyError(const GgufFile& f, const std::string& key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": metadata \"", key, "\" ", what));
}

// An optional number: `fallback` when absent (llama.cpp's default for it), an error naming the
// key when it is there but not a number.
absl::StatusOr<double> OptionalFloat(const GgufFile& f, const std::string& key, double fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return f.GetFloat(key);
}
absl::StatusOr<int64_t> OptionalInt(const GgufFile& f, const std::string& key, int64_t fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return f.GetInt(key);
}

// attention.sliding_window_pattern: one bool per layer, true for a sliding layer (the
// converter writes layer_types so), or one bool for every layer.
absl::StatusOr<std::vector<bool>> SlidingLayers(const GgufFile& f, int64_t layers) {
  const std::string key = Key("attention.sliding_window_pattern");
  const json* v = f.Find(key);
  if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat(f.path(), ": metadata \"", key, "\" is missing"));
  if (v->is_boolean()) return std::vector<bool>(layers, v->get<bool>());
  if (!v->is_array() || static_cast<int64_t>(v->size()) != layers) {
    return KeyError(f, key, absl::StrCat("must be one bool per layer (block_count ", layers, "), got ", v->dump()));
  }
  std::vector<bool> sliding;
  for (const json& e : *v) {
    if (!e.is_boolean()) return KeyError(f, key, absl::StrCat("has the entry ", e.dump(), "; expected bools"));
    sliding.push_back(e.get<bool>());
  }
  return sliding;
}

// attention.head_count_kv: one count, or one per layer (the converter writes
// num_key_value_heads on sliding layers, num_global_key_value_heads on full ones). Returns
// {sliding layers' count, full layers' count}: the engine has one count per layer type.
absl::StatusOr<std::pair<int64_t, int64_t>> KvHeads(const GgufFile& f, const std::vector<bool>& sliding,
                                                    int64_t heads) {
  const std::string key = Key("attention.head_count_kv");
  const int64_t layers = static_cast<int64_t>(sliding.size());
  std::vector<int64_t> per_layer(layers, heads);  // llama.cpp: n_head_kv defaults to n_head
  if (const json* v = f.Find(key); v != nullptr) {
    if (v->is_number_integer()) {
      per_layer.assign(layers, v->get<int64_t>());
    } else if (v->is_array() && static_cast<int64_t>(v->size()) == layers) {
      for (int64_t i = 0; i < layers; ++i) {
        if (!(*v)[i].is_number_integer()) return KeyError(f, key, absl::StrCat("has the entry ", (*v)[i].dump()));
        per_layer[i] = (*v)[i].get<int64_t>();
      }
    } else {
      return KeyError(f, key, absl::StrCat("must be an integer or one per layer (block_count ", layers, ")"));
    }
  }
  int64_t by_type[2] = {-1, -1};  // [sliding, full]
  for (int64_t i = 0; i < layers; ++i) {
    int64_t& want = by_type[sliding[i] ? 0 : 1];
    if (want >= 0 && want != per_layer[i]) {
      return KeyError(f, key, absl::StrCat("gives layer ", i, " ", per_layer[i], " KV heads and another ",
                                           sliding[i] ? "sliding" : "full-attention", " layer ", want,
                                           "; tpserve takes one count per layer type, as transformers does"));
    }
    want = per_layer[i];
  }
  return std::pair<int64_t, int64_t>{by_type[0], by_type[1]};
}

// Whether the full-attention layers take their values from the key projection
// (attention_k_eq_v): llama.cpp's Gemma 4 uses K as V on a layer without attn_v, and the
// converter writes no attn_v where transformers has no v_proj.
absl::StatusOr<bool> KEqV(const GgufFile& f, const std::vector<bool>& sliding) {
  int64_t full_with_v = -1, full_without_v = -1;
  for (int64_t i = 0; i < static_cast<int64_t>(sliding.size()); ++i) {
    const std::string v = absl::StrCat("blk.", i, ".attn_v.weight");
    const bool has_v = f.FindTensor(v) != nullptr;
    if (sliding[i] && !has_v) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": tensor \"", v, "\" is missing; in Gemma 4 only full-attention layers take their values "
          "from the keys (attention_k_eq_v), and layer ", i, " is a sliding layer"));
    }
    if (!sliding[i]) (has_v ? full_with_v : full_without_v) = i;
  }
  if (full_with_v >= 0 && full_without_v >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": full-attention layer ", full_with_v, " has tensor \"blk.", full_with_v,
        ".attn_v.weight\" and full-attention layer ", full_without_v,
        " has none; attention_k_eq_v is one setting for every full-attention layer"));
  }
  return full_without_v >= 0;
}

// The full layers' proportional RoPE, which llama.cpp runs as a whole-head rotation divided by
// rope_freqs.weight: 1 for each of the first `rotated` frequencies, 1e30 (no rotation) for the
// rest. Returns partial_rotary_factor = 2 * rotated / head_dim.
absl::StatusOr<double> PartialRotaryFactor(const GgufFile& f, int64_t head_dim) {
  const char* name = "rope_freqs.weight";
  const GgufTensor* t = f.FindTensor(name);
  const int64_t half = head_dim / 2;
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor \"", name,
                                                   "\" is missing (the full-attention layers' proportional RoPE)"));
  }
  if (t->type != GgmlType::kF32 || t->ne.size() != 1 || t->ne[0] != half) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor \"", name, "\" must be F32 of key_length / 2 = ",
                                                   half, " values"));
  }
  std::vector<float> factors(half);
  std::memcpy(factors.data(), t->data, half * sizeof(float));
  int64_t rotated = 0;
  while (rotated < half && factors[rotated] == 1.0f) ++rotated;
  for (int64_t i = rotated; i < half; ++i) {
    if (factors[i] != static_cast<float>(1e30)) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": tensor \"", name, "\" holds ", factors[i], " at ", i,
          "; Gemma 4's proportional RoPE is 1 for each rotated frequency, then 1e30 for the rest"));
    }
  }
  return 2.0 * static_cast<double>(rotated) / static_cast<double>(head_dim);
}

}  // namespace

absl::Status RefuseGemma4Variants(const GgufFile& f) {
  auto refuse = [&](const std::string& key, const json& v, absl::string_view feature) {
    return KeyError(f, key, absl::StrCat("is ", v.dump(), ": ", feature,
                                         " is not supported; tpserve serves the dense Gemma 4 text models "
                                         "(gemma-4-31b's shape)"));
  };
  // llama.cpp requires this key; 0 on the dense models.
  const std::string ple = Key("embedding_length_per_layer_input");
  TP_ASSIGN_OR_RETURN(int64_t ple_size, f.GetInt(ple));
  if (ple_size != 0) return refuse(ple, ple_size, "per-layer input embeddings (hidden_size_per_layer_input)");
  const std::pair<const char*, const char*> kNonzero[] = {
      {"attention.shared_kv_layers", "sharing KV caches across layers (num_kv_shared_layers)"},
      {"expert_count", "a mixture of experts (enable_moe_block)"},
      {"expert_feed_forward_length", "a mixture of experts (moe_intermediate_size)"},
  };
  for (const auto& [suffix, feature] : kNonzero) {
    const std::string key = Key(suffix);
    if (const json* v = f.Find(key); v != nullptr && *v != 0) return refuse(key, *v, feature);
  }
  const std::pair<const char*, const char*> kScalar[] = {
      {"feed_forward_length", "a per-layer feed-forward size (use_double_wide_mlp)"},
      {"attention.head_count", "a per-layer query head count"},
  };
  for (const auto& [suffix, feature] : kScalar) {
    const std::string key = Key(suffix);
    if (const json* v = f.Find(key); v != nullptr && v->is_array()) return refuse(key, *v, feature);
  }
  return absl::OkStatus();
}

absl::Status AddGemma4ConfigFields(const GgufFile& f, json& c) {
  const int64_t hidden = c.at("hidden_size").get<int64_t>();
  const int64_t layers = c.at("num_hidden_layers").get<int64_t>();
  const int64_t heads = std::max<int64_t>(c.at("num_attention_heads").get<int64_t>(), 1);  // checked later
  c["model_type"] = "gemma4_text";
  c["architectures"] = {"Gemma4ForCausalLM"};
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["hidden_size_per_layer_input"] = 0;  // RefuseGemma4Variants checked the file's
  c["num_kv_shared_layers"] = 0;
  c["enable_moe_block"] = false;
  c["use_double_wide_mlp"] = false;

  TP_ASSIGN_OR_RETURN(c["rms_norm_eps"], f.GetFloat(Key("attention.layer_norm_rms_epsilon")));
  TP_ASSIGN_OR_RETURN(c["sliding_window"], f.GetInt(Key("attention.sliding_window")));
  TP_ASSIGN_OR_RETURN(std::vector<bool> sliding, SlidingLayers(f, layers));
  if (sliding.empty() || sliding.back()) {
    return KeyError(f, Key("attention.sliding_window_pattern"),
                    "makes the last layer a sliding one; Gemma 4's last layer is full attention");
  }
  json& types = c["layer_types"] = json::array();
  for (bool s : sliding) types.push_back(s ? "sliding_attention" : "full_attention");

  // Head sizes: key_length for full-attention layers (global_head_dim), key_length_swa for
  // sliding ones (head_dim); llama.cpp requires each value length to equal its key length.
  TP_ASSIGN_OR_RETURN(int64_t head_dim_full, OptionalInt(f, Key("attention.key_length"), hidden / heads));
  TP_ASSIGN_OR_RETURN(int64_t v_full, OptionalInt(f, Key("attention.value_length"), hidden / heads));
  TP_ASSIGN_OR_RETURN(int64_t head_dim_swa, f.GetInt(Key("attention.key_length_swa")));
  TP_ASSIGN_OR_RETURN(int64_t v_swa, f.GetInt(Key("attention.value_length_swa")));
  if (v_full != head_dim_full) {
    return KeyError(f, Key("attention.value_length"), absl::StrCat(v_full, " differs from key_length ", head_dim_full));
  }
  if (v_swa != head_dim_swa) {
    return KeyError(f, Key("attention.value_length_swa"),
                    absl::StrCat(v_swa, " differs from key_length_swa ", head_dim_swa));
  }
  c["head_dim"] = head_dim_swa;
  c["global_head_dim"] = head_dim_full;

  TP_ASSIGN_OR_RETURN(auto kv, KvHeads(f, sliding, heads));
  TP_ASSIGN_OR_RETURN(bool k_eq_v, KEqV(f, sliding));
  if (!k_eq_v && kv.second != kv.first) {
    return KeyError(f, Key("attention.head_count_kv"),
                    absl::StrCat("gives full-attention layers ", kv.second, " KV heads and sliding layers ", kv.first,
                                 ", but the full-attention layers have attn_v: transformers' Gemma 4 takes "
                                 "num_global_key_value_heads only with attention_k_eq_v"));
  }
  c["num_key_value_heads"] = kv.first;
  c["num_global_key_value_heads"] = kv.second;
  c["attention_k_eq_v"] = k_eq_v;

  // RoPE. llama.cpp: freq_base defaults to 10000 and freq_base_swa to freq_base; the converter
  // writes no scaling for Gemma 4 ("proportional" is not a GGUF scaling type), and rotates
  // whole heads, the full layers' partial rotation being rope_freqs.weight.
  TP_ASSIGN_OR_RETURN(double base, OptionalFloat(f, Key("rope.freq_base"), 10000.0));
  TP_ASSIGN_OR_RETURN(double base_swa, OptionalFloat(f, Key("rope.freq_base_swa"), base));
  if (const json* t = f.Find(Key("rope.scaling.type")); t != nullptr && *t != "none") {
    return KeyError(f, Key("rope.scaling.type"),
                    absl::StrCat("is ", t->dump(), "; RoPE scaling is not supported for Gemma 4 GGUF files"));
  }
  TP_ASSIGN_OR_RETURN(int64_t rot_full, OptionalInt(f, Key("rope.dimension_count"), head_dim_full));
  TP_ASSIGN_OR_RETURN(int64_t rot_swa, OptionalInt(f, Key("rope.dimension_count_swa"), head_dim_swa));
  if (rot_full != head_dim_full) {
    return KeyError(f, Key("rope.dimension_count"),
                    absl::StrCat(rot_full, " differs from key_length ", head_dim_full,
                                 " (full-attention layers rotate whole heads, divided by rope_freqs.weight)"));
  }
  if (rot_swa != head_dim_swa) {
    return KeyError(f, Key("rope.dimension_count_swa"),
                    absl::StrCat(rot_swa, " differs from key_length_swa ", head_dim_swa,
                                 ": partial rotation on sliding layers is not supported"));
  }
  TP_ASSIGN_OR_RETURN(double partial, PartialRotaryFactor(f, head_dim_full));
  c["rope_parameters"] = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", base_swa}}},
      {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", partial}, {"rope_theta", base}}},
  };
  // Absent means 30 to llama.cpp (its hparams default), which caps every Gemma 4 so.
  TP_ASSIGN_OR_RETURN(c["final_logit_softcapping"], OptionalFloat(f, Key("final_logit_softcapping"), 30.0));
  return absl::OkStatus();
}

}  // namespace tpserve
