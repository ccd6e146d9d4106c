// Row-wise and elementwise CPU kernels: RMSNorm, RoPE, gated activations, softcap, add,
// scale, embedding lookup, argmax and the KV-cache write. Tested by
// tests/cpu_kernels_test.cc.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequantize.h"

namespace tpserve::cpu {
namespace {

using avx2::Bf16;
using avx2::F16;

// Below this many elements an OpenMP fork costs more than the work.
constexpr int64_t kMinParallelElems = int64_t{1} << 15;

float SumOfSquares(const float* x, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i);
    const __m256 b = _mm256_loadu_ps(x + i + 8);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
    acc1 = _mm256_fmadd_ps(b, b, acc1);
  }
  if (i < n) {  // masked lanes load as 0 and add nothing
    const __m256i mask = avx2::TailMask(std::min<int64_t>(8, n - i));
    const __m256 a = _mm256_maskload_ps(x + i, mask);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
    i += 8;
    if (i < n) {
      const __m256 b = _mm256_maskload_ps(x + i, avx2::TailMask(n - i));
      acc1 = _mm256_fmadd_ps(b, b, acc1);
    }
  }
  return avx2::HorizontalSum(_mm256_add_ps(acc0, acc1));
}

// Applies `op` (a functor on __m256) to n floats, the tail through masked loads and stores
// so every element takes the same path whatever its position.
template <typename Op>
void MapInPlace(float* x, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, op(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i mask = avx2::TailMask(n - i);
    _mm256_maskstore_ps(x + i, mask, op(_mm256_maskload_ps(x + i, mask)));
  }
}

// out = act(gate) * up over one row, with the same tail handling as MapInPlace.
template <typename Act>
void GatedRow(const float* gate, const float* up, int64_t dim, Act act, float* out) {
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_mul_ps(act(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  }
  if (i < dim) {
    const __m256i mask = avx2::TailMask(dim - i);
    const __m256 g = _mm256_maskload_ps(gate + i, mask);
    _mm256_maskstore_ps(out + i, mask, _mm256_mul_ps(act(g), _mm256_maskload_ps(up + i, mask)));
  }
}

// silu(x) = x / (1 + e^-x), as torch computes it.
__m256 Silu(__m256 x) {
  const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
__m256 GeluTanh(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                     _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
  const __m256 t = avx2::Tanh(inner);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), t));
}

template <typename T>
void EmbeddingRow(const T* row, int64_t dim, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(avx2::Load8(row + i), s));
  for (; i < dim; ++i) out[i] = avx2::ToF32(row[i]) * scale;
}

}  // namespace

void RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, NormKind kind,
             float* out) {
#pragma omp parallel for schedule(static) if (rows * dim >= kMinParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    const float mean_sq = SumOfSquares(xr, dim) / static_cast<float>(dim);
    // transformers: x * torch.rsqrt(mean + eps), then the weight; same rounding order here.
    const float inv_rms = 1.0f / std::sqrt(mean_sq + eps);
    switch (kind) {
      case NormKind::kScale:
        for (int64_t i = 0; i < dim; ++i) o[i] = (xr[i] * inv_rms) * w[i];
        break;
      case NormKind::kOnePlusScale:
        for (int64_t i = 0; i < dim; ++i) o[i] = (xr[i] * inv_rms) * (1.0f + w[i]);
        break;
      case NormKind::kNoScale:
        for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * inv_rms;
        break;
    }
  }
}

void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, float attn_factor) {
  const int64_t half = head_dim / 2;
#pragma omp parallel if (tokens * heads * head_dim >= kMinParallelElems)
  {
    // cos/sin of one token, shared by all its heads.
    std::vector<float> cos_a(half), sin_a(half);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      const float pos = static_cast<float>(positions[t]);
      for (int64_t i = 0; i < half; ++i) {
        // The angle is rounded to fp32 before cos/sin, as transformers computes it; at
        // large positions that rounding dominates the result.
        const float angle = pos * inv_freq[i];
        cos_a[i] = std::cos(angle) * attn_factor;
        sin_a[i] = std::sin(angle) * attn_factor;
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* xh = x + (t * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = xh[i];
          const float x1 = xh[i + half];
          xh[i] = x0 * cos_a[i] - x1 * sin_a[i];
          xh[i + half] = x1 * cos_a[i] + x0 * sin_a[i];
        }
      }
    }
  }
}

void GatedActivation(const float* gate_up, int64_t rows, int64_t dim, Activation act, float* out) {
  // The threads split the columns (in 16-float steps) and each walks the rows in order. With
  // out == gate_up, row r's result then lands on its own gate (r = 0, element by element
  // after reading it) or on the gate or up half of row r / 2, in the columns this thread has
  // already read.
#pragma omp parallel if (rows * dim >= kMinParallelElems)
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t per = (dim + 16 * threads - 1) / (16 * threads) * 16;
    const int64_t c0 = std::min(dim, omp_get_thread_num() * per), c1 = std::min(dim, c0 + per);
    for (int64_t r = 0; r < rows && c0 < c1; ++r) {
      const float* gate = gate_up + r * 2 * dim + c0;
      if (act == Activation::kSilu) {
        GatedRow(gate, gate + dim, c1 - c0, Silu, out + r * dim + c0);
      } else {
        GatedRow(gate, gate + dim, c1 - c0, GeluTanh, out + r * dim + c0);
      }
    }
  }
}

void Softcap(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  // Divide (not multiply by 1/cap) to round exactly as logits / cap does.
  MapInPlace(x, n, [c](__m256 v) { return _mm256_mul_ps(c, avx2::Tanh(_mm256_div_ps(v, c))); });
}

void Add(const float* a, const float* b, int64_t n, float* out) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void Scale(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void Embedding(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
               int64_t vocab_start, int64_t vocab_rows, int64_t dim, float scale, float* out) {
#pragma omp parallel for schedule(static) if (tokens * dim >= kMinParallelElems)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
    float* o = out + t * dim;
    if (row < 0 || row >= vocab_rows) {
      std::memset(o, 0, sizeof(float) * dim);
      continue;
    }
    switch (table_dtype) {
      case DType::kF32:
        EmbeddingRow(static_cast<const float*>(table) + row * dim, dim, scale, o);
        break;
      case DType::kBF16:
        EmbeddingRow(static_cast<const Bf16*>(table) + row * dim, dim, scale, o);
        break;
      case DType::kF16:
        EmbeddingRow(static_cast<const F16*>(table) + row * dim, dim, scale, o);
        break;
      default:  // block-quantized: the row's blocks widened, then scaled as the float types
        DequantizeRow(table_dtype, static_cast<const uint8_t*>(table) + row * RowBytes(table_dtype, dim), dim, o);
        EmbeddingRow(static_cast<const float*>(o), dim, scale, o);
        break;
    }
  }
}

int64_t Argmax(const float* x, int64_t n) {
  TP_CHECK(n > 0);
  // Pass 1: the maximum, and whether any NaN is present (torch.argmax treats NaN as the
  // largest value, so the first NaN wins).
  bool has_nan = false;
  const float max = avx2::MaxNoticingNan(x, n, &has_nan);
  if (has_nan) {
    for (int64_t j = 0; j < n; ++j) {
      if (std::isnan(x[j])) return j;
    }
  }
  // Pass 2: the first element equal to the maximum.
  const __m256 target = _mm256_set1_ps(max);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), target, _CMP_EQ_OQ));
    if (hits != 0) return i + std::countr_zero(static_cast<unsigned>(hits));
  }
  for (; i < n; ++i) {
    if (x[i] == max) return i;
  }
  return 0;  // unreachable: max is one of the elements
}

const char* KvCacheDTypeName(KvCacheDType t) {
  switch (t) {
    case KvCacheDType::kBf16: return "bf16";
    case KvCacheDType::kFp8E4M3: return "fp8_e4m3";
    default: return "fp32";
  }
}

namespace {
// Bytes of one head's record in the cache.
int64_t KvHeadBytes(KvCacheDType t, int64_t head_dim) {
  switch (t) {
    case KvCacheDType::kBf16: return 2 * head_dim;
    case KvCacheDType::kFp8E4M3: return 4 + head_dim;
    default: return 4 * head_dim;
  }
}
}  // namespace

int64_t KvSlotBytes(KvCacheDType t, int64_t kv_heads, int64_t head_dim) { return kv_heads * KvHeadBytes(t, head_dim); }

void StoreKvHead(KvCacheDType t, const float* x, int64_t head_dim, uint8_t* out) {
  switch (t) {
    case KvCacheDType::kF32:
      std::memcpy(out, x, 4 * head_dim);
      return;
    case KvCacheDType::kBf16:
      for (int64_t i = 0; i < head_dim; ++i) {
        const uint16_t b = F32ToBf16(x[i]);
        std::memcpy(out + 2 * i, &b, 2);
      }
      return;
    case KvCacheDType::kFp8E4M3: {
      float amax = 0.0f;
      for (int64_t i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = amax / 448.0f;
      std::memcpy(out, &scale, 4);
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int64_t i = 0; i < head_dim; ++i) out[4 + i] = F32ToF8E4M3(x[i] * inv);
      return;
    }
  }
}

void LoadKvHead(KvCacheDType t, const uint8_t* in, int64_t head_dim, float* out) {
  switch (t) {
    case KvCacheDType::kF32:
      std::memcpy(out, in, 4 * head_dim);
      return;
    case KvCacheDType::kBf16:
      for (int64_t i = 0; i < head_dim; ++i) {
        uint16_t b;
        std::memcpy(&b, in + 2 * i, 2);
        out[i] = Bf16ToF32(b);
      }
      return;
    case KvCacheDType::kFp8E4M3: {
      float scale;
      std::memcpy(&scale, in, 4);
      for (int64_t i = 0; i < head_dim; ++i) out[i] = scale * F8E4M3ToF32(in[4 + i]);
      return;
    }
  }
}

void WriteKv(const float* k, const float* v, const int32_t* slot_mapping, int64_t tokens,
             int64_t kv_heads, int64_t head_dim, KvCacheDType kv_dtype, void* k_cache, void* v_cache) {
  const int64_t row = kv_heads * head_dim;
  const int64_t slot_bytes = KvSlotBytes(kv_dtype, kv_heads, head_dim);
  const int64_t head_bytes = KvHeadBytes(kv_dtype, head_dim);
  uint8_t* const kc = static_cast<uint8_t*>(k_cache);
  uint8_t* const vc = static_cast<uint8_t*>(v_cache);
#pragma omp parallel for schedule(static) if (tokens * row >= kMinParallelElems)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    if (kv_dtype == KvCacheDType::kF32) {
      std::memcpy(kc + slot * slot_bytes, k + t * row, sizeof(float) * row);
      std::memcpy(vc + slot * slot_bytes, v + t * row, sizeof(float) * row);
      continue;
    }
    for (int64_t h = 0; h < kv_heads; ++h) {
      StoreKvHead(kv_dtype, k + t * row + h * head_dim, head_dim, kc + slot * slot_bytes + h * head_bytes);
      StoreKvHead(kv_dtype, v + t * row + h * head_dim, head_dim, vc + slot * slot_bytes + h * head_bytes);
    }
  }
}

}  // namespace tpserve::cpu
