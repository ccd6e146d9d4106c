// SamplingParams validation, the Philox RNG and the CPU sampler's row passes (AVX2).
// Tested by tests/sampler_test.cc.
#include "coordinator/engine/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "kernels/base.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int32_t kMaxLogprobs = 20;
// Temperatures below this sample greedily, as in vLLM (and 1 / T stays finite).
constexpr float kGreedyTemperature = 1e-5f;
// Weights are summed per block so that a draw finds its block from the block sums and
// then scans one block, instead of a serial prefix sum over the whole vocabulary.
constexpr int64_t kBlock = 256;
// Up to this k the k-th largest logit comes from a k-element heap fed by a vector
// threshold test; above it, from nth_element on a copy.
constexpr int64_t kMaxHeapTopK = 2048;
// Above this many top-p candidates, bin them first (TopPThreshold); a bin spans 1/32
// of an octave of weight.
constexpr int64_t kMaxDirectTopP = 4096;
constexpr int kTopPBinShift = 18;
// Up to this many top-k survivors (ties included) are weighed one by one instead of by
// a pass over the whole row.
constexpr int64_t kMaxSparse = 4096;

double HorizontalSum(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// w[i] = x[i] >= floor ? exp((x[i] - max) * inv_t) : 0 over n elements; returns their
// sum (fp64 accumulation). With kStore, writes w and each block's sum to block_sums.
template <bool kStore>
double ExpWeights(const float* x, int64_t n, float max, float inv_t, float floor, float* w,
                  double* block_sums) {
  const __m256 vmax = _mm256_set1_ps(max);
  const __m256 vinv_t = _mm256_set1_ps(inv_t);
  const __m256 vfloor = _mm256_set1_ps(floor);
  // Lanes of v outside `lanes` weigh 0.
  auto weigh = [&](__m256 v, __m256 lanes, int64_t i, __m256i store_mask, bool full, __m256d& acc_lo,
                   __m256d& acc_hi) {
    const __m256 keep = _mm256_and_ps(lanes, _mm256_cmp_ps(v, vfloor, _CMP_GE_OQ));
    const __m256 e = _mm256_and_ps(keep, cpu::avx2::Exp(_mm256_mul_ps(_mm256_sub_ps(v, vmax), vinv_t)));
    if constexpr (kStore) {
      if (full) {
        _mm256_storeu_ps(w + i, e);
      } else {
        _mm256_maskstore_ps(w + i, store_mask, e);
      }
    }
    acc_lo = _mm256_add_pd(acc_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc_hi = _mm256_add_pd(acc_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  };
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const __m256i tail_none = _mm256_setzero_si256();  // unused by full vectors
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    __m256d acc_lo = _mm256_setzero_pd();
    __m256d acc_hi = _mm256_setzero_pd();
    int64_t i = b;
    for (; i + 8 <= end; i += 8) weigh(_mm256_loadu_ps(x + i), all, i, tail_none, true, acc_lo, acc_hi);
    if (i < end) {
      const __m256i tail = cpu::avx2::TailMask(end - i);
      weigh(_mm256_maskload_ps(x + i, tail), _mm256_castsi256_ps(tail), i, tail, false, acc_lo, acc_hi);
    }
    const double block_sum = HorizontalSum(_mm256_add_pd(acc_lo, acc_hi));
    if constexpr (kStore) block_sums[b / kBlock] = block_sum;
    total += block_sum;
  }
  return total;
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
    unsigned mask = _mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(*threshold), _CMP_GT_OQ));
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

// The k-th largest of x[0, n) (duplicates counted), 1 <= k <= n.
float KthLargest(const float* x, int64_t n, int64_t k, std::vector<float>* scratch) {
  if (k > kMaxHeapTopK) {
    scratch->assign(x, x + n);
    std::nth_element(scratch->begin(), scratch->begin() + (k - 1), scratch->end(), std::greater<float>());
    return (*scratch)[k - 1];
  }
  // Min-heap of the k largest so far; its top is the current k-th largest.
  scratch->assign(x, x + k);
  std::make_heap(scratch->begin(), scratch->end(), std::greater<float>());
  float kth = scratch->front();
  ForEachAbove(x, k, n, &kth, [&](int64_t i) {
    std::pop_heap(scratch->begin(), scratch->end(), std::greater<float>());
    scratch->back() = x[i];
    std::push_heap(scratch->begin(), scratch->end(), std::greater<float>());
    kth = scratch->front();
  });
  return kth;
}

// The k largest (id, x[id]) of x[0, n), largest first, lowest id first on ties.
std::vector<std::pair<int32_t, float>> TopN(const float* x, int64_t n, int64_t k) {
  std::vector<std::pair<int32_t, float>> top;
  k = std::min(k, n);
  if (k <= 0) return top;
  top.reserve(k + 1);
  // Entries with value >= x[i] stay ahead of i: they are larger or have a lower id.
  auto insert = [&](int64_t i) {
    const auto pos = std::upper_bound(top.begin(), top.end(), x[i],
                                      [](float v, const std::pair<int32_t, float>& e) { return v > e.second; });
    top.insert(pos, {static_cast<int32_t>(i), x[i]});
    if (static_cast<int64_t>(top.size()) > k) top.pop_back();
  };
  for (int64_t i = 0; i < k; ++i) insert(i);
  float kth = top.back().second;
  ForEachAbove(x, k, n, &kth, [&](int64_t i) {
    insert(i);
    kth = top.back().second;
  });
  return top;
}

// Top-p quickselect over weights v[0, n) (any order; reordered), all lighter than
// elements already known to weigh `above` (< target) in total: a token is kept when the
// tokens strictly heavier than it weigh less than `target`, so ties with a kept token
// are kept too. Returns the lightest kept weight (the heaviest one always is).
// Expected O(n).
float SelectTopP(float* v, int64_t n, double above, double target) {
  int64_t lo = 0;
  int64_t hi = n;
  float threshold = kInf;
  while (lo < hi) {
    const float a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];
    const float pivot = std::max(std::min(a, b), std::min(std::max(a, b), c));
    // [lo, gt) heavier than the pivot, [gt, lt) equal, [lt, hi) lighter.
    int64_t gt = lo, i = lo, lt = hi;
    double heavier = 0, equal = 0;
    while (i < lt) {
      const float w = v[i];
      if (w > pivot) {
        heavier += w;
        std::swap(v[gt++], v[i++]);
      } else if (w < pivot) {
        std::swap(v[i], v[--lt]);
      } else {
        equal += w;
        ++i;
      }
    }
    if (above + heavier >= target) {  // the pivot is dropped; the boundary is heavier
      hi = gt;
      continue;
    }
    threshold = pivot;  // kept, with everything heavier
    above += heavier + equal;
    if (above >= target) return threshold;  // everything lighter is dropped
    lo = lt;
  }
  return threshold;
}

// The top-p threshold over candidate weights v[0, n) (in (0, 1]; reordered), which are
// heavier than every other token: the lightest kept weight, 0 if all are kept. Many
// candidates (a flat distribution) are first binned by their float bits, which order
// positive floats, so that only the bin holding the boundary goes to the quickselect.
float TopPThreshold(float* v, int64_t n, double target, std::vector<double>* bins) {
  if (n <= kMaxDirectTopP) return SelectTopP(v, n, 0.0, target);
  constexpr uint32_t kTopBin = std::bit_cast<uint32_t>(1.0f) >> kTopPBinShift;
  auto bin_of = [&](float x) { return std::min(std::bit_cast<uint32_t>(x) >> kTopPBinShift, kTopBin); };
  bins->assign(kTopBin + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) (*bins)[bin_of(v[i])] += v[i];
  double above = 0;
  uint32_t boundary = kTopBin + 1;
  while (boundary > 0 && above + (*bins)[boundary - 1] < target) above += (*bins)[--boundary];
  if (boundary == 0) return 0.0f;  // the candidates weigh less than target: all kept
  --boundary;
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {  // branch-free compaction of the boundary bin
    v[m] = v[i];
    m += bin_of(v[i]) == boundary;
  }
  return SelectTopP(v, m, above, target);
}

// Copies the elements of w[0, n) that are >= floor to out (capacity n + 8), in order;
// returns how many. Groups of 8 with none are skipped by one vector compare.
int64_t GatherAtLeast(const float* w, int64_t n, float floor, float* out) {
  int64_t count = 0;
  int64_t i = 0;
  const __m256 vfloor = _mm256_set1_ps(floor);
  for (; i + 8 <= n; i += 8) {
    const unsigned mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(w + i), vfloor, _CMP_GE_OQ));
    if (mask == 0) continue;
    for (int j = 0; j < 8; ++j) {
      out[count] = w[i + j];
      count += (mask >> j) & 1;
    }
  }
  for (; i < n; ++i) {
    out[count] = w[i];
    count += w[i] >= floor;
  }
  return count;
}

// Zeroes the weights below `keep` and recomputes the block sums; returns the total.
double ZeroBelow(float* w, int64_t n, float keep, double* block_sums) {
  const __m256 vkeep = _mm256_set1_ps(keep);
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    __m256d acc_lo = _mm256_setzero_pd();
    __m256d acc_hi = _mm256_setzero_pd();
    for (int64_t i = b; i < end; i += 8) {
      const __m256i lanes = cpu::avx2::TailMask(end - i);  // all lanes but in the last group
      const __m256 v = _mm256_maskload_ps(w + i, lanes);
      const __m256 e = _mm256_and_ps(v, _mm256_cmp_ps(v, vkeep, _CMP_GE_OQ));
      _mm256_maskstore_ps(w + i, lanes, e);
      acc_lo = _mm256_add_pd(acc_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
      acc_hi = _mm256_add_pd(acc_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    block_sums[b / kBlock] = HorizontalSum(_mm256_add_pd(acc_lo, acc_hi));
    total += block_sums[b / kBlock];
  }
  return total;
}

// Index of the draw `target` in [0, sum of weights) under weights w, given the sums of
// its blocks of kBlock. Rounding can leave target at or past the end of a block's
// serial sum; then the block's (or row's) last positive weight is taken.
int32_t DrawFromBlocks(const float* w, const double* block_sums, int64_t n, double target) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  double cum = 0;
  int64_t b = 0;
  int64_t last_positive_block = 0;
  for (; b < blocks; ++b) {
    if (block_sums[b] > 0) last_positive_block = b;
    if (cum + block_sums[b] > target) break;
    cum += block_sums[b];
  }
  if (b == blocks) {
    b = last_positive_block;
    target = kInf;
  }
  int64_t last_positive = b * kBlock;
  for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
    if (w[i] <= 0) continue;
    last_positive = i;
    cum += w[i];
    if (cum > target) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last_positive);
}

}  // namespace

absl::Status SamplingParams::Validate(int64_t vocab_size) const {
  TP_CHECK(vocab_size > 0);
  auto invalid = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  // Written as !(in range) so that NaN fails too.
  if (!(temperature >= 0 && temperature < kInf)) {
    return invalid("temperature must be >= 0 and finite (0 = greedy), got ", temperature);
  }
  if (top_k < -1) return invalid("top_k must be -1 or 0 (off) or >= 1, got ", top_k);
  if (!(top_p > 0 && top_p <= 1)) return invalid("top_p must be in (0, 1] (1 = off), got ", top_p);
  if (!(min_p >= 0 && min_p <= 1)) return invalid("min_p must be in [0, 1] (0 = off), got ", min_p);
  if (!(repetition_penalty > 0 && repetition_penalty < kInf)) {
    return invalid("repetition_penalty must be > 0 and finite (1 = off), got ", repetition_penalty);
  }
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) {
    return invalid("presence_penalty must be in [-2, 2], got ", presence_penalty);
  }
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    return invalid("frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  }
  if (max_tokens < 1) return invalid("max_tokens must be >= 1, got ", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return invalid("min_tokens must be in [0, max_tokens = ", max_tokens, "], got ", min_tokens);
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return invalid("stop[", i, "] is an empty string; stop strings must be non-empty");
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0 || stop_token_ids[i] >= vocab_size) {
      return invalid("stop_token_ids[", i, "] must be in [0, vocab_size = ", vocab_size, "), got ",
                     stop_token_ids[i]);
    }
  }
  if (logprobs.has_value() && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    return invalid("logprobs must be in [0, ", kMaxLogprobs, "], got ", *logprobs);
  }
  return absl::OkStatus();
}

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;  // key schedule (Weyl) constants
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const uint64_t p0 = uint64_t{kM0} * ctr[0];
    const uint64_t p1 = uint64_t{kM1} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

SamplingRng SamplingRng::ForRequest(const SamplingParams& params, uint32_t stream) {
  if (params.seed.has_value()) return SamplingRng(*params.seed, stream);
  thread_local absl::BitGen entropy;  // seeded from the OS
  return SamplingRng(absl::Uniform<uint64_t>(entropy), stream);
}

double SamplingRng::Uniform(uint64_t step) const {
  const std::array<uint32_t, 4> r =
      Philox4x32({static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), stream_, 0},
                 {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  const uint64_t bits = ((uint64_t{r[0]} << 32) | r[1]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

Sampler::Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size), eos_token_ids_(std::move(eos_token_ids)) {
  TP_CHECK(vocab_size_ > 0 && vocab_size_ <= std::numeric_limits<int32_t>::max());
  for (int32_t id : eos_token_ids_) TP_CHECK(id >= 0 && id < vocab_size_);
}

absl::Status Sampler::PrepareRow(absl::Span<const float> logits, const SamplingParams& params,
                                 absl::Span<const int32_t> prompt_ids,
                                 absl::Span<const int32_t> output_ids, bool mask_stop_ids) {
  const int64_t V = vocab_size_;
  row_.assign(logits.begin(), logits.end());
  const bool repetition = params.repetition_penalty != 1.0f;
  if (repetition || params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    for (size_t i = 0; i < output_ids.size(); ++i) {
      if (output_ids[i] < 0 || output_ids[i] >= V) {
        return absl::InvalidArgumentError(absl::StrCat("output token ", i, " is ", output_ids[i],
                                                       ", outside the vocabulary [0, ", V, ")"));
      }
    }
    if (repetition) {
      for (size_t i = 0; i < prompt_ids.size(); ++i) {
        if (prompt_ids[i] < 0 || prompt_ids[i] >= V) {
          return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", prompt_ids[i],
                                                         ", outside the vocabulary [0, ", V, ")"));
        }
      }
    }
    // Epoch stamps mark the tokens seen in this call without clearing [V] arrays.
    if (stamp_.empty()) {
      stamp_.assign(V, 0);
      output_count_.assign(V, 0);
    }
    if (++epoch_ == 0) {
      std::fill(stamp_.begin(), stamp_.end(), 0);
      epoch_ = 1;
    }
    touched_.clear();
    for (int32_t t : output_ids) {
      if (stamp_[t] != epoch_) {
        stamp_[t] = epoch_;
        output_count_[t] = 0;
        touched_.push_back(t);
      }
      ++output_count_[t];
    }
    const float rp = params.repetition_penalty;
    auto penalize = [&](float& x) { x = x > 0 ? x / rp : x * rp; };
    if (repetition) {
      for (int32_t t : touched_) penalize(row_[t]);
      for (int32_t t : prompt_ids) {
        if (stamp_[t] != epoch_) {
          stamp_[t] = epoch_;
          penalize(row_[t]);
        }
      }
    }
    for (int32_t t : touched_) {
      row_[t] -= params.frequency_penalty * static_cast<float>(output_count_[t]);
      row_[t] -= params.presence_penalty;
    }
  }
  if (mask_stop_ids) {
    for (int32_t t : params.stop_token_ids) row_[t] = -kInf;
    if (!params.ignore_eos) {
      for (int32_t t : eos_token_ids_) row_[t] = -kInf;
    }
  }
  return absl::OkStatus();
}

int32_t Sampler::SampleFiltered(const float* x, float max_logit, const SamplingParams& params, double u,
                                double* sum_exp) {
  const int64_t V = vocab_size_;
  const float inv_t = 1.0f / params.temperature;
  const bool top_p = params.top_p < 1.0f;
  const bool min_p = params.min_p > 0.0f;
  // Every filter keeps an upper set of the logits, so each is a threshold: top-k one on
  // the logits, top-p and min-p ones on the weights exp((x - max) / T), whose max is 1.
  const bool top_k = params.top_k > 0 && params.top_k < V;
  float logit_floor = -kInf;
  if (top_k) {
    logit_floor = KthLargest(x, V, params.top_k, &top_k_scratch_);
    // A small top-k (the usual case) leaves few tokens: weigh just those.
    kept_ids_.clear();
    const float below_floor = std::nextafter(logit_floor, -kInf);  // x > below <=> x >= floor
    ForEachAbove(x, 0, V, &below_floor, [&](int64_t i) { kept_ids_.push_back(static_cast<int32_t>(i)); });
    if (static_cast<int64_t>(kept_ids_.size()) <= kMaxSparse) {
      const int64_t n = static_cast<int64_t>(kept_ids_.size());
      kept_weights_.resize(n);
      double total = 0;
      for (int64_t j = 0; j < n; ++j) {
        kept_weights_[j] = std::exp((x[kept_ids_[j]] - max_logit) * inv_t);
        total += kept_weights_[j];
      }
      float keep = min_p ? params.min_p : 0.0f;
      if (top_p) {
        select_.assign(kept_weights_.begin(), kept_weights_.end());
        keep = std::max(keep, SelectTopP(select_.data(), n, 0.0, params.top_p * total));
      }
      double kept = 0;
      for (float w : kept_weights_) kept += w >= keep ? w : 0.0;
      const double target = u * kept;
      double cum = 0;
      int32_t last = -1;
      for (int64_t j = 0; j < n; ++j) {
        if (kept_weights_[j] < keep) continue;
        last = kept_ids_[j];
        cum += kept_weights_[j];
        if (cum > target) return last;
      }
      return last;  // rounding left target at the very end
    }
  }

  weights_.resize(V);
  block_sums_.resize((V + kBlock - 1) / kBlock);
  const double total =
      ExpWeights<true>(x, V, max_logit, inv_t, logit_floor, weights_.data(), block_sums_.data());
  if (!top_k && params.temperature == 1.0f) *sum_exp = total;
  if (!top_p && !min_p) return DrawFromBlocks(weights_.data(), block_sums_.data(), V, u * total);

  // Min-p keeps weights >= min_p (the max weighs 1). Top-p looks only at candidates: it
  // never keeps a weight below (1 - top_p) * total / V, as all those together weigh
  // less than (1 - top_p) * total, so each has more than top_p * total above it (halved
  // for rounding); nor do those below min_p matter, min-p drops them next.
  float keep = min_p ? params.min_p : 0.0f;
  if (top_p) {
    const float floor = std::max(keep, static_cast<float>(0.5 * (1.0 - params.top_p) * total / V));
    select_.resize(V + 8);
    const int64_t n = GatherAtLeast(weights_.data(), V, floor, select_.data());
    TP_CHECK(n > 0);  // the max weighs 1 > floor
    keep = std::max(keep, TopPThreshold(select_.data(), n, params.top_p * total, &top_p_bins_));
  }
  const double kept = ZeroBelow(weights_.data(), V, keep, block_sums_.data());
  return DrawFromBlocks(weights_.data(), block_sums_.data(), V, u * kept);
}

absl::StatusOr<const float*> Sampler::ProcessedRow(absl::Span<const float> logits, const SamplingParams& params,
                                                   absl::Span<const int32_t> prompt_ids,
                                                   absl::Span<const int32_t> output_ids, int32_t* argmax) {
  const int64_t V = vocab_size_;
  TP_CHECK(static_cast<int64_t>(logits.size()) == V);
  const bool mask_stop_ids = static_cast<int64_t>(output_ids.size()) < params.min_tokens &&
                             (!params.stop_token_ids.empty() || (!params.ignore_eos && !eos_token_ids_.empty()));
  const bool penalties = params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
                         params.frequency_penalty != 0.0f;
  const float* x = logits.data();
  if (penalties || mask_stop_ids) {
    if (absl::Status s = PrepareRow(logits, params, prompt_ids, output_ids, mask_stop_ids); !s.ok()) return s;
    x = row_.data();
  }

  // Argmax returns the first NaN when there is one.
  *argmax = static_cast<int32_t>(cpu::Argmax(x, V));
  const float max_logit = x[*argmax];
  if (std::isnan(max_logit) || max_logit == kInf) {
    return absl::InternalError(absl::StrCat("logits row has ", max_logit, " at token ", *argmax,
                                            ": the forward pass produced invalid values (check the "
                                            "checkpoint, its dtype and the kernels)"));
  }
  if (max_logit == -kInf) {
    return absl::InvalidArgumentError(
        "every logit is -inf, so no token can be sampled (min_tokens masks EOS and stop_token_ids; check "
        "that the vocabulary has other tokens)");
  }
  return x;
}

void Sampler::FillLogprobs(const float* x, float max_logit, double sum_exp, int32_t top_n, SampleResult& r) const {
  if (sum_exp < 0) sum_exp = ExpWeights<false>(x, vocab_size_, max_logit, 1.0f, -kInf, nullptr, nullptr);
  const double log_z = max_logit + std::log(sum_exp);
  r.logprob = static_cast<float>(x[r.token_id] - log_z);
  r.top_logprobs = TopN(x, vocab_size_, top_n);
  for (auto& [id, value] : r.top_logprobs) value = static_cast<float>(value - log_z);
}

absl::StatusOr<SampleResult> Sampler::Sample(absl::Span<const float> logits, const SamplingParams& params,
                                             absl::Span<const int32_t> prompt_ids,
                                             absl::Span<const int32_t> output_ids, const SamplingRng& rng) {
  int32_t argmax = 0;
  absl::StatusOr<const float*> row = ProcessedRow(logits, params, prompt_ids, output_ids, &argmax);
  if (!row.ok()) return row.status();
  const float* x = *row;
  const float max_logit = x[argmax];
  SampleResult result;
  double sum_exp = -1;
  result.token_id = params.temperature < kGreedyTemperature
                        ? argmax
                        : SampleFiltered(x, max_logit, params, rng.Uniform(output_ids.size()), &sum_exp);
  if (params.logprobs.has_value()) FillLogprobs(x, max_logit, sum_exp, *params.logprobs, result);
  return result;
}

absl::StatusOr<SampleResult> Sampler::Logprobs(absl::Span<const float> logits, const SamplingParams& params,
                                               absl::Span<const int32_t> prompt_ids,
                                               absl::Span<const int32_t> output_ids, int32_t token_id) {
  TP_CHECK(params.logprobs.has_value());
  if (token_id < 0 || token_id >= vocab_size_) {
    return absl::InternalError(absl::StrCat("sampled token id ", token_id, " is outside the vocabulary of ",
                                            vocab_size_));
  }
  int32_t argmax = 0;
  absl::StatusOr<const float*> row = ProcessedRow(logits, params, prompt_ids, output_ids, &argmax);
  if (!row.ok()) return row.status();
  SampleResult result;
  result.token_id = token_id;
  FillLogprobs(*row, (*row)[argmax], -1, *params.logprobs, result);
  return result;
}

}  // namespace tpserve
