// Paged attention for few query tokens (decode), flash-decoding style: each block takes
// one token, one KV head (all of its GQA query heads, up to 8 at a time) and one
// partition of the keys; a second kernel merges the partitions' softmax statistics.
// Tested by tests/cuda_attention_test.cc against cpu::PagedAttention.
#include <algorithm>
#include <mutex>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxHeads = 8;        // query heads per block
constexpr int kPartitionAlign = 64;
constexpr int kMaxPartition = 1024;  // keys per partition

struct DecodePlan {
  int head_chunks = 1;     // blocks per KV head along its query heads
  int heads_per_chunk = 1;
  int partition = kPartitionAlign;  // keys per partition
  int parts = 1;
};

DecodePlan PlanDecode(int64_t tokens, const cpu::PagedAttentionParams& p, int num_sms) {
  DecodePlan d;
  const int group = p.num_q_heads / p.num_kv_heads;
  d.head_chunks = (group + kMaxHeads - 1) / kMaxHeads;
  d.heads_per_chunk = (group + d.head_chunks - 1) / d.head_chunks;
  // Keys a query can see: bounded by the block table width and by the window. A fixed
  // bound (not the batch's actual lengths) keeps the launch shape replayable in a graph.
  int64_t ctx = std::max<int64_t>(1, static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size);
  if (p.sliding_window > 0) ctx = std::min<int64_t>(ctx, p.sliding_window);
  const int64_t base_blocks = std::max<int64_t>(1, tokens * p.num_kv_heads * d.head_chunks);
  // Enough partitions for about two blocks per multiprocessor.
  int64_t want = std::max<int64_t>(1, (2 * static_cast<int64_t>(num_sms) + base_blocks - 1) / base_blocks);
  want = std::min<int64_t>(want, (ctx + kPartitionAlign - 1) / kPartitionAlign);
  int64_t partition = (ctx + want - 1) / want;
  partition = (partition + kPartitionAlign - 1) / kPartitionAlign * kPartitionAlign;
  partition = std::min<int64_t>(partition, kMaxPartition);
  d.partition = static_cast<int>(partition);
  d.parts = static_cast<int>((ctx + partition - 1) / partition);
  return d;
}

// Workspace layout when parts > 1: o [tokens, q_heads, parts, D] unnormalized outputs,
// then m and l [tokens, q_heads, parts] (running max and sum of exp(score - max)).
struct Partials {
  float* o;
  float* m;
  float* l;
};
Partials LayoutPartials(void* ws, int64_t tokens, int32_t q_heads, int parts, int32_t head_dim) {
  float* base = static_cast<float*>(ws);
  const int64_t rows = tokens * q_heads * parts;
  return Partials{base, base + rows * head_dim, base + rows * head_dim + rows};
}

size_t SmemBytes(int heads_per_chunk, int partition, int head_dim) {
  // q [heads, D], scores [heads, partition], o [heads, D], all fp32.
  return static_cast<size_t>(heads_per_chunk) * (2 * head_dim + partition) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(kThreads) DecodeKernel(AttnArgs a, int partition, int parts, int head_chunks,
                                                        int heads_per_chunk, Partials partials) {
  constexpr int kVecs = D / 8;                                 // 16-byte vectors per row
  constexpr int kLanesPerKey = kVecs < kWarp ? kVecs : kWarp;  // lanes that share one key's dot
  constexpr int kVecsPerLane = kVecs / kLanesPerKey;
  constexpr int kKeysPerWarp = kWarp / kLanesPerKey;
  constexpr int kKeyLanes = kThreads / kVecs;  // keys summed in parallel in the P·V stage
  static_assert(kVecs <= kThreads && kThreads % kVecs == 0, "head_dim out of range");

  extern __shared__ float smem[];
  __shared__ float m_s[kMaxHeads], l_s[kMaxHeads];
  float* q_s = smem;                              // [heads, D]
  float* scores = q_s + heads_per_chunk * D;      // [heads, partition]
  float* o_s = scores + heads_per_chunk * partition;  // [heads, D]

  const int t = blockIdx.x;
  const int kv_head = blockIdx.y / head_chunks;
  const int chunk = blockIdx.y % head_chunks;
  const int part = blockIdx.z;
  const int group = a.num_q_heads / a.num_kv_heads;
  const int h0 = kv_head * group + chunk * heads_per_chunk;
  const int nh = min(heads_per_chunk, (kv_head + 1) * group - h0);
  if (nh <= 0) return;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;

  const int32_t pos = a.token_pos[t];
  const int32_t first = FirstKey(pos, a.sliding_window);
  const int32_t k0 = first + part * partition;
  const int32_t n = pos < 0 ? 0 : min(k0 + partition, pos + 1) - k0;
  if (n <= 0) {
    if (parts == 1) {
      for (int i = tid; i < nh * D; i += kThreads) {
        a.out[(static_cast<int64_t>(t) * a.num_q_heads + h0) * D + i] = __float2bfloat16_rn(0.0f);
      }
    } else if (tid < nh) {
      const int64_t row = (static_cast<int64_t>(t) * a.num_q_heads + h0 + tid) * parts + part;
      partials.m[row] = -INFINITY;
      partials.l[row] = 0.0f;
    }
    return;
  }

  for (int i = tid; i < nh * D; i += kThreads) {
    q_s[i] = __bfloat162float(a.q[(static_cast<int64_t>(t) * a.num_q_heads + h0) * D + i]);
    o_s[i] = 0.0f;
  }
  __syncthreads();

  const int32_t* table = a.block_tables + static_cast<int64_t>(a.token_seq[t]) * a.max_blocks_per_seq;
  const int64_t row_stride = static_cast<int64_t>(a.num_kv_heads) * D;
  // Cache offset of key k0 + j for this KV head, or -1 for a block the table does not hold.
  auto key_offset = [&](int j) -> int64_t {
    const int32_t key = k0 + j;
    const int32_t block = table[key / a.block_size];
    if (block < 0) return -1;
    return (static_cast<int64_t>(block) * a.block_size + key % a.block_size) * row_stride +
           static_cast<int64_t>(kv_head) * D;
  };

  // Scores: kLanesPerKey lanes split one key's dot product; a warp takes kKeysPerWarp keys.
  {
    const int sub = lane / kLanesPerKey, sl = lane % kLanesPerKey;
    for (int jb = warp * kKeysPerWarp; jb < n; jb += kWarps * kKeysPerWarp) {
      const int j = jb + sub;
      const int64_t off = j < n ? key_offset(j) : -1;
      float kf[kVecsPerLane * 8];
#pragma unroll
      for (int v = 0; v < kVecsPerLane; ++v) {
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (off >= 0) raw = *reinterpret_cast<const uint4*>(a.k_cache + off + (v * kLanesPerKey + sl) * 8);
        Bf16x8ToFloat(raw, kf + v * 8);
      }
#pragma unroll
      for (int h = 0; h < kMaxHeads; ++h) {
        if (h >= nh) break;
        float dot = 0.0f;
#pragma unroll
        for (int v = 0; v < kVecsPerLane; ++v) {
          const float* qv = q_s + h * D + (v * kLanesPerKey + sl) * 8;
#pragma unroll
          for (int e = 0; e < 8; ++e) dot += qv[e] * kf[v * 8 + e];
        }
#pragma unroll
        for (int o = kLanesPerKey / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (sl == 0 && j < n) scores[h * partition + j] = off >= 0 ? ScoreTransform(dot, a.scale, a.softcap) : -INFINITY;
      }
    }
  }
  __syncthreads();

  // Softmax statistics per head over this partition; scores become exp(score - max).
  for (int h = warp; h < nh; h += kWarps) {
    float* sc = scores + h * partition;
    float mx = -INFINITY;
    for (int j = lane; j < n; j += kWarp) mx = fmaxf(mx, sc[j]);
    mx = WarpMax(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += kWarp) {
      const float p = mx == -INFINITY ? 0.0f : expf(sc[j] - mx);
      sc[j] = p;
      sum += p;
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      m_s[h] = mx;
      l_s[h] = sum;
    }
  }
  __syncthreads();

  // P·V: each thread owns 8 dims of the row and every kKeyLanes-th key.
  {
    const int c = tid % kVecs, kl = tid / kVecs;
    float acc[kMaxHeads][8];
#pragma unroll
    for (int h = 0; h < kMaxHeads; ++h) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
    }
    for (int j = kl; j < n; j += kKeyLanes) {
      const int64_t off = key_offset(j);
      if (off < 0) continue;
      float vf[8];
      Bf16x8ToFloat(*reinterpret_cast<const uint4*>(a.v_cache + off + c * 8), vf);
#pragma unroll
      for (int h = 0; h < kMaxHeads; ++h) {
        if (h >= nh) break;
        const float p = scores[h * partition + j];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] += p * vf[e];
      }
    }
#pragma unroll
    for (int h = 0; h < kMaxHeads; ++h) {
      if (h >= nh) break;
#pragma unroll
      for (int e = 0; e < 8; ++e) atomicAdd(&o_s[h * D + c * 8 + e], acc[h][e]);
    }
  }
  __syncthreads();

  if (parts == 1) {
    for (int i = tid; i < nh * D; i += kThreads) {
      const float l = l_s[i / D];
      a.out[(static_cast<int64_t>(t) * a.num_q_heads + h0) * D + i] = __float2bfloat16_rn(l > 0.0f ? o_s[i] / l : 0.0f);
    }
  } else {
    for (int i = tid; i < nh * D; i += kThreads) {
      const int64_t row = (static_cast<int64_t>(t) * a.num_q_heads + h0 + i / D) * parts + part;
      partials.o[row * D + i % D] = o_s[i];
    }
    if (tid < nh) {
      const int64_t row = (static_cast<int64_t>(t) * a.num_q_heads + h0 + tid) * parts + part;
      partials.m[row] = m_s[tid];
      partials.l[row] = l_s[tid];
    }
  }
}

// One block per (token, query head): out = sum_p e^(m_p - M) o_p / sum_p e^(m_p - M) l_p.
__global__ void MergePartitionsKernel(AttnArgs a, int parts, int head_dim, Partials partials) {
  const int t = blockIdx.x, h = blockIdx.y;
  bf16* out = a.out + (static_cast<int64_t>(t) * a.num_q_heads + h) * head_dim;
  if (a.token_pos[t] < 0) {
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) out[d] = __float2bfloat16_rn(0.0f);
    return;
  }
  const int64_t row0 = (static_cast<int64_t>(t) * a.num_q_heads + h) * parts;
  float mx = -INFINITY;
  for (int p = 0; p < parts; ++p) {
    if (partials.l[row0 + p] > 0.0f) mx = fmaxf(mx, partials.m[row0 + p]);
  }
  float denom = 0.0f;
  for (int p = 0; p < parts; ++p) {
    const float l = partials.l[row0 + p];
    if (l > 0.0f) denom += expf(partials.m[row0 + p] - mx) * l;
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float num = 0.0f;
    for (int p = 0; p < parts; ++p) {
      if (partials.l[row0 + p] > 0.0f) num += expf(partials.m[row0 + p] - mx) * partials.o[(row0 + p) * head_dim + d];
    }
    out[d] = __float2bfloat16_rn(denom > 0.0f ? num / denom : 0.0f);
  }
}

template <int D>
void RaiseSmemLimit() {
  static std::once_flag once;
  std::call_once(once, [] {
    TP_CUDA_CHECK(cudaFuncSetAttribute(DecodeKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(SmemBytes(kMaxHeads, kMaxPartition, D))));
  });
}

struct LaunchDecode {
  const AttnArgs& a;
  const DecodePlan& d;
  const Partials& partials;
  cudaStream_t stream;
  template <int D>
  void operator()() const {
    RaiseSmemLimit<D>();
    const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(a.num_kv_heads * d.head_chunks),
                    static_cast<unsigned>(d.parts));
    DecodeKernel<D><<<grid, kThreads, SmemBytes(d.heads_per_chunk, d.partition, D), stream>>>(
        a, d.partition, d.parts, d.head_chunks, d.heads_per_chunk, partials);
    TP_CUDA_CHECK_LAUNCH();
  }
};

}  // namespace

bool AttentionHeadDimSupported(int32_t head_dim) {
  switch (head_dim) {
    case 16: case 32: case 64: case 128: case 256: case 512:
      return true;
    default:
      return false;
  }
}

size_t DecodeAttentionWorkspaceBytes(int64_t tokens, const cpu::PagedAttentionParams& p, int num_sms) {
  const DecodePlan d = PlanDecode(tokens, p, num_sms);
  if (d.parts == 1) return 0;
  const int64_t rows = tokens * p.num_q_heads * d.parts;
  return static_cast<size_t>(rows) * (p.head_dim + 2) * sizeof(float);
}

void DecodeAttention(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* token_seq,
                     const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                     const cpu::PagedAttentionParams& p, int num_sms, void* workspace, size_t workspace_bytes,
                     bf16* out, cudaStream_t stream) {
  if (tokens == 0) return;
  const AttnArgs a = MakeAttnArgs(q, k_cache, v_cache, token_seq, token_pos, tokens, block_tables, p, out);
  const DecodePlan d = PlanDecode(tokens, p, num_sms);
  TP_CHECK(workspace_bytes >= DecodeAttentionWorkspaceBytes(tokens, p, num_sms));
  const Partials partials = d.parts > 1 ? LayoutPartials(workspace, tokens, p.num_q_heads, d.parts, p.head_dim)
                                        : Partials{nullptr, nullptr, nullptr};
  DispatchHeadDim(p.head_dim, LaunchDecode{a, d, partials, stream});
  if (d.parts > 1) {
    const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(p.num_q_heads));
    MergePartitionsKernel<<<grid, std::min(p.head_dim, 256), 0, stream>>>(a, d.parts, p.head_dim, partials);
    TP_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tpserve::cuda
