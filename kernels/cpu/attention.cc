// Paged attention on the CPU: causal, GQA, sliding window and softcap, with an online
// (chunked) fp32 softmax. Tested by tests/cpu_attention_test.cc; measured by
// bench/kernels_bench.cc.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/attention_blocked.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve::cpu {
namespace {

// Keys scored per online-softmax step (a multiple of 8): large enough to vectorize the
// exp, small enough that the scores of a whole GQA group stay in L1.
constexpr int kKeyChunk = 64;
// Keys ahead whose K rows are prefetched. Each key of one KV head is a separate short run
// (head_dim floats, a whole slot row apart), which the hardware prefetchers do not follow;
// 2 ahead measured best for decode over a 1k context (1.7x). The chunk's V rows are asked for
// as its keys are scored, a chunk ahead of AccumulateRows (which otherwise waited on them:
// the 270M's batch-16 decode attention over 1k keys 14-23% faster, docs/quantization.md).
constexpr int kPrefetchKeys = 2;

float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float sum = avx2::HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Brings the cache lines of one K or V row (n floats) towards L1.
inline void PrefetchRow(const float* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < n * static_cast<int64_t>(sizeof(float)); b += 64) {
    _mm_prefetch(p + b, _MM_HINT_T0);
  }
}

// acc[0:n] += sum over c < count of p[c] * rows[c][0:n], rows[c] = base + offsets[c].
// Each 64-float slice of acc stays in 8 registers across all the rows, so the loop is
// bound by loads and FMAs rather than by storing acc back once per row.
void AccumulateRows(const float* p, int count, const float* base, const int64_t* offsets, int64_t n,
                    float* acc) {
  int64_t d = 0;
  for (; d + 64 <= n; d += 64) {
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_loadu_ps(acc + d + 8 * j);
    for (int c = 0; c < count; ++c) {
      const __m256 pc = _mm256_set1_ps(p[c]);
      const float* row = base + offsets[c] + d;
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(pc, _mm256_loadu_ps(row + 8 * j), a[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(acc + d + 8 * j, a[j]);
  }
  for (; d + 8 <= n; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int c = 0; c < count; ++c) {
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[c]), _mm256_loadu_ps(base + offsets[c] + d), a);
    }
    _mm256_storeu_ps(acc + d, a);
  }
  for (; d < n; ++d) {
    float a = acc[d];
    for (int c = 0; c < count; ++c) a += p[c] * base[offsets[c] + d];
    acc[d] = a;
  }
}

// Per-thread working set for one (token, KV head, run of query heads) task.
struct Scratch {
  explicit Scratch(int max_heads, int head_dim, bool widen_kv)
      : acc(static_cast<size_t>(max_heads) * head_dim),
        scores(static_cast<size_t>(max_heads) * kKeyChunk),
        row_max(max_heads),
        row_sum(max_heads),
        key_offsets(kKeyChunk),
        k_rows(widen_kv ? static_cast<size_t>(kKeyChunk) * head_dim : 0),
        v_rows(widen_kv ? static_cast<size_t>(kKeyChunk) * head_dim : 0) {}
  std::vector<float> acc;     // [heads, head_dim] unnormalized output
  std::vector<float> scores;  // [heads, kKeyChunk] scores, then probabilities
  std::vector<float> row_max;
  std::vector<float> row_sum;
  std::vector<int64_t> key_offsets;  // offsets of the chunk's K/V rows (in the fp32 cache, or in k_rows/v_rows)
  std::vector<float> k_rows, v_rows;  // the chunk's K and V rows widened to fp32 (caches not held as fp32)
};

// Attention of query heads [q_begin, q_end) of one token, all reading KV head `kv_head`.
// Sharing the loop over keys lets every K and V row be loaded once for the whole group.
// Keys [key_first, key_last] of one token's query heads [q_begin, q_end), all reading KV head
// `kv_head`: leaves the unnormalized output in s.acc and the softmax's running max and sum in
// s.row_max / s.row_sum (an empty range: -inf and 0). Sharing the loop over keys lets every K
// and V row be loaded once for the whole group.
void AttendKeys(const float* q, const void* k_cache, const void* v_cache, const int32_t* block_table,
                int32_t key_first, int32_t key_last, int32_t kv_head, int32_t q_begin, int32_t q_end,
                const PagedAttentionParams& p, Scratch& s) {
  const int heads = q_end - q_begin;
  const int64_t hd = p.head_dim;
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * hd;
  const bool f32 = p.kv_dtype == KvCacheDType::kF32;
  const int64_t slot_bytes = KvSlotBytes(p.kv_dtype, p.num_kv_heads, hd);
  const int64_t head_bytes = slot_bytes / p.num_kv_heads;
  // The rows the loops below read: the fp32 caches themselves, or the chunk's widened rows.
  const float* const k_base = f32 ? static_cast<const float*>(k_cache) : s.k_rows.data();
  const float* const v_base = f32 ? static_cast<const float*>(v_cache) : s.v_rows.data();
  std::fill_n(s.acc.begin(), heads * hd, 0.0f);
  std::fill_n(s.row_max.begin(), heads, -INFINITY);
  std::fill_n(s.row_sum.begin(), heads, 0.0f);
  const __m256 cap = _mm256_set1_ps(p.softcap);

  for (int32_t j0 = key_first; j0 <= key_last; j0 += kKeyChunk) {
    const int count = std::min(kKeyChunk, key_last + 1 - j0);
    int32_t block = j0 / p.block_size;
    int32_t offset = j0 % p.block_size;
    for (int c = 0; c < count; ++c) {
      const int64_t slot = static_cast<int64_t>(block_table[block]) * p.block_size + offset;
      if (f32) {
        s.key_offsets[c] = slot * kv_row + kv_head * hd;
      } else {
        const int64_t at = slot * slot_bytes + kv_head * head_bytes;
        LoadKvHead(p.kv_dtype, static_cast<const uint8_t*>(k_cache) + at, hd, s.k_rows.data() + c * hd);
        LoadKvHead(p.kv_dtype, static_cast<const uint8_t*>(v_cache) + at, hd, s.v_rows.data() + c * hd);
        s.key_offsets[c] = c * hd;
      }
      if (++offset == p.block_size) {
        offset = 0;
        ++block;
      }
    }
    // Scores are padded with -inf to a multiple of 8 so the tail lanes get probability 0.
    const int padded = (count + 7) & ~7;
    for (int c = 0; c < count; ++c) {
      const float* key = k_base + s.key_offsets[c];
      if (f32 && c + kPrefetchKeys < count) PrefetchRow(k_base + s.key_offsets[c + kPrefetchKeys], hd);
      if (f32) PrefetchRow(v_base + s.key_offsets[c], hd);
      for (int h = 0; h < heads; ++h) {
        s.scores[h * kKeyChunk + c] = Dot(q + (q_begin + h) * hd, key, hd) * p.scale;
      }
    }
    for (int h = 0; h < heads; ++h) {
      float* sc = s.scores.data() + h * kKeyChunk;
      if (p.softcap > 0.0f) {
        for (int c = 0; c < padded; c += 8) {
          const __m256 v = _mm256_loadu_ps(sc + c);
          _mm256_storeu_ps(sc + c, _mm256_mul_ps(cap, avx2::Tanh(_mm256_div_ps(v, cap))));
        }
      }
      // After the softcap, which would map -inf to -cap.
      for (int c = count; c < padded; ++c) sc[c] = -INFINITY;
      __m256 vmax = _mm256_set1_ps(-INFINITY);
      for (int c = 0; c < padded; c += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(sc + c));
      // Online softmax: rescale what was accumulated under the previous maximum.
      const float new_max = std::max(s.row_max[h], avx2::HorizontalMax(vmax));
      const float correction = std::exp(s.row_max[h] - new_max);
      s.row_max[h] = new_max;
      if (correction != 1.0f) {
        float* acc = s.acc.data() + h * hd;
        for (int64_t d = 0; d < hd; ++d) acc[d] *= correction;
      }
      s.row_sum[h] = s.row_sum[h] * correction + ExpScores(sc, padded, count, new_max, p);
    }
    for (int h = 0; h < heads; ++h) {
      AccumulateRows(s.scores.data() + h * kKeyChunk, count, v_base, s.key_offsets.data(), hd,
                     s.acc.data() + h * hd);
    }
  }
}

// Every key a query at `pos` sees, normalized into out (its heads [q_begin, q_end)).
void AttendGroup(const float* q, const void* k_cache, const void* v_cache,
                 const int32_t* block_table, int32_t pos, int32_t kv_head, int32_t q_begin,
                 int32_t q_end, const PagedAttentionParams& p, float* out, Scratch& s) {
  AttendKeys(q, k_cache, v_cache, block_table, FirstKey(p, pos), pos, kv_head, q_begin, q_end, p, s);
  const int64_t hd = p.head_dim;
  for (int h = 0; h < q_end - q_begin; ++h) {
    const float inv_sum = 1.0f / s.row_sum[h];
    const float* acc = s.acc.data() + h * hd;
    float* o = out + (q_begin + h) * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * inv_sum;
  }
}


// Caches not held as fp32, over a step with more query tokens than kWidenOnceTokens (a prefill
// chunk): every key is read by many queries, so the blocks the step reads are widened to fp32
// once, in a compact copy (at most kWidenOnceBytes), and the fp32 kernel runs on it; decoding
// tasks instead widen each chunk of keys as they read it (AttendGroup). Returns false where the
// step's blocks exceed the cap (then the caller widens per task).
constexpr int64_t kWidenOnceTokens = 16;
constexpr int64_t kWidenOnceBytes = int64_t{32} << 20;

bool AttendOnWidenedBlocks(const float* q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                           const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                           const PagedAttentionParams& p, float* out) {
  // The blocks a sequence's queries can see: from the first visible position's (the sliding
  // window's start: earlier blocks may have been freed) to the last query's, per table row.
  std::vector<int32_t> rows_first, rows_last;  // per table row (rows_last -1: none)
  for (int64_t t = 0; t < tokens; ++t) {
    if (token_pos[t] < 0) continue;
    const int32_t row = token_seq[t];
    if (row >= static_cast<int32_t>(rows_last.size())) {
      rows_last.resize(row + 1, -1);
      rows_first.resize(row + 1, std::numeric_limits<int32_t>::max());
    }
    const int32_t first = p.sliding_window > 0 ? std::max(0, token_pos[t] - p.sliding_window + 1) : 0;
    rows_first[row] = std::min(rows_first[row], first / p.block_size);
    rows_last[row] = std::max(rows_last[row], token_pos[t] / p.block_size);
  }
  std::vector<int32_t> physical;  // compact id -> physical block
  std::vector<int32_t> tables(rows_last.size() * p.max_blocks_per_seq, 0);
  std::unordered_map<int32_t, int32_t> compact;
  for (size_t row = 0; row < rows_last.size(); ++row) {
    for (int32_t b = rows_last[row] < 0 ? 0 : rows_first[row]; b <= rows_last[row]; ++b) {
      const int32_t phys = block_tables[row * p.max_blocks_per_seq + b];
      auto [it, added] = compact.emplace(phys, static_cast<int32_t>(physical.size()));
      if (added) physical.push_back(phys);
      tables[row * p.max_blocks_per_seq + b] = it->second;
    }
  }
  const int64_t hd = p.head_dim;
  const int64_t row_floats = static_cast<int64_t>(p.num_kv_heads) * hd;
  const int64_t block_floats = p.block_size * row_floats;
  if (2 * static_cast<int64_t>(physical.size()) * block_floats * 4 > kWidenOnceBytes) return false;
  thread_local std::vector<float> k32, v32;
  k32.resize(std::max<size_t>(1, physical.size() * block_floats));
  v32.resize(k32.size());
  const int64_t slot_bytes = KvSlotBytes(p.kv_dtype, p.num_kv_heads, hd), head_bytes = slot_bytes / p.num_kv_heads;
  const int64_t slots = static_cast<int64_t>(physical.size()) * p.block_size;
  float* const kw = k32.data();
  float* const vw = v32.data();
#pragma omp parallel for schedule(static) if (slots * row_floats >= (int64_t{1} << 15))
  for (int64_t i = 0; i < slots; ++i) {
    const int64_t src = static_cast<int64_t>(physical[i / p.block_size]) * p.block_size + i % p.block_size;
    for (int64_t h = 0; h < p.num_kv_heads; ++h) {
      const int64_t at = src * slot_bytes + h * head_bytes;
      LoadKvHead(p.kv_dtype, static_cast<const uint8_t*>(k_cache) + at, hd, kw + i * row_floats + h * hd);
      LoadKvHead(p.kv_dtype, static_cast<const uint8_t*>(v_cache) + at, hd, vw + i * row_floats + h * hd);
    }
  }
  PagedAttentionParams fp32 = p;
  fp32.kv_dtype = KvCacheDType::kF32;
  PagedAttention(q, kw, vw, token_seq, token_pos, tokens, tables.data(), fp32, out);
  return true;
}

// PagedAttention of the step's tokens ids[0, tokens) one at a time: the decode path, and every
// token not in a run of a sequence's consecutive queries.
void AttendTokenByToken(const float* q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                        const int32_t* token_pos, const int64_t* ids, int64_t tokens, const int32_t* block_tables,
                        const PagedAttentionParams& p, float* out) {
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  // A task is (token, KV head, run of that head's query heads). Whole groups share K/V
  // loads; a decode step with few tokens and KV heads splits groups to occupy every thread.
  const int64_t threads = omp_get_max_threads();
  const int64_t groups = tokens * p.num_kv_heads;
  const int64_t hd = p.head_dim;
  const int64_t q_stride = static_cast<int64_t>(p.num_q_heads) * hd;
  const bool widen = p.kv_dtype != KvCacheDType::kF32;
  // Few (token, KV head) groups, as in decoding: each group's keys are split into `ranges` runs
  // of whole key chunks, a task each (every K and V row is read, and widened, once), and the
  // runs' partial softmaxes are merged. Splitting the group's query heads instead (below) has
  // every task read all the keys.
  int32_t longest = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    const int32_t pos = token_pos[ids[i]];
    if (pos >= 0) longest = std::max(longest, pos - FirstKey(p, pos) + 1);
  }
  const int64_t ranges =
      std::min<int64_t>((2 * threads + groups - 1) / groups, (longest + kKeyChunk - 1) / kKeyChunk);
  if (ranges > 1) {
    const int64_t part_floats = group * (hd + 2);  // acc [group, hd], then row_max [group], row_sum [group]
    // The calling thread's, kept between decode steps and layers; the OpenMP threads below
    // reach it through `partials` (a thread_local named inside would be their own).
    thread_local std::vector<float> partial;
    partial.resize(static_cast<size_t>(groups * ranges * part_floats));
    float* const partials = partial.data();
#pragma omp parallel
    {
      Scratch scratch(group, p.head_dim, widen);
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < groups * ranges; ++task) {
        const int64_t g = task / ranges, t = ids[g / p.num_kv_heads];
        const int32_t kv_head = static_cast<int32_t>(g % p.num_kv_heads), r = static_cast<int32_t>(task % ranges);
        const int32_t pos = token_pos[t];
        int32_t key_first = 0, key_last = -1;  // empty for padding and for ranges past the keys
        if (pos >= 0) {
          const int32_t first = FirstKey(p, pos);
          const int32_t chunks = (pos - first + kKeyChunk) / kKeyChunk;
          const int32_t per = static_cast<int32_t>((chunks + ranges - 1) / ranges) * kKeyChunk;
          key_first = first + r * per;
          key_last = std::min(pos, key_first + per - 1);
        }
        AttendKeys(q + t * q_stride, k_cache, v_cache,
                   block_tables + static_cast<int64_t>(token_seq[t]) * p.max_blocks_per_seq, key_first, key_last,
                   kv_head, kv_head * group, (kv_head + 1) * group, p, scratch);
        float* part = partials + task * part_floats;
        std::copy_n(scratch.acc.begin(), group * hd, part);
        std::copy_n(scratch.row_max.begin(), group, part + group * hd);
        std::copy_n(scratch.row_sum.begin(), group, part + group * hd + group);
      }
    }
#pragma omp parallel for schedule(static) if (groups > 1)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t t = ids[g / p.num_kv_heads];
      const int32_t kv_head = static_cast<int32_t>(g % p.num_kv_heads);
      float* o = out + t * q_stride + static_cast<int64_t>(kv_head) * group * hd;
      if (token_pos[t] < 0) {  // a padding query: nothing to attend to
        std::fill_n(o, group * hd, 0.0f);
        continue;
      }
      const float* parts = partials + g * ranges * part_floats;
      for (int32_t h = 0; h < group; ++h) {
        float m = -INFINITY;
        for (int64_t r = 0; r < ranges; ++r) m = std::max(m, parts[r * part_floats + group * hd + h]);
        float sum = 0.0f;
        float* oh = o + h * hd;
        std::fill_n(oh, hd, 0.0f);
        for (int64_t r = 0; r < ranges; ++r) {
          const float* part = parts + r * part_floats;
          const float rm = part[group * hd + h];
          if (rm == -INFINITY) continue;  // an empty range
          const float w = std::exp(rm - m);
          sum += part[group * hd + group + h] * w;
          for (int64_t d = 0; d < hd; ++d) oh[d] += part[h * hd + d] * w;
        }
        const float inv_sum = 1.0f / sum;
        for (int64_t d = 0; d < hd; ++d) oh[d] *= inv_sum;
      }
    }
    return;
  }
  int32_t splits = 1;
  while (splits < group && groups * splits < 2 * threads) splits *= 2;
  splits = std::min(splits, group);
  const int32_t heads_per_task = (group + splits - 1) / splits;
  const int64_t tasks = groups * splits;

#pragma omp parallel if (tasks > 1)
  {
    Scratch scratch(heads_per_task, p.head_dim, widen);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t t = ids[task / (p.num_kv_heads * splits)];
      const int32_t kv_head = static_cast<int32_t>(task / splits % p.num_kv_heads);
      const int32_t part = static_cast<int32_t>(task % splits);
      const int32_t q_begin = kv_head * group + part * heads_per_task;
      const int32_t q_end = std::min(q_begin + heads_per_task, (kv_head + 1) * group);
      if (q_begin >= q_end) continue;
      float* out_t = out + t * q_stride;
      if (token_pos[t] < 0) {  // a padding query: nothing to attend to
        std::fill(out_t + q_begin * p.head_dim, out_t + q_end * p.head_dim, 0.0f);
        continue;
      }
      AttendGroup(q + t * q_stride, k_cache, v_cache,
                  block_tables + static_cast<int64_t>(token_seq[t]) * p.max_blocks_per_seq,
                  token_pos[t], kv_head, q_begin, q_end, p, out_t, scratch);
    }
  }
}

}  // namespace

void PagedAttention(const float* q, const void* k_cache, const void* v_cache,
                    const int32_t* token_seq, const int32_t* token_pos, int64_t tokens,
                    const int32_t* block_tables, const PagedAttentionParams& p, float* out) {
  TP_CHECK(p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0);
  TP_CHECK(p.head_dim > 0 && p.block_size > 0);
  if (p.kv_dtype != KvCacheDType::kF32 && tokens > kWidenOnceTokens &&
      AttendOnWidenedBlocks(q, k_cache, v_cache, token_seq, token_pos, tokens, block_tables, p, out)) {
    return;
  }
  // Runs of a sequence's consecutive queries (prefill chunks) take the blocked path; the rest
  // (decode tokens, short runs, padding) go token by token. Which path a token takes depends
  // only on the step's layout, never on kv_dtype, so caches not held as fp32 still give the
  // fp32 path's result on their stored values.
  // The calling thread's, kept between layers and steps: no allocation per decode step. The
  // OpenMP regions below reach `rest` through its data pointer.
  thread_local std::vector<QueryRun> runs;
  thread_local std::vector<int64_t> rest;
  FindQueryRuns(token_seq, token_pos, tokens, runs, rest);
  if (!runs.empty()) AttendQueryRuns(q, k_cache, v_cache, token_seq, token_pos, runs, block_tables, p, out);
  if (!rest.empty()) {
    AttendTokenByToken(q, k_cache, v_cache, token_seq, token_pos, rest.data(), static_cast<int64_t>(rest.size()),
                       block_tables, p, out);
  }
}

}  // namespace tpserve::cpu
