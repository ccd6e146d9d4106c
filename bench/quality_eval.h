// The model side of the quantization quality benchmark (bench/quality_bench.cc): a text's
// tokens cut into llama-perplexity's chunks, each chunk run through a reference and a
// candidate model in one prefill step with logits at every scored position, scored by
// bench/quality_metrics.h. Tested on fixture checkpoints by tests/quality_eval_test.cc.
//
// The convention (llama.cpp's `llama-perplexity --kl-divergence`): the text is tokenized
// once (BOS first where the tokenizer adds one) and cut into floor(tokens / ctx)
// consecutive chunks of ctx tokens; where the tokenizer adds a BOS, each chunk's first
// token is replaced by BOS. The first ctx/2 positions of a chunk are context only: the
// logits at positions ctx/2 .. ctx-2 are scored against the tokens that follow them,
// ctx - 1 - ctx/2 tokens per chunk.
#pragma once

#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/quality_metrics.h"
#include "launch/engine_setup.h"
#include "worker/communicator.h"
#include "worker/model.h"

namespace tpserve::bench {

// The chunks of `tokens` (see the file's comment), at most `max_chunks` (0: all).
std::vector<std::vector<int32_t>> SplitIntoChunks(const std::vector<int32_t>& tokens, int32_t ctx,
                                                  int64_t max_chunks, std::optional<int32_t> bos);

// The first scored position of a chunk of ctx tokens: ctx / 2.
inline int32_t FirstScoredPosition(int32_t ctx) { return ctx / 2; }

// Applies "key=value,key=value" engine settings to `o` (--ref_options, --candidate_options):
// dtype, load_format, cpu_gemm, cpu_quant_prefill, cpu_huge_pages (true|false), threads. Unknown keys are
// errors that list the known ones. New EngineOptions knobs (a weight quantization, say) are
// one line each here.
absl::Status ApplyEngineSettings(absl::string_view settings, EngineOptions& o);

// Starts one model as the benchmark runs it: this rank alone (comm of size 1), on the CPU,
// with a KV cache for one sequence of `ctx` tokens in every KV group. `options.model` and the
// weight settings are the caller's; device, KV and batch settings are overwritten.
absl::StatusOr<Engine> StartScoringEngine(EngineOptions options, int32_t ctx, Communicator& comm);

// Both models must score the same vocabulary: an error naming both sizes otherwise.
absl::Status CheckSameVocabulary(const ModelConfig& ref, const ModelConfig& cand);

// One chunk through `model` in one prefill step, or in consecutive steps of at most
// `step_tokens` tokens (0: one step): the logits at positions
// [FirstScoredPosition(ctx), ctx - 1): [ctx - 1 - ctx/2][vocab] flat, fp32. Steps of at most
// cpu::kMaxStreamingRows (16) tokens run every product on the decode kernels (on quantized
// weights: int8-rounded activations), so that the scores are what decoding computes.
absl::StatusOr<std::vector<float>> ScoredLogits(Model& model, const std::vector<int32_t>& chunk,
                                                int32_t step_tokens = 0);

// The chunk's scores from both models' ScoredLogits rows (equal sizes).
std::vector<TokenScore> ScoreRows(absl::Span<const float> ref_logits, absl::Span<const float> cand_logits,
                                  int64_t vocab, const std::vector<int32_t>& chunk);

// Scores one chunk (ctx - 1 - ctx/2 tokens) of the candidate against the reference.
absl::StatusOr<std::vector<TokenScore>> ScoreChunk(Model& ref, Model& cand, const std::vector<int32_t>& chunk,
                                                   int32_t cand_step_tokens = 0);

}  // namespace tpserve::bench
