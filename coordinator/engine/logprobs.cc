// Host logprobs: penalties, one max pass, one exp pass, one top-N scan. Tested by
// tests/sampling_params_test.cc.
#include "coordinator/engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<TokenLogprob> ComputeLogprobs(absl::Span<const float> logits, const RowSampling& row,
                                             absl::Span<const int32_t> penalty_tokens,
                                             absl::Span<const int32_t> penalty_counts, int32_t token_id,
                                             int32_t top_n) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (token_id < 0 || token_id >= V) {
    return absl::InternalError(absl::StrCat("sampled token id ", token_id, " is outside the vocabulary of ", V));
  }
  std::vector<float> x(logits.begin(), logits.end());
  for (size_t e = 0; e < penalty_tokens.size(); ++e) {
    const int32_t id = penalty_tokens[e];
    if (id < 0 || id >= V) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the vocabulary [0, ", V, ")"));
    }
    x[id] = PenalizedLogit(x[id], row, penalty_counts[e]);
  }
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < V; ++i) {
    if (std::isnan(x[i]) || x[i] == std::numeric_limits<float>::infinity()) {
      return absl::InternalError(absl::StrCat("logits row has ", x[i], " at token ", i,
                                              ": the forward pass produced invalid values (check the "
                                              "checkpoint, its dtype and the kernels)"));
    }
    max = std::max(max, x[i]);
  }
  if (max == -std::numeric_limits<float>::infinity()) {
    return absl::InvalidArgumentError(
        "every logit is -inf, so no token can be sampled (min_tokens masks EOS and stop_token_ids; check "
        "that the vocabulary has other tokens)");
  }
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  const double log_z = max + std::log(sum);

  TokenLogprob out;
  out.token_id = token_id;
  out.logprob = static_cast<float>(x[token_id] - log_z);
  // The top N by a scan that keeps a sorted list: entries with a value >= x[i] stay ahead
  // of i (they are larger or have a lower id).
  const int64_t n = std::min<int64_t>(std::max(top_n, 0), V);
  std::vector<std::pair<int32_t, float>>& top = out.top;
  top.reserve(n + 1);
  for (int64_t i = 0; i < V && n > 0; ++i) {
    if (x[i] == -std::numeric_limits<float>::infinity()) continue;  // masked: never sampled, never listed
    if (static_cast<int64_t>(top.size()) == n && !(x[i] > top.back().second)) continue;
    const auto pos = std::upper_bound(top.begin(), top.end(), x[i],
                                      [](float v, const std::pair<int32_t, float>& e) { return v > e.second; });
    top.insert(pos, {static_cast<int32_t>(i), x[i]});
    if (static_cast<int64_t>(top.size()) > n) top.pop_back();
  }
  for (auto& [id, value] : top) value = static_cast<float>(value - log_z);
  return out;
}

}  // namespace tpserve
