// Vocab-parallel embedding lookup into bf16 activations. Tested by
// tests/cuda_elementwise_test.cc against cpu::Embedding.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

// One block per token; threads stride over the row.
template <typename T>
__global__ void EmbeddingKernel(const int32_t* __restrict__ ids, const T* __restrict__ table, int64_t vocab_start,
                                int64_t vocab_rows, int64_t dim, float scale, bf16* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
  bf16* o = out + t * dim;
  if (row < 0 || row >= vocab_rows) {
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = __float2bfloat16_rn(0.0f);
    return;
  }
  const T* src = table + row * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = __float2bfloat16_rn(ToFloat(src[i]) * scale);
}

}  // namespace

void Embedding(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype, int64_t vocab_start,
               int64_t vocab_rows, int64_t dim, float scale, bf16* out, cudaStream_t stream) {
  if (tokens == 0) return;
  const int threads = 256;
  switch (table_dtype) {
    case DType::kBF16:
      EmbeddingKernel<<<tokens, threads, 0, stream>>>(ids, static_cast<const bf16*>(table), vocab_start, vocab_rows,
                                                      dim, scale, out);
      break;
    case DType::kF16:
      EmbeddingKernel<<<tokens, threads, 0, stream>>>(ids, static_cast<const __half*>(table), vocab_start,
                                                      vocab_rows, dim, scale, out);
      break;
    case DType::kF32:
      EmbeddingKernel<<<tokens, threads, 0, stream>>>(ids, static_cast<const float*>(table), vocab_start,
                                                      vocab_rows, dim, scale, out);
      break;
    default:
      TP_CHECK(false && "block-quantized embedding on CUDA (the loader widens it)");
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
