// What the two paged-attention kernels share: their argument block, the head_dim
// dispatch and the per-score transform (scale, softcap). Tested through
// tests/cuda_attention_test.cc.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"

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

}  // namespace tpserve::cuda
