// ggml block layouts -> fp32 (see dequantize.h). Tested by tests/gguf_quants_test.cc (through
// worker/gguf_quants.h, against gguf.quants.dequantize) and tests/quant_kernels_test.cc.
//
// Each type is one function over whole blocks: a fixed-size loop per block (or per 16/32-element
// sub-block of a K-quant super-block) with no branches on the data, so that the compiler
// vectorizes it. The arithmetic is ggml's (e.g. Q4_K is `(d * sc) * q - (dmin * m)`), and it is
// bit-identical to ggml and gguf.quants.dequantize whatever order or fusion the compiler picks:
// every product of scales and quants is exact in fp32 (the widest, Q6_K's d * sc * q, needs
// 11 + 7 + 5 = 23 of fp32's 24 significant bits, and fp16 scales cannot under- or overflow it),
// so the one rounding is the final add or subtract of a min, and an FMA (-march=native) fusing
// it with the multiply rounds the same.
#include "kernels/cpu/dequantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/base.h"

namespace tpserve::cpu {
namespace {

// Block sizes as in ggml's ggml-common.h (GgmlLayout's numbers; the decoders below walk them).
constexpr int64_t kQK = 32;    // legacy quants: elements per block
constexpr int64_t kQK_K = 256;  // K-quants: elements per super-block

// An fp16 scale stored at p (blocks are packed at odd byte sizes, so p may be unaligned).
inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// F16ToF32 (kernels/base.h) bit for bit, but without its subnormal loop and branches, so that
// a loop over an F16 tensor vectorizes; tests/gguf_quants_test.cc compares all 65,536 inputs.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  const uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
  const uint32_t inf_nan = 0x7f800000u | (mant << 13);
  // A subnormal half is mant * 2^-24: exact in fp32 (and a normal fp32 number).
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(mant)) * 0x1p-24f);
  // Selects by mask: GCC will not if-convert a ternary whose arm holds a float multiply.
  const uint32_t is_sub = 0u - static_cast<uint32_t>(exp == 0);
  const uint32_t is_special = 0u - static_cast<uint32_t>(exp == 31);
  const uint32_t u = (subnormal & is_sub) | (inf_nan & is_special) | (normal & ~(is_sub | is_special));
  return std::bit_cast<float>(u | sign);
}

// Full unrolling: a 16-iteration loop with a short body is unrolled completely by GCC 12 before
// its loop vectorizer runs, and the straight-line code is then vectorized badly (scalar int to
// float conversions, about 3x slower); `#pragma GCC unroll 1` keeps it a loop, which then
// vectorizes whole. Clang reads the pragma too.

// Every decoder: `blocks` whole blocks from src into dst. For the float types a block is one
// element.
using DecodeFn = void (*)(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst);

void DecodeF32(const uint8_t* __restrict src, int64_t n, float* __restrict dst) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

void DecodeF16(const uint8_t* __restrict src, int64_t n, float* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = HalfToFloat(h);
  }
}

void DecodeBF16(const uint8_t* __restrict src, int64_t n, float* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  }
}

// Q4_0, 18 bytes: fp16 d; qs[16] (element j in the low nibble of qs[j], j+16 in the high).
// x = (q - 8) * d.
void DecodeQ4_0(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 18;
    float* __restrict y = dst + b * kQK;
    const float d = LoadF16(blk);
    const uint8_t* __restrict qs = blk + 2;
#pragma GCC unroll 1  // see "Full unrolling" above
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
      y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_1, 20 bytes: fp16 d, fp16 m; qs[16] as Q4_0. x = q * d + m.
void DecodeQ4_1(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 20;
    float* __restrict y = dst + b * kQK;
    const float d = LoadF16(blk);
    const float m = LoadF16(blk + 2);
    const uint8_t* __restrict qs = blk + 4;
#pragma GCC unroll 1  // see "Full unrolling" above
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
      y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0, 22 bytes: fp16 d; uint32 qh (bit j: element j's 5th bit); qs[16] as Q4_0.
// x = (q - 16) * d.
void DecodeQ5_0(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 22;
    float* __restrict y = dst + b * kQK;
    const float d = LoadF16(blk);
    uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    const uint8_t* __restrict qs = blk + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

// Q5_1, 24 bytes: fp16 d, fp16 m; uint32 qh; qs[16], as Q5_0. x = q * d + m.
void DecodeQ5_1(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 24;
    float* __restrict y = dst + b * kQK;
    const float d = LoadF16(blk);
    const float m = LoadF16(blk + 2);
    uint32_t qh;
    std::memcpy(&qh, blk + 4, 4);
    const uint8_t* __restrict qs = blk + 8;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

// Q8_0, 34 bytes: fp16 d; int8 qs[32]. x = q * d.
void DecodeQ8_0(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 34;
    float* __restrict y = dst + b * kQK;
    const float d = LoadF16(blk);
    const int8_t* __restrict qs = reinterpret_cast<const int8_t*>(blk + 2);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
  }
}

// Q2_K, 84 bytes: scales[16] (low nibble: scale, high: min, per 16 elements); qs[64] (2 bits);
// fp16 d, fp16 dmin. Each 128-element half reads 32 bytes of qs four times (shifts 0, 2, 4, 6),
// 32 elements per shift. x = (d * sc) * q - (dmin * m).
void DecodeQ2_K(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 84;
    float* __restrict y = dst + b * kQK_K;
    const uint8_t* __restrict scales = blk;
    const float d = LoadF16(blk + 80);
    const float dmin = LoadF16(blk + 82);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* __restrict q = blk + 16 + 32 * half;
      for (int s = 0; s < 4; ++s) {
        for (int g = 0; g < 2; ++g) {
          const int is = 8 * half + 2 * s + g;
          const float dl = d * static_cast<float>(scales[is] & 0x0f);
          const float ml = dmin * static_cast<float>(scales[is] >> 4);
          float* __restrict out = y + 128 * half + 32 * s + 16 * g;
#pragma GCC unroll 1  // see "Full unrolling" above
          for (int l = 0; l < 16; ++l) {
            out[l] = dl * static_cast<float>((q[16 * g + l] >> (2 * s)) & 3) - ml;
          }
        }
      }
    }
  }
}

// Q3_K, 110 bytes: hmask[32] (element e's 3rd bit: bit e/32 of hmask[e%32]); qs[64] (low 2
// bits, laid out as Q2_K); scales[12] (16 6-bit scales, offset by 32); fp16 d.
// q = low2 - (high bit ? 0 : 4); x = (d * (sc - 32)) * q.
void DecodeQ3_K(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 110;
    float* __restrict y = dst + b * kQK_K;
    const uint8_t* __restrict hmask = blk;
    const uint8_t* __restrict packed = blk + 96;
    const float d = LoadF16(blk + 108);
    // Scale i: low 4 bits from byte i%8 (low nibble for i < 8, high for i >= 8), high 2 bits
    // from byte 8 + i%4 at bit 2*(i/4).
    float dl[16];
    for (int i = 0; i < 16; ++i) {
      const int lo = (packed[i & 7] >> (4 * (i >> 3))) & 0x0f;
      const int hi = (packed[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
      dl[i] = d * static_cast<float>((lo | (hi << 4)) - 32);
    }
    for (int half = 0; half < 2; ++half) {
      const uint8_t* __restrict q = blk + 32 + 32 * half;
      for (int s = 0; s < 4; ++s) {
        const int hbit = 4 * half + s;
        for (int g = 0; g < 2; ++g) {
          const float scale = dl[8 * half + 2 * s + g];
          float* __restrict out = y + 128 * half + 32 * s + 16 * g;
          for (int l = 0; l < 16; ++l) {
            const int k = 16 * g + l;
            const int low = (q[k] >> (2 * s)) & 3;
            const int high = (hmask[k] >> hbit) & 1;
            out[l] = scale * static_cast<float>(low - 4 + 4 * high);
          }
        }
      }
    }
  }
}

// The 8 6-bit scales and mins of a Q4_K/Q5_K super-block, packed in 12 bytes (ggml's
// get_scale_min_k4): j < 4 in the low 6 bits of bytes j and j+4; j >= 4 in the nibbles of byte
// j+4 with their top 2 bits in the top of bytes j-4 and j.
inline void UnpackScaleMinK4(const uint8_t* __restrict p, float d, float dmin, float* __restrict ds,
                             float* __restrict dm) {
  for (int j = 0; j < 4; ++j) {
    ds[j] = d * static_cast<float>(p[j] & 0x3f);
    dm[j] = dmin * static_cast<float>(p[j + 4] & 0x3f);
    ds[j + 4] = d * static_cast<float>((p[j + 8] & 0x0f) | ((p[j] >> 6) << 4));
    dm[j + 4] = dmin * static_cast<float>((p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4));
  }
}

// Q4_K, 144 bytes: fp16 d, fp16 dmin; scales[12]; qs[128]. Sub-block 2c takes the low nibbles
// of qs[32c, 32c+32), sub-block 2c+1 the high ones. x = (d * sc) * q - (dmin * m).
void DecodeQ4_K(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 144;
    float* __restrict y = dst + b * kQK_K;
    float ds[8], dm[8];
    UnpackScaleMinK4(blk + 4, LoadF16(blk), LoadF16(blk + 2), ds, dm);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* __restrict q = blk + 16 + 32 * c;
      float* __restrict out = y + 64 * c;
      const float d1 = ds[2 * c], m1 = dm[2 * c], d2 = ds[2 * c + 1], m2 = dm[2 * c + 1];
      for (int l = 0; l < 32; ++l) {
        out[l] = d1 * static_cast<float>(q[l] & 0x0f) - m1;
        out[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
      }
    }
  }
}

// Q5_K, 176 bytes: fp16 d, fp16 dmin; scales[12]; qh[32] (sub-block j's 5th bits: bit j of
// qh[0, 32)); qs[128] as Q4_K. x = (d * sc) * q - (dmin * m).
void DecodeQ5_K(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 176;
    float* __restrict y = dst + b * kQK_K;
    float ds[8], dm[8];
    UnpackScaleMinK4(blk + 4, LoadF16(blk), LoadF16(blk + 2), ds, dm);
    const uint8_t* __restrict qh = blk + 16;
    for (int c = 0; c < 4; ++c) {
      const uint8_t* __restrict q = blk + 48 + 32 * c;
      float* __restrict out = y + 64 * c;
      const int j1 = 2 * c, j2 = 2 * c + 1;
      const float d1 = ds[j1], m1 = dm[j1], d2 = ds[j2], m2 = dm[j2];
      for (int l = 0; l < 32; ++l) {
        const int q1 = (q[l] & 0x0f) | (((qh[l] >> j1) & 1) << 4);
        const int q2 = (q[l] >> 4) | (((qh[l] >> j2) & 1) << 4);
        out[l] = d1 * static_cast<float>(q1) - m1;
        out[l + 32] = d2 * static_cast<float>(q2) - m2;
      }
    }
  }
}

// Q6_K, 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] (per 16
// elements), fp16 d. In each 128-element half, element k + 32t (k < 32, t < 4) takes nibble t/2
// of ql[k + 32(t%2)] and bits 2t..2t+1 of qh[k]. x = (d * sc) * (q - 32).
void DecodeQ6_K(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 210;
    float* __restrict y = dst + b * kQK_K;
    const int8_t* __restrict scales = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = LoadF16(blk + 208);
    float ds[16];
    for (int i = 0; i < 16; ++i) ds[i] = d * static_cast<float>(scales[i]);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* __restrict ql = blk + 64 * half;
      const uint8_t* __restrict qh = blk + 128 + 32 * half;
      const float* sc = ds + 8 * half;
      float* __restrict out = y + 128 * half;
      for (int g = 0; g < 2; ++g) {
        const float s0 = sc[g], s1 = sc[g + 2], s2 = sc[g + 4], s3 = sc[g + 6];
        for (int l = 0; l < 16; ++l) {
          const int k = 16 * g + l;
          const int q0 = ((ql[k] & 0x0f) | ((qh[k] & 3) << 4)) - 32;
          const int q1 = ((ql[k + 32] & 0x0f) | (((qh[k] >> 2) & 3) << 4)) - 32;
          const int q2 = ((ql[k] >> 4) | (((qh[k] >> 4) & 3) << 4)) - 32;
          const int q3 = ((ql[k + 32] >> 4) | (((qh[k] >> 6) & 3) << 4)) - 32;
          out[k] = s0 * static_cast<float>(q0);
          out[k + 32] = s1 * static_cast<float>(q1);
          out[k + 64] = s2 * static_cast<float>(q2);
          out[k + 96] = s3 * static_cast<float>(q3);
        }
      }
    }
  }
}

// F8_E4M3, 132 bytes: fp32 scale; q[128] E4M3 codes. x = scale * e4m3(q): one rounding, the
// multiply (every E4M3 value is exact in fp32). The dot kernels (quant_dot*.cc) form the same
// products, so decode and prefill see bit-identical weights.
void DecodeF8E4M3(const uint8_t* __restrict src, int64_t blocks, float* __restrict dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* __restrict blk = src + b * 132;
    float* __restrict y = dst + b * 128;
    float scale;
    std::memcpy(&scale, blk, 4);
    const uint8_t* __restrict q = blk + 4;
    for (int j = 0; j < 128; ++j) y[j] = scale * F8E4M3ToF32(q[j]);
  }
}

DecodeFn FindDecoder(DType t) {
  switch (t) {
    case DType::kF32: return DecodeF32;
    case DType::kF16: return DecodeF16;
    case DType::kBF16: return DecodeBF16;
    case DType::kQ4_0: return DecodeQ4_0;
    case DType::kQ4_1: return DecodeQ4_1;
    case DType::kQ5_0: return DecodeQ5_0;
    case DType::kQ5_1: return DecodeQ5_1;
    case DType::kQ8_0: return DecodeQ8_0;
    case DType::kQ2_K: return DecodeQ2_K;
    case DType::kQ3_K: return DecodeQ3_K;
    case DType::kQ4_K: return DecodeQ4_K;
    case DType::kQ5_K: return DecodeQ5_K;
    case DType::kQ6_K: return DecodeQ6_K;
    case DType::kF8_E4M3: return DecodeF8E4M3;
    case DType::kBF16Tiles: return nullptr;  // tile order: not rows (amx::UnpackTiles first)
  }
  return nullptr;
}

}  // namespace

void DequantizeRow(DType t, const void* src, int64_t n, float* dst) {
  const int64_t block = BlockElems(t);
  TP_CHECK(n >= 0 && n % block == 0);
  if (n > 0) FindDecoder(t)(static_cast<const uint8_t*>(src), n / block, dst);
}

void QuantizeRowQ8_0(const float* x, int64_t n, void* dst) {
  TP_CHECK(n % 32 == 0);
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = F32ToF16(d);
    std::memcpy(out + 34 * b, &dh, 2);
    int8_t* q = reinterpret_cast<int8_t*>(out + 34 * b + 2);
    for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(std::round(xb[j] * id));
  }
}

uint8_t F32ToF8E4M3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;  // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;  // >= 448 or inf: saturate (no code above 448)
  if (a >= 0x3c800000u) {
    // [2^-6, 448): a normal code. Round the 20 mantissa bits E4M3 drops to nearest even; a
    // carry out of the 3 kept bits moves to the next binade (mantissa 0), as it should, and
    // stops at 448 (the largest finite code, which nothing below 448 rounds past).
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    return sign | static_cast<uint8_t>((r >> 20) - (120u << 3));
  }
  // Below 2^-6: the multiples of 2^-9 (subnormal codes m = 0..7; m = 8 is 2^-6, code 0x08, so
  // rounding up from 7 lands on the right code). |f| < 2^-10 (exponent < 117, fp32 subnormals
  // included) is under half of 2^-9: 0.
  const uint32_t e = a >> 23;
  if (e < 117u) return sign;
  // |f| * 2^9 = mant * 2^(e - 141); shift = 141 - e is 21..24.
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 141u - e;
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  return sign | static_cast<uint8_t>(q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u));
}

void QuantizeRowF8E4M3(const float* x, int64_t n, void* dst) {
  TP_CHECK(n % 128 == 0);
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 128; ++b) {
    const float* xb = x + 128 * b;
    uint8_t* blk = out + 132 * b;
    float amax = 0.0f;
    for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float scale = amax / 448.0f;
    std::memcpy(blk, &scale, 4);
    // Division, not a multiply by 1 / scale: x / scale is then the one rounding before the
    // code's, and the block's amax lands on 448 (or just past it, and saturates).
    for (int j = 0; j < 128; ++j) blk[4 + j] = scale > 0.0f ? F32ToF8E4M3(xb[j] / scale) : 0;
  }
}

}  // namespace tpserve::cpu
