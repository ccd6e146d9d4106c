// The Gemma 4 MTP drafter's ("assistant" checkpoint, model_type gemma4_assistant) config,
// parsed from its config.json and checked against the target it drafts for
// (docs/mtp_drafter.md §1.1). Tested by tests/mtp_drafter_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model_config.h"

namespace tpserve {

struct MtpDrafterConfig {
  // The drafter's own decoder (config.json's text_config), parsed as a Gemma 4 text model;
  // its K/V geometry (head_dim, global_head_dim, KV heads, sliding_window) is the target's.
  // final_logit_softcapping is ignored: the assistant never soft-caps (A 191-194).
  ModelConfig text;
  int64_t backbone_hidden_size = 1536;  // D: the target's hidden_size (transformers' default)
  bool tie_word_embeddings = true;      // lm_head is model.embed_tokens; false is refused
  bool use_ordered_embeddings = false;  // true: the centroid head (§3.6), else a dense lm_head
  int32_t num_centroids = 2048;         // C, clusters of V / C tokens (centroid head only)
  int32_t centroid_top_k = 32;          // clusters scored per step (centroid_intermediate_top_k)
  // Drafts per round from the assistant's generation_config.json; 0 when absent.
  int32_t num_assistant_tokens = 0;

  // Its weights' parameters: the tied head once, pre/post_projection, the layers (query
  // and output projections only: no K/V), the centroids with the centroid head.
  int64_t ParameterCount() const;
};

// Built-in assistant shapes for dummy weights beside a built-in target (--load-format
// dummy with --speculative-config {"method": "mtp", "model": NAME}): "gemma-4-31b-assistant"
// (the published 31B assistant's shape as far as it is known: docs/mtp_drafter.md,
// "Built-in assistant shapes"), "gemma-4-1b-assistant" and "gemma-4-tiny-assistant" (the
// same recipe for the gemma-4-1b and gemma-4-tiny targets). Defined in presets.cc.
absl::StatusOr<MtpDrafterConfig> PresetMtpDrafterConfig(std::string_view name);
std::vector<std::string> MtpDrafterPresetNames();

// Parses an assistant's config.json text; `source` names the file in errors.
absl::StatusOr<MtpDrafterConfig> ParseMtpDrafterConfig(std::string_view json_text, std::string_view source);
// DIR/config.json, and num_assistant_tokens from DIR/generation_config.json when present.
absl::StatusOr<MtpDrafterConfig> LoadMtpDrafterConfig(const std::string& dir);

// The target's last layer of the given type (the layer whose K/V the drafter's layers of
// that type read, §2), or -1 when it has none.
int LastLayerOfType(const ModelConfig& target, bool sliding);

// The drafter fits `target` at tensor-parallel size tp: a Gemma 4 target with hidden_size
// = backbone_hidden_size and the same vocabulary; per drafter layer, a target layer of its
// type with the same head_dim, KV heads and sliding window; every split divides. An
// InvalidArgument error names the field.
absl::Status ValidateMtpDrafter(const MtpDrafterConfig& drafter, const ModelConfig& target, int tp);

}  // namespace tpserve
