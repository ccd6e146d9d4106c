// The model's own sampling defaults (vLLM's --generation-config auto|vllm|DIR): the values of
// generation_config.json that requests leaving a field unset get instead of SamplingParams'
// neutral ones. Tested by tests/generation_defaults_test.cc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/engine/sampling_params.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// The fields vLLM takes from a generation config (ModelConfig.get_diff_sampling_param) that
// tpserve samples with. Unset: the request's own value or SamplingParams' default stands.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<int32_t> top_k;  // 0 = off (a file's -1 is stored as 0)
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  // Where the values came from, for logs and ModelInfo, e.g. "/models/q/generation_config.json";
  // empty when nothing was read.
  std::string source;
  // What the source says that tpserve does not follow (do_sample false, max_new_tokens), one
  // sentence each, for the start-up log.
  std::vector<std::string> notes;

  bool empty() const {
    return !temperature && !top_k && !top_p && !min_p && !repetition_penalty;
  }
  // The set fields as a JSON-like object for logs, e.g. {"temperature": 0.6, "top_p": 0.95};
  // "{}" when empty.
  std::string ToString() const;
};

// Which of GenerationDefaults' fields a request set itself (an explicit value, 0 included,
// wins over the model's default; an absent or null field takes it).
struct ExplicitSamplingFields {
  bool temperature = false;
  bool top_k = false;
  bool top_p = false;
  bool min_p = false;
  bool repetition_penalty = false;
};

// Reads generation-config fields from already parsed JSON named `source` in messages (a
// generation_config.json's path, or e.g. a GGUF file whose metadata was translated to these
// names). Non-null temperature, top_k, top_p, min_p, repetition_penalty become defaults, as in
// vLLM with transformers 5 (whose GenerationConfig defaults are all None, so every value the
// file sets counts, top_k 50 and temperature 1.0 included). do_sample is ignored as vLLM does
// (a note records do_sample false beside sampling fields); other fields are ignored.
// INVALID_ARGUMENT naming `source` and the field for a wrong type ("must be a number") or a
// value SamplingParams::Validate refuses.
absl::StatusOr<GenerationDefaults> GenerationDefaultsFromJson(const nlohmann::json& config, absl::string_view source);

// DIR/generation_config.json through GenerationDefaultsFromJson. No such file: empty
// defaults (source empty). Unreadable or malformed JSON: an error naming the file.
absl::StatusOr<GenerationDefaults> LoadGenerationConfigDir(const std::string& dir);

// --generation-config: "auto" (the model's folder's generation_config.json when `model` is a
// folder that has one, or the one beside a model file (FILE.gguf); none for built-in model
// names), "vllm" (none: tpserve's own defaults),
// or a folder holding generation_config.json (it must exist). INVALID_ARGUMENT naming the flag
// for anything else.
absl::Status ValidateGenerationConfigFlag(absl::string_view value);
absl::StatusOr<GenerationDefaults> LoadGenerationDefaults(absl::string_view generation_config,
                                                          const std::string& model);

// Sets each field of `params` that `explicit_fields` does not mark to the default, where
// `defaults` has one.
void ApplyGenerationDefaults(const GenerationDefaults& defaults, const ExplicitSamplingFields& explicit_fields,
                             SamplingParams& params);

// The start-up log lines (vLLM's wording): empty when there are no defaults and no notes.
std::vector<std::string> DescribeGenerationDefaults(const GenerationDefaults& defaults);

}  // namespace tpserve
