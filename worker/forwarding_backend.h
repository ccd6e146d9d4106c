// A Backend that passes every call to another backend, for decorators that change or
// watch one or two of its ops and override only those: tests/bf16_reference_backend.h
// rounds every output to bf16, tests/decode_graphs_test.cc adds fake CUDA graphs,
// bench/op_profile.h times each op. The fused ops go to the inner backend's fused
// versions too; a decorator that wants them op by op calls Backend's defaults.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/backend.h"

namespace tpserve {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  bool device_is_host() const override { return inner_->device_is_host(); }
  bool SupportsQuantizedWeights(DType t) const override { return inner_->SupportsQuantizedWeights(t); }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateWeights(size_t bytes) override {
    return inner_->AllocateWeights(bytes);
  }
  void CopyFromHost(void* dst, const void* src, size_t bytes) override { inner_->CopyFromHost(dst, src, bytes); }
  void CopyToHost(void* dst, const void* src, size_t bytes) override { inner_->CopyToHost(dst, src, bytes); }
  void Synchronize() override { inner_->Synchronize(); }
  std::unique_ptr<SpanTimer> MakeSpanTimer() override { return inner_->MakeSpanTimer(); }
  void SetKernelOptions(const KernelOptions& k) override { inner_->SetKernelOptions(k); }
  absl::StatusOr<TuneReport> TuneKernels(const KernelUses& uses) override { return inner_->TuneKernels(uses); }
  void CopyFromHost2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                      size_t rows) override {
    inner_->CopyFromHost2D(dst, dst_pitch, src, src_pitch, row_bytes, rows);
  }
  void Embedding(const int32_t* ids, int64_t n, const Tensor& table, int64_t vocab_start, float scale,
                 Tensor out) override {
    inner_->Embedding(ids, n, table, vocab_start, scale, out);
  }
  void RmsNorm(const Tensor& x, const float* w, float eps, cpu::NormKind kind, Tensor out) override {
    inner_->RmsNorm(x, w, eps, kind, out);
  }
  void Linear(const Tensor& x, const Tensor& w, const float* bias, Tensor y) override { inner_->Linear(x, w, bias, y); }
  void PrepareLinearWeight(Tensor& w, std::span<const int64_t> row_splits) override {
    inner_->PrepareLinearWeight(w, row_splits);
  }
  void Rope(Tensor x, int64_t head_dim, const int32_t* positions, const float* inv_freq, float attn_factor) override {
    inner_->Rope(x, head_dim, positions, inv_freq, attn_factor);
  }
  void GatedActivation(const Tensor& gate_up, cpu::Activation act, Tensor out) override {
    inner_->GatedActivation(gate_up, act, out);
  }
  bool GatedActivationInPlace() const override { return inner_->GatedActivationInPlace(); }
  void Softcap(Tensor x, float cap) override { inner_->Softcap(x, cap); }
  void Add(const Tensor& a, const Tensor& b, Tensor out) override { inner_->Add(a, b, out); }
  void Scale(Tensor x, float s) override { inner_->Scale(x, s); }
  void Copy(const Tensor& src, Tensor dst) override { inner_->Copy(src, dst); }
  void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) override {
    inner_->GatherRows(x, rows, n, out);
  }
  void WriteKv(const Tensor& k, const Tensor& v, const int32_t* slot_mapping, int64_t head_dim,
               cpu::KvCacheDType kv_dtype, void* k_cache, void* v_cache) override {
    inner_->WriteKv(k, v, slot_mapping, head_dim, kv_dtype, k_cache, v_cache);
  }
  bool SupportsKvCacheDType(cpu::KvCacheDType t) const override { return inner_->SupportsKvCacheDType(t); }
  void PagedAttention(const Tensor& q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, const int32_t* block_tables, const cpu::PagedAttentionParams& p,
                      Tensor out) override {
    inner_->PagedAttention(q, k_cache, v_cache, token_seq, token_pos, block_tables, p, out);
  }
  void LinearSplit(const Tensor& x, const Tensor& w, const float* bias, std::span<const Tensor> outs) override {
    inner_->LinearSplit(x, w, bias, outs);
  }
  void AttentionPrologue(Tensor q, Tensor k, Tensor v, const AttentionPrologueParams& p) override {
    inner_->AttentionPrologue(q, k, v, p);
  }
  void ResidualNorm(Tensor o, const float* post_w, Tensor h, float scale, const float* next_w, float eps,
                    cpu::NormKind kind, Tensor x) override {
    inner_->ResidualNorm(o, post_w, h, scale, next_w, eps, kind, x);
  }
  void SampleShards(const void* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab,
                    const RowSampling* params, const int32_t* offsets, const int32_t* token_ids, const int32_t* counts,
                    int32_t* out) override {
    inner_->SampleShards(shards, tp, rows, shard_cols, vocab, params, offsets, token_ids, counts, out);
  }
  absl::Status ReserveAttentionWorkspace(int64_t tokens, const cpu::PagedAttentionParams& p) override {
    return inner_->ReserveAttentionWorkspace(tokens, p);
  }
  std::unique_ptr<StepGraphs> MakeStepGraphs(const std::vector<int32_t>& batch_sizes) override {
    return inner_->MakeStepGraphs(batch_sizes);
  }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace tpserve
