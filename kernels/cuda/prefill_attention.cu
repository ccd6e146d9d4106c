// Paged prefill attention: the launchers and the tile shapes. The kernel and its design
// notes are in prefill_attention.cuh; its sm_90a variants (wgmma) are built from
// prefill_attention_wgmma.cu. Tested by tests/cuda_attention_test.cc against
// cpu::PagedAttention.
#include <algorithm>
#include <vector>

#include "kernels/cuda/prefill_attention.cuh"

namespace tpserve::cuda {

#if !defined(TPSERVE_HAVE_SM90A)
// Built without sm_90 among the CUDA architectures: no wgmma variant.
namespace prefill_detail {
size_t WgmmaSmemBytes(int, int) { return 0; }
bool LaunchWgmma(int, int, const AttnArgs&, const TilePlan&, int, int, cudaStream_t) { return false; }
}  // namespace prefill_detail
#endif

namespace {

template <int D, int BK, int kSplit, int kRowWarps>
PrefillTuning TuningOf() {
  return PrefillTuning{BK, kRowWarps, Cfg<D, BK, kSplit, kRowWarps>::kBytes};
}

// The tile PrefillAttention launches for head_dim on a device that lets a block opt into
// `smem_optin` bytes of shared memory (512: 32 keys where they fit, else 16).
PrefillTuning ProductionTuningFor(int32_t head_dim, int smem_optin) {
  if (head_dim == 512) {
    const PrefillTuning wide = TuningOf<512, 32, 2, 4>();
    return wide.smem_bytes <= static_cast<size_t>(smem_optin) ? wide : TuningOf<512, 16, 2, 4>();
  }
  if (head_dim == 256) return TuningOf<256, 32, 1, 4>();
  return PrefillTuning{64, 4, 0};  // Launch<D, 64, 1>; no other shapes are built for these
}

struct LaunchPrefill {
  const AttnArgs& a;
  const prefill_detail::TilePlan& plan;
  int group;
  int smem_optin;  // the device's cudaDevAttrMaxSharedMemoryPerBlockOptin
  cudaStream_t stream;
  const PrefillTuning* tuning = nullptr;  // null: the production shape for D

  template <int D, int BK, int kSplit, int kRowWarps = 4>
  void Launch() const {
    LaunchPrefillKernel<D, BK, kSplit, kRowWarps, 0>(a, plan, group, smem_optin, stream);
  }

  template <int D>
  void operator()() const {
    const PrefillTuning t = tuning != nullptr ? *tuning : ProductionTuningFor(D, smem_optin);
    if (t.wgmma != 0) {
      TP_CHECK(prefill_detail::LaunchWgmma(D, t.wgmma, a, plan, group, smem_optin, stream));  // else not offered for D
    } else {
      TP_CHECK(LaunchTile<D>(t));  // else not one of PrefillAttentionTunings(D)
    }
  }

  // The tiles instantiated: production's (ProductionTuningFor) and the others
  // PrefillAttentionTunings offers.
  template <int D>
  bool LaunchTile(const PrefillTuning& t) const {
    auto is = [&](int bk, int rw) { return t.block_keys == bk && t.row_warps == rw; };
    if constexpr (D != 256 && D != 512) {
      if (is(64, 4)) return Launch<D, 64, 1, 4>(), true;
    } else if constexpr (D == 256) {
      if (is(32, 4)) return Launch<256, 32, 1, 4>(), true;
      if (is(64, 4)) return Launch<256, 64, 1, 4>(), true;
      if (is(32, 8)) return Launch<256, 32, 1, 8>(), true;
      if (is(64, 8)) return Launch<256, 64, 1, 8>(), true;
    } else if constexpr (D == 512) {
      if (is(32, 4)) return Launch<512, 32, 2, 4>(), true;
      if (is(16, 4)) return Launch<512, 16, 2, 4>(), true;
    }
    return false;
  }
};

}  // namespace

size_t PrefillAttentionWorkspaceBytes(int64_t tokens) {
  return static_cast<size_t>(2 * tokens + 1) * sizeof(int32_t);
}

namespace {
int SmemOptin() {
  int device = 0, smem_optin = 0;
  TP_CUDA_CHECK(cudaGetDevice(&device));
  TP_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return smem_optin;
}

// PrefillAttention with `tuning`'s tile shape (null: the production shape for the head dim).
void RunPrefill(const PrefillTuning* tuning, const bf16* q, const bf16* k_cache, const bf16* v_cache,
                const int32_t* token_seq, const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                const cpu::PagedAttentionParams& p, void* workspace, size_t workspace_bytes, bf16* out,
                cudaStream_t stream) {
  if (tokens == 0) return;
  TP_CHECK(workspace_bytes >= PrefillAttentionWorkspaceBytes(tokens));
  const AttnArgs a = MakeAttnArgs(q, k_cache, v_cache, token_seq, token_pos, tokens, block_tables, p, out);
  const prefill_detail::TilePlan plan = prefill_detail::LayoutTilePlan(workspace, tokens);
  DispatchHeadDim(p.head_dim, LaunchPrefill{a, plan, p.num_q_heads / p.num_kv_heads, SmemOptin(), stream, tuning});
}
}  // namespace

void PrefillAttention(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, int64_t tokens, const int32_t* block_tables,
                      const cpu::PagedAttentionParams& p, void* workspace, size_t workspace_bytes, bf16* out,
                      cudaStream_t stream) {
  RunPrefill(nullptr, q, k_cache, v_cache, token_seq, token_pos, tokens, block_tables, p, workspace, workspace_bytes,
             out, stream);
}

std::vector<PrefillTuning> PrefillAttentionTunings(int32_t head_dim) {
  std::vector<PrefillTuning> all;
  if (head_dim == 256) {
    all = {TuningOf<256, 32, 1, 4>(), TuningOf<256, 64, 1, 4>(), TuningOf<256, 32, 1, 8>(), TuningOf<256, 64, 1, 8>()};
  } else if (head_dim == 512) {
    all = {TuningOf<512, 32, 2, 4>(), TuningOf<512, 16, 2, 4>()};  // 8 row warps of 2 would spill (512 threads)
  }
  const int smem_optin = SmemOptin();
  std::vector<PrefillTuning> fit;
  for (const PrefillTuning& t : all) {
    if (t.smem_bytes <= static_cast<size_t>(smem_optin)) fit.push_back(t);
  }
  return fit;
}

PrefillTuning PrefillAttentionProductionTuning(int32_t head_dim) {
  return ProductionTuningFor(head_dim, SmemOptin());
}

std::vector<PrefillTuning> PrefillAttentionWgmmaTunings(int32_t head_dim) {
  std::vector<PrefillTuning> out;
  for (int variant : {1, 2}) {
    const size_t bytes = prefill_detail::WgmmaSmemBytes(head_dim, variant);
    if (bytes == 0 || bytes > static_cast<size_t>(SmemOptin())) continue;
    out.push_back(PrefillTuning{.block_keys = 32, .row_warps = 4, .smem_bytes = bytes, .wgmma = variant});
  }
  return out;
}

void PrefillAttentionWithTuning(const PrefillTuning& t, const bf16* q, const bf16* k_cache, const bf16* v_cache,
                                const int32_t* token_seq, const int32_t* token_pos, int64_t tokens,
                                const int32_t* block_tables, const cpu::PagedAttentionParams& p, void* workspace,
                                size_t workspace_bytes, bf16* out, cudaStream_t stream) {
  RunPrefill(&t, q, k_cache, v_cache, token_seq, token_pos, tokens, block_tables, p, workspace, workspace_bytes, out,
             stream);
}

}  // namespace tpserve::cuda
