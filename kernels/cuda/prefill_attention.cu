// Paged attention for many query tokens (prefill, chunked prefill, mixed batches): a
// block takes a tile of consecutive query tokens of one sequence times the query heads of
// one KV head, walks the union of their key ranges in shared-memory K/V tiles, and does
// both products on tensor cores (WMMA, bf16 in, fp32 accumulate) with an online softmax.
// Tiles are planned on the device from token_seq, so the launch never reads the batch
// on the host. Tested by tests/cuda_attention_test.cc against cpu::PagedAttention.
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cub/block/block_scan.cuh>
#include <mutex>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
constexpr int kPlanThreads = 1024;

// Tile shape per head dim: R query rows (token x head pairs), BK keys per K/V tile; sized
// so that Q, one K-or-V tile, the scores and the fp32 output fit in shared memory on
// sm_80 (163 KB) and sm_90.
template <int D>
struct Tile {
  static constexpr int R = D >= 512 ? 32 : 64;
  static constexpr int BK = D >= 256 ? 32 : 64;
  static constexpr int kLdQ = D + 8;   // bf16 rows, padded against bank conflicts
  static constexpr int kLdS = BK + 4;  // fp32 scores
  static constexpr int kLdP = BK + 8;  // bf16 probabilities
  static constexpr int kLdO = D + 4;   // fp32 output accumulator
};

constexpr size_t Align128(size_t x) { return (x + 127) / 128 * 128; }

// Shared-memory layout; every array starts 128-byte aligned (WMMA needs 32).
template <int D>
struct Smem {
  using T = Tile<D>;
  static constexpr size_t kQ = 0;
  static constexpr size_t kKv = kQ + Align128(sizeof(bf16) * T::R * T::kLdQ);
  static constexpr size_t kS = kKv + Align128(sizeof(bf16) * T::BK * T::kLdQ);
  static constexpr size_t kP = kS + Align128(sizeof(float) * T::R * T::kLdS);
  static constexpr size_t kO = kP + Align128(sizeof(bf16) * T::R * T::kLdP);
  static constexpr size_t kRowM = kO + Align128(sizeof(float) * T::R * T::kLdO);
  static constexpr size_t kRowL = kRowM + Align128(sizeof(float) * T::R);
  static constexpr size_t kRowPos = kRowL + Align128(sizeof(float) * T::R);
  static constexpr size_t kRowFirst = kRowPos + Align128(sizeof(int32_t) * T::R);
  static constexpr size_t kKeyOff = kRowFirst + Align128(sizeof(int32_t) * T::R);
  static constexpr size_t kBytes = kKeyOff + Align128(sizeof(int64_t) * T::BK);
};

struct MaxOp {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

// Splits the batch into tiles: maximal runs of consecutive tokens with the same
// token_seq, cut every tokens_per_tile tokens. One block; cub scans carry across chunks.
__global__ void __launch_bounds__(kPlanThreads) PlanTilesKernel(const int32_t* __restrict__ token_seq, int tokens,
                                                                int tokens_per_tile, int32_t* tile_start,
                                                                int32_t* tile_len, int32_t* tile_count) {
  using Scan = cub::BlockScan<int, kPlanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int carry_run_start, carry_tiles;
  if (threadIdx.x == 0) {
    carry_run_start = 0;
    carry_tiles = 0;
  }
  __syncthreads();
  for (int base = 0; base < tokens; base += kPlanThreads) {
    const int t = base + threadIdx.x;
    const bool in = t < tokens;
    const int starts_run = in && (t == 0 || token_seq[t] != token_seq[t - 1]) ? t : -1;
    int run_start;
    Scan(tmp).InclusiveScan(starts_run, run_start, MaxOp{});
    __syncthreads();
    run_start = max(run_start, carry_run_start);
    const int starts_tile = in && (t - run_start) % tokens_per_tile == 0 ? 1 : 0;
    int index, total;
    Scan(tmp).ExclusiveSum(starts_tile, index, total);
    if (starts_tile) {
      int len = 1;
      while (len < tokens_per_tile && t + len < tokens && token_seq[t + len] == token_seq[t]) ++len;
      tile_start[carry_tiles + index] = t;
      tile_len[carry_tiles + index] = len;
    }
    __syncthreads();
    if (threadIdx.x == kPlanThreads - 1) carry_run_start = run_start;
    if (threadIdx.x == 0) carry_tiles += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) *tile_count = carry_tiles;
}

template <int D>
__global__ void __launch_bounds__(kThreads) PrefillKernel(AttnArgs a, const int32_t* __restrict__ tile_start,
                                                         const int32_t* __restrict__ tile_len,
                                                         const int32_t* __restrict__ tile_count) {
  using T = Tile<D>;
  using S = Smem<D>;
  constexpr int R = T::R, BK = T::BK;
  extern __shared__ __align__(128) uint8_t smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem + S::kQ);
  bf16* kv_s = reinterpret_cast<bf16*>(smem + S::kKv);
  float* s_s = reinterpret_cast<float*>(smem + S::kS);
  bf16* p_s = reinterpret_cast<bf16*>(smem + S::kP);
  float* o_s = reinterpret_cast<float*>(smem + S::kO);
  float* row_m = reinterpret_cast<float*>(smem + S::kRowM);
  float* row_l = reinterpret_cast<float*>(smem + S::kRowL);
  int32_t* row_pos = reinterpret_cast<int32_t*>(smem + S::kRowPos);
  int32_t* row_first = reinterpret_cast<int32_t*>(smem + S::kRowFirst);
  int64_t* key_off = reinterpret_cast<int64_t*>(smem + S::kKeyOff);
  __shared__ int lo_s, hi_s;

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int kv_head = blockIdx.y;
  const int group = a.num_q_heads / a.num_kv_heads;
  const int64_t kv_stride = static_cast<int64_t>(a.num_kv_heads) * D;
  const int num_tiles = *tile_count;

  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    const int t0 = tile_start[tile], nt = tile_len[tile];
    const int rows = nt * group;  // row r: token t0 + r / group, query head kv_head * group + r % group
    const int32_t* table = a.block_tables + static_cast<int64_t>(a.token_seq[t0]) * a.max_blocks_per_seq;
    if (tid == 0) {
      lo_s = INT_MAX;
      hi_s = -1;
    }
    __syncthreads();
    for (int r = tid; r < R; r += kThreads) {
      const int32_t pos = r < rows ? a.token_pos[t0 + r / group] : -1;
      row_pos[r] = pos;
      row_first[r] = FirstKey(pos, a.sliding_window);
      row_m[r] = -INFINITY;
      row_l[r] = 0.0f;
      if (pos >= 0) {
        atomicMin(&lo_s, row_first[r]);
        atomicMax(&hi_s, pos);
      }
    }
    for (int i = tid; i < R * (D / 8); i += kThreads) {
      const int r = i / (D / 8), c = i % (D / 8);
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < rows) {
        const int64_t row = static_cast<int64_t>(t0 + r / group) * a.num_q_heads + kv_head * group + r % group;
        v = *reinterpret_cast<const uint4*>(a.q + row * D + c * 8);
      }
      *reinterpret_cast<uint4*>(q_s + r * T::kLdQ + c * 8) = v;
    }
    for (int i = tid; i < R * D; i += kThreads) o_s[(i / D) * T::kLdO + i % D] = 0.0f;
    __syncthreads();
    const int lo = lo_s, hi = hi_s;

    for (int j0 = lo; j0 <= hi; j0 += BK) {
      for (int c = tid; c < BK; c += kThreads) {
        const int32_t key = j0 + c;
        int64_t off = -1;
        if (key <= hi) {
          const int32_t block = table[key / a.block_size];
          if (block >= 0) {
            off = (static_cast<int64_t>(block) * a.block_size + key % a.block_size) * kv_stride +
                  static_cast<int64_t>(kv_head) * D;
          }
        }
        key_off[c] = off;
      }
      __syncthreads();
      auto load_tile = [&](const bf16* cache) {
        for (int i = tid; i < BK * (D / 8); i += kThreads) {
          const int k = i / (D / 8), c = i % (D / 8);
          const int64_t off = key_off[k];
          uint4 v = make_uint4(0, 0, 0, 0);
          if (off >= 0) v = *reinterpret_cast<const uint4*>(cache + off + c * 8);
          *reinterpret_cast<uint4*>(kv_s + k * T::kLdQ + c * 8) = v;
        }
      };
      load_tile(a.k_cache);
      __syncthreads();

      // S[R, BK] = Q · K^T.
      for (int f = warp; f < (R / 16) * (BK / 16); f += kWarps) {
        const int fi = f / (BK / 16), fj = f % (BK / 16);
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll 4
        for (int kk = 0; kk < D / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> qa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> kb;
          wmma::load_matrix_sync(qa, q_s + fi * 16 * T::kLdQ + kk * 16, T::kLdQ);
          wmma::load_matrix_sync(kb, kv_s + fj * 16 * T::kLdQ + kk * 16, T::kLdQ);
          wmma::mma_sync(acc, qa, kb, acc);
        }
        wmma::store_matrix_sync(s_s + fi * 16 * T::kLdS + fj * 16, acc, T::kLdS, wmma::mem_row_major);
      }
      __syncthreads();

      // V replaces K in shared memory while the softmax runs on the scores.
      load_tile(a.v_cache);
      for (int r = warp; r < R; r += kWarps) {
        const int32_t pos = row_pos[r], first = row_first[r];
        float s[BK / kWarp > 0 ? BK / kWarp : 1];
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < BK / kWarp; ++i) {
          const int c = lane + i * kWarp;
          const int32_t key = j0 + c;
          const bool visible = pos >= 0 && key >= first && key <= pos && key_off[c] >= 0;
          s[i] = visible ? ScoreTransform(s_s[r * T::kLdS + c], a.scale, a.softcap) : -INFINITY;
          mx = fmaxf(mx, s[i]);
        }
        mx = WarpMax(mx);
        const float m_old = row_m[r];
        const float m_new = fmaxf(m_old, mx);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < BK / kWarp; ++i) {
          const float p = m_new == -INFINITY ? 0.0f : expf(s[i] - m_new);
          const bf16 pb = __float2bfloat16_rn(p);
          p_s[r * T::kLdP + lane + i * kWarp] = pb;
          sum += __bfloat162float(pb);  // the weights P·V will actually use
        }
        sum = WarpSum(sum);
        const float corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        if (corr != 1.0f) {
          for (int d = lane; d < D; d += kWarp) o_s[r * T::kLdO + d] *= corr;
        }
        __syncwarp();
        if (lane == 0) {
          row_l[r] = row_l[r] * corr + sum;
          row_m[r] = m_new;
        }
      }
      __syncthreads();

      // O[R, D] += P · V.
      for (int f = warp; f < (R / 16) * (D / 16); f += kWarps) {
        const int fi = f / (D / 16), fj = f % (D / 16);
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        float* o_tile = o_s + fi * 16 * T::kLdO + fj * 16;
        wmma::load_matrix_sync(acc, o_tile, T::kLdO, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> pa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> vb;
          wmma::load_matrix_sync(pa, p_s + fi * 16 * T::kLdP + kk * 16, T::kLdP);
          wmma::load_matrix_sync(vb, kv_s + kk * 16 * T::kLdQ + fj * 16, T::kLdQ);
          wmma::mma_sync(acc, pa, vb, acc);
        }
        wmma::store_matrix_sync(o_tile, acc, T::kLdO, wmma::mem_row_major);
      }
      __syncthreads();
    }

    for (int i = tid; i < rows * D; i += kThreads) {
      const int r = i / D, d = i % D;
      const float l = row_l[r];
      const int64_t row = static_cast<int64_t>(t0 + r / group) * a.num_q_heads + kv_head * group + r % group;
      a.out[row * D + d] = __float2bfloat16_rn(row_pos[r] >= 0 && l > 0.0f ? o_s[r * T::kLdO + d] / l : 0.0f);
    }
    __syncthreads();  // the next tile reuses shared memory
  }
}

template <int D>
void RaiseSmemLimit() {
  static std::once_flag once;
  std::call_once(once, [] {
    TP_CUDA_CHECK(cudaFuncSetAttribute(PrefillKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Smem<D>::kBytes)));
  });
}

// Workspace: tile_start [tokens], tile_len [tokens], tile_count.
struct TilePlan {
  int32_t* start;
  int32_t* len;
  int32_t* count;
};
TilePlan LayoutTilePlan(void* ws, int64_t tokens) {
  int32_t* base = static_cast<int32_t*>(ws);
  return TilePlan{base, base + tokens, base + 2 * tokens};
}

struct LaunchPrefill {
  const AttnArgs& a;
  const TilePlan& plan;
  int group;
  cudaStream_t stream;
  template <int D>
  void operator()() const {
    const int tokens_per_tile = Tile<D>::R / group;
    TP_CHECK(tokens_per_tile >= 1);  // more query heads per KV head than rows in a tile
    PlanTilesKernel<<<1, kPlanThreads, 0, stream>>>(a.token_seq, a.tokens, tokens_per_tile, plan.start, plan.len,
                                                    plan.count);
    TP_CUDA_CHECK_LAUNCH();
    RaiseSmemLimit<D>();
    // Tiles <= ceil(tokens / tokens_per_tile) + (sequence boundaries); blocks loop over
    // tiles, blocks beyond the planned count exit at once, and the extra 128 cover
    // batches with many short runs (decode tokens mixed into a prefill).
    const int64_t blocks = std::min<int64_t>(a.tokens, (a.tokens + tokens_per_tile - 1) / tokens_per_tile + 128);
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.num_kv_heads));
    PrefillKernel<D><<<grid, kThreads, Smem<D>::kBytes, stream>>>(a, plan.start, plan.len, plan.count);
    TP_CUDA_CHECK_LAUNCH();
  }
};

}  // namespace

size_t PrefillAttentionWorkspaceBytes(int64_t tokens) {
  return static_cast<size_t>(2 * tokens + 1) * sizeof(int32_t);
}

void PrefillAttention(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                      const cpu::PagedAttentionParams& p, void* workspace, size_t workspace_bytes, bf16* out,
                      cudaStream_t stream) {
  if (tokens == 0) return;
  TP_CHECK(workspace_bytes >= PrefillAttentionWorkspaceBytes(tokens));
  const AttnArgs a = MakeAttnArgs(q, k_cache, v_cache, token_seq, token_pos, tokens, block_tables, p, out);
  const TilePlan plan = LayoutTilePlan(workspace, tokens);
  DispatchHeadDim(p.head_dim, LaunchPrefill{a, plan, p.num_q_heads / p.num_kv_heads, stream});
}

}  // namespace tpserve::cuda
