// CPU kernels of the forward pass: fp32 activations, fp32 accumulation, weights in
// fp32/bf16/fp16. They are the CPU backend's hot path and the references the CUDA
// kernels are tested against. Tested by tests/cpu_kernels_test.cc against naive
// loops; measured by bench/kernels_bench.cc.
//
// Threading: kernels parallelize with OpenMP over the calling thread's team size
// (the caller sets omp_set_num_threads once at start-up). All pointers are dense
// row-major unless a stride is given.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/base.h"
#include "kernels/row_sampling.h"

namespace tpserve::cpu {

// How Linear computes products with bf16 weights: the precision of x, the prefill GEMM
// (more than kMaxStreamingRows rows of x) and the decode GEMV (fewer: they stream the
// weights and are bound by memory at one row).
inline constexpr int64_t kMaxStreamingRows = 16;
enum class GemmPath : uint8_t {
  // fp32 x and fp32 FMAs: prefill widens bf16/fp16 weights to fp32 panel by panel for
  // OpenBLAS sgemm, decode runs the AVX2 GEMV. Every CPU; the reference the other path is
  // tested against.
  kSgemm,
  // bf16 weights (other dtypes as kSgemm): x rounded to bf16, products summed in fp32, as
  // PyTorch's bf16 linear computes. Prefill: oneDNN's bf16 matmul (AMX tiles or AVX512-BF16).
  // Decode: AVX512-BF16 dot products (vdpbf16ps), twice the multiply-adds per instruction
  // of fp32 FMAs, so speculative verification's 2-6 rows cost little more than one; on a CPU
  // without them the AVX2 GEMV on the rounded x. Only where oneDNN is built in and the CPU
  // has AVX-512.
  kOneDnnBf16,
  // kOneDnnBf16's numbers (x rounded to bf16, fp32 sums) with the prefill on AMX tiles of our
  // own (kernels/cpu/gemm_amx.h). The CPU backend holds bf16 linear weights in tile order on
  // this path (DType::kBF16Tiles: the tiles' B operand as it is, no repacking per product),
  // and decode rows run AVX512-BF16 dot products on that layout; weights it cannot hold so
  // (other dtypes, shapes that are not whole tiles) take the row kernels. Only where the CPU
  // has AMX-BF16; needs no oneDNN (docs/cpu_backend.md, "AMX").
  kAmxBf16,
};
const char* GemmPathName(GemmPath path);  // "sgemm" | "onednn-bf16" | "amx-bf16"
// Whether the path rounds x to bf16 before products with bf16 weights (every path but kSgemm).
inline bool RoundsXToBf16(GemmPath path) { return path != GemmPath::kSgemm; }

// The paths this build can run on this CPU, kSgemm first.
std::vector<GemmPath> AvailableGemmPaths();

// How prefill (more than kMaxStreamingRows rows of x) multiplies block-quantized weights of the
// integer types (every HasQuantDot type but F8_E4M3, which always widens).
enum class QuantPrefill : uint8_t {
  // Panels of blocks widened to the GemmPath's precision, then its GEMM (sgemm on fp32,
  // oneDNN or AMX tiles on bf16): Linear.
  kWiden,
  // x quantized per block to int8 and the decode dot kernels, 16 rows of x at a time against
  // panels of weight rows held in L2 (QuantGemm, kernels/cpu/quant.h): decode's numbers.
  kInt8,
};
const char* QuantPrefillName(QuantPrefill q);  // "widen" | "int8"

struct GemmChoice {
  GemmPath path = GemmPath::kSgemm;
  // What was chosen and why, for the start-up log and ModelInfo, e.g. "onednn-bf16
  // (oneDNN 2.6.3 brg:avx512_core_amx; CPU: avx2 avx512 avx512_bf16 amx_bf16); quantized
  // prefill: widen (...)".
  std::string description;
  QuantPrefill quant_prefill = QuantPrefill::kWiden;
};
// spec, "auto": kAmxBf16 where the CPU has AMX-BF16 (and the OS grants the tiles); else
// kOneDnnBf16 where it has AVX512-BF16 and oneDNN has a JIT kernel for it (not its reference
// loop); else kSgemm. "sgemm" / "onednn-bf16" / "amx-bf16": that path.
// quant_prefill_spec, "auto": kInt8 where the dot kernels have AVX-512 VNNI, the path is not
// kAmxBf16 and the CPU is not AMD's (measured: 1.4-1.7x oneDNN's bf16 prefill on a Sapphire
// Rapids without AMX, 0.65-0.96x on Zen 4; docs/quantization.md); else kWiden. "widen" / "int8":
// that one (int8 needs the AVX-512 VNNI or AVX2 dot kernels).
// An error says what this build and CPU offer where a choice is not available.
absl::StatusOr<GemmChoice> ChooseGemmPath(std::string_view spec, std::string_view quant_prefill_spec = "auto");

// y[M, N] = x[M, K] · w[N, K]^T, w in dtype `w_dtype` (dense rows of K elements; for a
// block-quantized dtype, rows of K / BlockElems blocks, a type with kernels/cpu/quant.h's dot
// kernels: decode rows run them on int8-quantized x, prefill widens panels of blocks to the
// path's precision). M = 1 (decode) must run at memory bandwidth; large M (prefill) at GEMM
// speed, on `path` (which must be available; see AvailableGemmPaths).
void Linear(GemmPath path, const float* x, int64_t m, int64_t k, const void* w, DType w_dtype,
            int64_t n, float* y);
// Linear with the quantized prefill chosen: QuantGemm (kernels/cpu/quant.h) where quant_prefill
// is kInt8, m > kMaxStreamingRows and w is of an integer block type; otherwise the above.
void Linear(GemmPath path, QuantPrefill quant_prefill, const float* x, int64_t m, int64_t k, const void* w,
            DType w_dtype, int64_t n, float* y);
// kOneDnnBf16's decode GEMV (m <= kMaxStreamingRows, bf16 w) where the CPU lacks
// AVX512-BF16: x rounded to bf16, then the AVX2 kernel, the same products summed in fp32.
// Linear picks it by DetectCpuFeatures(); declared here so that tests run it on every CPU.
void RoundedBf16LinearAvx2(const float* x, int64_t m, int64_t k, const void* w, int64_t n, float* y);
// The kSgemm path: the reference the CUDA kernels are tested against.
inline void Linear(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                   float* y) {
  Linear(GemmPath::kSgemm, x, m, k, w, w_dtype, n, y);
}

// How RMSNorm applies its weight.
enum class NormKind : uint8_t {
  kScale,         // x * w            (Llama, Qwen, Gemma 4)
  kOnePlusScale,  // x * (1 + w)      (Gemma 3)
  kNoScale,       // x                (Gemma 4's weightless v norm)
};
// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) then the weight as `kind` says.
// w: [dim] fp32, may be null for kNoScale. out may alias x.
void RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps,
             NormKind kind, float* out);

// Rotary embedding in place, rotate-half (non-interleaved) form as in transformers:
// for i < head_dim/2, with a = pos[t] * inv_freq[i] computed in fp32:
//   x[i]      = x[i] * cos(a) * attn_factor - x[i + h] * sin(a) * attn_factor
//   x[i + h]  = x[i + h] * cos(a) * attn_factor + x[i] * sin(a) * attn_factor
// x: [tokens, heads, head_dim]; positions: [tokens]; inv_freq: [head_dim / 2] (zeros
// leave those dims unrotated, which is how partial/proportional RoPE is expressed).
void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, float attn_factor);

enum class Activation : uint8_t { kSilu, kGeluTanh };
// gate_up: [rows, 2 * dim], the gate in the first `dim` columns, up in the rest.
// out[r, i] = act(gate[r, i]) * up[r, i]; out: [rows, dim]. out may be gate_up itself: the
// results then fill the buffer's first rows * dim floats.
void GatedActivation(const float* gate_up, int64_t rows, int64_t dim, Activation act, float* out);

// x = cap * tanh(x / cap), in place.
void Softcap(float* x, int64_t n, float cap);

// out = a + b (out may alias a or b).
void Add(const float* a, const float* b, int64_t n, float* out);
// x *= s.
void Scale(float* x, int64_t n, float s);

// Vocab-parallel embedding lookup: rows of `table` hold token ids
// [vocab_start, vocab_start + vocab_rows). ids outside that range give zero rows (another
// rank owns them; an all-reduce sums the shards). out[t, :] = table[id - vocab_start] * scale.
void Embedding(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
               int64_t vocab_start, int64_t vocab_rows, int64_t dim, float scale, float* out);

// How the CPU's paged KV cache holds K and V (--kv-cache-dtype): fp32 (the activations'
// dtype, the default), bf16 (each value rounded to nearest even), or FP8 E4M3 with one fp32
// scale per (slot, KV head): a head's record is {float scale; uint8 q[head_dim]}, scale =
// amax / 448 over the head's head_dim values, q = F32ToF8E4M3(x / scale) (kernels/cpu/
// dequantize.h), as the kF8_E4M3 weight blocks; no calibration needed, and a head of small
// values keeps its relative precision.
enum class KvCacheDType : uint8_t { kF32, kBf16, kFp8E4M3 };
const char* KvCacheDTypeName(KvCacheDType t);  // "fp32" | "bf16" | "fp8_e4m3"
// Bytes one slot of one layer's K (or V) takes: kv_heads heads of head_dim values.
int64_t KvSlotBytes(KvCacheDType t, int64_t kv_heads, int64_t head_dim);
// One head's head_dim values as the cache stores them, and back (exactly the values
// PagedAttention reads).
void StoreKvHead(KvCacheDType t, const float* x, int64_t head_dim, uint8_t* out);
void LoadKvHead(KvCacheDType t, const uint8_t* in, int64_t head_dim, float* out);

// Paged KV cache, one layer: cache[num_slots, kv_heads, head_dim] for K and for V (each slot
// KvSlotBytes bytes), slot = physical_block * block_size + offset_in_block.
// Writes token t's k/v ([tokens, kv_heads, head_dim]) to slot_mapping[t]; a slot < 0 is
// skipped (padding).
void WriteKv(const float* k, const float* v, const int32_t* slot_mapping, int64_t tokens,
             int64_t kv_heads, int64_t head_dim, KvCacheDType kv_dtype, void* k_cache, void* v_cache);

struct PagedAttentionParams {
  int32_t num_q_heads = 0;   // local (this rank's) query heads
  int32_t num_kv_heads = 0;  // local KV heads; num_q_heads % num_kv_heads == 0 (GQA)
  int32_t head_dim = 0;
  int32_t block_size = 16;
  int32_t max_blocks_per_seq = 0;  // row stride of block_tables
  float scale = 1.0f;              // applied to q·k before the softcap and softmax
  int32_t sliding_window = 0;      // > 0: key j is visible to query i iff i - j < window
  float softcap = 0.0f;            // > 0: scores = softcap * tanh(scores / softcap)
  // Round each softmax weight to bf16 before it multiplies V (the sum stays fp32), as the
  // CUDA kernels' tensor-core P·V does: for the bf16 test reference of the GPU backend.
  bool bf16_probabilities = false;
  KvCacheDType kv_dtype = KvCacheDType::kF32;  // how the caches hold K and V (WriteKv)
};
// Causal attention of a flat batch of query tokens over the paged cache (which already
// holds every visible key, the query tokens' own included).
// q, out: [tokens, num_q_heads, head_dim]. token_seq[t]: row of block_tables for token t;
// token_pos[t]: its position; it sees keys at positions [max(0, pos - window + 1), pos].
// block_tables: [num_seqs, max_blocks_per_seq] physical block ids.
// Query head h reads KV head h / (num_q_heads / num_kv_heads).
// Caches held as p.kv_dtype: the chunk's K and V rows are widened to fp32 (LoadKvHead) before
// the same fp32 arithmetic, so the result equals the fp32 path on the stored values.
void PagedAttention(const float* q, const void* k_cache, const void* v_cache,
                    const int32_t* token_seq, const int32_t* token_pos, int64_t tokens,
                    const int32_t* block_tables, const PagedAttentionParams& p, float* out);

// Index of the largest element (the first one on ties).
int64_t Argmax(const float* x, int64_t n);

// log(sum_i e^x[i]) over x[0, n), n >= 1: the normalizer of a log-softmax. The row max is
// subtracted first; e^(x - max) in fp32 within a few ulp, summed in fp32 over at most 32
// elements a lane and then in fp64 (relative error ~1e-6 at worst). -inf when every element
// is -inf; NaN when any is NaN or +inf (the caller finds which).
double LogSumExp(const float* x, int64_t n);

// The top_n largest of x[0, n) into ids and values, largest first and the lower index first
// on ties; -inf and NaN are never listed. Returns how many were written (fewer than top_n
// when fewer elements qualify). A vector test skips the (usually all) elements at or below
// the current top_n-th.
int64_t TopN(const float* x, int64_t n, int64_t top_n, int32_t* ids, float* values);

// Rule 0 of kernels/row_sampling.h over fp32 rows [rows, vocab], in place. Row r adds
// bias_values[e] to token bias_tokens[e] for e in [bias_offsets[r], bias_offsets[r + 1])
// (bias_offsets null: no bias), then, when mask_index (null: no masks) gives r a mask m >= 0,
// sets every token whose bit is clear in masks[m * mask_words ...] (bit t of word t / 64)
// to -inf. Token ids outside [0, vocab) are skipped.
void ApplyLogitEdits(float* logits, int64_t rows, int64_t vocab, const int32_t* bias_offsets,
                     const int32_t* bias_tokens, const float* bias_values, const int32_t* mask_index,
                     const uint64_t* masks, int64_t mask_words);

// The sampling rule of kernels/row_sampling.h over fp32 rows [rows, vocab]: applies row
// r's penalty entries [offsets[r], offsets[r + 1]) of token_ids/counts in place, then
// writes the sampled token to out[r].
void SampleRows(float* logits, int64_t rows, int64_t vocab, const RowSampling* params, const int32_t* offsets,
                const int32_t* token_ids, const int32_t* counts, int32_t* out);
// SampleRows for rows without penalty entries: the rows are only read, where they are.
void SampleUnpenalizedRows(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params, int32_t* out);

}  // namespace tpserve::cpu
