// Parses and checks the MTP assistant's config.json. The text_config goes through the
// Gemma 4 parser (worker/model_config.cc) once its all-shared K/V marker is checked.
// Tested by tests/mtp_drafter_test.cc.
#include "worker/mtp_drafter_config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/model.h"

namespace tpserve {
namespace {

using json = nlohmann::json;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An optional integer or boolean field of `j` (absent or null: `def`).
template <typename T>
absl::StatusOr<T> Field(const json& j, const char* key, T def, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return def;
  const json& v = j[key];
  const bool ok = std::is_same_v<T, bool> ? v.is_boolean() : v.is_number_integer();
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": field \"", key, "\" has the wrong type: expected ",
                                                   std::is_same_v<T, bool> ? "boolean" : "integer", ", got ",
                                                   v.dump()));
  }
  return v.get<T>();
}

const char* TypeName(bool sliding) { return sliding ? "sliding_attention" : "full_attention"; }

}  // namespace

absl::StatusOr<MtpDrafterConfig> ParseMtpDrafterConfig(std::string_view json_text, std::string_view source_view) {
  const std::string source(source_view);
  const json top = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded() || !top.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  const std::string type =
      top.contains("model_type") && top["model_type"].is_string() ? top["model_type"].get<std::string>() : "";
  if (type != "gemma4_assistant") {
    return absl::InvalidArgumentError(absl::StrCat(source, ": model_type is \"", type,
                                                   "\"; an MTP drafter is a Gemma 4 assistant checkpoint "
                                                   "(model_type \"gemma4_assistant\")"));
  }
  if (!top.contains("text_config") || !top["text_config"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": missing object field \"text_config\" (the drafter's decoder)"));
  }
  const std::string text_source = source + ": text_config";
  json text = top["text_config"];
  if (!text.contains("model_type")) text["model_type"] = "gemma4_text";
  if (text["model_type"] != "gemma4_text") {
    return absl::InvalidArgumentError(absl::StrCat(text_source, ": model_type is ", text["model_type"].dump(),
                                                   "; a Gemma 4 assistant's decoder is \"gemma4_text\""));
  }
  // Every drafter layer reads the target's K/V (AC 73-78 fills in 0 as "all", AC 94-98
  // refuses anything else); the text parser, written for targets, refuses shared layers.
  TP_ASSIGN_OR_RETURN(const int32_t layers, Field<int32_t>(text, "num_hidden_layers", 0, text_source));
  TP_ASSIGN_OR_RETURN(const int32_t shared, Field<int32_t>(text, "num_kv_shared_layers", 0, text_source));
  if (shared != 0 && shared != layers) {
    return absl::InvalidArgumentError(absl::StrCat(text_source, ": num_kv_shared_layers is ", shared,
                                                   "; a Gemma 4 assistant shares every layer's K/V (",
                                                   "num_hidden_layers = ", layers, ")"));
  }
  text.erase("num_kv_shared_layers");
  TP_ASSIGN_OR_RETURN(const int64_t ple_vocab, Field<int64_t>(text, "vocab_size_per_layer_input", 0, text_source));
  if (ple_vocab != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(text_source, ": vocab_size_per_layer_input is ", ple_vocab, "; a Gemma 4 assistant has none (0)"));
  }

  MtpDrafterConfig c;
  TP_ASSIGN_OR_RETURN(c.text, ParseModelConfig(text.dump(), text_source));
  if (c.text.arch != Arch::kGemma4) {
    return absl::InvalidArgumentError(absl::StrCat(text_source, ": not a Gemma 4 decoder"));
  }
  TP_ASSIGN_OR_RETURN(c.backbone_hidden_size,
                      Field<int64_t>(top, "backbone_hidden_size", c.backbone_hidden_size, source));
  TP_ASSIGN_OR_RETURN(c.tie_word_embeddings, Field<bool>(top, "tie_word_embeddings", c.tie_word_embeddings, source));
  TP_ASSIGN_OR_RETURN(c.use_ordered_embeddings,
                      Field<bool>(top, "use_ordered_embeddings", c.use_ordered_embeddings, source));
  TP_ASSIGN_OR_RETURN(c.num_centroids, Field<int32_t>(top, "num_centroids", c.num_centroids, source));
  TP_ASSIGN_OR_RETURN(c.centroid_top_k, Field<int32_t>(top, "centroid_intermediate_top_k", c.centroid_top_k, source));
  if (!c.tie_word_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": tie_word_embeddings is false; tpserve supports only ",
                     "assistants whose lm_head is model.embed_tokens (true, as published)"));
  }
  if (c.backbone_hidden_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": backbone_hidden_size must be positive"));
  }
  if (c.use_ordered_embeddings) {
    if (c.num_centroids <= 0 || c.text.vocab_size % c.num_centroids != 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": num_centroids ", c.num_centroids,
                                                     " must be positive and divide vocab_size ", c.text.vocab_size));
    }
    if (c.centroid_top_k <= 0 || c.centroid_top_k > c.num_centroids) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": centroid_intermediate_top_k ", c.centroid_top_k,
                                                     " must be in [1, num_centroids = ", c.num_centroids, "]"));
    }
  }
  return c;
}

absl::StatusOr<MtpDrafterConfig> LoadMtpDrafterConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  TP_ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  TP_ASSIGN_OR_RETURN(MtpDrafterConfig c, ParseMtpDrafterConfig(text, path));
  const std::string gen_path = dir + "/generation_config.json";
  if (auto gen = ReadText(gen_path); gen.ok()) {
    const json g = json::parse(*gen, nullptr, false);
    if (g.is_discarded() || !g.is_object())
      return absl::InvalidArgumentError(absl::StrCat(gen_path, ": not valid JSON"));
    TP_ASSIGN_OR_RETURN(c.num_assistant_tokens, Field<int32_t>(g, "num_assistant_tokens", 0, gen_path));
    if (c.num_assistant_tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat(gen_path, ": num_assistant_tokens must not be negative"));
    }
  }
  return c;
}

int64_t MtpDrafterConfig::ParameterCount() const {
  const ModelConfig& t = text;
  const int64_t d = t.hidden_size, D = backbone_hidden_size;
  int64_t n = t.vocab_size * d + d + 3 * D * d;  // tied head, final norm, pre/post_projection
  if (use_ordered_embeddings) n += static_cast<int64_t>(num_centroids) * d;
  for (const LayerConfig& l : t.layers) {
    const int64_t q = static_cast<int64_t>(t.num_heads) * l.head_dim;
    n += 2 * q * d + 3 * d * t.intermediate_size + 4 * d + l.head_dim + 1;  // q/o, MLP, norms, q_norm, scalar
    if (t.qkv_bias) n += q;
    if (t.o_proj_bias) n += d;
  }
  return n;
}

int LastLayerOfType(const ModelConfig& target, bool sliding) {
  for (int i = target.num_layers - 1; i >= 0; --i) {
    if (target.layers[i].sliding == sliding) return i;
  }
  return -1;
}

absl::Status ValidateMtpDrafter(const MtpDrafterConfig& d, const ModelConfig& target, int tp) {
  const ModelConfig& t = d.text;
  auto mismatch = [](const std::string& field, int64_t drafter, int64_t target_value, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("MTP drafter: ", field, " is ", drafter, " but the target's ", what,
                                                   " is ", target_value, "; the drafter was made for another model"));
  };
  if (target.arch != Arch::kGemma4) {
    return absl::InvalidArgumentError(absl::StrCat("MTP drafter: the target is a ", target.model_type,
                                                   " model; Gemma 4 assistants draft for Gemma 4 targets only"));
  }
  if (d.backbone_hidden_size != target.hidden_size) {
    return mismatch("backbone_hidden_size", d.backbone_hidden_size, target.hidden_size, "hidden_size");
  }
  if (t.vocab_size != target.vocab_size) {
    return mismatch("text_config.vocab_size", t.vocab_size, target.vocab_size, "vocab_size");
  }
  for (int i = 0; i < t.num_layers; ++i) {
    const LayerConfig& l = t.layers[i];
    const int tl = LastLayerOfType(target, l.sliding);
    if (tl < 0) {
      return absl::InvalidArgumentError(absl::StrCat("MTP drafter: text_config.layer_types[", i, "] is ",
                                                     TypeName(l.sliding), " but the target has no ",
                                                     TypeName(l.sliding), " layer to read K/V from"));
    }
    const LayerConfig& tc = target.layers[tl];
    const std::string at = absl::StrCat(" (drafter layer ", i, ")");
    if (l.head_dim != tc.head_dim) {
      return mismatch(absl::StrCat("text_config.", l.sliding ? "head_dim" : "global_head_dim", at), l.head_dim,
                      tc.head_dim, absl::StrCat("layer ", tl, " head dim"));
    }
    if (l.num_kv_heads != tc.num_kv_heads) {
      const char* field = !l.sliding && l.k_eq_v ? "num_global_key_value_heads" : "num_key_value_heads";
      return mismatch(absl::StrCat("text_config.", field, at), l.num_kv_heads, tc.num_kv_heads,
                      absl::StrCat("layer ", tl, " KV heads"));
    }
    // The drafter's window decides which cached positions it reads (W + 1 of them, §3.4);
    // the engine keeps the target's sliding blocks by the target's window.
    if (l.sliding_window != tc.sliding_window) {
      return mismatch(absl::StrCat("text_config.sliding_window", at), l.sliding_window, tc.sliding_window,
                      absl::StrCat("layer ", tl, " sliding window"));
    }
  }
  if (absl::Status st = ValidateTensorParallel(t, tp); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("MTP drafter: text_config: ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
