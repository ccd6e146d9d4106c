// --speculative-config and the proposers that guess from tokens alone (n-gram). Tested by tests/speculative_test.cc.
#include "coordinator/engine/speculative.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/base.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--speculative-config: ", what));
}

// A whole number in [lo, hi] under `key`, or `fallback` when the key is absent or null.
absl::StatusOr<int32_t> IntField(const nlohmann::json& j, const char* key, int32_t lo, int32_t hi,
                                 int32_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return Bad(absl::StrCat("\"", key, "\" must be an integer, got ", it->dump()));
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return Bad(absl::StrCat("\"", key, "\" must be in [", lo, ", ", hi, "], got ", v));
  return static_cast<int32_t>(v);
}

// "adaptive": true or false (absent: false).
absl::StatusOr<bool> AdaptiveField(const nlohmann::json& j) {
  auto it = j.find("adaptive");
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_boolean()) return Bad(absl::StrCat("\"adaptive\" must be true or false, got ", it->dump()));
  return it->get<bool>();
}

// {"method": "mtp", "model": DIR, "num_speculative_tokens": K}: all three required.
absl::StatusOr<SpeculativeConfig> ParseMtp(const nlohmann::json& j) {
  for (const auto& [key, value] : j.items()) {
    if (key != "method" && key != "model" && key != "num_speculative_tokens" && key != "adaptive") {
      return Bad(absl::StrCat("key \"", key, "\" is not supported with method \"mtp\" (supported: model, "
                              "num_speculative_tokens, adaptive)"));
    }
  }
  auto model = j.find("model");
  if (model == j.end() || !model->is_string() || model->get<std::string>().empty()) {
    return Bad("method \"mtp\" needs \"model\": the drafter checkpoint's directory (Gemma 4's \"assistant\", "
               "e.g. google/gemma-4-31B-it-assistant)");
  }
  if (!j.contains("num_speculative_tokens")) return Bad("\"num_speculative_tokens\" is required");
  TP_ASSIGN_OR_RETURN(const int32_t k, IntField(j, "num_speculative_tokens", 1, 64, 0));
  SpeculativeConfig c;
  c.method = SpeculativeConfig::Method::kMtp;
  c.model = model->get<std::string>();
  c.num_speculative_tokens = k;
  TP_ASSIGN_OR_RETURN(c.adaptive, AdaptiveField(j));
  return c;
}

}  // namespace

std::string SpeculativeConfig::ToJson() const {
  if (method == Method::kNone) return "";
  nlohmann::ordered_json j;
  if (method == Method::kMtp) {
    j["method"] = "mtp";
    j["model"] = model;
    j["num_speculative_tokens"] = num_speculative_tokens;
    if (adaptive) j["adaptive"] = true;
    return j.dump();
  }
  j["method"] = "ngram";
  j["num_speculative_tokens"] = num_speculative_tokens;
  j["prompt_lookup_min"] = prompt_lookup_min;
  j["prompt_lookup_max"] = prompt_lookup_max;
  if (adaptive) j["adaptive"] = true;
  return j.dump();
}

absl::StatusOr<SpeculativeConfig> ParseSpeculativeConfig(absl::string_view text) {
  SpeculativeConfig c;
  if (text.empty() || text == "null") return c;
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Bad(absl::StrCat("expected a JSON object such as {\"method\": \"ngram\", \"num_speculative_tokens\": 4}, "
                            "got ", text));
  }
  auto method = j.find("method");
  if (method == j.end() || !method->is_string()) {
    return Bad("\"method\" is required: \"ngram\" (prompt lookup) or \"mtp\" (Gemma 4's MTP drafter)");
  }
  const std::string name = method->get<std::string>();
  if (name == "mtp") return ParseMtp(j);
  if (name == "eagle" || name == "eagle3" || name == "draft_model" || name == "medusa" || name == "mlp_speculator" ||
      j.contains("model")) {
    return Bad(absl::StrCat("method \"", name, "\"", j.contains("model") ? " with a draft \"model\"" : "",
                            " is not implemented yet; use {\"method\": \"ngram\", ...} (prompt lookup) or "
                            "{\"method\": \"mtp\", \"model\": DIR, ...} (Gemma 4's MTP drafter)"));
  }
  if (name != "ngram") {
    return Bad(absl::StrCat("unknown method \"", name, "\"; the ones implemented are \"ngram\" and \"mtp\""));
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_min" &&
        key != "prompt_lookup_max" && key != "adaptive") {
      return Bad(absl::StrCat("key \"", key, "\" is not supported with method \"ngram\" (supported: "
                              "num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, adaptive)"));
    }
  }
  if (!j.contains("num_speculative_tokens")) return Bad("\"num_speculative_tokens\" is required");
  c.method = SpeculativeConfig::Method::kNgram;
  absl::StatusOr<int32_t> k = IntField(j, "num_speculative_tokens", 1, 64, 0);
  absl::StatusOr<int32_t> lo = IntField(j, "prompt_lookup_min", 1, 1024, 0);
  absl::StatusOr<int32_t> hi = IntField(j, "prompt_lookup_max", 1, 1024, 0);
  for (const absl::StatusOr<int32_t>* v : {&k, &lo, &hi}) {
    if (!v->ok()) return v->status();
  }
  c.num_speculative_tokens = *k;
  TP_ASSIGN_OR_RETURN(c.adaptive, AdaptiveField(j));
  c.prompt_lookup_min = *lo;
  c.prompt_lookup_max = *hi;
  if (c.prompt_lookup_min == 0 && c.prompt_lookup_max == 0) c.prompt_lookup_min = c.prompt_lookup_max = 5;
  if (c.prompt_lookup_min == 0) c.prompt_lookup_min = c.prompt_lookup_max;
  if (c.prompt_lookup_max == 0) c.prompt_lookup_max = c.prompt_lookup_min;
  if (c.prompt_lookup_min > c.prompt_lookup_max) {
    return Bad(absl::StrCat("\"prompt_lookup_min\" (", c.prompt_lookup_min, ") is above \"prompt_lookup_max\" (",
                            c.prompt_lookup_max, ")"));
  }
  return c;
}

int32_t NumAcceptedDrafts(absl::Span<const int32_t> drafts, absl::Span<const int32_t> samples) {
  int32_t kept = 0;
  while (kept < static_cast<int32_t>(drafts.size()) && kept < static_cast<int32_t>(samples.size()) &&
         samples[kept] == drafts[kept]) {
    ++kept;
  }
  return kept;
}

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}

std::vector<int32_t> NgramProposer::Propose(absl::Span<const int32_t> tokens, int32_t max_tokens) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return {};
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const int32_t* suffix = tokens.data() + len - n;
    int64_t best = -1, best_len = 0;
    // Occurrences ending before the suffix's own start + n - 1, newest first.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (std::memcmp(tokens.data() + i, suffix, n * sizeof(int32_t)) != 0) continue;
      const int64_t follow = std::min<int64_t>(max_tokens, len - (i + n));
      if (follow > best_len) {
        best = i;
        best_len = follow;
      }
      if (follow == max_tokens) break;
    }
    if (best >= 0) return std::vector<int32_t>(tokens.begin() + best + n, tokens.begin() + best + n + best_len);
  }
  return {};
}

void DraftLengthPolicy::ObserveStep(int32_t num_tokens, double forward_ms) {
  if (num_tokens < 1 || num_tokens > kMaxWidth || !(forward_ms > 0)) return;
  double& ms = ms_[num_tokens];
  ms = ms == 0 ? forward_ms : (1 - kStepWeight) * ms + kStepWeight * forward_ms;
}

double DraftLengthPolicy::Cost(int32_t width) const {
  width = std::clamp(width, 1, kMaxWidth);
  if (ms_[width] > 0) return ms_[width];
  int32_t below = width - 1, above = width + 1;
  while (below >= 1 && ms_[below] == 0) --below;
  while (above <= kMaxWidth && ms_[above] == 0) ++above;
  if (below >= 1) return ms_[below];  // untried widths look as cheap as the nearest narrower one: tried next
  if (above <= kMaxWidth) return ms_[above];
  return 1.0;  // nothing measured yet: all widths alike, so the most drafts
}

int32_t DraftLengthPolicy::Choose(double acceptance, int32_t other_tokens, int32_t max_drafts) const {
  int32_t best = 0;
  double best_rate = 0, expected = 1, p = 1;  // expected tokens of a step with k drafts
  for (int32_t k = 0; k <= max_drafts; ++k) {
    if (k > 0) {
      p *= acceptance;
      expected += p;
    }
    const double rate = expected / Cost(other_tokens + 1 + k);
    if (rate > best_rate * (1 + 1e-9)) {
      best = k;
      best_rate = rate;
    }
  }
  return best;
}

absl::Status SequenceProposer::ProposeAll(absl::Span<const DraftRequest> requests, Scheduler& scheduler) {
  for (const DraftRequest& r : requests) scheduler.SetDrafts(*r.seq, Propose(r.seq->token_ids(), r.max_drafts));
  return absl::OkStatus();
}

}  // namespace tpserve
