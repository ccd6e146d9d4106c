// SamplingParams validation and seeds. Tested by tests/sampling_params_test.cc.
#include "coordinator/engine/sampling_params.h"

#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "coordinator/engine/field_error.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int32_t kMaxLogprobs = 20;

}  // namespace

absl::Status SamplingParams::Validate(int64_t vocab_size) const {
  TP_CHECK(vocab_size > 0);
  // "FIELD...": the message starts with the field, and is tagged with it (FieldError), so
  // that the HTTP API names it in "param".
  auto invalid = [](absl::string_view field, auto&&... rest) {
    return FieldError(field, absl::StrCat(field, rest...));
  };
  // Written as !(in range) so that NaN fails too.
  if (!(temperature >= 0 && temperature < kInf)) {
    return invalid("temperature", " must be >= 0 and finite (0 = greedy), got ", temperature);
  }
  if (top_k < -1) return invalid("top_k", " must be -1 or 0 (off) or >= 1, got ", top_k);
  if (!(top_p > 0 && top_p <= 1)) return invalid("top_p", " must be in (0, 1] (1 = off), got ", top_p);
  if (!(min_p >= 0 && min_p <= 1)) return invalid("min_p", " must be in [0, 1] (0 = off), got ", min_p);
  if (!(repetition_penalty > 0 && repetition_penalty < kInf)) {
    return invalid("repetition_penalty", " must be > 0 and finite (1 = off), got ", repetition_penalty);
  }
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) {
    return invalid("presence_penalty", " must be in [-2, 2], got ", presence_penalty);
  }
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    return invalid("frequency_penalty", " must be in [-2, 2], got ", frequency_penalty);
  }
  if (max_tokens < 1) return invalid("max_tokens", " must be >= 1, got ", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return invalid("min_tokens", " must be in [0, max_tokens = ", max_tokens, "], got ", min_tokens);
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return invalid("stop", "[", i, "] is an empty string; stop strings must be non-empty");
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0 || stop_token_ids[i] >= vocab_size) {
      return invalid("stop_token_ids", "[", i, "] must be in [0, vocab_size = ", vocab_size, "), got ",
                     stop_token_ids[i]);
    }
  }
  if (logprobs.has_value() && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    return invalid("logprobs", " must be in [0, ", kMaxLogprobs, "], got ", *logprobs);
  }
  absl::flat_hash_set<int32_t> biased;
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return invalid("logit_bias", ": token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
    }
    if (!(bias >= -100 && bias <= 100)) {
      return invalid("logit_bias", ": the bias of token ", id, " must be in [-100, 100], got ", bias);
    }
    if (!biased.insert(id).second) return invalid("logit_bias", ": token id ", id, " appears twice");
  }
  // A schema can leave EOS as the only allowed token; min_tokens would then mask it too.
  if (grammar != nullptr && min_tokens > 0) {
    return invalid("min_tokens", " cannot be combined with response_format (structured output)");
  }
  return absl::OkStatus();
}

uint64_t ResolveSeed(const SamplingParams& params) {
  if (params.seed.has_value()) return *params.seed;
  thread_local absl::BitGen entropy;  // seeded from the OS
  return absl::Uniform<uint64_t>(entropy);
}

}  // namespace tpserve
