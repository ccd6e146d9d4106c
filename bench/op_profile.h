// Where a step's time goes, op by op: a Backend decorator that, while recording, waits for
// the device before and after every op it passes on and adds the wall time to that op's
// row (name and shape). Each timed op thus includes one device round trip (measured
// separately: sync_us) and no overlap with its neighbours, so the rows add up to more
// than an unprofiled step; they say where the time goes, the step time says how much.
// Used by engine_bench --op_profile (CPU and CUDA); tested by tests/op_profile_test.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "worker/forwarding_backend.h"

namespace tpserve {

struct OpProfileRow {
  std::string op;  // e.g. "linear_split m=1 n=16384 k=5376"
  int64_t calls = 0;
  double total_us = 0;
};

class OpProfileBackend : public ForwardingBackend {
 public:
  explicit OpProfileBackend(std::unique_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}
  std::string name() const override { return ForwardingBackend::name() + "+op-profile"; }

  // Starts recording (clearing earlier rows) / stops. Off, every call passes straight on.
  void Start();
  void Stop();
  // Rows by total time, largest first.
  std::vector<OpProfileRow> Rows() const;
  // The median cost of an empty Synchronize() pair on this device: the floor of every row.
  double SyncUs();

  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyFromHost2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                      size_t rows) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Embedding(const int32_t* ids, int64_t n, const Tensor& table, int64_t vocab_start, float scale,
                 Tensor out) override;
  void RmsNorm(const Tensor& x, const float* w, float eps, cpu::NormKind kind, Tensor out) override;
  void Linear(const Tensor& x, const Tensor& w, const float* bias, Tensor y) override;
  void Rope(Tensor x, int64_t head_dim, const int32_t* positions, const float* inv_freq, float attn_factor) override;
  void GatedActivation(const Tensor& gate_up, cpu::Activation act, Tensor out) override;
  void Softcap(Tensor x, float cap) override;
  void Add(const Tensor& a, const Tensor& b, Tensor out) override;
  void Scale(Tensor x, float s) override;
  void Copy(const Tensor& src, Tensor dst) override;
  void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) override;
  void WriteKv(const Tensor& k, const Tensor& v, const int32_t* slot_mapping, int64_t head_dim,
               cpu::KvCacheDType kv_dtype, void* k_cache, void* v_cache) override;
  void PagedAttention(const Tensor& q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, const int32_t* block_tables, const cpu::PagedAttentionParams& p,
                      Tensor out) override;
  void LinearSplit(const Tensor& x, const Tensor& w, const float* bias, std::span<const Tensor> outs) override;
  void AttentionPrologue(Tensor q, Tensor k, Tensor v, const AttentionPrologueParams& p) override;
  void ResidualNorm(Tensor o, const float* post_w, Tensor h, float scale, const float* next_w, float eps,
                    cpu::NormKind kind, Tensor x) override;
  void SampleShards(const void* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab,
                    const RowSampling* params, const int32_t* offsets, const int32_t* token_ids, const int32_t* counts,
                    int32_t* out) override;

 private:
  // Runs f; while recording, timed under the row label() names (built only then).
  template <typename Label, typename F>
  void Timed(Label&& label, F&& f);

  bool recording_ = false;
  std::map<std::string, OpProfileRow> rows_;
};

// Prints `rows`, recorded over `steps` steps, as a table under a line naming `what` and
// saying how long a step took timed so (`step_ms`), what its ops add up to and how much of
// that is synchronization (`sync_us` a call): calls and milliseconds per step, microseconds a
// call, share of the ops' total.
void PrintOpProfile(const std::string& what, const std::vector<OpProfileRow>& rows, int steps, double step_ms,
                    double sync_us);

}  // namespace tpserve
