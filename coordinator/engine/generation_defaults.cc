// Generation-config defaults: reading, validating, applying. Tested by
// tests/generation_defaults_test.cc.
#include "coordinator/engine/generation_defaults.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;

constexpr char kFileName[] = "generation_config.json";
constexpr char kFlagChoices[] = "auto, vllm or a folder holding generation_config.json";

// A bad value as a message shows it: short, JSON-quoted.
std::string Describe(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

absl::Status TypeError(absl::string_view source, absl::string_view field, absl::string_view expected,
                       const nlohmann::json& got) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": \"", field, "\" must be ", expected, ", got ", Describe(got)));
}

// Absent and null alike mean "not set" (vLLM keeps only values that are not None).
const nlohmann::json* Find(const nlohmann::json& config, const char* field) {
  auto it = config.find(field);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

absl::Status ReadFloat(const nlohmann::json& config, absl::string_view source, const char* field,
                       std::optional<float>& out) {
  const nlohmann::json* v = Find(config, field);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return TypeError(source, field, "a number", *v);
  out = static_cast<float>(v->get<double>());
  return absl::OkStatus();
}

// An integer; a float with an integral value (40.0) is taken, as Python compares it equal.
absl::Status ReadTopK(const nlohmann::json& config, absl::string_view source, std::optional<int32_t>& out) {
  const nlohmann::json* v = Find(config, "top_k");
  if (v == nullptr) return absl::OkStatus();
  constexpr double kMin = std::numeric_limits<int32_t>::min();
  constexpr double kMax = std::numeric_limits<int32_t>::max();
  if (!v->is_number()) return TypeError(source, "top_k", "an integer", *v);
  const double x = v->get<double>();
  if (std::floor(x) != x || x < kMin || x > kMax) return TypeError(source, "top_k", "an integer", *v);
  // transformers and vLLM both spell "off" as 0 or -1; SamplingParams keeps 0.
  out = x == -1 ? 0 : static_cast<int32_t>(x);
  return absl::OkStatus();
}

}  // namespace

std::string GenerationDefaults::ToString() const {
  std::vector<std::string> parts;
  if (temperature) parts.push_back(absl::StrCat("\"temperature\": ", *temperature));
  if (top_k) parts.push_back(absl::StrCat("\"top_k\": ", *top_k));
  if (top_p) parts.push_back(absl::StrCat("\"top_p\": ", *top_p));
  if (min_p) parts.push_back(absl::StrCat("\"min_p\": ", *min_p));
  if (repetition_penalty) parts.push_back(absl::StrCat("\"repetition_penalty\": ", *repetition_penalty));
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

absl::StatusOr<GenerationDefaults> GenerationDefaultsFromJson(const nlohmann::json& config, absl::string_view source) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": must be a JSON object, got ", Describe(config)));
  }
  GenerationDefaults d;
  d.source = std::string(source);
  TP_RETURN_IF_ERROR(ReadFloat(config, source, "temperature", d.temperature));
  TP_RETURN_IF_ERROR(ReadTopK(config, source, d.top_k));
  TP_RETURN_IF_ERROR(ReadFloat(config, source, "top_p", d.top_p));
  TP_RETURN_IF_ERROR(ReadFloat(config, source, "min_p", d.min_p));
  TP_RETURN_IF_ERROR(ReadFloat(config, source, "repetition_penalty", d.repetition_penalty));

  // A default the engine would refuse fails here, at start-up, not in every request. The
  // vocabulary size only bounds stop_token_ids, which defaults never set.
  SamplingParams check;
  ApplyGenerationDefaults(d, {}, check);
  if (absl::Status s = check.Validate(/*vocab_size=*/1); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }

  // vLLM reads the sampling fields whatever do_sample says; so does tpserve, and says so,
  // because transformers would decode such a checkpoint greedily. (With temperature 0 the
  // two agree.)
  const nlohmann::json* do_sample = Find(config, "do_sample");
  if (do_sample != nullptr && do_sample->is_boolean() && !do_sample->get<bool>() && !d.empty() &&
      d.temperature != 0.0f) {
    d.notes.push_back(absl::StrCat("do_sample is false, which is ignored (as vLLM does): ", d.ToString(),
                                   " still become the defaults, where transformers would decode greedily"));
  }
  if (const nlohmann::json* v = Find(config, "max_new_tokens"); v != nullptr) {
    d.notes.push_back(absl::StrCat("max_new_tokens ", Describe(*v),
                                   " is not applied (vLLM caps every request's max_tokens at it; tpserve does not)"));
  }
  return d;
}

absl::StatusOr<GenerationDefaults> LoadGenerationConfigDir(const std::string& dir) {
  const fs::path path = fs::path(dir) / kFileName;
  std::error_code ec;
  if (!fs::exists(path, ec)) return GenerationDefaults{};
  std::ifstream in(path);
  if (!in.is_open()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": cannot be opened for reading"));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not valid JSON: ", e.what()));
  }
  return GenerationDefaultsFromJson(config, path.string());
}

absl::Status ValidateGenerationConfigFlag(absl::string_view value) {
  if (value == "auto" || value == "vllm") return absl::OkStatus();
  const fs::path dir{std::string(value)};
  std::error_code ec;
  if (value.empty() || !fs::exists(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--generation-config must be ", kFlagChoices, "; got \"", value, "\", which is none of these"));
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--generation-config takes a folder (it reads its ", kFileName,
                                                   "), not a file: got ", value, "; pass its folder instead"));
  }
  if (!fs::exists(dir / kFileName, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--generation-config ", value, ": the folder has no ", kFileName));
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerationDefaults> LoadGenerationDefaults(absl::string_view generation_config,
                                                          const std::string& model) {
  TP_RETURN_IF_ERROR(ValidateGenerationConfigFlag(generation_config));
  if (generation_config == "vllm") return GenerationDefaults{};
  if (generation_config == "auto") {
    // A built-in model name (--load-format dummy) has no folder and so no defaults; a model
    // file (FILE.gguf, which carries none) has those of a generation_config.json beside it.
    std::error_code ec;
    if (fs::is_regular_file(model, ec)) return LoadGenerationConfigDir(fs::path(model).parent_path().string());
    if (!fs::is_directory(model, ec)) return GenerationDefaults{};
    return LoadGenerationConfigDir(model);
  }
  return LoadGenerationConfigDir(std::string(generation_config));
}

void ApplyGenerationDefaults(const GenerationDefaults& defaults, const ExplicitSamplingFields& explicit_fields,
                             SamplingParams& params) {
  if (defaults.temperature && !explicit_fields.temperature) params.temperature = *defaults.temperature;
  if (defaults.top_k && !explicit_fields.top_k) params.top_k = *defaults.top_k;
  if (defaults.top_p && !explicit_fields.top_p) params.top_p = *defaults.top_p;
  if (defaults.min_p && !explicit_fields.min_p) params.min_p = *defaults.min_p;
  if (defaults.repetition_penalty && !explicit_fields.repetition_penalty) {
    params.repetition_penalty = *defaults.repetition_penalty;
  }
}

std::vector<std::string> DescribeGenerationDefaults(const GenerationDefaults& defaults) {
  std::vector<std::string> lines;
  if (!defaults.empty()) {
    lines.push_back(absl::StrCat("Default sampling parameters have been overridden by the model's generation config (",
                                 defaults.source, "): ", defaults.ToString(),
                                 "; requests that set a field keep theirs. If this is not intended, relaunch "
                                 "with --generation-config vllm."));
  }
  for (const std::string& note : defaults.notes) lines.push_back(absl::StrCat(defaults.source, ": ", note));
  return lines;
}

}  // namespace tpserve
