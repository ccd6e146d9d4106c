// The sampling rule of kernels/row_sampling.h on the CPU (AVX2), fast up to vocabularies of
// 262,144: no sort anywhere. Tested by tests/cpu_sampling_test.cc against the plain
// reference tests/sampling_reference.h; timed by bench/sampling_bench.cc.
//
// Per row (V = vocabulary; passes over the whole row in brackets):
//  - greedy: cpu::Argmax [2 compare passes].
//  - The rule's thresholds are on s = l / T. Division by T > 0 is monotone, rounding
//    included, so max s = (max l) / T, the k-th largest s = (k-th largest l) / T, and
//    {s >= t} = {l >= LowestLogitReaching(t)}: thresholds are found on the logits and kept
//    sets compared on the logits, exactly, ties that the division creates included.
//  - top-k <= 2048: a k-element heap fed by a vector threshold test, which also yields the
//    row max [1 compare pass]; larger k: nth_element on a copy. A kept set of <= 4096
//    tokens (ties included) is then gathered [1 compare pass] and weighed, filtered and
//    drawn from on its own.
//  - Otherwise the row max [1 compare pass] and one vector exp pass with 256-token block
//    sums [1 exp pass]. Without top-p the draw walks the block sums and re-weighs one block.
//    With top-p, the candidates heavy enough to matter are gathered [1 compare pass] and
//    weighed; many of them (a flat row) are binned by logit so that only the bin holding
//    the top-p boundary is quickselected; the draw walks block sums of the candidates.
// Weights are fp32 exp of the rule's s - m (within a few ulp), summed in fp64 (in fp32 over
// at most 32 tokens first): the draw can differ from the reference's only where
// tests/sampling_reference.h calls it ambiguous.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <optional>
#include <vector>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Rule 2: temperatures below this sample greedily.
constexpr float kGreedyTemperature = 1e-5f;
// Weights are summed per block of tokens so that the draw finds its block from the block
// sums and scans one block, instead of a serial prefix sum over the whole row.
constexpr int64_t kBlock = 256;
// Up to this k the k-th largest logit comes from a k-element heap (fed only by the few
// logits above its top); above it, from nth_element on a copy.
constexpr int64_t kMaxHeapTopK = 2048;
// Up to this many top-k survivors (ties included) are weighed alone instead of by a pass
// over the whole row.
constexpr int64_t kMaxSparse = 4096;
// Above this many top-p candidates, bin them first; a bin spans 1/32 of an octave of weight
// (T * ln 2 / 32 of logit), the last one everything lighter.
constexpr int64_t kMaxDirectTopP = 4096;
constexpr float kBinsPerOctave = 32.0f;
constexpr int32_t kBins = 8192;

// A top-p candidate: its logit (the order) and its weight (the mass).
struct Candidate {
  float logit;
  float weight;
};

// Buffers reused across rows and calls (grown, never shrunk, so that no call zeroes
// megabytes): one set per thread.
struct Scratch {
  std::vector<float> heap;           // top-k heap or nth_element copy
  std::vector<int32_t> ids;          // gathered token ids, ascending
  std::vector<float> logits;         // their logits
  std::vector<float> weights;        // their weights
  std::vector<Candidate> select;     // top-p quickselect input
  std::vector<double> block_sums;    // per kBlock tokens (or candidates)
  std::vector<int32_t> bin_of;       // top-p candidates' bins
  std::vector<double> bins;          // 4 x the bins: top-p candidate mass per logit bin
};

template <typename T>
T* Ensure(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

double HorizontalSum(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// Accumulates the 8 fp32 lanes of e into two fp64 accumulators.
inline void AddWidened(__m256 e, __m256d& lo, __m256d& hi) {
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

// The smallest float l with l / T >= t (T > 0): division by T is monotone, so a logit is
// kept by the threshold t on s iff it is >= this. Binary search over the order of the floats
// (their bit patterns mapped to increasing integers), so tiny or huge T cost nothing extra.
float LowestLogitReaching(float t, float temperature) {
  if (t == -kInf) return -kInf;  // every logit but NaN
  auto key_of = [](float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  };
  auto float_of = [](uint32_t k) {
    return std::bit_cast<float>((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
  };
  // Invariant: float_of(lo) / T < t <= float_of(hi) / T (t > -inf, and +inf / T reaches
  // any t).
  uint32_t lo = key_of(-kInf), hi = key_of(kInf);
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (float_of(mid) / temperature >= t) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return float_of(hi);
}

// Calls fn(i) for every i in [begin, n) with x[i] > *threshold, in increasing i; fn may
// raise *threshold. The vector test skips the (usually all) lanes at or below it.
template <typename Fn>
void ForEachAbove(const float* x, int64_t begin, int64_t n, const float* threshold, Fn fn) {
  int64_t i = begin;
  for (; i < n && i % 8 != 0; ++i) {
    if (x[i] > *threshold) fn(i);
  }
  for (; i + 8 <= n; i += 8) {
    unsigned mask =
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(*threshold), _CMP_GT_OQ));
    while (mask != 0) {
      const int64_t j = i + std::countr_zero(mask);
      mask &= mask - 1;
      if (x[j] > *threshold) fn(j);
    }
  }
  for (; i < n; ++i) {
    if (x[i] > *threshold) fn(i);
  }
}

// The k-th largest of x[0, n) (duplicates counted, NaN counted as -inf), 1 <= k <= n,
// and in *max the largest (the top of the k kept), which spares a pass for the row max.
float KthLargest(const float* x, int64_t n, int64_t k, std::vector<float>& scratch, float* max) {
  auto no_nan = [](float v) { return std::isnan(v) ? -kInf : v; };
  if (k > kMaxHeapTopK) {
    scratch.resize(n);
    std::transform(x, x + n, scratch.begin(), no_nan);
    std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), std::greater<float>());
    *max = *std::max_element(scratch.begin(), scratch.begin() + k);
    return scratch[k - 1];
  }
  // Min-heap of the k largest so far; its top is the current k-th largest. NaN never
  // passes the > test of ForEachAbove.
  scratch.resize(k);
  std::transform(x, x + k, scratch.begin(), no_nan);
  std::make_heap(scratch.begin(), scratch.end(), std::greater<float>());
  float kth = scratch.front();
  ForEachAbove(x, k, n, &kth, [&](int64_t i) {
    std::pop_heap(scratch.begin(), scratch.end(), std::greater<float>());
    scratch.back() = x[i];
    std::push_heap(scratch.begin(), scratch.end(), std::greater<float>());
    kth = scratch.front();
  });
  *max = *std::max_element(scratch.begin(), scratch.end());
  return kth;
}

// Lane indices of the set bits of an 8-bit mask, packed low, one byte each: the
// permutation that compacts a vector's selected lanes.
constexpr std::array<uint64_t, 256> kCompressLanes = [] {
  std::array<uint64_t, 256> table{};
  for (int mask = 0; mask < 256; ++mask) {
    int k = 0;
    for (int j = 0; j < 8; ++j) {
      if ((mask >> j) & 1) table[mask] |= static_cast<uint64_t>(j) << (8 * k++);
    }
  }
  return table;
}();

// Writes the ids and logits of the elements of l[0, n) that are >= floor, in id order, to
// ids/vals (room for min(n, cap + 8)); returns how many, or -1 as soon as there are more
// than cap. Groups of 8 without one cost one vector compare.
int64_t GatherAtLeast(const float* l, int64_t n, float floor, int64_t cap, int32_t* ids, float* vals) {
  const __m256 vfloor = _mm256_set1_ps(floor);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t count = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(l + i);
    const unsigned mask = _mm256_movemask_ps(_mm256_cmp_ps(v, vfloor, _CMP_GE_OQ));
    if (mask == 0) continue;
    // count <= min(i, cap) here, so the 8 stores stay within the room promised.
    const __m256i perm = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(kCompressLanes[mask])));
    _mm256_storeu_ps(vals + count, _mm256_permutevar8x32_ps(v, perm));
    const __m256i id = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(i)), lane);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ids + count), _mm256_permutevar8x32_epi32(id, perm));
    count += std::popcount(mask);
    if (count > cap) return -1;
  }
  for (; i < n; ++i) {
    if (!(l[i] >= floor)) continue;
    if (count == cap) return -1;
    ids[count] = static_cast<int32_t>(i);
    vals[count++] = l[i];
  }
  return count;
}

// w = exp(s - m), s = l / T, for 8 logits; kDivide = false when T = 1 (s = l exactly). The
// same inputs give the same bits wherever this runs, so weights recomputed later (for one
// block, or for gathered candidates) equal the ones summed before.
template <bool kDivide>
inline __m256 Weight8(__m256 l, __m256 temperature, __m256 m) {
  const __m256 s = kDivide ? _mm256_div_ps(l, temperature) : l;
  return avx2::Exp(_mm256_sub_ps(s, m));
}

// The weights of l[0, n), 0 where l < floor or NaN: written to w when kStore, summed per
// kBlock into block_sums. Returns their sum. Each lane sums at most kBlock / 16 weights in
// fp32 (two chains, for throughput), the blocks are summed in fp64: a relative error of
// ~1e-6 at worst, far inside the reference's 1e-4 tolerance.
template <bool kDivide, bool kStore>
double Weigh(const float* l, int64_t n, float floor, float temperature, float m, float* w, double* block_sums) {
  const __m256 vt = _mm256_set1_ps(temperature);
  const __m256 vm = _mm256_set1_ps(m);
  const __m256 vfloor = _mm256_set1_ps(floor);
  auto weigh8 = [&](int64_t i) {
    const __m256 v = _mm256_loadu_ps(l + i);
    const __m256 e = _mm256_and_ps(_mm256_cmp_ps(v, vfloor, _CMP_GE_OQ), Weight8<kDivide>(v, vt, vm));
    if constexpr (kStore) _mm256_storeu_ps(w + i, e);
    return e;
  };
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    int64_t i = b;
    for (; i + 16 <= end; i += 16) {
      acc0 = _mm256_add_ps(acc0, weigh8(i));
      acc1 = _mm256_add_ps(acc1, weigh8(i + 8));
    }
    if (i + 8 <= end) {
      acc0 = _mm256_add_ps(acc0, weigh8(i));
      i += 8;
    }
    if (i < end) {
      const __m256i tail = avx2::TailMask(end - i);
      const __m256 v = _mm256_maskload_ps(l + i, tail);
      const __m256 keep = _mm256_and_ps(_mm256_castsi256_ps(tail), _mm256_cmp_ps(v, vfloor, _CMP_GE_OQ));
      const __m256 e = _mm256_and_ps(keep, Weight8<kDivide>(v, vt, vm));
      if constexpr (kStore) _mm256_maskstore_ps(w + i, tail, e);
      acc1 = _mm256_add_ps(acc1, e);
    }
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    AddWidened(_mm256_add_ps(acc0, acc1), lo, hi);
    const double sum = HorizontalSum(_mm256_add_pd(lo, hi));
    block_sums[b / kBlock] = sum;
    total += sum;
  }
  return total;
}

// Sums per kBlock of the weights w[j] whose logit vals[j] >= keep; returns the total.
double KeptBlockSums(const float* vals, const float* w, int64_t n, float keep, double* block_sums) {
  const __m256 vkeep = _mm256_set1_ps(keep);
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    __m256d acc_lo = _mm256_setzero_pd();
    __m256d acc_hi = _mm256_setzero_pd();
    int64_t i = b;
    for (; i + 8 <= end; i += 8) {
      const __m256 kept = _mm256_cmp_ps(_mm256_loadu_ps(vals + i), vkeep, _CMP_GE_OQ);
      AddWidened(_mm256_and_ps(kept, _mm256_loadu_ps(w + i)), acc_lo, acc_hi);
    }
    if (i < end) {
      const __m256i lanes = avx2::TailMask(end - i);
      const __m256 kept = _mm256_and_ps(_mm256_castsi256_ps(lanes),
                                        _mm256_cmp_ps(_mm256_maskload_ps(vals + i, lanes), vkeep, _CMP_GE_OQ));
      AddWidened(_mm256_and_ps(kept, _mm256_maskload_ps(w + i, lanes)), acc_lo, acc_hi);
    }
    block_sums[b / kBlock] = HorizontalSum(_mm256_add_pd(acc_lo, acc_hi));
    total += block_sums[b / kBlock];
  }
  return total;
}

// Where the draw lands among blocks: the first whose running sum exceeds target, and the
// sum before it. Rounding can leave target at or past the end of the last block: then the
// last block with weight, and target +inf so that its last weight is taken.
struct Landing {
  int64_t block = 0;
  double before = 0;
  double target = 0;
};
Landing FindBlock(const double* block_sums, int64_t blocks, double target) {
  double cum = 0;
  int64_t last_with_weight = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    if (block_sums[b] > 0) last_with_weight = b;
    if (cum + block_sums[b] > target) return {b, cum, target};
    cum += block_sums[b];
  }
  double before = 0;
  for (int64_t b = 0; b < last_with_weight; ++b) before += block_sums[b];
  return {last_with_weight, before, static_cast<double>(kInf)};
}

// The first j in [0, n) with vals[j] >= keep whose running weight (from `before`) exceeds
// target; when rounding leaves target unreached, the last such j with weight. Kept weights
// of 0 cannot raise the running sum, so they are never the answer.
int64_t ScanBlock(const float* vals, const float* w, int64_t n, float keep, double before, double target) {
  double cum = before;
  int64_t last = -1;
  for (int64_t j = 0; j < n; ++j) {
    if (!(vals[j] >= keep) || !(w[j] > 0.0f)) continue;
    last = j;
    cum += w[j];
    if (cum > target) return j;
  }
  return last;
}

// Quickselect for the top-p boundary over c[0, n) (reordered), all lighter than candidates
// already known to weigh `above`: the largest logit t such that above + the weight of
// {c : logit >= t} >= target. Ties with t are all in (the rule keeps them). nullopt when
// even all of c leave the sum short of target. Expected O(n).
std::optional<float> SelectTopP(Candidate* c, int64_t n, double above, double target) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const float a = c[lo].logit, b = c[lo + (hi - lo) / 2].logit, d = c[hi - 1].logit;
    const float pivot = std::max(std::min(a, b), std::min(std::max(a, b), d));
    // [lo, gt) above the pivot, [gt, lt) equal to it, [lt, hi) below it.
    int64_t gt = lo, i = lo, lt = hi;
    double heavier = 0, equal = 0;
    while (i < lt) {
      const float x = c[i].logit;
      if (x > pivot) {
        heavier += c[i].weight;
        std::swap(c[gt++], c[i++]);
      } else if (x < pivot) {
        std::swap(c[i], c[--lt]);
      } else {
        equal += c[i].weight;
        ++i;
      }
    }
    // A boundary strictly above the pivot needs a non-empty part there (top_p <= 0 makes
    // target 0, which any empty sum would reach).
    if (gt > lo && above + heavier >= target) {
      hi = gt;
      continue;
    }
    if (above + heavier + equal >= target) return pivot;
    above += heavier + equal;
    lo = lt;
  }
  return std::nullopt;
}

// The top-p boundary logit (as SelectTopP) over candidates vals/w[0, n), all >= floor,
// which hold every token at or above it. Many candidates (a flat row) are first binned by
// (lmax - logit) / (T ln 2 / 32), a key monotone in the logit, so that the boundary's ties
// share one bin and only that bin goes to the quickselect.
std::optional<float> TopPBoundary(const float* vals, const float* w, int64_t n, float floor, double target,
                                  float lmax, float temperature, Scratch& sc) {
  Candidate* c = Ensure(sc.select, n);
  if (n <= kMaxDirectTopP) {
    for (int64_t j = 0; j < n; ++j) c[j] = {vals[j], w[j]};
    return SelectTopP(c, n, 0.0, target);
  }
  const __m256 vlmax = _mm256_set1_ps(lmax);
  const __m256 vscale = _mm256_set1_ps(kBinsPerOctave / (temperature * std::numbers::ln2_v<float>));
  const __m256 vlast = _mm256_set1_ps(static_cast<float>(kBins - 1));
  // min_ps returns its second operand for NaN; (lmax - v) * scale is +inf at most.
  auto bin8 = [&](__m256 v) {
    return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_sub_ps(vlmax, v), vscale), vlast));
  };
  // Every candidate's bin is at most floor's: clear and walk only those.
  const int32_t bins = _mm256_cvtsi256_si32(bin8(_mm256_set1_ps(floor))) + 1;
  int32_t* bin_of = Ensure(sc.bin_of, n + 8);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bin_of + j), bin8(_mm256_loadu_ps(vals + j)));
  }
  if (j < n) {
    const __m256i tail = avx2::TailMask(n - j);
    _mm256_maskstore_epi32(bin_of + j, tail, bin8(_mm256_maskload_ps(vals + j, tail)));
  }
  // Four interleaved histograms, so that runs of one bin do not chain each add on the
  // store before it.
  double* hist = Ensure(sc.bins, 4 * static_cast<int64_t>(bins));
  std::fill(hist, hist + 4 * bins, 0.0);
  double* h[4] = {hist, hist + bins, hist + 2 * bins, hist + 3 * bins};
  for (j = 0; j + 4 <= n; j += 4) {
    h[0][bin_of[j]] += w[j];
    h[1][bin_of[j + 1]] += w[j + 1];
    h[2][bin_of[j + 2]] += w[j + 2];
    h[3][bin_of[j + 3]] += w[j + 3];
  }
  for (; j < n; ++j) h[0][bin_of[j]] += w[j];
  double above = 0;
  int32_t boundary = 0;
  for (;; ++boundary) {
    if (boundary == bins) return std::nullopt;
    const double mass = h[0][boundary] + h[1][boundary] + h[2][boundary] + h[3][boundary];
    if (above + mass >= target) break;
    above += mass;
  }
  // The boundary bin's members: groups of 8 without one cost one vector compare.
  const __m256i vboundary = _mm256_set1_epi32(boundary);
  int64_t m = 0;
  for (j = 0; j < n; j += 8) {
    const __m256i in_bin =
        _mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bin_of + j)), vboundary);
    // Lanes past n (the room of n + 8) hold stale bins: masked off.
    unsigned mask = _mm256_movemask_ps(_mm256_castsi256_ps(in_bin)) & (n - j >= 8 ? 0xffu : (1u << (n - j)) - 1);
    while (mask != 0) {
      const int64_t k = j + std::countr_zero(mask);
      mask &= mask - 1;
      c[m++] = {vals[k], w[k]};
    }
  }
  return SelectTopP(c, m, above, target);
}

// The draw over gathered tokens ids/vals/w[0, n) (id order), kept iff vals >= keep: the
// token, or -1 when no kept token has weight.
int32_t DrawGathered(const int32_t* ids, const float* vals, const float* w, int64_t n, float keep, float u,
                     Scratch& sc) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  double* sums = Ensure(sc.block_sums, blocks);
  const double total = KeptBlockSums(vals, w, n, keep, sums);
  if (!(total > 0)) return -1;
  const Landing at = FindBlock(sums, blocks, static_cast<double>(u) * total);
  const int64_t b = at.block * kBlock;
  const int64_t j = ScanBlock(vals + b, w + b, std::min(kBlock, n - b), keep, at.before, at.target);
  return j < 0 ? -1 : ids[b + j];
}

// Temperature, top-k, top-p, min-p and the draw for a row whose largest logit (NaN aside)
// lmax has lmax / T finite; kth: the top_k-th largest logit when top-k is on. Returns -1
// when nothing kept has weight (min_p > 1).
template <bool kDivide>
int32_t SampleFiltered(const float* l, int64_t V, const RowSampling& p, float lmax, float kth, Scratch& sc) {
  const float temperature = p.temperature;
  const float m = lmax / temperature;
  const float u = SampleUniform(p.seed, p.step);
  const bool top_p = p.top_p < 1.0f;
  // Rule 3's thresholds, as logit thresholds: a token is kept iff l >= each.
  const bool top_k = p.top_k > 0 && p.top_k < V;
  const float top_k_floor = top_k ? LowestLogitReaching(kth / temperature, temperature) : -kInf;
  const float min_p_floor = p.min_p > 0.0f ? LowestLogitReaching(m + std::log(p.min_p), temperature) : -kInf;
  const float base_floor = std::max(top_k_floor, min_p_floor);
  auto weigh_gathered = [&](const float* vals, int64_t n, float* w) {
    return Weigh<kDivide, true>(vals, n, -kInf, temperature, m, w, Ensure(sc.block_sums, (n + kBlock - 1) / kBlock));
  };
  auto top_p_floor = [&](const float* vals, const float* w, int64_t n, float floor,
                         double total) -> std::optional<float> {
    const std::optional<float> t =
        TopPBoundary(vals, w, n, floor, static_cast<double>(p.top_p) * total, lmax, temperature, sc);
    if (!t) return std::nullopt;
    return LowestLogitReaching(*t / temperature, temperature);
  };

  if (top_k) {
    // A small top-k (the usual case) leaves few tokens: gather and weigh just those.
    int32_t* ids = Ensure(sc.ids, kMaxSparse + 8);
    float* vals = Ensure(sc.logits, kMaxSparse + 8);
    const int64_t n = GatherAtLeast(l, V, top_k_floor, kMaxSparse, ids, vals);
    if (n >= 0) {
      float* w = Ensure(sc.weights, n + 8);
      const double total = weigh_gathered(vals, n, w);
      float keep = base_floor;
      if (top_p) {
        // nullopt: rounding left all survivors short of top_p of their own weight; keep all.
        if (const std::optional<float> t = top_p_floor(vals, w, n, top_k_floor, total)) keep = std::max(keep, *t);
      }
      return DrawGathered(ids, vals, w, n, keep, u, sc);
    }
  }

  const int64_t blocks = (V + kBlock - 1) / kBlock;
  double* block_sums = Ensure(sc.block_sums, blocks);
  if (!top_p) {
    const double total = Weigh<kDivide, false>(l, V, base_floor, temperature, m, nullptr, block_sums);
    if (!(total > 0)) return -1;
    const Landing at = FindBlock(block_sums, blocks, static_cast<double>(u) * total);
    // Re-weigh the landing block: the same bits as summed above.
    const int64_t b = at.block * kBlock, len = std::min(kBlock, V - b);
    float w[kBlock];
    double unused;
    Weigh<kDivide, true>(l + b, len, base_floor, temperature, m, w, &unused);
    const int64_t j = ScanBlock(l + b, w, len, base_floor, at.before, at.target);
    return j < 0 ? -1 : static_cast<int32_t>(b + j);
  }

  // Top-p over the whole top-k set: its weight first, then the candidates. Top-p never
  // keeps a token lighter than phi = (1 - top_p) / 2 * total / V: all those weigh at most
  // half of (1 - top_p) * total together, so the heavier tokens alone weigh more than
  // top_p * total and the boundary lies among them. Nor do tokens below min-p matter:
  // min-p drops them next.
  const double total = Weigh<kDivide, false>(l, V, top_k_floor, temperature, m, nullptr, block_sums);
  float floor = base_floor;
  const double phi = 0.5 * (1.0 - static_cast<double>(p.top_p)) * total / static_cast<double>(V);
  if (phi > 0) {
    // w <= phi  <=>  l <= lmax + T log(phi), up to rounding, which only moves the bound a
    // few ulp: still far below the boundary, and a shortfall is caught below.
    const double bound = static_cast<double>(lmax) + static_cast<double>(temperature) * std::log(phi);
    floor = std::max(floor, std::min(lmax, static_cast<float>(bound)));
  }
  int32_t* ids = Ensure(sc.ids, V + 8);
  float* vals = Ensure(sc.logits, V + 8);
  for (;;) {
    const int64_t n = GatherAtLeast(l, V, floor, V, ids, vals);
    float* w = Ensure(sc.weights, n + 8);
    weigh_gathered(vals, n, w);
    if (const std::optional<float> t = top_p_floor(vals, w, n, floor, total)) {
      return DrawGathered(ids, vals, w, n, std::max(base_floor, *t), u, sc);
    }
    // The candidates weigh less than top_p * total. Cut by min-p (or holding the whole
    // top-k set, short by rounding alone): top-p keeps more than min-p, which decides.
    if (floor == base_floor) return DrawGathered(ids, vals, w, n, base_floor, u, sc);
    floor = base_floor;  // cut by the phi bound, short by rounding: take every candidate
  }
}

int32_t SampleRow(const float* l, int64_t V, const RowSampling& p, Scratch& sc) {
  if (!(p.temperature >= kGreedyTemperature)) return static_cast<int32_t>(Argmax(l, V));
  float lmax = -kInf, kth = -kInf;
  if (p.top_k > 0 && p.top_k < V) {
    kth = KthLargest(l, V, p.top_k, sc.heap, &lmax);
  } else {
    bool has_nan = false;  // NaN is ignored here, as the rule has it
    lmax = avx2::MaxNoticingNan(l, V, &has_nan);
  }
  // No finite logit (or a scaled one that overflows): nothing to weigh.
  if (!std::isfinite(lmax / p.temperature)) return static_cast<int32_t>(Argmax(l, V));
  const int32_t token = p.temperature == 1.0f ? SampleFiltered<false>(l, V, p, lmax, kth, sc)
                                              : SampleFiltered<true>(l, V, p, lmax, kth, sc);
  return token >= 0 ? token : static_cast<int32_t>(Argmax(l, V));
}

// Sets l[t] = -inf for every token t whose bit in `keep` is clear, and touches no other:
// a grammar's mask inside a string has a few scattered clear bits (one store each), and
// where few tokens fit its words are all clear (runs of vector stores).
void MaskRow(float* l, int64_t vocab, const uint64_t* keep) {
  const __m256 neg_inf = _mm256_set1_ps(-kInf);
  for (int64_t w = 0; w * 64 < vocab; ++w) {
    const int64_t n = std::min<int64_t>(64, vocab - w * 64);
    uint64_t clear = ~keep[w];
    if (n < 64) clear &= (uint64_t{1} << n) - 1;
    if (clear == 0) continue;
    float* p = l + w * 64;
    if (clear == ~uint64_t{0}) {
      for (int j = 0; j < 64; j += 8) _mm256_storeu_ps(p + j, neg_inf);
      continue;
    }
    for (; clear != 0; clear &= clear - 1) p[std::countr_zero(clear)] = -kInf;
  }
}

}  // namespace

void ApplyLogitEdits(float* logits, int64_t rows, int64_t vocab, const int32_t* bias_offsets,
                     const int32_t* bias_tokens, const float* bias_values, const int32_t* mask_index,
                     const uint64_t* masks, int64_t mask_words) {
  for (int64_t r = 0; r < rows; ++r) {
    float* l = logits + r * vocab;
    if (bias_offsets != nullptr) {
      for (int32_t e = bias_offsets[r]; e < bias_offsets[r + 1]; ++e) {
        if (bias_tokens[e] >= 0 && bias_tokens[e] < vocab) l[bias_tokens[e]] += bias_values[e];
      }
    }
    if (mask_index == nullptr || mask_index[r] < 0) continue;
    MaskRow(l, vocab, masks + mask_index[r] * mask_words);
  }
}

void SampleRows(float* logits, int64_t rows, int64_t vocab, const RowSampling* params, const int32_t* offsets,
                const int32_t* token_ids, const int32_t* counts, int32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* l = logits + r * vocab;
    for (int32_t e = offsets[r]; e < offsets[r + 1]; ++e) {
      const int32_t id = token_ids[e];
      if (id >= 0 && id < vocab) l[id] = PenalizedLogit(l[id], params[r], counts[e]);
    }
  }
  SampleUnpenalizedRows(logits, rows, vocab, params, out);
}

double LogSumExp(const float* x, int64_t n) {
  bool has_nan = false;
  const float m = avx2::MaxNoticingNan(x, n, &has_nan);  // +inf when any element is
  if (has_nan || m == kInf) return std::numeric_limits<double>::quiet_NaN();
  if (m == -kInf) return -kInf;
  thread_local std::vector<double> block_sums;  // kept between rows: no allocation per token
  double* sums = Ensure(block_sums, (n + kBlock - 1) / kBlock);
  return m + std::log(Weigh<false, false>(x, n, -kInf, 1.0f, m, nullptr, sums));
}

int64_t TopN(const float* x, int64_t n, int64_t top_n, int32_t* ids, float* values) {
  if (top_n <= 0) return 0;
  int64_t count = 0;
  float threshold = -kInf;  // > -inf: never a masked token or NaN
  ForEachAbove(x, 0, n, &threshold, [&](int64_t i) {
    // After the kept values >= x[i]: on ties the lower index stays ahead.
    const int64_t pos = std::upper_bound(values, values + count, x[i], std::greater<float>()) - values;
    const int64_t last = std::min(count, top_n - 1);  // the element that falls off, if full
    for (int64_t j = last; j > pos; --j) {
      values[j] = values[j - 1];
      ids[j] = ids[j - 1];
    }
    values[pos] = x[i];
    ids[pos] = static_cast<int32_t>(i);
    if (count < top_n) ++count;
    if (count == top_n) threshold = values[top_n - 1];
  });
  return count;
}

void SampleUnpenalizedRows(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params, int32_t* out) {
  // Rows are independent (each draw is SampleUniform(seed, step) of its own row), so they are
  // split among the threads: a decode step of 16 rows over 262,144 tokens took 3.3 ms on one.
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    thread_local Scratch scratch;  // each thread's own, kept between steps
    out[r] = SampleRow(logits + r * vocab, vocab, params[r], scratch);
  }
}

}  // namespace tpserve::cpu
