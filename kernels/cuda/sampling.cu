// GPU argmax and sampling (penalties, temperature, top-k, top-p, min-p, seeded draw) as
// kernels/row_sampling.h defines them. Thresholds are found by radix selection over an
// order-preserving integer key of the scaled logits, so nothing is sorted. Tested by
// tests/cuda_sampling_test.cc against the C++ reference there.
#include <algorithm>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/sampling.h"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 1024;

// Larger floats map to larger keys (NaN aside).
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (value, index) order of torch.argmax: NaN above everything, then larger, then first.
__device__ __forceinline__ bool Better(float a, int32_t ia, float b, int32_t ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

__device__ __forceinline__ void WarpArgmax(float& v, int32_t& i) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (Better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// Argmax of one row over the block; the result is valid in every thread.
template <typename T>
__device__ int32_t BlockArgmax(const T* row, int64_t vocab) {
  __shared__ float best_v[kWarp];
  __shared__ int32_t best_i[kWarp];
  float v = -INFINITY;
  int32_t idx = INT32_MAX;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float x = ToFloat(row[i]);
    if (Better(x, static_cast<int32_t>(i), v, idx)) {
      v = x;
      idx = static_cast<int32_t>(i);
    }
  }
  WarpArgmax(v, idx);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) {
    best_v[threadIdx.x / kWarp] = v;
    best_i[threadIdx.x / kWarp] = idx;
  }
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = threadIdx.x < warps ? best_v[threadIdx.x] : -INFINITY;
  idx = threadIdx.x < warps ? best_i[threadIdx.x] : INT32_MAX;
  if (threadIdx.x < kWarp) WarpArgmax(v, idx);
  __shared__ int32_t result;
  if (threadIdx.x == 0) result = idx;
  __syncthreads();
  return result;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) ArgmaxKernel(const T* __restrict__ logits, int64_t vocab,
                                                         int32_t* __restrict__ out) {
  const int32_t i = BlockArgmax(logits + blockIdx.x * vocab, vocab);
  if (threadIdx.x == 0) out[blockIdx.x] = i;
}

__global__ void PenaltiesKernel(float* logits, int64_t vocab, const SamplingParams* __restrict__ params,
                                const int32_t* __restrict__ offsets, const int32_t* __restrict__ token_ids,
                                const int32_t* __restrict__ counts) {
  const int64_t r = blockIdx.x;
  const SamplingParams p = params[r];
  for (int32_t e = offsets[r] + threadIdx.x; e < offsets[r + 1]; e += blockDim.x) {
    const int32_t id = token_ids[e];
    if (id < 0 || id >= vocab) continue;
    float& l = logits[r * vocab + id];
    l = PenalizedLogit(l, p, counts[e]);
  }
}

// Grid (column chunks, rows): full fp32 rows from the gathered bf16 shards.
__global__ void AssembleKernel(const bf16* __restrict__ shards, int64_t rows, int64_t shard_cols, int64_t vocab,
                               float* __restrict__ logits) {
  const int64_t r = blockIdx.y;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < vocab;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = c / shard_cols, j = c % shard_cols;
    const int64_t cols = min(shard_cols, vocab - k * shard_cols);
    logits[r * vocab + c] = __bfloat162float(shards[k * rows * shard_cols + r * cols + j]);
  }
}

struct SampleShared {
  uint32_t count_hist[256];
  float mass_hist[256];
  uint32_t prefix;
  uint32_t remaining;
  float mass_above;
  int32_t chosen;
  int32_t last_kept;
  float running;
};

// The key of the element that the radix walk stops at. With kMass false: the k-th
// largest key (k = `need` as an integer); with kMass true: the largest key t whose
// elements with key >= t (and >= floor) carry weight >= need.
template <bool kMass>
__device__ uint32_t RadixSelect(const float* row, int64_t vocab, float temperature, float m,
                                uint32_t floor, float need, SampleShared& sh) {
  uint32_t prefix = 0, mask = 0;
  if (threadIdx.x == 0) {
    sh.remaining = static_cast<uint32_t>(need);
    sh.mass_above = 0.0f;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
      sh.count_hist[i] = 0;
      sh.mass_hist[i] = 0.0f;
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float s = row[i] / temperature;
      const uint32_t key = OrderKey(s);
      if ((key & mask) != prefix || key < floor) continue;
      const uint32_t digit = (key >> shift) & 255u;
      if (kMass) {
        atomicAdd(&sh.mass_hist[digit], expf(s - m));
      } else {
        atomicAdd(&sh.count_hist[digit], 1u);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1, lowest = -1;
      for (int d = 255; d >= 0; --d) {
        if (kMass) {
          if (sh.mass_hist[d] > 0.0f) lowest = d;
          if (sh.mass_hist[d] > 0.0f && sh.mass_above + sh.mass_hist[d] >= need) {
            chosen = d;
            break;
          }
          sh.mass_above += sh.mass_hist[d];
        } else {
          if (sh.count_hist[d] > 0) lowest = d;
          if (sh.count_hist[d] > 0 && sh.count_hist[d] >= sh.remaining) {
            chosen = d;
            break;
          }
          sh.remaining -= sh.count_hist[d];
        }
      }
      // Rounding left the target unreached: keep everything down to the lowest element.
      if (chosen < 0) chosen = lowest < 0 ? 0 : lowest;
      sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
    }
    __syncthreads();
    prefix = sh.prefix;
    mask |= 255u << shift;
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) SampleKernel(const float* __restrict__ logits, int64_t vocab,
                                                         const SamplingParams* __restrict__ params,
                                                         int32_t* __restrict__ out) {
  using Scan = cub::BlockScan<float, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ SampleShared sh;
  __shared__ float red[kWarp];
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  const SamplingParams p = params[r];

  if (!(p.temperature >= 1e-5f)) {
    const int32_t i = BlockArgmax(row, vocab);
    if (threadIdx.x == 0) out[r] = i;
    return;
  }
  const float temp = p.temperature;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, row[i] / temp);
  const float m = BlockMax(mx, red);

  uint32_t threshold = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    threshold = RadixSelect<false>(row, vocab, temp, m, 0u, static_cast<float>(p.top_k), sh);
  }
  if (p.top_p < 1.0f) {
    float mass = 0.0f;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float s = row[i] / temp;
      if (OrderKey(s) >= threshold) mass += expf(s - m);
    }
    const float kept = BlockSum(mass, red);
    const uint32_t t_p = RadixSelect<true>(row, vocab, temp, m, threshold, p.top_p * kept, sh);
    threshold = max(threshold, t_p);
  }
  if (p.min_p > 0.0f) threshold = max(threshold, OrderKey(m + logf(p.min_p)));

  float mass = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float s = row[i] / temp;
    if (OrderKey(s) >= threshold) mass += expf(s - m);
  }
  const float total = BlockSum(mass, red);
  const float target = SampleUniform(p.seed, p.step) * total;

  // First id (in id order) whose running kept weight exceeds the target.
  if (threadIdx.x == 0) {
    sh.chosen = INT32_MAX;
    sh.last_kept = -1;
    sh.running = 0.0f;
  }
  __syncthreads();
  for (int64_t base = 0; base < vocab; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    float w = 0.0f;
    if (i < vocab) {
      const float s = row[i] / temp;
      if (OrderKey(s) >= threshold) {
        w = expf(s - m);
        atomicMax(&sh.last_kept, static_cast<int32_t>(i));
      }
    }
    float incl, chunk_total;
    Scan(scan_tmp).InclusiveSum(w, incl, chunk_total);
    const float running = sh.running;
    if (w > 0.0f && running + incl > target) atomicMin(&sh.chosen, static_cast<int32_t>(i));
    __syncthreads();
    if (threadIdx.x == 0) sh.running = running + chunk_total;
    __syncthreads();
    if (sh.chosen != INT32_MAX) break;
  }
  if (threadIdx.x == 0) out[r] = sh.chosen != INT32_MAX ? sh.chosen : max(sh.last_kept, 0);
}

}  // namespace

void Argmax(const void* logits, DType dtype, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  TP_CHECK(vocab > 0 && dtype != DType::kF16);
  if (dtype == DType::kBF16) {
    ArgmaxKernel<<<rows, kThreads, 0, stream>>>(static_cast<const bf16*>(logits), vocab, out);
  } else {
    ArgmaxKernel<<<rows, kThreads, 0, stream>>>(static_cast<const float*>(logits), vocab, out);
  }
  TP_CUDA_CHECK_LAUNCH();
}

void ApplyPenalties(float* logits, int64_t rows, int64_t vocab, const SamplingParams* params,
                    const int32_t* offsets, const int32_t* token_ids, const int32_t* counts, cudaStream_t stream) {
  if (rows == 0) return;
  PenaltiesKernel<<<rows, 256, 0, stream>>>(logits, vocab, params, offsets, token_ids, counts);
  TP_CUDA_CHECK_LAUNCH();
}

void AssembleLogits(const bf16* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab, float* logits,
                    cudaStream_t stream) {
  if (rows == 0) return;
  TP_CHECK(tp >= 1 && shard_cols * tp >= vocab && shard_cols * (tp - 1) < vocab);
  const unsigned chunks = static_cast<unsigned>(std::min<int64_t>((vocab + 1023) / 1024, 128));
  AssembleKernel<<<dim3(chunks, static_cast<unsigned>(rows)), 1024, 0, stream>>>(shards, rows, shard_cols, vocab,
                                                                                 logits);
  TP_CUDA_CHECK_LAUNCH();
}

void Sample(const float* logits, int64_t rows, int64_t vocab, const SamplingParams* params, int32_t* out,
            cudaStream_t stream) {
  if (rows == 0) return;
  TP_CHECK(vocab > 0);
  SampleKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, params, out);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
