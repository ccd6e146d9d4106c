// quant.h's dispatch, QuantizeX, and the scalar dot kernels: the reference paths, plain C++
// over whole blocks with exact int32 sums per block, against which the AVX2 and AVX-512 paths
// (quant_dot_avx2.cc, quant_dot_avx512.cc) are tested by tests/quant_kernels_test.cc.
//
// Every path computes, per weight block and row of x, the same integers (the block's or
// super-block's sum of q_w * q_x, with the K-quants' 4- or 6-bit sub-block scales and mins
// applied in int32: at most ~2^28, no overflow) and scales them in fp32 by d_w * d_x (Q4_1 and
// Q5_1 add m_w * s_x); only the order of the fp32 sums over blocks differs between paths. The integer work may be vectorized by the
// compiler for the build's ISA: integers are exact, and the fp32 sums are not reordered
// without -ffast-math. F8_E4M3 is fp32 arithmetic throughout (see quant.h, and DotF8Rows in
// quant_dot_fp8.inc): the paths differ only in how their fp32 sums round.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/base.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_dot_paths.h"

namespace tpserve::cpu {
namespace {

inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

inline const BlockQ8* XRow8(const void* xq, size_t xq_row_bytes, int i) {
  return reinterpret_cast<const BlockQ8*>(static_cast<const uint8_t*>(xq) + i * xq_row_bytes);
}
inline const BlockQ8_1* XRow8_1(const void* xq, size_t xq_row_bytes, int i) {
  return reinterpret_cast<const BlockQ8_1*>(static_cast<const uint8_t*>(xq) + i * xq_row_bytes);
}
inline const BlockQ8K* XRow8K(const void* xq, size_t xq_row_bytes, int i) {
  return reinterpret_cast<const BlockQ8K*>(static_cast<const uint8_t*>(xq) + i * xq_row_bytes);
}

// ---- Activations ----

// d = amax / 127 and q = round(x * 127 / amax): |q| <= 127, so the kernels' sign trick
// (negating x) cannot overflow. The AVX2 versions (quant_dot_avx2.cc) do the same fp32
// operations and round the same way, so their output is bit-identical.
void QuantizeQ8Scalar(const float* x, int64_t blocks, BlockQ8* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    for (int j = 0; j < 32; ++j) out[b].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
  }
}

// BlockQ8's numbers, and s = d * (sum of qs) rounded once (ggml's quantize_row_q8_1 stores it
// as fp16).
void QuantizeQ8_1Scalar(const float* x, int64_t blocks, BlockQ8_1* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    BlockQ8 q;
    QuantizeQ8Scalar(x + 32 * b, 1, &q);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += q.qs[j];
    out[b].d = q.d;
    out[b].s = q.d * static_cast<float>(sum);
    std::memcpy(out[b].qs, q.qs, 32);
  }
}

void QuantizeQ8KScalar(const float* x, int64_t blocks, BlockQ8K* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + 256 * b;
    float amax = 0.0f;
    for (int j = 0; j < 256; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    for (int j = 0; j < 256; ++j) out[b].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += out[b].qs[16 * g + j];
      out[b].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

// ---- Scalar dot kernels ----

// Q4_0, 18 bytes: fp16 d; qs[16] (element j: low nibble of qs[j]; j + 16: high). w = (q - 8) d.
void DotQ4_0Scalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const BlockQ8* x = XRow8(xq, xs, i);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 32; ++b) {
      const uint8_t* qs = w + 18 * b + 2;
      int isum = 0;
      for (int j = 0; j < 16; ++j) {
        isum += ((qs[j] & 0x0f) - 8) * x[b].qs[j] + ((qs[j] >> 4) - 8) * x[b].qs[j + 16];
      }
      sum += (LoadF16(w + 18 * b) * x[b].d) * static_cast<float>(isum);
    }
    y[i * ldy] = sum;
  }
}

// Q5_0, 22 bytes: fp16 d; uint32 qh (bit j: element j's 5th bit); qs[16] as Q4_0. w = (q - 16) d.
void DotQ5_0Scalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const BlockQ8* x = XRow8(xq, xs, i);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 32; ++b) {
      const uint8_t* blk = w + 22 * b;
      uint32_t qh;
      std::memcpy(&qh, blk + 2, 4);
      const uint8_t* qs = blk + 6;
      int isum = 0;
      for (int j = 0; j < 16; ++j) {
        const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        isum += (lo - 16) * x[b].qs[j] + (hi - 16) * x[b].qs[j + 16];
      }
      sum += (LoadF16(blk) * x[b].d) * static_cast<float>(isum);
    }
    y[i * ldy] = sum;
  }
}

// Q4_1 (20 bytes: fp16 d, m; qs[16] as Q4_0) and Q5_1 (24 bytes: fp16 d, m; uint32 qh; qs[16],
// as Q5_0): w = d q + m with q unsigned, so a block's dot is d d_x (q . x_q) + m s (BlockQ8_1's
// s = d_x sum x_q), as ggml's vec_dot_q4_1_q8_1.
template <bool kQ5>
void DotQ45_1Scalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  constexpr int64_t kBytes = kQ5 ? 24 : 20;
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const BlockQ8_1* x = XRow8_1(xq, xs, i);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 32; ++b) {
      const uint8_t* blk = w + kBytes * b;
      uint32_t qh = 0;
      if (kQ5) std::memcpy(&qh, blk + 4, 4);
      const uint8_t* qs = blk + (kQ5 ? 8 : 4);
      int isum = 0;
      for (int j = 0; j < 16; ++j) {
        const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        isum += lo * x[b].qs[j] + hi * x[b].qs[j + 16];
      }
      sum += (LoadF16(blk) * x[b].d) * static_cast<float>(isum) + LoadF16(blk + 2) * x[b].s;
    }
    y[i * ldy] = sum;
  }
}

// Q8_0, 34 bytes: fp16 d; int8 qs[32]. w = q d.
void DotQ8_0Scalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const BlockQ8* x = XRow8(xq, xs, i);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 32; ++b) {
      const int8_t* qs = reinterpret_cast<const int8_t*>(w + 34 * b + 2);
      int isum = 0;
      for (int j = 0; j < 32; ++j) isum += qs[j] * x[b].qs[j];
      sum += (LoadF16(w + 34 * b) * x[b].d) * static_cast<float>(isum);
    }
    y[i * ldy] = sum;
  }
}

// The 8 6-bit scales and mins of a Q4_K/Q5_K super-block (12 bytes at p), as dequantize.cc's
// UnpackScaleMinK4.
inline void UnpackScaleMin(const uint8_t* p, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = p[j] & 0x3f;
    mn[j] = p[j + 4] & 0x3f;
    sc[j + 4] = (p[j + 8] & 0x0f) | ((p[j] >> 6) << 4);
    mn[j + 4] = (p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4);
  }
}

// Q4_K (144 bytes: fp16 d, dmin; scales[12]; qs[128]) and Q5_K (176 bytes: the same with
// qh[32] before qs). Sub-block j (32 elements) has w = (d sc_j) q - (dmin m_j): its dot with
// x is d sc_j (q . x_q) - dmin m_j (bsums of its two 16-element groups), all times d_x.
template <bool kQ5>
void DotQ45KScalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  constexpr int64_t kBytes = kQ5 ? 176 : 144;
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const BlockQ8K* x = XRow8K(xq, xs, i);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 256; ++b) {
      const uint8_t* blk = w + kBytes * b;
      const uint8_t* qh = blk + 16;
      const uint8_t* qs = blk + (kQ5 ? 48 : 16);
      int sc[8], mn[8];
      UnpackScaleMin(blk + 4, sc, mn);
      int isum = 0, msum = 0;
      for (int j = 0; j < 8; ++j) {
        const uint8_t* q = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        int dot = 0;
        for (int l = 0; l < 32; ++l) {
          int v = (q[l] >> shift) & 0x0f;
          if (kQ5) v |= ((qh[l] >> j) & 1) << 4;
          dot += v * x[b].qs[32 * j + l];
        }
        isum += sc[j] * dot;
        msum += mn[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
      }
      sum += (LoadF16(blk) * x[b].d) * static_cast<float>(isum);
      sum -= (LoadF16(blk + 2) * x[b].d) * static_cast<float>(msum);
    }
    y[i * ldy] = sum;
  }
}

// Q2_K, 84 bytes: scales[16] (per 16 elements: the scale in the low nibble, the min in the
// high one); qs[64]; fp16 d, dmin. In each 128-element half, element l + 32t (l < 32) is bits
// 2t, 2t+1 of qs[32 half + l] (dequantize.cc's DecodeQ2_K). w = (d sc_g) q - (dmin m_g): the dot
// is d sum_g sc_g (q . x_q)_g - dmin sum_g m_g bsum_g, times d_x (ggml's vec_dot_q2_K_q8_K).
void DotQ2_KScalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const BlockQ8K* x = XRow8K(xq, xs, i);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 256; ++b) {
      const uint8_t* blk = w + 84 * b;
      const uint8_t* scales = blk;
      int isum = 0, msum = 0;
      for (int g = 0; g < 16; ++g) msum += (scales[g] >> 4) * x[b].bsums[g];
      for (int half = 0; half < 2; ++half) {
        const uint8_t* q = blk + 16 + 32 * half;
        for (int t = 0; t < 4; ++t) {
          for (int g = 0; g < 2; ++g) {
            int dot = 0;
            for (int l = 16 * g; l < 16 * g + 16; ++l) dot += ((q[l] >> (2 * t)) & 3) * x[b].qs[128 * half + 32 * t + l];
            isum += (scales[8 * half + 2 * t + g] & 0x0f) * dot;
          }
        }
      }
      sum += (LoadF16(blk + 80) * x[b].d) * static_cast<float>(isum);
      sum -= (LoadF16(blk + 82) * x[b].d) * static_cast<float>(msum);
    }
    y[i * ldy] = sum;
  }
}

// Q3_K, 110 bytes: hmask[32]; qs[64] (low 2 bits, laid out as Q2_K's); scales[12] (16 6-bit
// scales); fp16 d. Element l + 32t of half h has q = low2 - 4 + 4 * (bit 4h + t of hmask[l]),
// in [-4, 4); its group's scale is sc - 32 (dequantize.cc's DecodeQ3_K). The dot is
// d sum_g (sc_g - 32) (q . x_q)_g, times d_x (ggml's vec_dot_q3_K_q8_K).
void DotQ3_KScalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const BlockQ8K* x = XRow8K(xq, xs, i);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 256; ++b) {
      const uint8_t* blk = w + 110 * b;
      const uint8_t* hmask = blk;
      const uint8_t* packed = blk + 96;
      // Scale g: low 4 bits from byte g % 8 (low nibble for g < 8, high for g >= 8), high 2 bits
      // from byte 8 + g % 4 at bit 2 (g / 4).
      int sc[16];
      for (int g = 0; g < 16; ++g) {
        sc[g] = (((packed[g & 7] >> (4 * (g >> 3))) & 0x0f) | (((packed[8 + (g & 3)] >> (2 * (g >> 2))) & 3) << 4)) - 32;
      }
      int isum = 0;
      for (int half = 0; half < 2; ++half) {
        const uint8_t* q = blk + 32 + 32 * half;
        for (int t = 0; t < 4; ++t) {
          for (int g = 0; g < 2; ++g) {
            int dot = 0;
            for (int l = 16 * g; l < 16 * g + 16; ++l) {
              const int v = ((q[l] >> (2 * t)) & 3) - ((hmask[l] >> (4 * half + t)) & 1 ? 0 : 4);
              dot += v * x[b].qs[128 * half + 32 * t + l];
            }
            isum += sc[8 * half + 2 * t + g] * dot;
          }
        }
      }
      sum += (LoadF16(blk + 108) * x[b].d) * static_cast<float>(isum);
    }
    y[i * ldy] = sum;
  }
}

// Q6_K, 210 bytes: ql[128], qh[64], int8 scales[16] (per 16 elements), fp16 d; w = (d sc)(q - 32)
// with q in [0, 64): the dot is d (sum_g sc_g (q . x_q)_g - 32 sum_g sc_g bsum_g), times d_x.
// In each 128-element half, element l + 32t takes nibble t/2 of ql[l + 32(t%2)] and bits
// 2t, 2t+1 of qh[l] (dequantize.cc's DecodeQ6_K).
void DotQ6_KScalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const BlockQ8K* x = XRow8K(xq, xs, i);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 256; ++b) {
      const uint8_t* blk = w + 210 * b;
      const int8_t* scales = reinterpret_cast<const int8_t*>(blk + 192);
      int isum = 0;
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = blk + 64 * half;
        const uint8_t* qh = blk + 128 + 32 * half;
        for (int t = 0; t < 4; ++t) {
          for (int g = 0; g < 2; ++g) {
            int dot = 0;
            for (int l = 16 * g; l < 16 * g + 16; ++l) {
              const int q = ((ql[l + 32 * (t % 2)] >> (4 * (t / 2))) & 0x0f) | (((qh[l] >> (2 * t)) & 3) << 4);
              dot += q * x[b].qs[128 * half + 32 * t + l];
            }
            isum += scales[8 * half + 2 * t + g] * dot;
          }
        }
      }
      int bias = 0;
      for (int g = 0; g < 16; ++g) bias += scales[g] * x[b].bsums[g];
      isum -= 32 * bias;
      sum += (LoadF16(blk + 208) * x[b].d) * static_cast<float>(isum);
    }
    y[i * ldy] = sum;
  }
}

// F8_E4M3, 132 bytes: fp32 scale; q[128] E4M3 codes; x is fp32 (QuantizeX copies it). The
// weights as DequantizeRow widens them (scale * e4m3, one rounding), then multiply-adds in fp32.
void DotF8E4M3Scalar(const void* w_row, const void* xq, size_t xs, int m, int64_t k, float* y, int64_t ldy) {
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  for (int i = 0; i < m; ++i) {
    const float* x = reinterpret_cast<const float*>(static_cast<const uint8_t*>(xq) + i * xs);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / 128; ++b) {
      float scale;
      std::memcpy(&scale, w + 132 * b, 4);
      const uint8_t* q = w + 132 * b + 4;
      for (int j = 0; j < 128; ++j) sum += (scale * F8E4M3ToF32(q[j])) * x[128 * b + j];
    }
    y[i * ldy] = sum;
  }
}

QuantDotFn FindScalar(DType w) {
  switch (w) {
    case DType::kQ4_0: return DotQ4_0Scalar;
    case DType::kQ4_1: return DotQ45_1Scalar<false>;
    case DType::kQ5_0: return DotQ5_0Scalar;
    case DType::kQ5_1: return DotQ45_1Scalar<true>;
    case DType::kQ8_0: return DotQ8_0Scalar;
    case DType::kQ2_K: return DotQ2_KScalar;
    case DType::kQ3_K: return DotQ3_KScalar;
    case DType::kQ4_K: return DotQ45KScalar<false>;
    case DType::kQ5_K: return DotQ45KScalar<true>;
    case DType::kQ6_K: return DotQ6_KScalar;
    case DType::kF8_E4M3: return DotF8E4M3Scalar;
    default: return nullptr;
  }
}

}  // namespace

const char* QuantIsaName(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar: return "scalar";
    case QuantIsa::kAvx2: return "avx2";
    case QuantIsa::kAvx512Vnni: return "avx512_vnni";
  }
  return "?";
}

bool QuantIsaAvailable(QuantIsa isa) {
  const CpuFeatures& f = DetectCpuFeatures();
  switch (isa) {
    case QuantIsa::kScalar: return true;
    case QuantIsa::kAvx2: return f.avx2;
    case QuantIsa::kAvx512Vnni: return f.avx2 && f.avx512 && f.avx512_vnni;
  }
  return false;
}

QuantIsa BestQuantIsa() {
  if (QuantIsaAvailable(QuantIsa::kAvx512Vnni)) return QuantIsa::kAvx512Vnni;
  if (QuantIsaAvailable(QuantIsa::kAvx2)) return QuantIsa::kAvx2;
  return QuantIsa::kScalar;
}

bool HasQuantDot(DType w) { return FindScalar(w) != nullptr; }

QuantX QuantXFor(DType w, QuantIsa isa, int64_t m) {
  TP_CHECK(HasQuantDot(w));
  if (w == DType::kF8_E4M3) return QuantX::kF32;
  if (w == DType::kQ4_1 || w == DType::kQ5_1) return QuantX::kQ8_1;
  if (BlockElems(w) == 256) return QuantX::kQ8K;
  return isa == QuantIsa::kAvx512Vnni && m >= quant_paths::kBiasedXRowsFrom ? QuantX::kQ8U : QuantX::kQ8;
}

size_t QuantizedXRowBytes(DType w, int64_t k) {
  TP_CHECK(HasQuantDot(w) && k % BlockElems(w) == 0);
  switch (QuantXFor(w, QuantIsa::kScalar, 1)) {  // kQ8U's blocks are kQ8's size
    case QuantX::kQ8:
    case QuantX::kQ8U: return static_cast<size_t>(k / 32) * sizeof(BlockQ8);
    case QuantX::kQ8_1: return static_cast<size_t>(k / 32) * sizeof(BlockQ8_1);
    case QuantX::kQ8K: return static_cast<size_t>(k / 256) * sizeof(BlockQ8K);
    case QuantX::kF32: return static_cast<size_t>(k) * sizeof(float);
  }
  return 0;
}

void QuantizeX(DType w, QuantIsa isa, const float* x, int64_t m, int64_t k, void* xq) {
  const size_t row_bytes = QuantizedXRowBytes(w, k);
  const QuantX kind = QuantXFor(w, isa, m);
  if (kind == QuantX::kF32) {  // x as it is: row i at i * 4k bytes
    std::memcpy(xq, x, static_cast<size_t>(m) * row_bytes);
    return;
  }
  const bool avx2 = QuantIsaAvailable(QuantIsa::kAvx2);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    void* out = static_cast<uint8_t*>(xq) + i * row_bytes;
    if (kind == QuantX::kQ8K) {
      auto* blocks = static_cast<BlockQ8K*>(out);
      avx2 ? quant_paths::QuantizeQ8KAvx2(xi, k / 256, blocks) : QuantizeQ8KScalar(xi, k / 256, blocks);
    } else if (kind == QuantX::kQ8_1) {
      auto* blocks = static_cast<BlockQ8_1*>(out);
      avx2 ? quant_paths::QuantizeQ8_1Avx2(xi, k / 32, blocks) : QuantizeQ8_1Scalar(xi, k / 32, blocks);
    } else {
      auto* blocks = static_cast<BlockQ8*>(out);
      avx2 ? quant_paths::QuantizeQ8Avx2(xi, k / 32, blocks) : QuantizeQ8Scalar(xi, k / 32, blocks);
      if (kind == QuantX::kQ8U) {
        for (int64_t b = 0; b < k / 32; ++b) {
          for (int8_t& q : blocks[b].qs) q = static_cast<int8_t>(static_cast<uint8_t>(q) ^ 0x80);  // q + 128
        }
      }
    }
  }
}

// The tile's signed legacy types, whose x blocks are BlockQ8.
static bool HasQuantTile(DType w) { return w == DType::kQ4_0 || w == DType::kQ5_0 || w == DType::kQ8_0; }

size_t QuantizedXTileBytes(DType w, int64_t k) {
  TP_CHECK(HasQuantTile(w) && k % 32 == 0);
  return static_cast<size_t>(k / 32) * kQuantTileRows * sizeof(BlockQ8);
}

void QuantizeXTile(DType w, const float* x, int64_t m, int64_t k, void* tile) {
  TP_CHECK(HasQuantTile(w) && k % 32 == 0 && m >= 1 && m <= kQuantTileRows);
  const int64_t nb = k / 32;
  // One row's blocks at a time (QuantizeX's numbers), then spread over the tile.
  thread_local std::vector<BlockQ8> row;
  row.resize(nb);
  const bool avx2 = QuantIsaAvailable(QuantIsa::kAvx2);
  auto* out = static_cast<uint8_t*>(tile);
  constexpr int64_t kBlockBytes = kQuantTileRows * sizeof(BlockQ8);  // 512 bytes of q, 64 of d
  for (int64_t i = 0; i < kQuantTileRows; ++i) {
    if (i < m) {
      avx2 ? quant_paths::QuantizeQ8Avx2(x + i * k, nb, row.data()) : QuantizeQ8Scalar(x + i * k, nb, row.data());
    } else {
      std::memset(row.data(), 0, nb * sizeof(BlockQ8));  // q = 0, d = 0
    }
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = out + b * kBlockBytes;
      for (int g = 0; g < 8; ++g) {
        uint32_t q4;
        std::memcpy(&q4, &row[b].qs[4 * g], 4);
        q4 ^= 0x80808080u;  // q + 128, byte by byte
        std::memcpy(blk + (g * kQuantTileRows + i) * 4, &q4, 4);
      }
      std::memcpy(blk + 512 + i * sizeof(float), &row[b].d, sizeof(float));
    }
  }
}

QuantTileFn FindQuantTile(DType w, QuantIsa isa) {
  if (!HasQuantTile(w) || isa != QuantIsa::kAvx512Vnni || !QuantIsaAvailable(isa)) return nullptr;
  return quant_paths::FindAvx512VnniTile(w);
}

QuantDotFn FindQuantDot(DType w, QuantIsa isa) {
  if (!HasQuantDot(w) || !QuantIsaAvailable(isa)) return nullptr;
  switch (isa) {
    case QuantIsa::kScalar: return FindScalar(w);
    case QuantIsa::kAvx2: return quant_paths::FindAvx2(w);
    case QuantIsa::kAvx512Vnni: return quant_paths::FindAvx512Vnni(w);
  }
  return nullptr;
}

}  // namespace tpserve::cpu
