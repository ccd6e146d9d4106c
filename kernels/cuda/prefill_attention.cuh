// The prefill attention kernel, shared by prefill_attention.cu (mma.sync, every
// architecture) and prefill_attention_wgmma.cu (its sm_90a variants: kWgmma 1, S = Q·K^T on
// wgmma; kWgmma 2, P·V too). Internal to kernels/cuda: each including file gets its own copies of the
// kernels (anonymous namespace).
//
// Paged attention for many query tokens (prefill, chunked prefill, mixed batches),
// FlashAttention-2 style. Tested by tests/cuda_attention_test.cc against cpu::PagedAttention.
//
// A CTA takes a tile of consecutive query tokens of one sequence times the query heads of
// one KV head: R = 64 rows (token x head pairs, so GQA groups share every K/V tile; 128 in
// one of the tunings cuda_kernels_bench sweeps). Each
// warp owns 16 rows; for head_dim 512 two warps share those rows and each owns half of D
// (they add their partial Q·K^T over 2 KB of shared memory and keep identical softmax
// state), so the fp32 output stays at <= 128 registers per thread. Per key tile of BK keys:
// S = Q·K^T and O += P·V on mma.sync m16n8k16 (bf16 in, fp32 accumulate) with ldmatrix
// operands (.trans for V); scores, running max and sum live in registers and P turns into
// bf16 A fragments in place. K/V rows are gathered through the block table by cp.async
// (16-byte chunks; freed blocks and keys outside the tile's range are zero-filled and
// masked) into a double buffer, so tile j + 1 loads while tile j computes. One thread per
// key reads the block table (for tile j + 2, while tile j computes) and leaves the key's
// cache offset in shared memory: the copies themselves do no division by the block size
// and no table read (per 16-byte chunk they did: ~750 of the 2075 SASS instructions of a
// head_dim-256 key tile; now ~190 of 1571). Key tiles span
// the union of the rows' [FirstKey, pos] ranges; a warp skips tiles none of its rows see
// and masks only tiles some of its rows see in part. Rows of shared memory are padded by
// 16 bytes, which keeps ldmatrix and cp.async free of bank conflicts (with kWgmma, Q and K
// are swizzled instead, as wgmma reads them, and with kWgmma 2 V too: Sw128Offset).
//   D <= 128: BK 64, 4 warps;  D 256: BK 32, 4 warps, 100 KiB (2 CTAs per SM on sm_90);
//   D 512: BK 32, 8 warps, 212 KiB where the device allows it (sm_90), else BK 16, 138 KiB.
// Tiles are planned on the device from token_seq, so the launch never reads the batch on
// the host.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <mutex>
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace prefill_detail {

// Workspace: tile_start [tokens], tile_len [tokens], tile_count.
struct TilePlan {
  int32_t* start;
  int32_t* len;
  int32_t* count;
};
inline TilePlan LayoutTilePlan(void* ws, int64_t tokens) {
  int32_t* base = static_cast<int32_t*>(ws);
  return TilePlan{base, base + tokens, base + 2 * tokens};
}

// The sm_90a variants (prefill_attention_wgmma.cu where the build targets sm_90, else the
// stubs in prefill_attention.cu): 1, S on wgmma; 2, P·V too. WgmmaSmemBytes: the variant's
// shared memory at head_dim, 0 where it is not built for head_dim or this device cannot
// run it. LaunchWgmma: false where it launched nothing.
size_t WgmmaSmemBytes(int head_dim, int variant);
bool LaunchWgmma(int head_dim, int variant, const AttnArgs& a, const TilePlan& plan, int group, int smem_optin,
                 cudaStream_t stream);

}  // namespace prefill_detail

namespace {

constexpr int kPlanThreads = 1024;

// Tile shape and shared-memory layout for head dim D, BK keys per K/V tile, kSplit warps
// sharing each 16 rows (each owning D / kSplit output columns) and kRowWarps x 16 rows.
template <int D, int BK, int kSplit, int kRowWarps = 4, int kWgmma = 0>
struct Cfg {
  static constexpr int kThreads = kRowWarps * kSplit * kWarp;
  static constexpr int R = 16 * kRowWarps;  // query rows per CTA
  static constexpr int kDw = D / kSplit;    // D columns per warp
  static constexpr int kLd = D + 8;         // bf16 row stride in shared memory
  static constexpr int kChunks = D / 8;     // 16-byte chunks per row
  static constexpr int kKeysPerPass = kThreads / kChunks;
  static constexpr int kPasses = (BK + kKeysPerPass - 1) / kKeysPerPass;
  static_assert(kDw % 16 == 0 && BK % 16 == 0 && kThreads % kChunks == 0);
  static_assert(BK <= kThreads);  // one thread looks up each key of a tile
  // kWgmma 1: one warpgroup of 64 rows computes S = Q·K^T with Q and K in 128-byte-swizzled
  // slabs (Sw128Offset); 32 keys a tile (wgmma m64n32k16). 2: P·V too (m64n256k16, V
  // swizzled the same way), head_dim 256.
  static_assert(kWgmma == 0 || (kSplit == 1 && kRowWarps == 4 && D % 64 == 0 && BK == 32));
  static_assert(kWgmma < 2 || D == 256);
  // Q [R][kLd]; K, V [2 stages][BK][kLd]; the split warps' partial scores; key_ok [2][BK];
  // key_off [2][BK] (each key's cache offset for this KV head, -1 where there is none).
  // wgmma: Q [D / 64 slabs][R][64] and K [2][D / 64][BK][64] (with kWgmma 2, V too),
  // swizzled, from a base that the kernel aligns to 1024 bytes (the swizzle pattern's
  // period) within kAlign of slack.
  static constexpr size_t kAlign = kWgmma ? 1024 : 0;
  static constexpr size_t kKStage = sizeof(bf16) * BK * (kWgmma ? D : kLd);
  static constexpr size_t kVStage = sizeof(bf16) * BK * (kWgmma >= 2 ? D : kLd);
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(bf16) * R * (kWgmma ? D : kLd);
  static constexpr size_t kV = kK + 2 * kKStage;
  static constexpr size_t kXch = kV + 2 * kVStage;
  static constexpr size_t kKeyOk = kXch + (kSplit > 1 ? sizeof(float) * kThreads * (BK / 2) : 0);
  static constexpr size_t kKeyOff = (kKeyOk + 2 * BK + 7) / 8 * 8;
  static constexpr size_t kBytes = kAlign + kKeyOff + sizeof(int64_t) * 2 * BK;
  // Two CTAs per SM where registers allow (128 threads: 255 each; the fp32 output of
  // D / kSplit columns alone takes D / kSplit / 2 of them).
  static constexpr int kMinBlocks = kThreads <= 128 ? 2 : 1;
};

// Synchronizes the kCount threads (whole warps) that use barrier `id` (0 is __syncthreads).
__device__ __forceinline__ void NamedBarrier(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

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

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `rows` rows stored as
// wgmma wants a K-major operand with 128-byte swizzle: slabs of 64 bf16 columns (8
// chunks), each slab `rows` x 128 bytes, chunk c of row r at position c ^ (r % 8) of its
// 128-byte row. The tile's base is 1024-byte aligned, so this is the swizzle the hardware
// applies to the addresses it computes (address bits 4-6 ^= bits 7-9).
__device__ __forceinline__ uint32_t Sw128Offset(int row, int chunk, int rows) {
  return static_cast<uint32_t>((chunk / 8) * rows * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) * 16));
}

// Orders this thread's generic-proxy shared-memory writes (cp.async, completed) before
// the async proxy's reads (wgmma operands).
__device__ __forceinline__ void FenceProxyAsync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wgmma shared-memory matrix descriptor for a 128-byte-swizzled operand starting at shared
// address `addr`: start address >> 4 (bits 0-13), leading byte offset (bits 16-29; unused,
// 16, for K-major operands; between 64-column slabs for MN-major ones), stride byte offset
// 1024 between 8-row groups (bits 32-45), base offset 0 (the tile is 1024-byte aligned),
// swizzle mode 1 = 128 B (bits 62-63).
__device__ __forceinline__ uint64_t Sw128Desc(uint32_t addr, uint32_t leading_bytes = 16) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(leading_bytes >> 4) << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// Pins registers across the wgmma fence and wait: wgmma.fence must follow every write to
// a register the MMA reads, and the asynchronous MMA writes its accumulators between its
// issue and its wait, behind the compiler's back.
template <typename T, int N>  // float accumulators or uint32_t (packed bf16) A fragments
__device__ __forceinline__ void FenceOperands(T (&r)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (std::is_floating_point_v<T>) {
        asm volatile("" : "+f"(r[j][e])::"memory");
      } else {
        asm volatile("" : "+r"(r[j][e])::"memory");
      }
    }
  }
}

// Commits the wgmmas issued, waits for them all and pins the accumulators they wrote.
template <int N>
__device__ __forceinline__ void WgmmaCommitAndWait(float (&acc)[N][4]) {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  FenceOperands(acc);
}
#endif

// S[64, 32] = Q[64, D] · K[32, D]^T by the CTA's warpgroup (all 4 warps, converged):
// wgmma m64n32k16 per 16 columns of D, both operands from shared memory (Sw128Offset
// layouts at q_addr, k_addr), fp32 accumulators. Warp w's registers hold rows 16w + g and
// 16w + g + 8 in the mma.sync C-fragment layout, s[n8 tile][4], which the softmax reads.
template <int D, int BK, int R>
__device__ __forceinline__ void WgmmaScores(float (&s)[BK / 8][4], uint32_t q_addr, uint32_t k_addr) {
  static_assert(BK == 32 && R == 64);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  FenceOperands(s);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  // The start address is the descriptor's low field (address >> 4), so stepping through
  // the tile adds (offset >> 4) to a base descriptor; the tiles end below 256 KB, so the
  // field never carries into the next.
  const uint64_t q_desc = Sw128Desc(q_addr), k_desc = Sw128Desc(k_addr);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t qd = q_desc + static_cast<uint64_t>(((kk / 4) * R * 128 + (kk % 4) * 32) >> 4);
    const uint64_t kd = k_desc + static_cast<uint64_t>(((kk / 4) * BK * 128 + (kk % 4) * 32) >> 4);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(s[0][0]), "+f"(s[0][1]), "+f"(s[0][2]), "+f"(s[0][3]), "+f"(s[1][0]), "+f"(s[1][1]), "+f"(s[1][2]),
          "+f"(s[1][3]), "+f"(s[2][0]), "+f"(s[2][1]), "+f"(s[2][2]), "+f"(s[2][3]), "+f"(s[3][0]), "+f"(s[3][1]),
          "+f"(s[3][2]), "+f"(s[3][3])
        : "l"(qd), "l"(kd), "r"(kk > 0 ? 1 : 0));
  }
  WgmmaCommitAndWait(s);
#else
  __trap();  // only instantiated in prefill_attention_wgmma.cu, built for sm_90a
#endif
}

// O[64, 256] += P[64, 32] · V[32, 256] by the CTA's warpgroup: two wgmma m64n256k16 with P
// from registers (pa: each warp's 16 rows x 16 keys, the mma.sync A fragment, which is
// wgmma's register A layout) and V from shared memory as an MN-major operand with 128-byte
// swizzle (Sw128Offset(key, chunk, BK): keys 128 bytes apart within a 64-column slab; 8-key
// groups 1024 bytes apart = SBO; slabs BK x 128 bytes apart = LBO). o: the accumulators in
// the mma.sync C-fragment layout (o[n8 tile][4]).
// The accumulators of n8 tile j as four "+f" asm operands.
#define TP_O4(j) "+f"(o[j][0]), "+f"(o[j][1]), "+f"(o[j][2]), "+f"(o[j][3])
template <int BK>
__device__ __forceinline__ void WgmmaPv(float (&o)[32][4], const float (&s)[BK / 8][4], uint32_t v_addr) {
  static_assert(BK == 32);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  uint32_t pa[BK / 16][4];
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    pa[kk][0] = PackBf16(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = PackBf16(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
  FenceOperands(pa);  // the A fragment as well as the accumulators
  FenceOperands(o);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  const uint64_t v_desc = Sw128Desc(v_addr, BK * 128);  // MN-major: 64-column slabs BK x 128 bytes apart
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    const uint64_t vd = v_desc + static_cast<uint64_t>((kk * 16 * 128) >> 4);  // 16 keys further
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        :
          TP_O4(0), TP_O4(1), TP_O4(2), TP_O4(3),
          TP_O4(4), TP_O4(5), TP_O4(6), TP_O4(7),
          TP_O4(8), TP_O4(9), TP_O4(10), TP_O4(11),
          TP_O4(12), TP_O4(13), TP_O4(14), TP_O4(15),
          TP_O4(16), TP_O4(17), TP_O4(18), TP_O4(19),
          TP_O4(20), TP_O4(21), TP_O4(22), TP_O4(23),
          TP_O4(24), TP_O4(25), TP_O4(26), TP_O4(27),
          TP_O4(28), TP_O4(29), TP_O4(30), TP_O4(31)
        : "r"(pa[kk][0]), "r"(pa[kk][1]), "r"(pa[kk][2]), "r"(pa[kk][3]), "l"(vd), "r"(1));
  }
  WgmmaCommitAndWait(o);
#else
  __trap();  // only instantiated in prefill_attention_wgmma.cu, built for sm_90a
#endif
}
#undef TP_O4

template <int D, int BK, int kSplit, int kRowWarps, int kWgmma>
__global__ void __launch_bounds__(Cfg<D, BK, kSplit, kRowWarps, kWgmma>::kThreads,
                                  Cfg<D, BK, kSplit, kRowWarps, kWgmma>::kMinBlocks)
    PrefillKernel(AttnArgs a, const int32_t* __restrict__ tile_start, const int32_t* __restrict__ tile_len,
                  const int32_t* __restrict__ tile_count) {
  using C = Cfg<D, BK, kSplit, kRowWarps, kWgmma>;
  constexpr int kLd = C::kLd, kDw = C::kDw, kThreads = C::kThreads;
  constexpr int kNt = BK / 8;  // 8-key column tiles of S per warp
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw;
  if constexpr (kWgmma) smem += (1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u;
  bf16* q_s = reinterpret_cast<bf16*>(smem + C::kQ);
  bf16* k_s = reinterpret_cast<bf16*>(smem + C::kK);
  bf16* v_s = reinterpret_cast<bf16*>(smem + C::kV);
  float* xch = reinterpret_cast<float*>(smem + C::kXch);
  uint8_t* key_ok = smem + C::kKeyOk;
  int64_t* key_off = reinterpret_cast<int64_t*>(smem + C::kKeyOff);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int row_warp = warp / kSplit, part = warp % kSplit;
  const int g = lane / 4, t4 = lane % 4;  // mma fragment coordinates: rows g, g + 8; columns 2 * t4 + {0, 1}
  const int d0 = part * kDw;              // this warp's columns of D
  const int kv_head = blockIdx.y;
  const int group = a.num_q_heads / a.num_kv_heads;
  const int64_t kv_stride = static_cast<int64_t>(a.num_kv_heads) * D;
  const bool softcap = a.softcap > 0.0f;
  const float score_mul = a.scale * kLog2e;  // scores in the log2 domain: exp2 instead of exp
  const int num_tiles = *tile_count;

  // Heaviest tiles (the last of a causal sequence) first.
  for (int tile = num_tiles - 1 - static_cast<int>(blockIdx.x); tile >= 0; tile -= gridDim.x) {
    const int t0 = tile_start[tile], nt = tile_len[tile];
    const int rows = nt * group;  // row r: token t0 + r / group, query head kv_head * group + r % group
    const int32_t* table = a.block_tables + static_cast<int64_t>(a.token_seq[t0]) * a.max_blocks_per_seq;

    // This thread's two rows, its warp's key range and the CTA's (all warps compute it alike).
    const int r0 = row_warp * 16 + g, r1 = r0 + 8;
    const int32_t pos0 = r0 < rows ? a.token_pos[t0 + r0 / group] : -1;
    const int32_t pos1 = r1 < rows ? a.token_pos[t0 + r1 / group] : -1;
    const int32_t first0 = FirstKey(pos0, a.sliding_window), first1 = FirstKey(pos1, a.sliding_window);
    // Keys any row of the warp sees: [w_lo, w_hi]; keys every row sees: [w_all_lo, w_all_hi].
    const int w_lo = __reduce_min_sync(0xffffffffu, min(pos0 >= 0 ? first0 : INT_MAX, pos1 >= 0 ? first1 : INT_MAX));
    const int w_hi = __reduce_max_sync(0xffffffffu, max(pos0, pos1));
    const int w_all_lo = __reduce_max_sync(0xffffffffu, max(first0, first1));
    const int w_all_hi = __reduce_min_sync(0xffffffffu, min(pos0, pos1));
    int lo = INT_MAX, hi = -1;
    for (int i = lane; i < nt; i += kWarp) {
      const int32_t p = a.token_pos[t0 + i];
      if (p >= 0) {
        lo = min(lo, FirstKey(p, a.sliding_window));
        hi = max(hi, p);
      }
    }
    lo = __reduce_min_sync(0xffffffffu, lo);
    hi = __reduce_max_sync(0xffffffffu, hi);
    const int num_kt = hi >= lo ? (hi - lo) / BK + 1 : 0;

    // Q rows -> shared memory (zeros past the tile's rows); joins the first K/V tile's group.
    for (int i = tid; i < C::R * C::kChunks; i += kThreads) {
      const int r = i / C::kChunks, c = i % C::kChunks;
      const bool valid = r < rows;
      const int64_t row = static_cast<int64_t>(t0 + r / group) * a.num_q_heads + kv_head * group + r % group;
      const uint32_t dst = kWgmma ? Sw128Offset(r, c, C::R) : static_cast<uint32_t>((r * kLd + c * 8) * sizeof(bf16));
      CpAsync16(SmemAddr(q_s) + dst, valid ? a.q + row * D + c * 8 : a.q, valid);
    }
    // Cache offset of key k of key tile kt for this KV head; -1 past the tile range or in a
    // freed block. One thread per key and tile: the block-table read and the division by
    // the block size happen once per key, not once per 16-byte column.
    auto key_offset = [&](int kt, int k) -> int64_t {
      if (kt >= num_kt) return -1;  // also a tile of padding only: lo is INT_MAX there
      const int32_t key = lo + kt * BK + k;
      if (key > hi) return -1;
      const int32_t block = table[key / a.block_size];
      if (block < 0) return -1;
      return (static_cast<int64_t>(block) * a.block_size + key % a.block_size) * kv_stride +
             static_cast<int64_t>(kv_head) * D;
    };
    // Keys [j0, j0 + BK) -> stage, from the offsets in key_off[stage]; a thread copies one
    // 16-byte column of every kKeysPerPass-th key, and the first column's thread records
    // whether the key exists.
    auto load_kv = [&](int kt) {
      const int stage = kt & 1, col = tid % C::kChunks;
      const uint32_t ks = SmemAddr(k_s) + stage * static_cast<uint32_t>(C::kKStage);
      const uint32_t vs = SmemAddr(v_s) + stage * static_cast<uint32_t>(C::kVStage);
#pragma unroll
      for (int p = 0; p < C::kPasses; ++p) {
        const int k = tid / C::kChunks + p * C::kKeysPerPass;
        if (C::kPasses * C::kKeysPerPass > BK && k >= BK) break;
        const int64_t off = key_off[stage * BK + k];
        const bool valid = off >= 0;
        const int64_t src = valid ? off + col * 8 : 0;
        const uint32_t k_dst =
            kWgmma ? Sw128Offset(k, col, BK) : static_cast<uint32_t>((k * kLd + col * 8) * sizeof(bf16));
        CpAsync16(ks + k_dst, a.k_cache + src, valid);
        const uint32_t v_dst =
            kWgmma >= 2 ? Sw128Offset(k, col, BK) : static_cast<uint32_t>((k * kLd + col * 8) * sizeof(bf16));
        CpAsync16(vs + v_dst, a.v_cache + src, valid);
        if (col == 0) key_ok[stage * BK + k] = valid ? 1 : 0;
      }
    };
    if (tid < BK) {
      key_off[tid] = key_offset(0, tid);
      key_off[BK + tid] = key_offset(1, tid);
    }
    __syncthreads();
    if (num_kt > 0) load_kv(0);
    CpAsyncCommit();

    float o[kDw / 8][4];
#pragma unroll
    for (int j = 0; j < kDw / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // l: this thread's columns only

    for (int kt = 0; kt < num_kt; ++kt) {
      if (kt + 1 < num_kt) load_kv(kt + 1);
      CpAsyncCommit();
      // Tile kt + 2's offsets: the table read overlaps this tile's math, and the result goes
      // to key_off[stage] once every warp has issued tile kt's copies (barrier below).
      const int64_t ahead = tid < BK ? key_offset(kt + 2, tid) : -1;
      CpAsyncWait<1>();
      if constexpr (kWgmma) FenceProxyAsync();  // the copies' smem, read by wgmma (async proxy)
      __syncthreads();
      const int j0 = lo + kt * BK, stage = kt & 1;
      float s[kNt][4];
      if constexpr (kWgmma) {  // the whole warpgroup, every tile: S[64, BK] = Q · K^T
        WgmmaScores<D, BK, C::R>(s, SmemAddr(q_s), SmemAddr(k_s) + stage * static_cast<uint32_t>(C::kKStage));
      }
      // A warp skips tiles none of its rows sees, unless P·V runs on wgmma (the whole
      // warpgroup issues it; a warp that sees no key contributes P = 0).
      if (kWgmma >= 2 || (j0 <= w_hi && j0 + BK - 1 >= w_lo)) {
        if constexpr (!kWgmma) {  // S[16, BK] = Q[16, D] · K^T over this warp's columns of D
#pragma unroll
          for (int j = 0; j < kNt; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
          const bf16* ks = k_s + stage * BK * kLd;
#pragma unroll
          for (int kk = 0; kk < kDw / 16; ++kk) {
            uint32_t qa[4];
            Ldmatrix4(qa, SmemAddr(q_s + (row_warp * 16 + lane % 16) * kLd + d0 + kk * 16 + (lane / 16) * 8));
#pragma unroll
            for (int np = 0; np < BK / 16; ++np) {
              uint32_t kb[4];
              Ldmatrix4(kb, SmemAddr(ks + (np * 16 + (lane / 16) * 8 + lane % 8) * kLd + d0 + kk * 16 +
                                     ((lane / 8) % 2) * 8));
              Mma(s[2 * np], qa, kb[0], kb[1]);
              Mma(s[2 * np + 1], qa, kb[2], kb[3]);
            }
          }
        }
        if constexpr (kSplit > 1) {  // add the partner warp's half of the dot products
          static_assert(kSplit == 2);
          float* mine = xch + warp * kWarp * (BK / 2);
          const float* other = xch + (warp ^ 1) * kWarp * (BK / 2);
#pragma unroll
          for (int j = 0; j < kNt; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) mine[(j * 4 + e) * kWarp + lane] = s[j][e];
          }
          NamedBarrier(1 + row_warp, 2 * kWarp);
#pragma unroll
          for (int j = 0; j < kNt; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] += other[(j * 4 + e) * kWarp + lane];
          }
        }

        // Scores (log2 domain), masked: keys that do not exist, and keys outside a row's
        // [first, pos] unless every row of the warp sees the whole tile.
        const bool whole = j0 >= w_all_lo && j0 + BK - 1 <= w_all_hi;
        const uint8_t* ok = key_ok + stage * BK;
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < kNt; ++j) {
          const int c = j * 8 + 2 * t4;
          const uint32_t ok2 = *reinterpret_cast<const uint16_t*>(ok + c);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int32_t key = j0 + c + (e & 1);
            float v = softcap ? ScoreTransform(s[j][e], a.scale, a.softcap) * kLog2e : s[j][e] * score_mul;
            bool visible = ((ok2 >> (8 * (e & 1))) & 0xffu) != 0;
            if (!whole) visible = visible && (e < 2 ? key >= first0 && key <= pos0 : key >= first1 && key <= pos1);
            v = visible ? v : -INFINITY;
            s[j][e] = v;
            if (e < 2) {
              mx0 = fmaxf(mx0, v);
            } else {
              mx1 = fmaxf(mx1, v);
            }
          }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        // Online softmax; a row that has seen no key yet keeps max -inf and weights 0.
        const float new0 = fmaxf(m0, mx0), new1 = fmaxf(m1, mx1);
        const float base0 = new0 == -INFINITY ? 0.0f : new0, base1 = new1 == -INFINITY ? 0.0f : new1;
        const float corr0 = exp2f(m0 - base0), corr1 = exp2f(m1 - base1);
        m0 = new0;
        m1 = new1;
        float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
        for (int j = 0; j < kNt; ++j) {
          s[j][0] = exp2f(s[j][0] - base0);
          s[j][1] = exp2f(s[j][1] - base0);
          s[j][2] = exp2f(s[j][2] - base1);
          s[j][3] = exp2f(s[j][3] - base1);
          sum0 += s[j][0] + s[j][1];
          sum1 += s[j][2] + s[j][3];
        }
        l0 = l0 * corr0 + sum0;
        l1 = l1 * corr1 + sum1;
        if (__any_sync(0xffffffffu, corr0 != 1.0f || corr1 != 1.0f)) {
#pragma unroll
          for (int j = 0; j < kDw / 8; ++j) {
            o[j][0] *= corr0;
            o[j][1] *= corr0;
            o[j][2] *= corr1;
            o[j][3] *= corr1;
          }
        }

        // O[16, kDw] += P[16, BK] · V[BK, this warp's columns]; P's C fragments are A fragments.
        if constexpr (kWgmma >= 2) {
          WgmmaPv<BK>(o, s, SmemAddr(v_s) + stage * static_cast<uint32_t>(C::kVStage));
        } else {
          const bf16* vs = v_s + stage * BK * kLd;
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk) {
            const uint32_t pa[4] = {PackBf16(s[2 * kk][0], s[2 * kk][1]), PackBf16(s[2 * kk][2], s[2 * kk][3]),
                                    PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < kDw / 16; ++dp) {
              uint32_t vb[4];
              Ldmatrix4Trans(vb, SmemAddr(vs + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kLd + d0 + dp * 16 +
                                          (lane / 16) * 8));
              Mma(o[2 * dp], pa, vb[0], vb[1]);
              Mma(o[2 * dp + 1], pa, vb[2], vb[3]);
            }
          }
        }
      }
      if (tid < BK) key_off[(kt & 1) * BK + tid] = ahead;  // read by load_kv(kt + 2)
      __syncthreads();  // the next iteration refills this stage
    }
    CpAsyncWait<0>();  // Q's copies when there was no key tile

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = pos0 >= 0 && l0 > 0.0f ? 1.0f / l0 : 0.0f;
    const float inv1 = pos1 >= 0 && l1 > 0.0f ? 1.0f / l1 : 0.0f;
    auto store_row = [&](int r, float inv, int e) {
      const int64_t row = static_cast<int64_t>(t0 + r / group) * a.num_q_heads + kv_head * group + r % group;
      bf16* dst = a.out + row * D + d0 + 2 * t4;
#pragma unroll
      for (int j = 0; j < kDw / 8; ++j) {
        *reinterpret_cast<__nv_bfloat162*>(dst + j * 8) = __floats2bfloat162_rn(o[j][e] * inv, o[j][e + 1] * inv);
      }
    };
    if (r0 < rows) store_row(r0, inv0, 0);
    if (r1 < rows) store_row(r1, inv1, 2);
    __syncthreads();  // the next tile reuses shared memory
  }
}

template <int D, int BK, int kSplit, int kRowWarps, int kWgmma>
void RaiseSmemLimit() {
  static OncePerDevice once;
  once.Run([] {
    TP_CUDA_CHECK(cudaFuncSetAttribute(PrefillKernel<D, BK, kSplit, kRowWarps, kWgmma>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Cfg<D, BK, kSplit, kRowWarps, kWgmma>::kBytes)));
  });
}


template <int D, int BK, int kSplit, int kRowWarps, int kWgmma>
void LaunchPrefillKernel(const AttnArgs& a, const prefill_detail::TilePlan& plan, int group, int smem_optin,
                         cudaStream_t stream) {
  using C = Cfg<D, BK, kSplit, kRowWarps, kWgmma>;
  const int tokens_per_tile = C::R / group;
  TP_CHECK(tokens_per_tile >= 1);  // more query heads per KV head than rows in a tile
  TP_CHECK(static_cast<size_t>(smem_optin) >= C::kBytes);
  PlanTilesKernel<<<1, kPlanThreads, 0, stream>>>(a.token_seq, a.tokens, tokens_per_tile, plan.start, plan.len,
                                                  plan.count);
  TP_CUDA_CHECK_LAUNCH();
  RaiseSmemLimit<D, BK, kSplit, kRowWarps, kWgmma>();
  // Tiles <= ceil(tokens / tokens_per_tile) + (sequence boundaries); blocks loop over
  // tiles, blocks beyond the planned count exit at once, and the extra 128 cover
  // batches with many short runs (decode tokens mixed into a prefill).
  const int64_t blocks = std::min<int64_t>(a.tokens, (a.tokens + tokens_per_tile - 1) / tokens_per_tile + 128);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.num_kv_heads));
  PrefillKernel<D, BK, kSplit, kRowWarps, kWgmma><<<grid, C::kThreads, C::kBytes, stream>>>(a, plan.start,
                                                                                           plan.len, plan.count);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace tpserve::cuda
