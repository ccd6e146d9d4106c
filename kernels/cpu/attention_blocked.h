// Private to kernels/cpu/attention*.cc: the blocked (flash-attention style) path that
// PagedAttention runs for runs of many query tokens of one sequence, as in a prefill chunk.
// Tested through tests/cpu_attention_test.cc (PagedAttentionRunsTest, AttentionTilesTest) against the double
// reference; measured by bench/kernels_bench.cc --attention.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace tpserve::cpu {

// The first key a query at `pos` sees.
inline int32_t FirstKey(const PagedAttentionParams& p, int32_t pos) {
  return p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
}

// One online-softmax step of a row of scores, for both paths: sc[0, padded) := exp(sc - max)
// (padded: a multiple of 8, the tail already -inf), rounded to bf16 over [0, count) where
// p.bf16_probabilities; returns the sum of the exponentials (before any rounding).
float ExpScores(float* sc, int padded, int count, float max, const PagedAttentionParams& p);

// Tokens [first, first + count) of a step: one sequence's queries at consecutive positions
// token_pos[first], token_pos[first] + 1, ... (all >= 0).
struct QueryRun {
  int64_t first = 0;
  int32_t count = 0;
};

// The blocked path's two products (attention_tiles.inc), at 8 lanes (AVX2) and at 16
// (AVX-512, attention_tiles_avx512.cc: only where DetectCpuFeatures().avx512). Both give the
// same bits. Scores: s[rows][0:padded] = q[rows][0:hd] · kt[0:hd][0:padded] (kt's and s's row
// stride kChunkKeys; columns up to the next 16 may be written). Values: o[rows][0:hd] +=
// p[rows][0:count] · V (p's row stride kChunkKeys, o's ldo; V's rows at v_rows).
namespace attention_tiles {
inline constexpr int kChunkKeys = 64;  // keys per online-softmax step
inline constexpr int kTileRows = 6;    // query rows per register tile
void ScoresAvx2(const float* q, int rows, int64_t hd, const float* kt, int padded, float* s);
void ValuesAvx2(const float* p, int rows, int count, const float* const* v_rows, int64_t hd, float* o, int64_t ldo);
void ScoresAvx512(const float* q, int rows, int64_t hd, const float* kt, int padded, float* s);
void ValuesAvx512(const float* p, int rows, int count, const float* const* v_rows, int64_t hd, float* o,
                  int64_t ldo);
}  // namespace attention_tiles

// Runs shorter than this go token by token (PagedAttention's decode path, which also splits a
// long context's keys among threads); longer ones take AttendQueryRuns.
inline constexpr int32_t kMinRunTokens = 8;

// The maximal runs of at least kMinRunTokens tokens of the step into `runs`; every token not
// in one into `rest` (both cleared first).
void FindQueryRuns(const int32_t* token_seq, const int32_t* token_pos, int64_t tokens, std::vector<QueryRun>& runs,
                   std::vector<int64_t>& rest);

// PagedAttention's output for the tokens of `runs` (any kv_dtype: caches not held as fp32 are
// widened chunk by chunk with LoadKvHead, and the same fp32 arithmetic runs on the widened
// values). Blocks of a run's query tokens times one KV head's GQA group are scored against
// chunks of keys with register-blocked products, each K and V row loaded once per block.
void AttendQueryRuns(const float* q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                     const int32_t* token_pos, const std::vector<QueryRun>& runs, const int32_t* block_tables,
                     const PagedAttentionParams& p, float* out);

}  // namespace tpserve::cpu
