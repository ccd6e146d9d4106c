// Paged attention for few query tokens (decode), flash-decoding style on tensor cores.
// Tested by tests/cuda_attention_test.cc against cpu::PagedAttention; measured by the
// "decode attn" rows of bench/cuda_kernels_bench.cu.
//
// The kernel is bound by reading K and V, so the design makes every K/V byte travel from
// DRAM once per KV head and keeps many bytes in flight:
//  - A CTA (4 warps) takes one query token, one KV head with all of its GQA query heads
//    (up to 16: the M = 16 rows of mma.sync m16n8k16; rows past the group are zeros) and
//    one partition of that token's keys [FirstKey(pos), pos]. A second kernel merges the
//    partitions' (max, sum, unnormalized output) when there is more than one.
//  - Keys stream through a 3-stage cp.async pipeline of tiles of BK keys (K and V, 16-byte
//    chunks gathered through the block table; rows padded by 16 bytes so ldmatrix and
//    cp.async are free of bank conflicts). Each tile is 32 KB, so 2 tiles are in flight
//    per CTA and, at 2 CTAs per SM, 128 KB per SM. Keys past the partition and keys of
//    freed blocks (-1) are zero-filled (never read) and masked to -inf.
//  - The block-table lookups of tile j + 3 are issued while tile j computes (one key per
//    thread, kept in shared memory as cache offsets), so no load waits on the table.
//  - Warps split the work as (kWk key groups) x (kWd column groups): a warp owns kDw =
//    min(D, 128) columns of Q and of the output and BK / kWk keys of each tile.
//    S = Q·K^T and O += P·V run on mma.sync (bf16 in, fp32 accumulate; ldmatrix operands,
//    .trans for V); Q's fragments stay in registers for the whole CTA. When kWd > 1 the
//    column groups add their partial scores through shared memory (one more
//    __syncthreads per tile) and keep identical online-softmax state (log2 domain) in
//    registers; P turns into bf16 A fragments in place. Key groups keep separate softmax
//    state and are combined once at the end, through shared memory.
//      D 512: kWd 4, kWk 1, BK 16 | D 256: kWd 2, kWk 2, BK 32 | D 128: kWd 1, kWk 4, BK 64
//      D <= 64: kWd 1, kWk 4, BK 64 (smaller tiles; not the shapes that matter).
//  - The partition count depends only on host-known bounds (block-table width, window,
//    number of SMs): the plan picks the count that minimizes (waves of 2 CTAs per SM) x
//    (tiles per CTA + fixed cost), so one long sequence still fills the GPU and a large
//    batch is not split needlessly. Launches never read the batch on the host.
#include <algorithm>
#include <climits>
#include <mutex>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
constexpr int kRows = 16;        // query heads per CTA: the mma's M
constexpr int kStages = 3;       // K/V tiles in the cp.async pipeline
constexpr int kCtasPerSm = 2;    // what the plan assumes (sm_90: <= 113 KB of shared memory each)
constexpr int kTileOverhead = 3;  // a CTA's fixed cost (pipeline fill, epilogue), in tiles

constexpr int ColsPerWarp(int d) { return d < 128 ? d : 128; }
constexpr int KeysPerTile(int d) {
  const int key_groups = kWarps / (d / ColsPerWarp(d));
  const int cap = d <= 64 ? 64 : 128;
  const int by_bytes = 8192 / d < cap ? 8192 / d : cap;  // <= 32 KB of K + V per tile
  return by_bytes > 16 * key_groups ? by_bytes : 16 * key_groups;
}

// Tile shape and shared-memory layout for head dim D.
template <int D>
struct Cfg {
  static constexpr int kDw = ColsPerWarp(D);  // output columns per warp
  static constexpr int kWd = D / kDw;          // warps sharing a tile's keys, by columns
  static constexpr int kWk = kWarps / kWd;     // key groups
  static constexpr int BK = KeysPerTile(D);
  static constexpr int kKw = BK / kWk;        // keys per warp per tile
  static constexpr int kLd = D + 8;           // bf16 row stride of K, V in shared memory
  static constexpr int kChunks = D / 8;       // 16-byte chunks per row
  static constexpr int kCpt = BK * kChunks / kThreads;  // chunks per thread per tensor per tile
  static constexpr int kOld = D + 4;          // fp32 row stride of the epilogue's outputs
  static_assert(kDw % 16 == 0 && kKw % 16 == 0 && kWd * kWk == kWarps, "bad tile shape");
  static_assert(BK * kChunks % kThreads == 0 && BK <= kThreads, "bad tile shape");
  // [kStages][K | V][BK][kLd] bf16, reused after the loop as [kWk][kRows][kOld] fp32;
  // then the partial-score exchange [kWarps][kKw / 8][32 lanes] float4; the tiles'
  // key offsets [kStages][BK] and the lookups ahead [2][BK] (int64).
  static constexpr size_t kStage = 2 * sizeof(bf16) * BK * kLd;
  static constexpr size_t kPipe = kStages * kStage;
  static constexpr size_t kOut = sizeof(float) * kWk * kRows * kOld;
  static constexpr size_t kXch = kPipe > kOut ? kPipe : kOut;
  static constexpr size_t kXchBytes = kWd > 1 ? kWarps * (kKw / 8) * kWarp * sizeof(float4) : 0;
  static constexpr size_t kKeyOff = kXch + kXchBytes;
  static constexpr size_t kAhead = kKeyOff + sizeof(int64_t) * kStages * BK;
  static constexpr size_t kBytes = kAhead + sizeof(int64_t) * 2 * BK;
  // Two CTAs per SM in 228 KB, with the static arrays and the 1 KB each CTA reserves.
  static_assert(kBytes + 2048 <= 114 * 1024, "two CTAs per SM must fit");
};

struct DecodePlan {
  int head_chunks = 1;  // CTAs per KV head along its query heads
  int heads_per_chunk = 1;
  int partition = 1;    // keys per partition, a multiple of the tile
  int parts = 1;
};

DecodePlan PlanDecode(int64_t tokens, const cpu::PagedAttentionParams& p, int num_sms) {
  DecodePlan d;
  const int group = p.num_q_heads / p.num_kv_heads;
  d.head_chunks = (group + kRows - 1) / kRows;
  d.heads_per_chunk = (group + d.head_chunks - 1) / d.head_chunks;
  // Keys a query can see: bounded by the block table width and by the window. A fixed
  // bound (not the batch's actual lengths) keeps the launch shape replayable in a graph.
  int64_t ctx = std::max<int64_t>(1, static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size);
  if (p.sliding_window > 0) ctx = std::min<int64_t>(ctx, p.sliding_window);
  const int64_t bk = KeysPerTile(p.head_dim);
  const int64_t tiles = (ctx + bk - 1) / bk;
  const int64_t base = std::max<int64_t>(1, tokens * p.num_kv_heads * d.head_chunks);
  const int64_t slots = std::max<int64_t>(1, static_cast<int64_t>(kCtasPerSm) * num_sms);
  // Beyond ~3 waves more partitions only shave wave quantization; cap the search there.
  const int64_t max_parts = std::min<int64_t>({tiles, (3 * slots + base - 1) / base, 4096});
  int64_t best_parts = 1, best_cost = LLONG_MAX;
  for (int64_t parts = 1; parts <= max_parts; ++parts) {
    const int64_t per_part = (tiles + parts - 1) / parts;
    if ((tiles + per_part - 1) / per_part != parts) continue;  // same split as fewer parts
    const int64_t waves = (base * parts + slots - 1) / slots;
    const int64_t cost = waves * (per_part + kTileOverhead) + (parts > 1 ? kTileOverhead : 0);
    if (cost < best_cost) {
      best_cost = cost;
      best_parts = parts;
    }
  }
  const int64_t per_part = (tiles + best_parts - 1) / best_parts;
  d.partition = static_cast<int>(per_part * bk);
  d.parts = static_cast<int>((tiles + per_part - 1) / per_part);
  return d;
}

// Workspace layout when parts > 1: o [tokens, q_heads, parts, D] outputs unnormalized
// (relative to m), then m and l [tokens, q_heads, parts]: the running max of the scores
// in the log2 domain and the sum of 2^(score - m).
struct Partials {
  float* o;
  float* m;
  float* l;
};
Partials LayoutPartials(void* ws, int64_t tokens, int32_t q_heads, int parts, int32_t head_dim) {
  float* base = static_cast<float*>(ws);
  const int64_t rows = tokens * q_heads * parts;
  return Partials{base, base + rows * head_dim, base + rows * head_dim + rows};
}

__device__ __forceinline__ uint32_t LoadPair(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

template <int D>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    DecodeKernel(AttnArgs a, int partition, int parts, int head_chunks, int heads_per_chunk, Partials partials) {
  AllowDependentLaunch();  // with one partition the o GEMV comes next (see kernels/cuda/gemv.cu)
  using C = Cfg<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float m_s[C::kWk][kRows], l_s[C::kWk][kRows];
  float4* xch = reinterpret_cast<float4*>(smem + C::kXch);
  int64_t* key_off = reinterpret_cast<int64_t*>(smem + C::kKeyOff);  // [kStages][BK], -1: masked
  int64_t* ahead = reinterpret_cast<int64_t*>(smem + C::kAhead);     // [2][BK]

  const int t = blockIdx.x;
  const int kv_head = blockIdx.y / head_chunks;
  const int h0 = kv_head * (a.num_q_heads / a.num_kv_heads) + blockIdx.y % head_chunks * heads_per_chunk;
  const int nh = min(heads_per_chunk, (kv_head + 1) * (a.num_q_heads / a.num_kv_heads) - h0);
  if (nh <= 0) return;
  const int part = blockIdx.z;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int kg = warp / C::kWd, wd = warp % C::kWd;  // key group, column group
  const int g = lane / 4, tq = lane % 4;              // fragment row, column pair

  const int32_t pos = a.token_pos[t];
  const int32_t k0 = FirstKey(pos, a.sliding_window) + part * partition;
  const int32_t n = pos < 0 ? 0 : min(k0 + partition, pos + 1) - k0;
  if (n <= 0) {
    if (parts == 1) {
      for (int i = tid; i < nh * D; i += kThreads) {
        a.out[(static_cast<int64_t>(t) * a.num_q_heads + h0) * D + i] = __float2bfloat16_rn(0.0f);
      }
    } else if (tid < nh) {
      const int64_t row = (static_cast<int64_t>(t) * a.num_q_heads + h0 + tid) * parts + part;
      partials.m[row] = -INFINITY;
      partials.l[row] = 0.0f;
    }
    return;
  }

  const int32_t* table = a.block_tables + static_cast<int64_t>(a.token_seq[t]) * a.max_blocks_per_seq;
  const int64_t row_stride = static_cast<int64_t>(a.num_kv_heads) * D;
  const int ntiles = (n + C::BK - 1) / C::BK;
  // Cache offset (elements) of key r of tile j for this KV head; -1 past the partition or
  // in a freed block.
  auto lookup = [&](int j, int r) -> int64_t {
    const int32_t key = j * C::BK + r;
    if (j >= ntiles || key >= n) return -1;
    const int32_t abs_key = k0 + key;
    const int32_t block = table[abs_key / a.block_size];
    if (block < 0) return -1;
    return (static_cast<int64_t>(block) * a.block_size + abs_key % a.block_size) * row_stride +
           static_cast<int64_t>(kv_head) * D;
  };
  const uint32_t pipe = SmemAddr(smem);
  // Copies tile j's K and V rows into its stage; offsets[r] is key r's cache offset.
  auto issue = [&](int j, const int64_t* offsets) {
    const int stage = j % kStages;
    const uint32_t k_dst = pipe + stage * static_cast<uint32_t>(C::kStage);
    const uint32_t v_dst = k_dst + static_cast<uint32_t>(C::kStage / 2);
#pragma unroll
    for (int i = 0; i < C::kCpt; ++i) {
      const int chunk = tid + i * kThreads;
      const int r = chunk / C::kChunks, c = chunk % C::kChunks;
      const int64_t off = offsets[r];
      const bool ok = off >= 0;
      const int64_t src = ok ? off + c * 8 : 0;
      const uint32_t dst = static_cast<uint32_t>((r * C::kLd + c * 8) * sizeof(bf16));
      CpAsync16(k_dst + dst, a.k_cache + src, ok);
      CpAsync16(v_dst + dst, a.v_cache + src, ok);
    }
    if (tid < C::BK) key_off[stage * C::BK + tid] = offsets[tid];
  };

  // Prologue: tiles 0 .. kStages - 2 in flight, tile kStages - 1 looked up.
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < ntiles) {
      if (tid < C::BK) ahead[tid] = lookup(j, tid);
      __syncthreads();
      issue(j, ahead);
      __syncthreads();
    }
    CpAsyncCommit();
  }
  if (tid < C::BK) ahead[(kStages - 1) % 2 * C::BK + tid] = lookup(kStages - 1, tid);

  // Q fragments (A operand, rows g and g + 8) of this warp's columns; rows past nh are 0.
  uint32_t qf[C::kDw / 16][4];
  {
    const bf16* q = a.q + (static_cast<int64_t>(t) * a.num_q_heads + h0) * D + wd * C::kDw + 2 * tq;
#pragma unroll
    for (int ks = 0; ks < C::kDw / 16; ++ks) {
      qf[ks][0] = g < nh ? LoadPair(q + g * D + ks * 16) : 0u;
      qf[ks][1] = g + 8 < nh ? LoadPair(q + (g + 8) * D + ks * 16) : 0u;
      qf[ks][2] = g < nh ? LoadPair(q + g * D + ks * 16 + 8) : 0u;
      qf[ks][3] = g + 8 < nh ? LoadPair(q + (g + 8) * D + ks * 16 + 8) : 0u;
    }
  }

  float o[C::kDw / 8][4];
#pragma unroll
  for (int i = 0; i < C::kDw / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g, g + 8; l: this thread's columns
  const int key0 = kg * C::kKw;  // this warp's first key in a tile
  const bool softcap = a.softcap > 0.0f;
  const float score_mul = a.scale * kLog2e;

  for (int it = 0; it < ntiles; ++it) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile `it` landed; everyone is done with tile it - 1 and its stage
    const int next = it + kStages - 1;
    if (next < ntiles) issue(next, ahead + next % 2 * C::BK);
    CpAsyncCommit();
    // The table lookup for the tile after: its load overlaps this tile's math.
    const int64_t off_ahead = tid < C::BK ? lookup(next + 1, tid) : -1;

    const int stage = it % kStages;
    const uint32_t k_tile = pipe + stage * static_cast<uint32_t>(C::kStage);
    const uint32_t v_tile = k_tile + static_cast<uint32_t>(C::kStage / 2);

    // S = Q·K^T over this warp's columns for its keys: C fragments [key octet][4].
    float s[C::kKw / 8][4];
#pragma unroll
    for (int i = 0; i < C::kKw / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int n2 = 0; n2 < C::kKw / 16; ++n2) {
      const int key = key0 + n2 * 16 + (lane & 7) + (lane >> 4) * 8;
      const uint32_t row = k_tile + static_cast<uint32_t>((key * C::kLd + wd * C::kDw + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
      for (int ks = 0; ks < C::kDw / 16; ++ks) {
        uint32_t b[4];
        Ldmatrix4(b, row + ks * 32);
        Mma(s[2 * n2], qf[ks], b[0], b[1]);
        Mma(s[2 * n2 + 1], qf[ks], b[2], b[3]);
      }
    }
    if constexpr (C::kWd > 1) {
      // Column groups add their partial scores, each in the same order, so they agree.
      float4* mine = xch + warp * (C::kKw / 8) * kWarp + lane;
#pragma unroll
      for (int i = 0; i < C::kKw / 8; ++i) mine[i * kWarp] = make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
      __syncthreads();
      const float4* group = xch + kg * C::kWd * (C::kKw / 8) * kWarp + lane;
#pragma unroll
      for (int i = 0; i < C::kKw / 8; ++i) {
        float4 sum = group[i * kWarp];
#pragma unroll
        for (int w = 1; w < C::kWd; ++w) {
          const float4 v = group[(w * (C::kKw / 8) + i) * kWarp];
          sum.x += v.x;
          sum.y += v.y;
          sum.z += v.z;
          sum.w += v.w;
        }
        s[i][0] = sum.x;
        s[i][1] = sum.y;
        s[i][2] = sum.z;
        s[i][3] = sum.w;
      }
    }

    // Online softmax in the log2 domain; masked keys score -inf.
    const int64_t* offs = key_off + stage * C::BK + key0 + 2 * tq;
    float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int i = 0; i < C::kKw / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool ok = offs[i * 8 + (e & 1)] >= 0;
        const float v = softcap ? ScoreTransform(s[i][e], a.scale, a.softcap) * kLog2e : s[i][e] * score_mul;
        s[i][e] = ok ? v : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[i][e]);
      }
    }
    float base[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // a row with nothing visible yet
      alpha[r] = exp2f(m_run[r] - base[r]);
      m_run[r] = mx[r];
      l_run[r] *= alpha[r];
    }
#pragma unroll
    for (int i = 0; i < C::kKw / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[i][e] = exp2f(s[i][e] - base[e >> 1]);
        l_run[e >> 1] += s[i][e];
      }
    }
#pragma unroll
    for (int i = 0; i < C::kDw / 8; ++i) {
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[0];
      o[i][2] *= alpha[1];
      o[i][3] *= alpha[1];
    }

    // O += P·V: P's C fragments are the A fragments of 16-key steps.
#pragma unroll
    for (int ks = 0; ks < C::kKw / 16; ++ks) {
      const uint32_t pa[4] = {PackBf16(s[2 * ks][0], s[2 * ks][1]), PackBf16(s[2 * ks][2], s[2 * ks][3]),
                              PackBf16(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                              PackBf16(s[2 * ks + 1][2], s[2 * ks + 1][3])};
      const int key = key0 + ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const uint32_t row = v_tile + static_cast<uint32_t>((key * C::kLd + wd * C::kDw + (lane >> 4) * 8) * 2);
#pragma unroll
      for (int n2 = 0; n2 < C::kDw / 16; ++n2) {
        uint32_t b[4];
        Ldmatrix4Trans(b, row + n2 * 32);
        Mma(o[2 * n2], pa, b[0], b[1]);
        Mma(o[2 * n2 + 1], pa, b[2], b[3]);
      }
    }
    if (tid < C::BK) ahead[(next + 1) % 2 * C::BK + tid] = off_ahead;
  }

  // Epilogue: combine the key groups through shared memory (the pipeline's space).
  CpAsyncWait<0>();
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
  float* out_s = reinterpret_cast<float*>(smem);  // [kWk][kRows][kOld]
  {
    float* row0 = out_s + (kg * kRows + g) * C::kOld + wd * C::kDw + 2 * tq;
    float* row1 = row0 + 8 * C::kOld;
#pragma unroll
    for (int i = 0; i < C::kDw / 8; ++i) {
      *reinterpret_cast<float2*>(row0 + i * 8) = make_float2(o[i][0], o[i][1]);
      *reinterpret_cast<float2*>(row1 + i * 8) = make_float2(o[i][2], o[i][3]);
    }
    if (wd == 0 && tq == 0) {
      m_s[kg][g] = m_run[0];
      m_s[kg][g + 8] = m_run[1];
      l_s[kg][g] = l_run[0];
      l_s[kg][g + 8] = l_run[1];
    }
  }
  __syncthreads();
  const int64_t out_row0 = static_cast<int64_t>(t) * a.num_q_heads + h0;
  for (int i = tid; i < nh * D; i += kThreads) {
    const int r = i / D, d = i % D;
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < C::kWk; ++k) m = fmaxf(m, m_s[k][r]);
    float l = 0.0f, acc = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int k = 0; k < C::kWk; ++k) {
        const float w = exp2f(m_s[k][r] - m);
        l += w * l_s[k][r];
        acc += w * out_s[(k * kRows + r) * C::kOld + d];
      }
    }
    if (parts == 1) {
      a.out[out_row0 * D + i] = __float2bfloat16_rn(l > 0.0f ? acc / l : 0.0f);
    } else {
      const int64_t row = (out_row0 + r) * parts + part;
      partials.o[row * D + d] = acc;
      if (d == 0) {
        partials.m[row] = m;
        partials.l[row] = l;
      }
    }
  }
}

// Block (token, query head, 128 columns): out = sum_p 2^(m_p - M) o_p / sum_p 2^(m_p - M) l_p.
// Each warp takes every 4th partition (float4 columns per lane); every warp computes M
// and the denominator over all partitions itself.
constexpr int kMergeCols = 4 * kWarp;
__global__ void __launch_bounds__(kThreads) MergePartitionsKernel(AttnArgs a, int parts, int head_dim,
                                                                   Partials partials) {
  AllowDependentLaunch();  // the o GEMV launched after this one may start fetching weights
  __shared__ float4 sum_s[kWarps][kWarp];
  const int t = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int d = blockIdx.z * kMergeCols + 4 * lane;
  bf16* out = a.out + (static_cast<int64_t>(t) * a.num_q_heads + h) * head_dim;
  const int64_t row0 = (static_cast<int64_t>(t) * a.num_q_heads + h) * parts;
  float m = -INFINITY;
  if (a.token_pos[t] >= 0) {
    for (int p = lane; p < parts; p += kWarp) {
      if (partials.l[row0 + p] > 0.0f) m = fmaxf(m, partials.m[row0 + p]);
    }
    m = WarpMax(m);
  }
  float denom = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (m != -INFINITY) {
    for (int p = lane; p < parts; p += kWarp) {
      const float l = partials.l[row0 + p];
      if (l > 0.0f) denom += exp2f(partials.m[row0 + p] - m) * l;
    }
    denom = WarpSum(denom);
    if (d < head_dim) {
      for (int p = warp; p < parts; p += kWarps) {
        if (partials.l[row0 + p] <= 0.0f) continue;
        const float w = exp2f(partials.m[row0 + p] - m);
        const float4 v = *reinterpret_cast<const float4*>(partials.o + (row0 + p) * head_dim + d);
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
      }
    }
  }
  sum_s[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && d < head_dim) {
    for (int w = 1; w < kWarps; ++w) {
      acc.x += sum_s[w][lane].x;
      acc.y += sum_s[w][lane].y;
      acc.z += sum_s[w][lane].z;
      acc.w += sum_s[w][lane].w;
    }
    const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
    __nv_bfloat162 pair[2] = {__floats2bfloat162_rn(acc.x * inv, acc.y * inv),
                              __floats2bfloat162_rn(acc.z * inv, acc.w * inv)};
    *reinterpret_cast<uint2*>(out + d) = *reinterpret_cast<const uint2*>(pair);
  }
}

template <int D>
void SetKernelAttributes() {
  static OncePerDevice once;
  once.Run([] {
    TP_CUDA_CHECK(cudaFuncSetAttribute(DecodeKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Cfg<D>::kBytes)));
    TP_CUDA_CHECK(cudaFuncSetAttribute(DecodeKernel<D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
  });
}

struct LaunchDecode {
  const AttnArgs& a;
  const DecodePlan& d;
  const Partials& partials;
  cudaStream_t stream;
  template <int D>
  void operator()() const {
    SetKernelAttributes<D>();
    const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(a.num_kv_heads * d.head_chunks),
                    static_cast<unsigned>(d.parts));
    DecodeKernel<D><<<grid, kThreads, Cfg<D>::kBytes, stream>>>(a, d.partition, d.parts, d.head_chunks,
                                                                d.heads_per_chunk, partials);
    TP_CUDA_CHECK_LAUNCH();
  }
};

}  // namespace

bool AttentionHeadDimSupported(int32_t head_dim) {
  switch (head_dim) {
    case 16: case 32: case 64: case 128: case 256: case 512:
      return true;
    default:
      return false;
  }
}

size_t DecodeAttentionWorkspaceBytes(int64_t tokens, const cpu::PagedAttentionParams& p, int num_sms) {
  const DecodePlan d = PlanDecode(tokens, p, num_sms);
  if (d.parts == 1) return 0;
  const int64_t rows = tokens * p.num_q_heads * d.parts;
  return static_cast<size_t>(rows) * (p.head_dim + 2) * sizeof(float);
}

void DecodeAttention(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* token_seq,
                     const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                     const cpu::PagedAttentionParams& p, int num_sms, void* workspace, size_t workspace_bytes,
                     bf16* out, cudaStream_t stream) {
  if (tokens == 0) return;
  const AttnArgs a = MakeAttnArgs(q, k_cache, v_cache, token_seq, token_pos, tokens, block_tables, p, out);
  const DecodePlan d = PlanDecode(tokens, p, num_sms);
  TP_CHECK(workspace_bytes >= DecodeAttentionWorkspaceBytes(tokens, p, num_sms));
  const Partials partials = d.parts > 1 ? LayoutPartials(workspace, tokens, p.num_q_heads, d.parts, p.head_dim)
                                        : Partials{nullptr, nullptr, nullptr};
  DispatchHeadDim(p.head_dim, LaunchDecode{a, d, partials, stream});
  if (d.parts > 1) {
    const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(p.num_q_heads),
                    static_cast<unsigned>((p.head_dim + kMergeCols - 1) / kMergeCols));
    MergePartitionsKernel<<<grid, kThreads, 0, stream>>>(a, d.parts, p.head_dim, partials);
    TP_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tpserve::cuda
