// Host logprobs: penalties (on a copy, only when there are any), cpu::LogSumExp's max and
// vector exp passes, cpu::TopN's vector-skipping scan. Tested by
// tests/sampling_params_test.cc.
#include "coordinator/engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve {

absl::StatusOr<TokenLogprob> ComputeLogprobs(absl::Span<const float> logits, const RowSampling& row,
                                             absl::Span<const int32_t> penalty_tokens,
                                             absl::Span<const int32_t> penalty_counts, int32_t token_id,
                                             int32_t top_n) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (token_id < 0 || token_id >= V) {
    return absl::InternalError(absl::StrCat("sampled token id ", token_id, " is outside the vocabulary of ", V));
  }
  // The row as the rules left it: a copy only where penalties change it.
  std::vector<float> penalized;
  const float* x = logits.data();
  if (!penalty_tokens.empty()) {
    penalized.assign(logits.begin(), logits.end());
    for (size_t e = 0; e < penalty_tokens.size(); ++e) {
      const int32_t id = penalty_tokens[e];
      if (id < 0 || id >= V) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the vocabulary [0, ", V, ")"));
      }
      penalized[id] = PenalizedLogit(penalized[id], row, penalty_counts[e]);
    }
    x = penalized.data();
  }
  const double log_z = cpu::LogSumExp(x, V);
  if (std::isnan(log_z)) {
    for (int64_t i = 0; i < V; ++i) {
      if (std::isnan(x[i]) || x[i] == std::numeric_limits<float>::infinity()) {
        return absl::InternalError(absl::StrCat("logits row has ", x[i], " at token ", i,
                                                ": the forward pass produced invalid values (check the "
                                                "checkpoint, its dtype and the kernels)"));
      }
    }
    return absl::InternalError("the logits row's log-sum-exp is NaN without a NaN or +inf logit");
  }
  if (log_z == -std::numeric_limits<double>::infinity()) {
    return absl::InvalidArgumentError(
        "every logit is -inf, so no token can be sampled (min_tokens masks EOS and stop_token_ids; check "
        "that the vocabulary has other tokens)");
  }

  TokenLogprob out;
  out.token_id = token_id;
  out.logprob = static_cast<float>(x[token_id] - log_z);
  const int64_t n = std::min<int64_t>(std::max(top_n, 0), V);
  std::vector<int32_t> ids(n);
  std::vector<float> values(n);
  const int64_t listed = cpu::TopN(x, V, n, ids.data(), values.data());
  std::vector<std::pair<int32_t, float>>& top = out.top;
  top.reserve(listed);
  for (int64_t i = 0; i < listed; ++i) top.emplace_back(ids[i], values[i]);
  for (auto& [id, value] : top) value = static_cast<float>(value - log_z);
  return out;
}

}  // namespace tpserve
