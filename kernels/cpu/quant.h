// CPU kernels that read ggml block-quantized weights (kernels/base.h's quantized DTypes) as
// they are stored, instead of widening them at load: the activation row is quantized per block
// to int8 (as llama.cpp's Q8_0 / Q8_K activations), each weight block's integer dot product
// with it is exact, and the blocks' scales are applied in fp32. Decode GEMVs stream the blocks
// (1 byte per element for Q8_0, ~0.56 for Q4_K: the bytes per token decide decode speed);
// prefill either widens panels of blocks (Linear, linear.cc) or runs the same dot kernels on
// int8 x (QuantGemm), as cpu::QuantPrefill chooses.
//
// Exactness: a dot kernel's result is dequant(w) · dequant(quantize(x)) computed in exact
// integer arithmetic per block (per sub-block for the K-quants), then summed in fp32, so every
// instruction-set path agrees with the scalar one up to the order of the fp32 sums of block
// results. Q4_1 and Q5_1 (w = d q + m) add m * s per block, s = d_x * sum of x's int8 values
// (BlockQ8_1), so their fp32 sums are over two terms a block, whose magnitudes bound the
// rounding rather than |w . x| (they may cancel where m < 0). The error against fp32 x is x's
// int8 rounding (|dx| <= d / 2 per element, d the block's amax / 127). Tested by tests/quant_kernels_test.cc per type and per path against
// the dequantize-then-dot reference (kernels/cpu/dequantize.h); measured by
// bench/quant_dot_bench.cc.
//
// FP8 E4M3 weights (kF8_E4M3, 128-element blocks with an fp32 scale) are the exception: fp8 is
// chosen for accuracy, so x stays fp32 (QuantizeX copies it) and a kernel computes
// sum over blocks of scale * sum_j e4m3(q_j) * x_j in fp32 FMAs (the scalar path, and the vector
// paths beyond 4 rows of x, multiply the weights by the scale first: DequantizeRow's weights bit
// for bit). Each product is exact in the FMAs; only the rounding of the fp32 sums differs from
// the reference. A NaN code (0x7f, 0xff) gives NaN, as the math says; QuantizeRowF8E4M3 never
// writes one. The vector paths convert a code b to the fp16 bits (b & 0x80) << 8 |
// (b & 0x7f) << 7, which is e4m3(b) * 2^-8 exactly (subnormals included), and fold 2^8 into the
// scale (exact for scales below 2^119).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/base.h"

namespace tpserve::cpu {

// An activation block for the 32-element weight blocks (Q4_0, Q5_0, Q8_0): x[j] ~= d * qs[j],
// d = amax / 127 (fp32: finer than ggml's fp16 scale, and free for an activation).
struct BlockQ8 {
  float d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8) == 36);

// An activation block for the weight types with an offset (Q4_1, Q5_1: w = d q + m), as
// ggml's block_q8_1: BlockQ8's d and qs (the same numbers), and s = d * sum of qs (fp32,
// ggml's fp16), which the weight block's m multiplies. A separate type, so that BlockQ8's
// types read no bytes they do not use.
struct BlockQ8_1 {
  float d;
  float s;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 40);

// An activation super-block for the K-quants (Q2_K ... Q6_K), as ggml's block_q8_K:
// x[j] ~= d * qs[j]; bsums[g] = sum of qs[16g .. 16g + 16) (the K-quants' mins and Q6_K's
// offset of 32, Q3_K's of 4 multiply these).
struct BlockQ8K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
static_assert(sizeof(BlockQ8K) == 292);

// The instruction-set paths of the dot kernels. kScalar runs everywhere (the reference);
// kAvx2 needs AVX2 + FMA (+ F16C for FP8); kAvx512Vnni needs AVX-512 F/BW/VL + VNNI (its
// FP8 kernel uses only F/BW and the 512-bit vcvtph2ps, but sits in the same slot).
enum class QuantIsa : uint8_t { kScalar, kAvx2, kAvx512Vnni };
const char* QuantIsaName(QuantIsa isa);  // "scalar" | "avx2" | "avx512_vnni"
// Whether this CPU can run `isa` (CPUID).
bool QuantIsaAvailable(QuantIsa isa);
// The fastest available path.
QuantIsa BestQuantIsa();

// The activation blocks a dot kernel call over m rows of x takes, by weight type and path:
// BlockQ8 (Q4_0, Q5_0, Q8_0), BlockQ8_1 (Q4_1, Q5_1), BlockQ8K (the K-quants), or x as it is
// (kF32: F8_E4M3). kQ8U: BlockQ8 with each q stored as the byte q + 128, for the AVX-512 VNNI
// kernels of Q4_0, Q5_0 and Q8_0 over m > 1 rows (their vpdpbusd takes x's bytes as unsigned
// and the signed weights as they are, less 128 times the weights' sums once per block for all
// rows; at one row the sign trick on kQ8 measured faster). The weight type must have kernels
// (HasQuantDot).
enum class QuantX : uint8_t { kQ8, kQ8U, kQ8_1, kQ8K, kF32 };
QuantX QuantXFor(DType w, QuantIsa isa, int64_t m);

// Whether the weight type has dot kernels: every ggml block type tpserve reads (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q2_K ... Q6_K) and F8_E4M3. Weights of other types are widened at load
// (the loader says so).
bool HasQuantDot(DType w);

// Bytes of one quantized activation row of k elements for weight type `w`
// (k / 32 BlockQ8 or BlockQ8_1, or k / 256 BlockQ8K; 4 k for F8_E4M3: fp32); k is a multiple
// of BlockElems(w).
size_t QuantizedXRowBytes(DType w, int64_t k);
// Quantizes x [m, k] fp32 for one call of path isa's kernel for weight type w over these m
// rows (the blocks QuantXFor(w, isa, m) names): row i at xq + i * QuantizedXRowBytes(w, k).
// Round to nearest (ties away from zero, as ggml's roundf); an all-zero block gets d = 0. For
// F8_E4M3 the rows are copied unchanged.
void QuantizeX(DType w, QuantIsa isa, const float* x, int64_t m, int64_t k, void* xq);

// y[i * ldy] = w_row · x_i for i < m, where w_row is one weight row of k elements of type w
// and x_i is row i of a QuantizeX output (rows xq_row_bytes apart). A kernel may share each
// unpacked weight block among the m rows.
using QuantDotFn = void (*)(const void* w_row, const void* xq, size_t xq_row_bytes, int m, int64_t k, float* y,
                            int64_t ldy);
// The kernel for (w, isa); null where the type has no kernels or the path is not available
// on this CPU.
QuantDotFn FindQuantDot(DType w, QuantIsa isa);

// Row tiles: up to kQuantTileRows rows of x against one weight row with the rows in the
// vector lanes (one 32-bit lane a row), for Q4_0, Q5_0 and Q8_0 on the AVX-512 VNNI path. A
// QuantDotFn pays per row and block an integer dot, a conversion, a scale and an FMA on 8
// lanes; a tile pays them once per block for all its rows on 16 lanes, each weight dword
// broadcast against the 16 rows' bytes of x. The tile keeps the fp32 sums of that QuantDotFn's
// lanes (its 8 groups of 4 elements, even and odd blocks) apart and adds them in its order, so
// y is bit for bit the QuantDotFn's at any m: a row's result does not depend on the batch.
inline constexpr int kQuantTileRows = 16;
// QuantGemv takes the tiles from this many rows of x on: 0.98-1.25x the QuantDotFn at 12 rows,
// 0.61-0.85x at 8 (bench/quant_dot_bench.cc on a Sapphire Rapids VM; docs/quantization.md). On a
// Zen 4 VM 0.82-1.04x at 12 and 0.96-1.29x at 16 (crossing near 13 rows there; not split by CPU).
inline constexpr int kQuantTileRowsFrom = 12;
// The tile of m <= kQuantTileRows rows of x, per 32-element block: [8 groups of 4 elements]
// [16 rows][4 bytes] of q + 128 (512 bytes), then the 16 rows' d (fp32); rows m.. hold q = 0,
// d = 0. q and d are QuantizeX's for the same rows.
size_t QuantizedXTileBytes(DType w, int64_t k);  // k / 32 * 576
void QuantizeXTile(DType w, const float* x, int64_t m, int64_t k, void* tile);
// y[i * ldy] = w_row · x_i for i < m, x_i row i of a QuantizeXTile tile.
using QuantTileFn = void (*)(const void* w_row, const void* tile, int m, int64_t k, float* y, int64_t ldy);
// The tile kernel for (w, isa); null where there is none (every type but Q4_0, Q5_0, Q8_0; every
// path but kAvx512Vnni) or the path is not available on this CPU.
QuantTileFn FindQuantTile(DType w, QuantIsa isa);

// Linear's decode rows (kernels/cpu/cpu_kernels.h; m <= kMaxStreamingRows) for a weight type
// that HasQuantDot: x quantized once (QuantizeX), then the best dot kernel over the weight
// rows, split among the OpenMP threads in contiguous ranges. Defined in quant_linear.cc.
void QuantGemv(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, float* y);
// Prefill rows over the same kernels: x in chunks of kQuantTileRows rows, each quantized and
// multiplied as QuantGemv takes that many rows (so y is QuantGemv's per chunk, bit for bit),
// with panels of weight rows outer so that each weight block is read from memory once and
// reused from L2 by every chunk.
void QuantGemm(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, float* y);

}  // namespace tpserve::cpu
