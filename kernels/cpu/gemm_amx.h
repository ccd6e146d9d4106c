// Private to the CPU kernels: a bf16 GEMM on AMX tiles that reads the weights as they are
// held ([n, k] rows), for Linear's amx-bf16 prefill path. Tested by tests/cpu_kernels_test.cc
// (GemmPathTest on amx-bf16, skipped where the CPU has no AMX); measured by
// bench/kernels_bench.cc beside oneDNN's matmul and PyTorch's (bench/cpu_vs_torch.sh).
#pragma once

#include <cstdint>
#include <string>

namespace tpserve::cpu::amx {

// Whether this CPU has AMX-BF16 and the kernel granted this process the tile data state
// (Linux asks each process to request it: arch_prctl ARCH_REQ_XCOMP_PERM). The first call
// makes the request; "" when available, else why not (for the path choice's error).
const std::string& Bf16Unavailable();
inline bool Bf16Available() { return Bf16Unavailable().empty(); }

// The K step of one tile product: k must be a multiple of it.
inline constexpr int64_t kBf16StepK = 32;

// y[m, n] = xb[m, k] · w[n, k]^T with fp32 accumulation and output; xb and w are bf16 bits;
// rows of y ldy floats apart (ldy >= n). k % kBf16StepK == 0. Only where Bf16Available().
// Runs on the caller's OpenMP threads (weight rows split between them).
void LinearBf16(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy);

// The same product with weights held in another form (quantized blocks): `widen` writes
// weight rows [n0, n0 + rows) as bf16 bits to out ([rows, k]; rows <= 32), called on the
// thread that then multiplies them, so each 32-row slice is widened into that thread's
// cache right before its tiles read it (no panel of widened weights, no barrier per panel).
using WidenRows = void (*)(const void* ctx, int64_t n0, int64_t rows, int64_t k, uint16_t* out);
void LinearBf16Widened(const uint16_t* xb, int64_t m, int64_t k, WidenRows widen, const void* ctx, int64_t n,
                       float* y, int64_t ldy);

// Weights held in tile order (DType::kBF16Tiles; the CPU backend packs bf16 linear weights
// so at load on the amx-bf16 path): each group of 16 rows of a [n, k] bf16 matrix is k / 32
// tiles of 1 KiB in k order; row r of tile (group g, step s) holds, for each of the group's
// rows c = 0..15, that row's elements 32 s + 2r and 32 s + 2r + 1: a TDPBF16PS B operand as
// it is, so the prefill multiplies x (the A operand) by the weights without repacking them, and
// its sums come out in y's orientation (no transpose). A group's bytes are its 16 rows' bytes, so rows
// [16 a, 16 b) are still a slice at byte offset 16 a * k * 2. n % 16 == 0, k % 32 == 0.
inline constexpr int64_t kTileGroupRows = 16;
inline bool CanHoldAsTiles(int64_t n, int64_t k) { return n % kTileGroupRows == 0 && k % kBf16StepK == 0; }
// w ([n, k] bf16 rows) rewritten in place into tile order, and back (for tests and tools).
// Need AVX-512 (every CPU with AMX has it).
void PackTiles(uint16_t* w, int64_t n, int64_t k);
void UnpackTiles(uint16_t* w, int64_t n, int64_t k);

// y[m, n] = xb[m, k] · w^T with w in tile order (gemm_amx_tiles.cc): AMX tiles, fp32 sums,
// the same products as LinearBf16 on the rows. Only where Bf16Available().
void LinearTiles(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy);
// The decode rows (m <= 16) on AVX512-BF16 dot products: each tile row is 16 weights' pairs,
// multiplied by one broadcast pair of x into 16 outputs' sums (no horizontal sums).
void GemvTiles(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y);

// Loads the tile configuration every kernel here uses (8 tiles of 16 rows x 64 bytes).
// Private to gemm_amx*.cc; call it from code compiled for AMX, on the thread that runs tiles.
void ConfigureTiles();

}  // namespace tpserve::cpu::amx
