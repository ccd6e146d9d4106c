// Offline generation: step planning, greedy sampling, logprobs. Tested by
// tests/model_test.cc.
#include "coordinator/engine/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve {
namespace {

double LogSumExp(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

}  // namespace

float LogProbOf(const float* logits, int64_t vocab, int32_t id) {
  return static_cast<float>(logits[id] - LogSumExp(logits, vocab));
}

std::vector<std::pair<int32_t, float>> TopLogProbs(const float* logits, int64_t vocab, int32_t n) {
  n = static_cast<int32_t>(std::min<int64_t>(n, vocab));
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double lse = LogSumExp(logits, vocab);
  std::vector<std::pair<int32_t, float>> out;
  for (int32_t i = 0; i < n; ++i) out.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  return out;
}

absl::StatusOr<std::vector<GenerationOutput>> Generator::Generate(const std::vector<std::vector<int32_t>>& prompts,
                                                                  const GenerateParams& params) {
  const ModelConfig& cfg = model_.config();
  const int32_t bs = model_.block_size();
  const int64_t V = cfg.vocab_size;
  if (params.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be at least 1");
  steps_.clear();
  const int32_t S = static_cast<int32_t>(prompts.size());
  std::vector<GenerationOutput> outs(S);
  int32_t max_blocks = 0;
  int64_t blocks_needed = 0;
  for (int32_t s = 0; s < S; ++s) {
    if (prompts[s].empty()) return absl::InvalidArgumentError(absl::StrCat("prompt ", s, " is empty"));
    for (int32_t id : prompts[s]) {
      if (id < 0 || id >= V) {
        return absl::InvalidArgumentError(absl::StrCat("prompt ", s, ": token id ", id,
                                                       " is outside the vocabulary [0, ", V, ")"));
      }
    }
    const int64_t total = static_cast<int64_t>(prompts[s].size()) + params.max_tokens;
    if (total > cfg.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("prompt ", s, ": ", prompts[s].size(), " prompt tokens + ",
                                                     params.max_tokens, " max tokens exceed the model's ",
                                                     cfg.max_position_embeddings, " positions"));
    }
    const int32_t nb = static_cast<int32_t>((total + bs - 1) / bs);
    max_blocks = std::max(max_blocks, nb);
    blocks_needed += nb;
    outs[s].prompt_ids = prompts[s];
  }
  const int64_t have_blocks = *std::min_element(model_.num_kv_blocks().begin(), model_.num_kv_blocks().end());
  if (blocks_needed > have_blocks) {
    return absl::ResourceExhaustedError(absl::StrCat("the KV cache holds ", have_blocks, " blocks of ", bs,
                                                     " tokens; this batch needs ", blocks_needed,
                                                     ": raise the KV cache memory or lower max tokens"));
  }
  // Block tables: sequence s owns blocks_needed_s blocks, in order or scrambled.
  std::vector<int32_t> pool(blocks_needed);
  std::iota(pool.begin(), pool.end(), 0);
  if (options_.scramble_blocks) {
    for (size_t i = 0; i < pool.size(); ++i) std::swap(pool[i], pool[(i * 7919 + 13) % pool.size()]);
  }
  std::vector<int32_t> tables(static_cast<size_t>(S) * max_blocks, -1);
  {
    size_t next = 0;
    for (int32_t s = 0; s < S; ++s) {
      const int64_t total = static_cast<int64_t>(prompts[s].size()) + params.max_tokens;
      for (int32_t b = 0; b * bs < total; ++b) tables[s * max_blocks + b] = pool[next++];
    }
  }
  auto slot_of = [&](int32_t s, int32_t pos) { return tables[s * max_blocks + pos / bs] * bs + pos % bs; };

  std::vector<int32_t> eos = cfg.eos_token_ids;
  eos.insert(eos.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
  std::vector<int32_t> length(S);  // tokens already in the cache
  std::vector<bool> done(S, false);
  std::vector<int32_t> next_token(S, -1);

  auto sample = [&](int32_t s, const float* logits) {
    const int32_t id = static_cast<int32_t>(cpu::Argmax(logits, V));
    GenerationOutput& o = outs[s];
    o.output_ids.push_back(id);
    o.output_logprobs.push_back(LogProbOf(logits, V, id));
    if (params.top_logprobs > 0) o.top_logprobs.push_back(TopLogProbs(logits, V, params.top_logprobs));
    if (params.return_logits) o.logits.emplace_back(logits, logits + V);
    next_token[s] = id;
    if (!params.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) {
      done[s] = true;
      o.finish_reason = "stop";
    } else if (static_cast<int32_t>(o.output_ids.size()) >= params.max_tokens) {
      done[s] = true;
      o.finish_reason = "length";
    }
  };

  // Offline generation gives every KV group the same block layout.
  const size_t groups = model_.num_kv_blocks().size();
  std::vector<int32_t> slots;  // of the step being built
  auto run = [&](StepPlan& plan, const std::vector<int32_t>& logit_seqs, bool prefill) -> absl::Status {
    plan.num_seqs = S;
    plan.kv.assign(groups, KvGroupPlan{slots, max_blocks, tables});
    slots.clear();
    StepTimes t;
    TP_ASSIGN_OR_RETURN(StepOutput step, executor_.Execute(plan, &t));
    const std::vector<float>& logits = step.logits;
    steps_.push_back(StepRecord{plan.num_tokens(), t.total_us / 1000.0, t.allreduce_us / 1000.0, prefill});
    for (size_t i = 0; i < logit_seqs.size(); ++i) sample(logit_seqs[i], &logits[i * V]);
    return absl::OkStatus();
  };

  // Prefill, chunked: a step takes up to max_num_batched_tokens prompt tokens.
  {
    StepPlan plan;
    std::vector<int32_t> logit_seqs;
    for (int32_t s = 0; s < S; ++s) {
      const int32_t n = static_cast<int32_t>(prompts[s].size());
      for (int32_t p = 0; p < n; ++p) {
        plan.token_ids.push_back(prompts[s][p]);
        plan.positions.push_back(p);
        plan.token_seq.push_back(s);
        slots.push_back(slot_of(s, p));
        if (p == n - 1) {
          plan.logit_rows.push_back(static_cast<int32_t>(plan.token_ids.size() - 1));
          logit_seqs.push_back(s);
        }
        if (plan.num_tokens() >= options_.max_num_batched_tokens) {
          TP_RETURN_IF_ERROR(run(plan, logit_seqs, true));
          plan = StepPlan{};
          logit_seqs.clear();
        }
      }
      length[s] = n;
    }
    if (plan.num_tokens() > 0) TP_RETURN_IF_ERROR(run(plan, logit_seqs, true));
  }
  // Decode: one token per unfinished sequence per step.
  while (true) {
    StepPlan plan;
    std::vector<int32_t> logit_seqs;
    for (int32_t s = 0; s < S; ++s) {
      if (done[s]) continue;
      plan.token_ids.push_back(next_token[s]);
      plan.positions.push_back(length[s]);
      plan.token_seq.push_back(s);
      slots.push_back(slot_of(s, length[s]));
      plan.logit_rows.push_back(static_cast<int32_t>(plan.token_ids.size() - 1));
      logit_seqs.push_back(s);
      ++length[s];
    }
    if (plan.num_tokens() == 0) break;
    TP_RETURN_IF_ERROR(run(plan, logit_seqs, false));
  }
  return outs;
}

}  // namespace tpserve
