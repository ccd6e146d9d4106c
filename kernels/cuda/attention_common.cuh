// What the two paged-attention kernels share: their argument block, the head_dim
// dispatch and the per-score transform (scale, softcap). Tested through
// tests/cuda_attention_test.cc.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {

struct AttnArgs {
  const bf16* q;             // [tokens, num_q_heads, head_dim]
  const bf16* k_cache;       // [num_slots, num_kv_heads, head_dim]
  const bf16* v_cache;       // [num_slots, num_kv_heads, head_dim]
  const int32_t* token_seq;  // [tokens]
  const int32_t* token_pos;  // [tokens]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  bf16* out;                 // [tokens, num_q_heads, head_dim]
  int32_t tokens;
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t block_size;
  int32_t max_blocks_per_seq;
  int32_t sliding_window;
  float scale;
  float softcap;
};

inline AttnArgs MakeAttnArgs(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* token_seq,
                             const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                             const cpu::PagedAttentionParams& p, bf16* out) {
  TP_CHECK(p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0);
  TP_CHECK(p.block_size > 0);
  return AttnArgs{q, k_cache, v_cache, token_seq, token_pos, block_tables, out,
                  static_cast<int32_t>(tokens), p.num_q_heads, p.num_kv_heads, p.block_size,
                  p.max_blocks_per_seq, p.sliding_window, p.scale, p.softcap};
}

// First key position query position `pos` sees.
__device__ __forceinline__ int32_t FirstKey(int32_t pos, int32_t window) {
  return window > 0 ? max(0, pos - window + 1) : 0;
}

// q·k -> score, as cpu::PagedAttention: scale, then the softcap.
__device__ __forceinline__ float ScoreTransform(float dot, float scale, float softcap) {
  const float s = dot * scale;
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}

// Calls f.template operator()<D>() for the supported head dims (C++17: no template lambdas).
template <typename F>
void DispatchHeadDim(int32_t head_dim, const F& f) {
  switch (head_dim) {
    case 16: f.template operator()<16>(); break;
    case 32: f.template operator()<32>(); break;
    case 64: f.template operator()<64>(); break;
    case 128: f.template operator()<128>(); break;
    case 256: f.template operator()<256>(); break;
    case 512: f.template operator()<512>(); break;
    default:
      std::fprintf(stderr, "tpserve: CUDA attention has no kernel for head_dim %d (16, 32, 64, 128, 256, 512)\n",
                   head_dim);
      std::abort();
  }
}

// ---- Tensor-core and async-copy helpers of both kernels (sm_80+) ----

constexpr float kLog2e = 1.4426950408889634f;

// 16 bytes global -> shared, asynchronously; zero-fills (reads nothing) unless `valid`.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void Ldmatrix4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c[16x8] += a[16x16] · b[16x8], bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace tpserve::cuda
