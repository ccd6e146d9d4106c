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

// The only dtype enum in the project.
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline constexpr size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
std::string_view DTypeName(DType t);
// Parses "float32"/"fp32"/"F32", "bfloat16"/"bf16"/"BF16", "float16"/"fp16"/"F16".
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
