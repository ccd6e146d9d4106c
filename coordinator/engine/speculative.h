// Speculative decoding's configuration (vLLM's --speculative-config) and the draft
// proposers. A proposer guesses a running sequence's next tokens right after each step;
// the engine core verifies them in the sequence's next step (the scheduler gives it 1 + K
// tokens and K + 1 sampled rows) and keeps the longest prefix the target model agrees
// with. The MTP drafter's proposer, which runs a model on every rank, is
// coordinator/engine/mtp_proposer.h; MakeDraftProposer (engine_core.h) makes the one a
// config names.
// Drafts are deterministic (one guess per position), so verification is exact for every
// sampling setting: each row is sampled by the target's own rule with the draw of its
// output position, a draft is kept while it equals that sample, and the first differing
// sample replaces it. Tested by tests/speculative_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "coordinator/engine/scheduler.h"

namespace tpserve {

struct SpeculativeConfig {
  enum class Method { kNone, kNgram, kMtp };
  Method method = Method::kNone;
  int32_t num_speculative_tokens = 0;  // K: draft tokens per step, at most
  // n-gram (prompt lookup): the longest suffix of the sequence, between these lengths,
  // that occurred earlier in it proposes the tokens that followed it there.
  int32_t prompt_lookup_min = 0;
  int32_t prompt_lookup_max = 0;
  // mtp: the drafter checkpoint's directory (Gemma 4's "assistant", model_type
  // gemma4_assistant; worker/mtp_drafter.h), loaded on every rank beside the target.
  std::string model;
  // "adaptive": true: each step drafts for each sequence the number of tokens (0 ... K) that
  // is expected to give the most tokens per second, from its recent acceptance and the
  // measured time of steps of each width (DraftLengthPolicy). Off (vLLM's behaviour): K
  // whenever the proposer has them.
  bool adaptive = false;

  bool enabled() const { return method != Method::kNone; }
  // JSON as --speculative-config takes it, with the defaults filled in ("" when off).
  std::string ToJson() const;
};

// Parses --speculative-config: a JSON object as vLLM's, e.g.
//   {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
//   {"method": "mtp", "model": "/models/gemma-4-31b-it-assistant", "num_speculative_tokens": 4}
// As vLLM: with neither lookup bound set both are 5; with one set, the other equals it.
// num_speculative_tokens is required for both. "" or "null": off. INVALID_ARGUMENT naming
// the key for a bad value, an unknown key, or a method not implemented here. The mtp
// model directory is read by StartEngine, not here.
absl::StatusOr<SpeculativeConfig> ParseSpeculativeConfig(absl::string_view json);

// The verification rule. `samples[i]` is the target's token at the position after
// drafts[0..i) (sampled as if those were accepted: row i of the step, with the draw of
// that output position); drafts.size() + 1 samples. Returns how many drafts are kept: the
// longest prefix equal to the samples. The tokens emitted are samples[0..kept], i.e. the
// kept drafts and then the first sample that differs (or the one after the last draft).
// For a deterministic draft this is exact rejection sampling: draft d at a position is
// kept with probability p(d), and a rejected position emits a token drawn from p
// conditioned on not d, i.e. from max(p - one_hot(d), 0) renormalized.
int32_t NumAcceptedDrafts(absl::Span<const int32_t> drafts, absl::Span<const int32_t> samples);

// How many drafts a sequence's next step should verify ("adaptive" speculation): the k
// in 0 ... max_drafts that maximizes the expected tokens per forward millisecond,
//   (1 + a + a^2 + ... + a^k) / T(n + 1 + k),
// a being the sequence's acceptance rate (DraftAcceptance, sequence.h; the accepted run of drafts is a
// prefix, so position i is reached with probability a^i), T(w) the measured forward time
// of a decode step of w tokens (an average over recent steps), and n the other sequences'
// tokens in that step. A width not measured yet costs what the nearest narrower measured
// one does, so it looks attractive and gets measured; with nothing measured all widths
// cost alike and k = max_drafts. On a GPU at batch 1 the widths cost about the same and
// k stays near K; where verification is compute-bound (a CPU, large batches) fewer drafts
// win.
class DraftLengthPolicy {
 public:
  static constexpr int32_t kMaxWidth = 1024;  // wider steps are not measured (costed as the widest measured)

  // A decode step's forward (no prefill tokens) of num_tokens tokens took forward_ms.
  void ObserveStep(int32_t num_tokens, double forward_ms);
  int32_t Choose(double acceptance, int32_t other_tokens, int32_t max_drafts) const;
  double Cost(int32_t width) const;

 private:
  static constexpr double kStepWeight = 0.2;  // of the newest step in the average
  std::vector<double> ms_ = std::vector<double>(kMaxWidth + 1, 0.0);  // 0: not measured
};

// Guesses the next tokens of the sequences a step just gave tokens, on the engine thread
// right after the step's Update (the engine core's update stage ends with it).
class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Sets each request's drafts with scheduler.SetDrafts (up to its max_drafts; none is
  // fine). An error (a drafter model's pass failed) fails the step's requests as a failed
  // forward does.
  virtual absl::Status ProposeAll(absl::Span<const DraftRequest> requests, Scheduler& scheduler) = 0;
};

// A proposer that guesses from a sequence's tokens alone, one sequence at a time.
class SequenceProposer : public DraftProposer {
 public:
  // Up to `max_tokens` guesses at what follows `tokens` (prompt and output so far; fewer
  // or none when it has nothing to offer).
  virtual std::vector<int32_t> Propose(absl::Span<const int32_t> tokens, int32_t max_tokens) = 0;
  absl::Status ProposeAll(absl::Span<const DraftRequest> requests, Scheduler& scheduler) final;
};

// Prompt lookup: for n from max down to min, the last n tokens are looked for earlier in
// the sequence; at the first n found, the tokens after the most recent occurrence that
// has max_tokens of them (else after the one with the most) are the draft. O(length * n)
// per call, on rank 0's CPU, no weights.
class NgramProposer : public SequenceProposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n);
  std::vector<int32_t> Propose(absl::Span<const int32_t> tokens, int32_t max_tokens) override;

 private:
  int32_t min_n_, max_n_;
};

}  // namespace tpserve
