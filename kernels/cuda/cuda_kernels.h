// CUDA kernels of the forward pass and of sampling: bf16 activations, fp32 accumulation.
// Each launcher mirrors a kernels/cpu op (same shapes, same semantics; the CPU kernel is
// its reference) and is tested against it by tests/cuda_*_test.cc (ctest -L gpu).
//
// Launchers take device pointers, sizes and an explicit stream, enqueue asynchronously,
// check cudaGetLastError, and never synchronize, so they may be captured in a CUDA graph.
// All tensors are dense row-major unless a stride is given.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve::cuda {

using bf16 = __nv_bfloat16;

// ---- Row-wise and elementwise ops (kernels/cuda/embedding.cu, norm.cu, rope.cu,
// elementwise.cu, kv_cache.cu) ----

// out[t, :] = table[ids[t] - vocab_start, :] * scale, zero rows for ids outside
// [vocab_start, vocab_start + vocab_rows). table: [vocab_rows, dim] in table_dtype.
void Embedding(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype, int64_t vocab_start,
               int64_t vocab_rows, int64_t dim, float scale, bf16* out, cudaStream_t stream);

// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps), then the weight as `kind` says.
// x, out: [rows, dim] (out may alias x); w: fp32 [dim], null for kNoScale.
void RmsNorm(const bf16* x, const float* w, int64_t rows, int64_t dim, float eps, cpu::NormKind kind, bf16* out,
             cudaStream_t stream);
// Backend::ResidualNorm in one kernel: o' = RmsNorm(o, post_w) (post_w null: o),
// h = h + o', h = h * scale, x = RmsNorm(h, next_w) (next_w null: x untouched), with the
// bf16 roundings and sums of those four kernels launched one by one (bit-identical).
// o, h, x: [rows, dim]; x aliases neither; kind is kScale or kOnePlusScale.
void ResidualNorm(const bf16* o, const float* post_w, bf16* h, float scale, const float* next_w, int64_t rows,
                  int64_t dim, float eps, cpu::NormKind kind, bf16* x, cudaStream_t stream);

// Rotate-half RoPE in place, as cpu::Rope. x: [tokens, heads, head_dim]; positions:
// [tokens]; inv_freq: fp32 [head_dim / 2] (zeros leave dims unrotated).
void Rope(bf16* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, float attn_factor, cudaStream_t stream);

// Backend::AttentionPrologue in one kernel: per-head RMSNorm of q and k (weights null: no
// norm; kind kScale or kOnePlusScale) and weightless of v (v_norm), RoPE on q and k
// (attn_factor 1), k and v to cache slot slot_mapping[t] (< 0: skipped). q [tokens,
// q_heads, head_dim] is rewritten in place; k and v [tokens, kv_heads, head_dim] are
// read only. Bit-identical to RmsNorm, Rope and WriteKv launched one by one for head_dim
// up to 1024 (RmsNorm's warp-per-row width).
struct AttentionPrologueArgs {
  bf16* q = nullptr;
  const bf16* k = nullptr;
  const bf16* v = nullptr;
  int64_t tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  bool v_norm = false;
  float eps = 1e-6f;
  cpu::NormKind norm_kind = cpu::NormKind::kScale;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  const int32_t* slot_mapping = nullptr;
  bf16* k_cache = nullptr;
  bf16* v_cache = nullptr;
};
void AttentionPrologue(const AttentionPrologueArgs& a, cudaStream_t stream);

// gate_up: [rows, 2 * dim] (gate | up) -> out[rows, dim] = act(gate) * up.
void GatedActivation(const bf16* gate_up, int64_t rows, int64_t dim, cpu::Activation act, bf16* out,
                     cudaStream_t stream);

// Elementwise over n values of `dtype` (kBF16 or kF32), computed in fp32.
void Softcap(void* x, DType dtype, int64_t n, float cap, cudaStream_t stream);  // x = cap * tanh(x / cap)
void Add(const void* a, const void* b, DType dtype, int64_t n, void* out, cudaStream_t stream);
void Scale(void* x, DType dtype, int64_t n, float s, cudaStream_t stream);
// y[r, c] += bias[c]; y: [rows, cols] bf16, bias fp32.
void AddBias(bf16* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

// x[i] = a fixed hash of (i, seed) in [-1, 1): non-zero data for timing kernels (the GPU
// draws less power on zeros, which would flatter a kernel).
void FillPattern(bf16* x, int64_t n, uint32_t seed, cudaStream_t stream);

// out[i, :] = x[rows[i], :] for rows of row_bytes bytes.
void GatherRows(const void* x, int64_t row_bytes, const int32_t* rows, int64_t n, void* out, cudaStream_t stream);

// Paged KV cache write, as cpu::WriteKv: k, v: [tokens, kv_heads * head_dim];
// caches: [num_slots, kv_heads * head_dim]; slot_mapping[t] < 0 is skipped.
void WriteKv(const bf16* k, const bf16* v, const int32_t* slot_mapping, int64_t tokens, int64_t kv_heads,
             int64_t head_dim, bf16* k_cache, bf16* v_cache, cudaStream_t stream);

// ---- Paged attention (kernels/cuda/decode_attention.cu, prefill_attention.cu) ----
// Both compute exactly cpu::PagedAttention (causal, GQA, sliding window, softcap,
// block tables whose -1 entries are never read, padding queries with pos < 0 give
// zeros) for any flat batch; they differ in how they spend the GPU.

// head_dim values the attention kernels are built for.
bool AttentionHeadDimSupported(int32_t head_dim);

// Decode: one query token at a time, keys split into partitions that run in parallel
// and are merged by a second kernel (flash-decoding), so one long sequence still fills
// the GPU. Best for few tokens. `workspace` holds the partial results; size it with
// DecodeAttentionWorkspaceBytes for the same (tokens, p, num_sms).
size_t DecodeAttentionWorkspaceBytes(int64_t tokens, const cpu::PagedAttentionParams& p, int num_sms);
void DecodeAttention(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* token_seq,
                     const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                     const cpu::PagedAttentionParams& p, int num_sms, void* workspace, size_t workspace_bytes,
                     bf16* out, cudaStream_t stream);

// Prefill: tiles of consecutive query tokens of one sequence (tiles are planned on the
// device from token_seq, so chunked-prefill batches that mix sequences and decode tokens
// work) share each K/V tile loaded to shared memory; FlashAttention-2 style tensor-core
// (mma.sync) products with the online softmax in registers. Best for many tokens.
// workspace: PrefillAttentionWorkspaceBytes(tokens).
size_t PrefillAttentionWorkspaceBytes(int64_t tokens);
void PrefillAttention(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                      const cpu::PagedAttentionParams& p, void* workspace, size_t workspace_bytes, bf16* out,
                      cudaStream_t stream);

// The prefill kernel with another tile shape (keys per K/V tile, 16-row warps per CTA), for
// cuda_kernels_bench's sweep and for start-up tuning (`--kernels tuned`), which launches the
// fastest through PrefillAttentionWithTuning. PrefillAttentionProductionTuning says what
// PrefillAttention itself launches (the same as PrefillAttentionWithTuning with it). Other
// tiles start key tiles at other keys, so the bits may differ from PrefillAttention's by
// rounding (tests/cuda_attention_test.cc holds every tuning to
// the CPU reference).
struct PrefillTuning {
  int block_keys = 32, row_warps = 4;
  size_t smem_bytes = 0;
  int wgmma = 0;  // PrefillAttentionWgmmaTunings': 1, S on wgmma; 2, P·V too
};
std::vector<PrefillTuning> PrefillAttentionTunings(int32_t head_dim);  // those this device's shared memory fits
// The sm_90a variants of the prefill kernel (head_dim 256, 32 keys x 4 row warps, a
// warpgroup of 64 rows): wgmma 1, S = Q·K^T on wgmma with Q and K in 128-byte-swizzled
// shared memory, P·V on mma.sync; wgmma 2, P·V on wgmma too (P from registers, V swizzled
// as an MN-major operand). Empty where the build has no sm_90 code, the device is not
// compute capability 9.0, or head_dim is another. Not among PrefillAttentionTunings (so
// start-up tuning does not offer them) until a GPU run has held them to the CPU reference
// and timed them (tests/cuda_attention_test.cc's Wgmma test, cuda_kernels_bench's
// "prefill wgmma" rows).
std::vector<PrefillTuning> PrefillAttentionWgmmaTunings(int32_t head_dim);
// The shape PrefillAttention itself launches for head_dim on this device (512: 32 keys where
// shared memory allows, else 16).
PrefillTuning PrefillAttentionProductionTuning(int32_t head_dim);
void PrefillAttentionWithTuning(const PrefillTuning& t, const bf16* q, const bf16* k_cache, const bf16* v_cache,
                                const int32_t* token_seq, const int32_t* token_pos, int64_t tokens,
                                const int32_t* block_tables, const cpu::PagedAttentionParams& p, void* workspace,
                                size_t workspace_bytes, bf16* out, cudaStream_t stream);

// ---- Linear (kernels/cuda/gemv.cu, gemv_bulk.cu; large M goes through kernels/cuda/gemm.h) ----

// How a GEMV may run; every choice gives the same bits.
struct GemvLaunch {
  // Stream the weights through shared memory with bulk asynchronous copies (the TMA
  // engine), a persistent block per SM with up to 6 groups of rows in flight, instead of
  // the split kernel's register loads. Taken for bf16 weights, m <= 4, k % 8 == 0,
  // k <= 24576 and x's m rows plus two stages of weight rows within shared memory (on an
  // H200 m = 4 stops near k = 19300, m = 3 near k = 23200), on compute capability 9.0+
  // (GemvBulkSupported); otherwise ignored (GemvTakesBulk says which).
  bool bulk = false;
  // Programmatic dependent launch (9.0+; ignored below): the GEMV may start while the
  // kernel before it on the stream still runs, fetching weights meanwhile; it reads x and
  // writes y only once that kernel is done. Weight reads may run ahead of every kernel
  // since the stream's last plain (non-programmatic) launch or synchronization, so the
  // weights must not be written by any of those (they are loaded before any forward pass).
  bool pdl = false;
  // The split kernel's block shape at m = 1 with bf16 weights and k % 8 == 0: an index into
  // GemvTunings() (-1: the production shape). Every shape gives the same bits; where the
  // bulk kernel is taken, or elsewhere, it is ignored. The CUDA backend picks it per weight
  // shape by measurement (Backend::TuneKernels).
  int tuning = -1;
};
// True when the current device runs the bulk GEMV and programmatic launch (compute
// capability 9.0+ and this build's sm_90 code; elsewhere both GemvLaunch fields are ignored).
bool GemvBulkSupported();
// Whether a GemvLaunch{.bulk = true} launch of m rows of k takes the bulk kernel here (for
// tests: a silent fallback to the split kernel would pass a bit-equality test).
bool GemvTakesBulk(int64_t m, int64_t k);

// y[m, n] = x[m, k] · w[n, k]^T for small m, reading w once per 8 rows of x at memory
// bandwidth (16-byte loads, several in flight per lane). w: bf16, fp16 or fp32; k % 8 == 0
// for the vectorized path (any k works). Also the fallback for fp16/fp32 weights at any m.
void Gemv(const bf16* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, bf16* y,
          cudaStream_t stream, const GemvLaunch& launch = {});
// The same product with its n = sum(cols) output features split across up to
// kMaxGemvOutputs dense outputs: features [0, cols[0]) go to y[0] ([m, cols[0]]), the
// next cols[1] to y[1], and so on. One launch for a fused QKV projection.
constexpr int kMaxGemvOutputs = 3;
struct GemvOutputs {
  bf16* y[kMaxGemvOutputs] = {};
  int64_t cols[kMaxGemvOutputs] = {};
  int count = 0;
};
void GemvSplit(const bf16* x, int64_t m, int64_t k, const void* w, DType w_dtype, const GemvOutputs& out,
               cudaStream_t stream, const GemvLaunch& launch = {});
// For cuda_kernels_bench's sweep only: the m = 1, bf16-weight GEMV with another block shape
// (output features per block, 16-byte loads in flight per feature and thread, blocks per
// SM the registers must allow). Every tuning gives Gemv's bits exactly (same per-thread
// summation order); the production shape is {4, 4, 2}. k % 8 == 0.
struct GemvTuning {
  int features = 4, unroll = 4, min_blocks = 2;
};
std::vector<GemvTuning> GemvTunings();  // the instantiated ones
// The launches that give Gemv's bits for m rows of x (bf16 weights, k % 8 == 0) on the
// current device, each with `pdl` as given: the production launch first, then the split
// kernel's other block shapes (m = 1), then the bulk-copy kernel where it takes (m, k).
// What the CUDA backend's tuning times against each other (worker/cuda_tuning.cc).
struct GemvCandidate {
  std::string name;  // "split", "split F2 U4 B3", "bulk"
  GemvLaunch launch;
};
std::vector<GemvCandidate> GemvCandidates(int64_t m, int64_t k, bool pdl);
void GemvWithTuning(const GemvTuning& t, const bf16* x, int64_t k, const bf16* w, int64_t n, bf16* y,
                    cudaStream_t stream);

// ---- Sampling (kernels/cuda/sampling.cu; semantics in kernels/cuda/sampling.h) ----

// out[r] = index of the largest logits[r, :] (the first on ties; NaN counts as largest,
// as torch.argmax). logits: [rows, vocab] bf16 or fp32.
void Argmax(const void* logits, DType dtype, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream);

}  // namespace tpserve::cuda
