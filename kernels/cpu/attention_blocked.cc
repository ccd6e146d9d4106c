// PagedAttention's blocked path for runs of many query tokens of one sequence (prefill
// chunks), flash-attention style: S = Q·K^T and O += P·V as register-blocked AVX2 products,
// with PagedAttention's online softmax per row in between. Tested by tests/cpu_attention_test.cc
// (PagedAttentionRunsTest); measured by bench/kernels_bench.cc --attention.
#include "kernels/cpu/attention_blocked.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/cpu_features.h"

namespace tpserve::cpu {
namespace {

// Keys per online-softmax step: the stride of the score rows and of the transposed keys.
using attention_tiles::kChunkKeys;
// Query rows (tokens x the GQA group's heads) per task: enough rows that each packed K and V
// row serves many FMAs, few enough that a 512-token prompt still makes a few hundred tasks
// for dynamic scheduling to balance the causal triangle's unequal blocks.
constexpr int kBlockRows = 48;
// Micro-kernel tile (attention_tiles::kTileRows): 6 rows x 2 vectors is 12 accumulators, plus
// 2 loaded vectors and a broadcast: 15 of AVX2's 16 registers (AVX-512 has 32).
using attention_tiles::kTileRows;

// Per-thread working set of one task (a block of query rows against one KV head).
struct BlockScratch {
  std::vector<float> q;               // [rows, hd] the block's queries, row = token * group + head
  std::vector<float> o;               // [rows, hd_pad] unnormalized output
  std::vector<float> s;               // [rows, kChunkKeys] scores, then probabilities
  std::vector<float> kt;              // [hd, kChunkKeys] the chunk's keys, transposed
  std::vector<float> k_wide, v_wide;  // [kChunkKeys, hd_pad] rows widened to fp32 (caches not fp32)
  std::vector<const float*> k_rows, v_rows;  // [kChunkKeys] the chunk's K and V rows
  std::vector<float> row_max, row_sum;       // [rows] the online softmax's state

  void Resize(int rows, int64_t hd, int64_t hd_pad, bool widen) {
    q.resize(static_cast<size_t>(rows) * hd);
    o.resize(static_cast<size_t>(rows) * hd_pad);
    s.resize(static_cast<size_t>(rows) * kChunkKeys);
    kt.resize(static_cast<size_t>(hd) * kChunkKeys);
    k_wide.resize(widen ? static_cast<size_t>(kChunkKeys) * hd_pad : 0);
    v_wide.resize(k_wide.size());
    k_rows.resize(kChunkKeys);
    v_rows.resize(kChunkKeys);
    row_max.resize(rows);
    row_sum.resize(rows);
  }
};

// kt[d * kChunkKeys + c] = rows[c][d] for c < count, 0 for count <= c < padded (a multiple
// of 8). Whole 8x8 blocks go through registers: a scalar transpose costs as many
// instructions as a third of the score FMAs it feeds.
void TransposeKeys(const float* const* rows, int count, int padded, int64_t hd, float* kt) {
  int c = 0;
  for (; c + 8 <= count; c += 8) {
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(rows[c + i] + d);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      // r[0..3]: rows 0-3's elements {0,4}, {1,5}, {2,6}, {3,7}; r[4..7]: rows 4-7's.
      for (int h = 0; h < 8; h += 4) {
        r[h + 0] = _mm256_shuffle_ps(t[h + 0], t[h + 2], 0x44);
        r[h + 1] = _mm256_shuffle_ps(t[h + 0], t[h + 2], 0xEE);
        r[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        r[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
      }
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(kt + (d + i) * kChunkKeys + c, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(kt + (d + i + 4) * kChunkKeys + c, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
      }
    }
    for (; d < hd; ++d) {
      for (int i = 0; i < 8; ++i) kt[d * kChunkKeys + c + i] = rows[c + i][d];
    }
  }
  for (int64_t d = 0; d < hd; ++d) {
    float* col = kt + d * kChunkKeys;
    for (int i = c; i < count; ++i) col[i] = rows[i][d];
    for (int i = count; i < padded; ++i) col[i] = 0.0f;
  }
}

// The products at 8 lanes (AVX2); attention_tiles_avx512.cc has them at 16.
struct Vec {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V LoadFirst(const float* p, int n) { return _mm256_maskload_ps(p, avx2::TailMask(n)); }
  static void StoreFirst(float* p, V v, int n) { _mm256_maskstore_ps(p, avx2::TailMask(n), v); }
};

#include "kernels/cpu/attention_tiles.inc"

// The products on the widest vectors this CPU has.
bool UseAvx512Tiles() {
  static const bool avx512 = DetectCpuFeatures().avx512;
  return avx512;
}

void Scores(const float* q, int rows, int64_t hd, const float* kt, int padded, float* s) {
  if (UseAvx512Tiles()) return attention_tiles::ScoresAvx512(q, rows, hd, kt, padded, s);
  TileScores(q, rows, hd, kt, padded, s);
}

void AccumulateValues(const float* p, int rows, int count, const float* const* v_rows, int64_t hd, float* o,
                      int64_t ldo) {
  if (UseAvx512Tiles()) return attention_tiles::ValuesAvx512(p, rows, count, v_rows, hd, o, ldo);
  TileValues(p, rows, count, v_rows, hd, o, ldo);
}

// One block of a run: tokens [t0, t0 + n) (positions pos0, pos0 + 1, ...) times KV head
// kv_head's query heads, over every key any of them sees; writes their rows of out.
void AttendBlock(const float* q, const void* k_cache, const void* v_cache, const int32_t* block_table, int64_t t0,
                 int32_t n, int32_t pos0, int32_t kv_head, const PagedAttentionParams& p, float* out,
                 BlockScratch& s) {
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int rows = n * group;
  const int64_t hd = p.head_dim;
  const int64_t hd_pad = (hd + 7) & ~int64_t{7};
  const int64_t q_stride = static_cast<int64_t>(p.num_q_heads) * hd;
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * hd;
  const bool f32 = p.kv_dtype == KvCacheDType::kF32;
  const int64_t slot_bytes = KvSlotBytes(p.kv_dtype, p.num_kv_heads, hd);
  const int64_t head_bytes = slot_bytes / p.num_kv_heads;
  for (int32_t i = 0; i < n; ++i) {  // a token's group heads are adjacent in q
    std::copy_n(q + (t0 + i) * q_stride + static_cast<int64_t>(kv_head) * group * hd, group * hd,
                s.q.data() + static_cast<int64_t>(i) * group * hd);
  }
  std::fill_n(s.o.begin(), rows * hd_pad, 0.0f);
  std::fill_n(s.row_max.begin(), rows, -INFINITY);
  std::fill_n(s.row_sum.begin(), rows, 0.0f);
  const __m256 cap = _mm256_set1_ps(p.softcap);
  const __m256 scale = _mm256_set1_ps(p.scale);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int32_t key_first = FirstKey(p, pos0), key_last = pos0 + n - 1;

  for (int32_t j0 = key_first; j0 <= key_last; j0 += kChunkKeys) {
    const int count = std::min(kChunkKeys, key_last + 1 - j0);
    const int padded = (count + 7) & ~7;
    int32_t block = j0 / p.block_size;
    int32_t offset = j0 % p.block_size;
    for (int c = 0; c < count; ++c) {
      const int64_t slot = static_cast<int64_t>(block_table[block]) * p.block_size + offset;
      if (f32) {
        s.k_rows[c] = static_cast<const float*>(k_cache) + slot * kv_row + kv_head * hd;
        s.v_rows[c] = static_cast<const float*>(v_cache) + slot * kv_row + kv_head * hd;
      } else {
        const int64_t at = slot * slot_bytes + kv_head * head_bytes;
        LoadKvHead(p.kv_dtype, static_cast<const uint8_t*>(k_cache) + at, hd, s.k_wide.data() + c * hd_pad);
        LoadKvHead(p.kv_dtype, static_cast<const uint8_t*>(v_cache) + at, hd, s.v_wide.data() + c * hd_pad);
        s.k_rows[c] = s.k_wide.data() + c * hd_pad;
        s.v_rows[c] = s.v_wide.data() + c * hd_pad;
      }
      if (++offset == p.block_size) {
        offset = 0;
        ++block;
      }
    }
    TransposeKeys(s.k_rows.data(), count, padded, hd, s.kt.data());
    Scores(s.q.data(), rows, hd, s.kt.data(), padded, s.s.data());

    // The online softmax of PagedAttention's token-by-token path, row by row: scale, softcap,
    // then -inf for keys the row's token does not see (after the softcap, which would map
    // -inf to -cap), the running max, rescale, exp and sum.
    for (int r = 0; r < rows; ++r) {
      const int32_t pos = pos0 + r / group;
      const int32_t lo = std::max(FirstKey(p, pos), j0) - j0;
      const int32_t hi = std::min(pos, j0 + count - 1) - j0;
      float* sc = s.s.data() + static_cast<int64_t>(r) * kChunkKeys;
      if (lo > hi) {  // the chunk is wholly outside this row's keys: it adds nothing
        std::fill_n(sc, padded, 0.0f);
        continue;
      }
      const __m256i lo_v = _mm256_set1_epi32(lo - 1), hi_v = _mm256_set1_epi32(hi + 1);
      __m256 vmax = _mm256_set1_ps(-INFINITY);
      for (int c = 0; c < padded; c += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(sc + c), scale);
        if (p.softcap > 0.0f) v = _mm256_mul_ps(cap, avx2::Tanh(_mm256_div_ps(v, cap)));
        const __m256i key = _mm256_add_epi32(lane, _mm256_set1_epi32(c));
        const __m256i seen = _mm256_and_si256(_mm256_cmpgt_epi32(key, lo_v), _mm256_cmpgt_epi32(hi_v, key));
        v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), v, _mm256_castsi256_ps(seen));
        _mm256_storeu_ps(sc + c, v);
        vmax = _mm256_max_ps(vmax, v);
      }
      const float new_max = std::max(s.row_max[r], avx2::HorizontalMax(vmax));
      const float correction = std::exp(s.row_max[r] - new_max);
      s.row_max[r] = new_max;
      if (correction != 1.0f) {
        float* o = s.o.data() + r * hd_pad;
        const __m256 cv = _mm256_set1_ps(correction);
        for (int64_t d = 0; d < hd_pad; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), cv));
      }
      s.row_sum[r] = s.row_sum[r] * correction + ExpScores(sc, padded, count, new_max, p);
    }
    AccumulateValues(s.s.data(), rows, count, s.v_rows.data(), hd, s.o.data(), hd_pad);
  }
  for (int r = 0; r < rows; ++r) {
    const float inv_sum = 1.0f / s.row_sum[r];
    const float* o = s.o.data() + r * hd_pad;
    float* dst = out + (t0 + r / group) * q_stride + (static_cast<int64_t>(kv_head) * group + r % group) * hd;
    for (int64_t d = 0; d < hd; ++d) dst[d] = o[d] * inv_sum;
  }
}

}  // namespace

namespace attention_tiles {
void ScoresAvx2(const float* q, int rows, int64_t hd, const float* kt, int padded, float* s) {
  TileScores(q, rows, hd, kt, padded, s);
}
void ValuesAvx2(const float* p, int rows, int count, const float* const* v_rows, int64_t hd, float* o, int64_t ldo) {
  TileValues(p, rows, count, v_rows, hd, o, ldo);
}
}  // namespace attention_tiles

float ExpScores(float* sc, int padded, int count, float max, const PagedAttentionParams& p) {
  const __m256 m = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  for (int c = 0; c < padded; c += 8) {
    const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(sc + c), m));
    _mm256_storeu_ps(sc + c, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  if (p.bf16_probabilities) {
    for (int c = 0; c < count; ++c) sc[c] = Bf16ToF32(F32ToBf16(sc[c]));
  }
  return avx2::HorizontalSum(vsum);
}

void FindQueryRuns(const int32_t* token_seq, const int32_t* token_pos, int64_t tokens, std::vector<QueryRun>& runs,
                   std::vector<int64_t>& rest) {
  runs.clear();
  rest.clear();
  int64_t t = 0;
  while (t < tokens) {
    int64_t end = t + 1;
    if (token_pos[t] >= 0) {
      while (end < tokens && token_seq[end] == token_seq[t] && token_pos[end] == token_pos[end - 1] + 1) ++end;
    }
    if (end - t >= kMinRunTokens) {
      runs.push_back({t, static_cast<int32_t>(end - t)});
    } else {
      for (int64_t u = t; u < end; ++u) rest.push_back(u);
    }
    t = end;
  }
}

void AttendQueryRuns(const float* q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                     const int32_t* token_pos, const std::vector<QueryRun>& runs, const int32_t* block_tables,
                     const PagedAttentionParams& p, float* out) {
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t block_tokens = std::max(1, kBlockRows / group);
  // Blocks of each run, the costliest (most keys) first so that dynamic scheduling ends with
  // the small ones.
  std::vector<QueryRun> blocks;
  std::vector<int64_t> keys;
  for (const QueryRun& run : runs) {
    for (int32_t b = 0; b < run.count; b += block_tokens) {
      const int64_t t0 = run.first + b;
      const int32_t n = std::min(block_tokens, run.count - b);
      blocks.push_back({t0, n});
      keys.push_back(static_cast<int64_t>(token_pos[t0]) + n - FirstKey(p, token_pos[t0]));
    }
  }
  std::vector<int32_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return keys[a] > keys[b]; });
  const int64_t tasks = static_cast<int64_t>(blocks.size()) * p.num_kv_heads;
  const int64_t hd = p.head_dim, hd_pad = (hd + 7) & ~int64_t{7};
  const bool widen = p.kv_dtype != KvCacheDType::kF32;
#pragma omp parallel if (tasks > 1)
  {
    // Declared inside the region: each OpenMP thread's own, kept across calls (layers).
    thread_local BlockScratch scratch;
    scratch.Resize(block_tokens * group, hd, hd_pad, widen);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const QueryRun& b = blocks[order[task / p.num_kv_heads]];
      const int32_t kv_head = static_cast<int32_t>(task % p.num_kv_heads);
      AttendBlock(q, k_cache, v_cache, block_tables + static_cast<int64_t>(token_seq[b.first]) * p.max_blocks_per_seq,
                  b.first, b.count, token_pos[b.first], kv_head, p, out, scratch);
    }
  }
}

}  // namespace tpserve::cpu
