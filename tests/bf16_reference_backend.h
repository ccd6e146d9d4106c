// A CPU reference at the CUDA backend's precision: the CPU backend with every op's output
// rounded to bf16, where the CUDA backend stores bf16 activations and KV cache. The fp32
// CPU pass is no tight reference for a bf16 pass (bf16 rounding alone moves the fixtures'
// logits by up to ~0.3 against transformers' fp32 ones), this one is (another summation
// order moves them by 0.11-0.21: tests/rounding_envelope_test.cc).
//
// The fused ops (Backend::LinearSplit, AttentionPrologue, ResidualNorm) run Backend's
// defaults, which call the ops below, so the reference rounds where the CUDA backend's
// fused kernels do.
// Attention rounds its softmax weights to bf16 before P·V, as both CUDA attention kernels
// do on tensor cores (without it, qwen2 and gemma4_multimodal fail by 1.4x on an H200).
// Used by tests/cuda_model_test.cc and tests/rounding_envelope_test.cc.
//
// With a nonzero jitter seed each Linear output is multiplied by (1 + 2^-20 u), u uniform in
// [-1, 1], before its bf16 rounding: the size of the difference another fp32 summation order
// (cuBLAS, the GEMV kernel) makes, so that runs with a few seeds show how far a fixture moves
// its logits for rounding flips alone.
#pragma once

#include <cmath>
#include <memory>
#include <random>

#include "worker/forwarding_backend.h"
#include "worker/backend.h"

namespace tpserve::testing {

// The CPU backend (fp32 activations holding bf16 values) with every output rounded.
class Bf16ReferenceBackend : public ForwardingBackend {
 public:
  explicit Bf16ReferenceBackend(uint64_t jitter_seed = 0)
      : ForwardingBackend(MakeCpuBackend(BackendOptions{.threads = 2})),
        jitter_(jitter_seed != 0),
        rng_(jitter_seed) {}
  std::string name() const override { return "cpu-bf16-reference"; }

  // Fused ops op by op, so that each step rounds.
  void LinearSplit(const Tensor& x, const Tensor& w, const float* bias, std::span<const Tensor> outs) override {
    Backend::LinearSplit(x, w, bias, outs);
  }
  void AttentionPrologue(Tensor q, Tensor k, Tensor v, const AttentionPrologueParams& p) override {
    Backend::AttentionPrologue(q, k, v, p);
  }
  void ResidualNorm(Tensor o, const float* post_w, Tensor h, float scale, const float* next_w, float eps,
                    cpu::NormKind kind, Tensor x) override {
    Backend::ResidualNorm(o, post_w, h, scale, next_w, eps, kind, x);
  }

  void Embedding(const int32_t* ids, int64_t n, const Tensor& table, int64_t vocab_start, float scale,
                 Tensor out) override {
    inner().Embedding(ids, n, table, vocab_start, scale, out);
    Round(out.RowSlice(0, n));
  }
  void RmsNorm(const Tensor& x, const float* w, float eps, cpu::NormKind kind, Tensor out) override {
    inner().RmsNorm(x, w, eps, kind, out);
    Round(out);
  }
  // As the CUDA backend: the product rounded, then the bias added and rounded again.
  void Linear(const Tensor& x, const Tensor& w, const float* bias, Tensor y) override {
    inner().Linear(x, w, nullptr, y);
    if (jitter_) Jitter(y);
    Round(y);
    if (bias == nullptr) return;
    float* p = static_cast<float*>(y.data);
    for (int64_t r = 0; r < y.rows; ++r) {
      for (int64_t c = 0; c < y.cols; ++c) p[r * y.cols + c] += bias[c];
    }
    Round(y);
  }
  void Rope(Tensor x, int64_t head_dim, const int32_t* positions, const float* inv_freq, float attn_factor) override {
    inner().Rope(x, head_dim, positions, inv_freq, attn_factor);
    Round(x);
  }
  void GatedActivation(const Tensor& gate_up, cpu::Activation act, Tensor out) override {
    inner().GatedActivation(gate_up, act, out);
    Round(out);
  }
  void Softcap(Tensor x, float cap) override {
    inner().Softcap(x, cap);
    Round(x);
  }
  void Add(const Tensor& a, const Tensor& b, Tensor out) override {
    inner().Add(a, b, out);
    Round(out);
  }
  void Scale(Tensor x, float s) override {
    inner().Scale(x, s);
    Round(x);
  }
  void PagedAttention(const Tensor& q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, const int32_t* block_tables, const cpu::PagedAttentionParams& p,
                      Tensor out) override {
    cpu::PagedAttentionParams rounded = p;
    rounded.bf16_probabilities = true;  // as both CUDA attention kernels' P·V
    inner().PagedAttention(q, k_cache, v_cache, token_seq, token_pos, block_tables, rounded, out);
    Round(out);
  }

 private:
  static void Round(Tensor t) {
    float* p = static_cast<float*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = Bf16ToF32(F32ToBf16(p[i]));
  }
  void Jitter(Tensor t) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    float* p = static_cast<float*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(p[i] * (1.0 + std::ldexp(u(rng_), -20)));
  }
  bool jitter_;
  std::mt19937_64 rng_;
};

}  // namespace tpserve::testing
