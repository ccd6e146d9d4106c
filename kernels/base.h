// Lowest layer shared by every tpserve library: the one dtype enum, bf16/fp16
// conversions, the invariant CHECK macro and absl::Status helper macros.
// Tested by tests/base_test.cc.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve {

// The only dtype enum in the project. Activations and the KV cache are float types; weights
// may also be one of ggml's block-quantized types (kernels/cpu/quant.h): a row of such a
// tensor is cols / BlockElems blocks of BlockBytes bytes, as GGUF files store them.
enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  // ggml's legacy quants (32-element blocks) and K-quants (256-element super-blocks).
  kQ4_0 = 3,
  kQ4_1 = 4,
  kQ5_0 = 5,
  kQ5_1 = 6,
  kQ8_0 = 7,
  kQ2_K = 8,
  kQ3_K = 9,
  kQ4_K = 10,
  kQ5_K = 11,
  kQ6_K = 12,
  // FP8 E4M3 (OCP: bias 7, no infinities, 0x7f/0xff NaN, max 448) in blocks of 128 with an fp32
  // scale: {float scale; uint8_t q[128]}, value = scale * e4m3(q). One scale per block holds
  // a per-channel scale (the same in every block of a row) and a 128x128 block scale alike.
  kF8_E4M3 = 13,
  // bfloat16 weights reordered into AMX tile order (kernels/cpu/gemm_amx.h): the CPU backend
  // holds bf16 linear weights so on the amx-bf16 path. Two bytes an element like kBF16, and
  // each group of 16 rows keeps its 16 rows' bytes, but a single row is not contiguous.
  kBF16Tiles = 14,
};

inline constexpr bool IsQuantized(DType t) { return t >= DType::kQ4_0 && t <= DType::kF8_E4M3; }
// Bytes of one element of a float type (a broken invariant for a block type: use RowBytes).
inline constexpr size_t DTypeSize(DType t) {
  if (IsQuantized(t)) {
    std::fprintf(stderr, "DTypeSize of a block-quantized dtype %d\n", static_cast<int>(t));
    std::abort();
  }
  return t == DType::kF32 ? 4 : 2;
}
// Elements per block (1 for the float types) and bytes per block (DTypeSize for them).
int64_t BlockElems(DType t);
size_t BlockBytes(DType t);
// Bytes of a row of `cols` elements; cols must be a multiple of BlockElems(t).
inline size_t RowBytes(DType t, int64_t cols) {
  return IsQuantized(t) ? static_cast<size_t>(cols / BlockElems(t)) * BlockBytes(t)
                        : static_cast<size_t>(cols) * DTypeSize(t);
}
std::string_view DTypeName(DType t);  // "float32", ..., "q4_k"
// Parses "float32"/"fp32"/"F32", "bfloat16"/"bf16"/"BF16", "float16"/"fp16"/"F16" (the
// float types only: --dtype and config.json's torch_dtype name these).
absl::StatusOr<DType> ParseDType(std::string_view name);

inline float Bf16ToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even, as torch does.
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// Converts n elements of `src` (dtype t) to fp32.
void ToF32(const void* src, DType t, size_t n, float* dst);

}  // namespace tpserve

// A broken invariant (a bug, never user input): print file:line and abort.
#define TP_CHECK(cond)                                                          \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                             \
    }                                                                           \
  } while (0)

#define TP_STATUS_CONCAT_INNER(a, b) a##b
#define TP_STATUS_CONCAT(a, b) TP_STATUS_CONCAT_INNER(a, b)

#define TP_RETURN_IF_ERROR(expr)          \
  do {                                    \
    ::absl::Status _tp_st = (expr);       \
    if (!_tp_st.ok()) return _tp_st;      \
  } while (0)

#define TP_ASSIGN_OR_RETURN(lhs, expr) \
  TP_ASSIGN_OR_RETURN_IMPL(TP_STATUS_CONCAT(_tp_sor_, __LINE__), lhs, expr)
#define TP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
