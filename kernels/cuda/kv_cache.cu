// The paged KV-cache write: each token's k/v rows to its slot, padding slots skipped.
// Tested by tests/cuda_attention_test.cc against cpu::WriteKv.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

// One block per token; 16-byte copies (row_elems % 8 == 0) or element copies.
__global__ void WriteKvKernel(const bf16* __restrict__ k, const bf16* __restrict__ v,
                              const int32_t* __restrict__ slot_mapping, int64_t row_elems, bf16* __restrict__ k_cache,
                              bf16* __restrict__ v_cache) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  const bf16* ks = k + t * row_elems;
  const bf16* vs = v + t * row_elems;
  bf16* kd = k_cache + slot * row_elems;
  bf16* vd = v_cache + slot * row_elems;
  if (row_elems % 8 == 0) {
    for (int64_t i = threadIdx.x; i < row_elems / 8; i += blockDim.x) {
      reinterpret_cast<uint4*>(kd)[i] = reinterpret_cast<const uint4*>(ks)[i];
      reinterpret_cast<uint4*>(vd)[i] = reinterpret_cast<const uint4*>(vs)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) {
      kd[i] = ks[i];
      vd[i] = vs[i];
    }
  }
}

}  // namespace

void WriteKv(const bf16* k, const bf16* v, const int32_t* slot_mapping, int64_t tokens, int64_t kv_heads,
             int64_t head_dim, bf16* k_cache, bf16* v_cache, cudaStream_t stream) {
  if (tokens == 0) return;
  WriteKvKernel<<<tokens, 128, 0, stream>>>(k, v, slot_mapping, kv_heads * head_dim, k_cache, v_cache);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda
