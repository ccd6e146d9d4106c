// Parses Hugging Face config.json into ModelConfig, with the defaults transformers uses
// for each architecture. Tested by tests/model_config_test.cc.
#include "worker/model_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using json = nlohmann::json;

// Typed field access with errors that name the file and the field.
class Fields {
 public:
  Fields(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  template <typename T>
  absl::StatusOr<T> Get(const char* key) const {
    if (!Has(key)) return absl::InvalidArgumentError(absl::StrCat(source_, ": missing field \"", key, "\""));
    return As<T>(j_[key], key);
  }
  template <typename T>
  absl::StatusOr<T> GetOr(const char* key, T def) const {
    if (!Has(key)) return def;
    return As<T>(j_[key], key);
  }
  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field \"", key, "\" ", what));
  }
  const std::string& source() const { return source_; }
  const json& raw() const { return j_; }

 private:
  template <typename T>
  absl::StatusOr<T> As(const json& v, const char* key) const {
    try {
      if constexpr (std::is_same_v<T, bool>) {
        if (!v.is_boolean()) throw std::runtime_error("boolean");
      } else if constexpr (std::is_integral_v<T>) {
        if (!v.is_number_integer()) throw std::runtime_error("integer");
      } else if constexpr (std::is_floating_point_v<T>) {
        if (!v.is_number()) throw std::runtime_error("number");
      } else if constexpr (std::is_same_v<T, std::string>) {
        if (!v.is_string()) throw std::runtime_error("string");
      }
      return v.get<T>();
    } catch (const std::exception& e) {
      return Error(key, absl::StrCat("has the wrong type: expected ", e.what(), ", got ", v.dump()));
    }
  }
  const json& j_;
  std::string source_;
};

#define ASSIGN_FIELD(lhs, expr) TP_ASSIGN_OR_RETURN(lhs, expr)

absl::StatusOr<Arch> ArchFromModelType(const std::string& model_type, const std::string& source) {
  if (model_type == "llama") return Arch::kLlama;
  if (model_type == "qwen2") return Arch::kQwen2;
  if (model_type == "qwen3") return Arch::kQwen3;
  if (model_type == "gemma3" || model_type == "gemma3_text") return Arch::kGemma3;
  if (model_type == "gemma4" || model_type == "gemma4_text") return Arch::kGemma4;
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": unsupported architecture: model_type \"", model_type,
      "\"; supported: llama, qwen2, qwen3, gemma3, gemma3_text, gemma4, gemma4_text"));
}

// Parses one RoPE parameter dict ({"rope_type": ..., "rope_theta": ..., ...}).
absl::StatusOr<RopeConfig> ParseRope(const json& j, const std::string& where, double default_theta) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " must be an object, got ", j.dump()));
  }
  Fields f(j, where);
  RopeConfig r;
  std::string type;
  if (f.Has("rope_type")) {
    ASSIGN_FIELD(type, f.Get<std::string>("rope_type"));
  } else {
    ASSIGN_FIELD(type, f.GetOr<std::string>("type", "default"));
  }
  r.type = type;
  ASSIGN_FIELD(r.theta, f.GetOr<double>("rope_theta", default_theta));
  ASSIGN_FIELD(r.partial_rotary_factor, f.GetOr<double>("partial_rotary_factor", 1.0));
  if (type == "default") {
  } else if (type == "linear") {
    ASSIGN_FIELD(r.factor, f.Get<double>("factor"));
  } else if (type == "llama3") {
    ASSIGN_FIELD(r.factor, f.Get<double>("factor"));
    ASSIGN_FIELD(r.low_freq_factor, f.Get<double>("low_freq_factor"));
    ASSIGN_FIELD(r.high_freq_factor, f.Get<double>("high_freq_factor"));
    ASSIGN_FIELD(r.original_max_position, f.Get<int64_t>("original_max_position_embeddings"));
  } else if (type == "proportional") {
    ASSIGN_FIELD(r.factor, f.GetOr<double>("factor", 1.0));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": unsupported rope_type \"", type, "\"; supported: default, linear, llama3, proportional"));
  }
  if (type != "proportional" && r.partial_rotary_factor != 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": partial_rotary_factor ", r.partial_rotary_factor, " is supported only with rope_type proportional"));
  }
  if (r.theta <= 0 || r.factor <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": rope_theta and factor must be positive"));
  }
  return r;
}

// Global (non per-layer-type) RoPE for Llama/Qwen: rope_parameters, or legacy
// rope_theta + rope_scaling.
absl::StatusOr<RopeConfig> ParseGlobalRope(const Fields& f) {
  double theta;
  ASSIGN_FIELD(theta, f.GetOr<double>("rope_theta", 10000.0));
  if (f.Has("rope_parameters")) return ParseRope(f.raw()["rope_parameters"], f.source() + ": rope_parameters", theta);
  if (f.Has("rope_scaling")) return ParseRope(f.raw()["rope_scaling"], f.source() + ": rope_scaling", theta);
  RopeConfig r;
  r.theta = theta;
  return r;
}

absl::Status CheckUnsupported(const Fields& f, const char* key, const json& allowed) {
  if (!f.Has(key)) return absl::OkStatus();
  if (f.raw()[key] == allowed) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      f.source(), ": unsupported config feature \"", key, "\" = ", f.raw()[key].dump(),
      " (tpserve supports only ", allowed.dump(), ")"));
}

absl::Status ParseLayerTypes(const Fields& f, int32_t num_layers, int32_t default_pattern,
                             std::vector<LayerConfig>& layers) {
  layers.assign(num_layers, LayerConfig{});
  if (f.Has("layer_types")) {
    const json& lt = f.raw()["layer_types"];
    if (!lt.is_array() || static_cast<int32_t>(lt.size()) != num_layers) {
      return f.Error("layer_types", absl::StrCat("must be a list of num_hidden_layers (", num_layers, ") strings"));
    }
    for (int32_t i = 0; i < num_layers; ++i) {
      if (lt[i] == "sliding_attention") {
        layers[i].sliding = true;
      } else if (lt[i] == "full_attention") {
        layers[i].sliding = false;
      } else {
        return f.Error("layer_types", absl::StrCat("entry ", i, " is ", lt[i].dump(),
                                                   "; expected \"sliding_attention\" or \"full_attention\""));
      }
    }
    return absl::OkStatus();
  }
  int32_t pattern = default_pattern;
  if (f.Has("sliding_window_pattern")) {
    ASSIGN_FIELD(pattern, f.Get<int32_t>("sliding_window_pattern"));
  }
  for (int32_t i = 0; i < num_layers; ++i) layers[i].sliding = pattern > 0 && ((i + 1) % pattern) != 0;
  return absl::OkStatus();
}

absl::Status ParseGemma(const Fields& f, ModelConfig& c) {
  const bool g4 = c.arch == Arch::kGemma4;
  c.norm_kind = g4 ? cpu::NormKind::kScale : cpu::NormKind::kOnePlusScale;
  c.qk_norm = true;
  c.v_norm = g4;
  c.sandwich_norms = true;
  c.layer_scalar = g4;
  std::string act;
  ASSIGN_FIELD(act, f.GetOr<std::string>("hidden_activation", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
    return f.Error("hidden_activation", absl::StrCat("is \"", act, "\"; supported: gelu_pytorch_tanh"));
  }
  c.activation = cpu::Activation::kGeluTanh;
  ASSIGN_FIELD(c.tie_word_embeddings, f.GetOr<bool>("tie_word_embeddings", true));
  ASSIGN_FIELD(c.qkv_bias, f.GetOr<bool>("attention_bias", false));
  c.o_proj_bias = c.qkv_bias;  // transformers: o_proj bias=config.attention_bias
  c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));

  int32_t head_dim;
  ASSIGN_FIELD(head_dim, f.GetOr<int32_t>("head_dim", 256));
  int32_t num_kv;
  ASSIGN_FIELD(num_kv, f.GetOr<int32_t>("num_key_value_heads", 4));  // transformers: 4 for Gemma 3 and 4
  int32_t window;
  ASSIGN_FIELD(window, f.GetOr<int32_t>("sliding_window", g4 ? 512 : 4096));
  TP_RETURN_IF_ERROR(ParseLayerTypes(f, c.num_layers, 6, c.layers));
  if (g4 && !c.layers.empty()) c.layers.back().sliding = false;  // transformers forces this

  double final_cap, attn_cap;
  ASSIGN_FIELD(final_cap, f.GetOr<double>("final_logit_softcapping", 0.0));
  ASSIGN_FIELD(attn_cap, f.GetOr<double>("attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(final_cap);
  // transformers (5.x) never passes attn_logit_softcapping to Gemma 3/4 attention.
  (void)attn_cap;
  c.attn_softcap = 0.0f;

  // RoPE per layer type.
  RopeConfig sliding_rope, full_rope;
  if (g4) {
    sliding_rope.theta = 10000.0;
    full_rope.type = "proportional";
    full_rope.partial_rotary_factor = 0.25;
    full_rope.theta = 1000000.0;
  } else {
    double local_theta, theta;
    ASSIGN_FIELD(local_theta, f.GetOr<double>("rope_local_base_freq", 10000.0));
    ASSIGN_FIELD(theta, f.GetOr<double>("rope_theta", 1000000.0));
    sliding_rope.theta = local_theta;
    full_rope.theta = theta;
    if (f.Has("rope_scaling")) {
      TP_ASSIGN_OR_RETURN(full_rope, ParseRope(f.raw()["rope_scaling"], f.source() + ": rope_scaling", theta));
    }
  }
  if (f.Has("rope_parameters")) {
    const json& rp = f.raw()["rope_parameters"];
    if (!rp.is_object()) return f.Error("rope_parameters", "must be an object");
    if (rp.contains("sliding_attention")) {
      TP_ASSIGN_OR_RETURN(sliding_rope, ParseRope(rp["sliding_attention"], f.source() + ": rope_parameters.sliding_attention", sliding_rope.theta));
    }
    if (rp.contains("full_attention")) {
      TP_ASSIGN_OR_RETURN(full_rope, ParseRope(rp["full_attention"], f.source() + ": rope_parameters.full_attention", full_rope.theta));
    }
    if (!rp.contains("sliding_attention") && !rp.contains("full_attention")) {
      TP_ASSIGN_OR_RETURN(full_rope, ParseRope(rp, f.source() + ": rope_parameters", full_rope.theta));
    }
  }

  for (auto& l : c.layers) {
    l.head_dim = head_dim;
    l.num_kv_heads = num_kv;
    l.sliding_window = l.sliding ? window : 0;
    l.rope = l.sliding ? sliding_rope : full_rope;
  }

  if (g4) {
    // Features of other Gemma 4 variants that the dense text path does not implement.
    TP_RETURN_IF_ERROR(CheckUnsupported(f, "num_kv_shared_layers", 0));
    TP_RETURN_IF_ERROR(CheckUnsupported(f, "enable_moe_block", false));
    TP_RETURN_IF_ERROR(CheckUnsupported(f, "use_double_wide_mlp", false));
    // "vision" only changes masks around image tokens, which text-only serving never has.
    if (f.Has("use_bidirectional_attention") && f.raw()["use_bidirectional_attention"] != "vision") {
      return f.Error("use_bidirectional_attention", absl::StrCat("is ", f.raw()["use_bidirectional_attention"].dump(),
                                                                 "; tpserve supports null or \"vision\" (causal text)"));
    }
    const json& ple = f.raw().contains("hidden_size_per_layer_input") ? f.raw()["hidden_size_per_layer_input"] : json(256);
    if (!(ple.is_null() || ple == 0)) {
      // transformers' default is 256 (per-layer embeddings), which the dense text path lacks.
      return f.Error("hidden_size_per_layer_input",
                     absl::StrCat("is ", ple.dump(), " (per-layer input embeddings; absent means 256 in transformers); "
                                  "tpserve supports only 0 or null (the dense 31B-style models)"));
    }
    bool k_eq_v;
    ASSIGN_FIELD(k_eq_v, f.GetOr<bool>("attention_k_eq_v", false));
    if (f.Has("per_layer_config")) {
      const json& plc = f.raw()["per_layer_config"];
      if (!plc.is_object()) return f.Error("per_layer_config", "must be an object of layer index -> overrides");
      for (auto it = plc.begin(); it != plc.end(); ++it) {
        int32_t idx = -1;
        try {
          size_t pos = 0;
          idx = std::stoi(it.key(), &pos);
          if (pos != it.key().size()) idx = -1;
        } catch (...) {
        }
        if (idx < 0 || idx >= c.num_layers) {
          return f.Error("per_layer_config", absl::StrCat("has key \"", it.key(), "\", not a layer index below ", c.num_layers));
        }
        for (auto o = it.value().begin(); o != it.value().end(); ++o) {
          if (o.key() == "head_dim" && o.value().is_number_integer()) {
            c.layers[idx].head_dim = o.value().get<int32_t>();
          } else if (o.key() == "num_key_value_heads" && o.value().is_number_integer()) {
            c.layers[idx].num_kv_heads = o.value().get<int32_t>();
          } else {
            return f.Error("per_layer_config", absl::StrCat("layer ", idx, " overrides \"", o.key(),
                                                            "\", which tpserve does not support (only head_dim, num_key_value_heads)"));
          }
        }
      }
    } else {
      int32_t global_head_dim, global_kv;
      ASSIGN_FIELD(global_head_dim, f.GetOr<int32_t>("global_head_dim", 512));
      ASSIGN_FIELD(global_kv, f.GetOr<int32_t>("num_global_key_value_heads", 0));
      for (auto& l : c.layers) {
        if (l.sliding) continue;
        l.head_dim = global_head_dim;
        if (k_eq_v && global_kv > 0) l.num_kv_heads = global_kv;
      }
    }
    for (auto& l : c.layers) l.k_eq_v = k_eq_v && !l.sliding;
    c.attn_scale = 1.0f;
  } else {
    // EmbeddingGemma's encoder: every token sees every other; the paged kernels are causal.
    if (f.Has("use_bidirectional_attention") && f.raw()["use_bidirectional_attention"] != false) {
      return f.Error("use_bidirectional_attention",
                     absl::StrCat("is ", f.raw()["use_bidirectional_attention"].dump(),
                                  " (EmbeddingGemma-style bidirectional attention), which tpserve does not "
                                  "support; it serves causal decoders only (false or absent)"));
    }
    double qpas;
    ASSIGN_FIELD(qpas, f.GetOr<double>("query_pre_attn_scalar", 256.0));
    c.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  }
  return absl::OkStatus();
}

absl::Status ParseLlamaLike(const Fields& f, ModelConfig& c) {
  std::string act;
  ASSIGN_FIELD(act, f.GetOr<std::string>("hidden_act", "silu"));
  if (act != "silu") return f.Error("hidden_act", absl::StrCat("is \"", act, "\"; supported: silu"));
  c.activation = cpu::Activation::kSilu;
  c.norm_kind = cpu::NormKind::kScale;
  c.qk_norm = c.arch == Arch::kQwen3;
  bool default_bias = c.arch == Arch::kQwen2;
  ASSIGN_FIELD(c.qkv_bias, f.GetOr<bool>("attention_bias", default_bias));
  if (c.arch == Arch::kQwen2) c.qkv_bias = true;  // Qwen2 always has q/k/v biases
  // transformers: o_proj bias=config.attention_bias for Llama and Qwen3, bias=False for Qwen2.
  c.o_proj_bias = c.arch != Arch::kQwen2 && c.qkv_bias;
  ASSIGN_FIELD(c.tie_word_embeddings, f.GetOr<bool>("tie_word_embeddings", false));
  TP_RETURN_IF_ERROR(CheckUnsupported(f, "mlp_bias", false));
  if (c.arch != Arch::kLlama) {
    bool sw;
    ASSIGN_FIELD(sw, f.GetOr<bool>("use_sliding_window", false));
    if (sw) return f.Error("use_sliding_window", "is true; tpserve supports Qwen models without sliding windows only");
  }
  int32_t num_kv, head_dim;
  ASSIGN_FIELD(num_kv, f.GetOr<int32_t>("num_key_value_heads", c.num_heads));
  ASSIGN_FIELD(head_dim, f.GetOr<int32_t>("head_dim", static_cast<int32_t>(c.hidden_size / std::max(1, c.num_heads))));
  RopeConfig rope;
  TP_ASSIGN_OR_RETURN(rope, ParseGlobalRope(f));
  if (rope.type == "proportional") return f.Error("rope_parameters", "rope_type proportional is a Gemma 4 feature");
  c.layers.assign(c.num_layers, LayerConfig{});
  for (auto& l : c.layers) {
    l.head_dim = head_dim;
    l.num_kv_heads = num_kv;
    l.rope = rope;
  }
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  return absl::OkStatus();
}

absl::Status ParseEosIds(const json& v, std::vector<int32_t>& out) {
  out.clear();
  if (v.is_number_integer()) {
    out.push_back(v.get<int32_t>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) return absl::InvalidArgumentError("eos_token_id entries must be integers");
      out.push_back(e.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string_view ArchName(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kGemma3: return "gemma3";
    case Arch::kGemma4: return "gemma4";
  }
  return "?";
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source_view) {
  const std::string source(source_view);
  json top = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  if (!top.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object"));
  ModelConfig c;
  Fields tf(top, source);
  if (top.contains("architectures") && top["architectures"].is_array() && !top["architectures"].empty() &&
      top["architectures"][0].is_string()) {
    c.architecture = top["architectures"][0].get<std::string>();
  }
  std::string top_type;
  ASSIGN_FIELD(top_type, tf.Get<std::string>("model_type"));
  // Multimodal checkpoints nest the language model's config under text_config.
  const json* text = &top;
  std::string text_source = source;
  if (top.contains("text_config") && top["text_config"].is_object()) {
    text = &top["text_config"];
    text_source = source + ": text_config";
  }
  Fields f(*text, text_source);
  c.model_type = text->contains("model_type") && (*text)["model_type"].is_string()
                     ? (*text)["model_type"].get<std::string>()
                     : top_type;
  TP_ASSIGN_OR_RETURN(c.arch, ArchFromModelType(c.model_type, source));

  ASSIGN_FIELD(c.vocab_size, f.Get<int64_t>("vocab_size"));
  ASSIGN_FIELD(c.hidden_size, f.Get<int64_t>("hidden_size"));
  ASSIGN_FIELD(c.intermediate_size, f.Get<int64_t>("intermediate_size"));
  ASSIGN_FIELD(c.num_layers, f.Get<int32_t>("num_hidden_layers"));
  ASSIGN_FIELD(c.num_heads, f.Get<int32_t>("num_attention_heads"));
  double eps;
  ASSIGN_FIELD(eps, f.GetOr<double>("rms_norm_eps", 1e-6));
  c.rms_norm_eps = static_cast<float>(eps);
  ASSIGN_FIELD(c.max_position_embeddings, f.GetOr<int64_t>("max_position_embeddings", 8192));
  for (auto [name, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", static_cast<int64_t>(c.num_layers)},
                         {"num_attention_heads", static_cast<int64_t>(c.num_heads)}}) {
    if (v <= 0) return f.Error(name, absl::StrCat("must be positive, got ", v));
  }

  std::string dtype_name;
  const json* dt = nullptr;
  for (const json* j : std::array<const json*, 2>{text, &top}) {
    for (const char* k : {"dtype", "torch_dtype"}) {
      if (!dt && j->contains(k) && (*j)[k].is_string()) dt = &(*j)[k];
    }
  }
  if (dt) {
    auto d = ParseDType(dt->get<std::string>());
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": torch_dtype: ", d.status().message()));
    c.torch_dtype = *d;
  }

  if (c.arch == Arch::kGemma3 || c.arch == Arch::kGemma4) {
    TP_RETURN_IF_ERROR(ParseGemma(f, c));
  } else {
    TP_RETURN_IF_ERROR(ParseLlamaLike(f, c));
  }

  for (size_t i = 0; i < c.layers.size(); ++i) {
    const LayerConfig& l = c.layers[i];
    if (l.head_dim <= 0 || l.head_dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(text_source, ": layer ", i, " head_dim ", l.head_dim, " must be positive and even"));
    }
    if (l.num_kv_heads <= 0 || c.num_heads % l.num_kv_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(text_source, ": layer ", i, " num_key_value_heads ", l.num_kv_heads,
                                                     " must divide num_attention_heads ", c.num_heads));
    }
  }

  for (auto& l : c.layers) {
    auto it = std::find(c.kv_group_windows.begin(), c.kv_group_windows.end(), l.sliding_window);
    if (it == c.kv_group_windows.end()) it = c.kv_group_windows.insert(c.kv_group_windows.end(), l.sliding_window);
    l.kv_group = static_cast<int32_t>(it - c.kv_group_windows.begin());
  }

  for (const json* j : std::array<const json*, 2>{text, &top}) {
    if (c.eos_token_ids.empty() && j->contains("eos_token_id")) {
      TP_RETURN_IF_ERROR(ParseEosIds((*j)["eos_token_id"], c.eos_token_ids));
    }
    if (c.bos_token_id < 0 && j->contains("bos_token_id") && (*j)["bos_token_id"].is_number_integer()) {
      c.bos_token_id = (*j)["bos_token_id"].get<int32_t>();
    }
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  TP_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  TP_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(text, path));
  const std::string gen_path = dir + "/generation_config.json";
  auto gen = ReadFile(gen_path);
  if (gen.ok()) {
    json g = json::parse(*gen, nullptr, false);
    if (g.is_discarded() || !g.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(gen_path, ": not valid JSON"));
    }
    if (g.contains("eos_token_id")) {
      std::vector<int32_t> eos;
      absl::Status st = ParseEosIds(g["eos_token_id"], eos);
      if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(gen_path, ": ", st.message()));
      if (!eos.empty()) c.eos_token_ids = eos;
    }
  }
  return c;
}

absl::Status KeepFirstLayers(ModelConfig& c, int32_t n) {
  if (n <= 0 || n >= c.num_layers) return absl::OkStatus();
  std::vector<bool> kept(c.kv_group_windows.size(), false);
  for (int32_t i = 0; i < n; ++i) kept[c.layers[i].kv_group] = true;
  for (size_t g = 0; g < kept.size(); ++g) {
    if (!kept[g]) {
      return absl::InvalidArgumentError(absl::StrCat("the first ", n, " of ", c.num_layers,
                                                     " layers hold no layer of KV group ", g, " (window ",
                                                     c.kv_group_windows[g], "); keep more layers"));
    }
  }
  c.layers.resize(n);
  c.num_layers = n;
  return absl::OkStatus();
}

int32_t ModelConfig::max_head_dim() const {
  int32_t m = 0;
  for (const auto& l : layers) m = std::max(m, l.head_dim);
  return m;
}

int64_t ModelConfig::ParameterCount() const {
  int64_t n = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2) + hidden_size;
  for (const auto& l : layers) {
    const int64_t q = static_cast<int64_t>(num_heads) * l.head_dim;
    const int64_t kv = static_cast<int64_t>(l.num_kv_heads) * l.head_dim;
    n += hidden_size * (q + kv * (l.k_eq_v ? 1 : 2)) + q * hidden_size;
    n += 3 * hidden_size * intermediate_size;
    n += hidden_size * (sandwich_norms ? 4 : 2);
    if (qk_norm) n += 2 * l.head_dim;
    if (qkv_bias) n += q + kv * (l.k_eq_v ? 1 : 2);
    if (o_proj_bias) n += hidden_size;
    if (layer_scalar) n += 1;
  }
  return n;
}

double ModelConfig::PrefillAttentionFlops(int64_t tokens) const {
  double flops = 0;
  const double t = static_cast<double>(tokens);
  for (const auto& l : layers) {
    // Keys visible to the queries at positions 0..tokens-1: sum of min(i + 1, window).
    const double w = l.sliding && l.sliding_window > 0 ? static_cast<double>(l.sliding_window) : t;
    const double visible = t <= w ? t * (t + 1) / 2 : w * (w + 1) / 2 + (t - w) * w;
    flops += 2 * 2 * static_cast<double>(num_heads) * l.head_dim * visible;
  }
  return flops;
}

std::vector<float> RopeInvFreq(const RopeConfig& r, int32_t head_dim) {
  const int32_t half = head_dim / 2;
  std::vector<float> inv(half, 0.0f);
  // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
  const float base = static_cast<float>(r.theta);
  if (r.type == "proportional") {
    const int32_t rope_angles = static_cast<int32_t>(r.partial_rotary_factor * head_dim / 2);
    for (int32_t i = 0; i < rope_angles && i < half; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      inv[i] = 1.0f / std::pow(base, e) / static_cast<float>(r.factor);
    }
    return inv;
  }
  for (int32_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(base, e);
  }
  if (r.type == "linear") {
    for (auto& v : inv) v /= static_cast<float>(r.factor);
  } else if (r.type == "llama3") {
    const double low_wavelen = static_cast<double>(r.original_max_position) / r.low_freq_factor;
    const double high_wavelen = static_cast<double>(r.original_max_position) / r.high_freq_factor;
    for (auto& v : inv) {
      const float wavelen = static_cast<float>(2.0 * M_PI) / v;
      const float scaled = wavelen > low_wavelen ? v / static_cast<float>(r.factor) : v;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (static_cast<float>(r.original_max_position) / wavelen - static_cast<float>(r.low_freq_factor)) /
                             static_cast<float>(r.high_freq_factor - r.low_freq_factor);
        v = (1 - smooth) * scaled / static_cast<float>(r.factor) + smooth * scaled;
      } else {
        v = scaled;
      }
    }
  }
  if (!r.freq_factors.empty()) {
    for (int32_t i = 0; i < half && i < static_cast<int32_t>(r.freq_factors.size()); ++i) inv[i] /= r.freq_factors[i];
  }
  return inv;
}

}  // namespace tpserve
