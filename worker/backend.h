// The forward pass reaches every op through this interface: the CPU backend
// (cpu_backend.cc) today, CUDA behind the same calls. Tensors are non-owning 2-D
// row-major views; buffers are owned by the backend that allocated them.
// Tested through tests/model_test.cc (the whole model) and the kernels' own tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"
#include "worker/decode_graphs.h"

namespace tpserve {

// Device memory owned by a backend; freed on destruction.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
};

// A dense row-major [rows, cols] view. A weight may be of a block-quantized dtype: each row is
// then cols / BlockElems(dtype) blocks (RowBytes); only a backend that says
// SupportsQuantizedWeights(dtype) is handed one.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t numel() const { return rows * cols; }
  size_t row_bytes() const { return RowBytes(dtype, cols); }
  size_t bytes() const { return static_cast<size_t>(rows) * row_bytes(); }
  // Rows [r0, r0 + n).
  Tensor RowSlice(int64_t r0, int64_t n) const {
    return Tensor{static_cast<uint8_t*>(data) + r0 * row_bytes(), dtype, n, cols};
  }
  // The same bytes seen as [rows * cols / new_cols, new_cols].
  Tensor Reshape(int64_t new_cols) const { return Tensor{data, dtype, numel() / new_cols, new_cols}; }
};

// What Backend::AttentionPrologue needs besides q, k and v (device pointers).
struct AttentionPrologueParams {
  int64_t head_dim = 0;
  const float* q_norm = nullptr;  // fp32 [head_dim] per-head RMSNorm weights; null: no norm
  const float* k_norm = nullptr;
  bool v_norm = false;            // weightless per-head RMSNorm of v (Gemma 4)
  float eps = 1e-6f;
  cpu::NormKind norm_kind = cpu::NormKind::kScale;  // of q_norm and k_norm
  const int32_t* positions = nullptr;               // [tokens]
  const float* inv_freq = nullptr;                  // [head_dim / 2], see Rope
  const int32_t* slot_mapping = nullptr;            // [tokens], see WriteKv
  cpu::KvCacheDType kv_dtype = cpu::KvCacheDType::kF32;  // see WriteKv
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};

// Kernel choices where a backend has several (CUDA: kernels/cuda/cuda_kernels.h,
// GemvLaunch; bulk and pdl need compute capability 9.0+); other backends ignore them.
struct KernelOptions {
  bool bulk_gemv = false;  // GEMVs (m <= 4) stream weights through shared memory with bulk copies
  bool pdl = false;        // GEMVs start while the kernel before them finishes (programmatic launch)
  // Linear and prefill attention use what Backend::TuneKernels measured fastest: per
  // weight shape the GEMV's block shape or the bulk kernel at 1-4 rows (the same bits
  // whichever wins) and the cuBLASLt algorithm per row count above; per attention
  // configuration the prefill kernel's tile shape (other summation orders: logits move by
  // rounding); bulk_gemv is then not used. What it did not measure keeps the defaults.
  bool tuned = false;
  bool operator==(const KernelOptions&) const = default;
};

// "split" (the default), "bulk" or "tuned", each optionally with "+pdl" (the vocabulary of
// tpserve's and engine_bench's --kernels); an error names the choices.
absl::StatusOr<KernelOptions> ParseKernelOptions(std::string_view spec);
// The spec ParseKernelOptions reads back as `k` ("split", "tuned+pdl", ...).
std::string KernelOptionsName(const KernelOptions& k);

// A weight the model multiplies by, for Backend::TuneKernels: its products have 1 to
// max_rows rows; `parts` are LinearSplit's output widths (summing to w.rows) where it is
// split, empty where it goes through Linear.
struct LinearUse {
  Tensor w;
  std::vector<int64_t> parts;
  int64_t max_rows = 0;
};

// An attention configuration the model runs (one per layer), for Backend::TuneKernels:
// prefill chunks of up to max_tokens query tokens with p's heads, head_dim, scale, window
// and softcap (the tuner picks block_size and max_blocks_per_seq for its own prompt).
struct AttentionUse {
  cpu::PagedAttentionParams p;
  int64_t max_tokens = 0;
};

// What Backend::TuneKernels chooses for.
struct KernelUses {
  std::vector<LinearUse> linear;
  std::vector<AttentionUse> attention;
};

// What Backend::TuneKernels measured: one line per product shape or attention
// configuration it timed, saying what won.
struct TuneReport {
  int products = 0;  // (kernel family, shape) pairs timed
  int changed = 0;   // of them, where a candidate other than the default won
  double seconds = 0;
  std::vector<std::string> lines;
};

struct BackendOptions {
  int threads = 1;      // CPU: OpenMP threads for kernels
  // CPU: how Linear computes products, in what precision of x (cpu::GemmPath; launch
  // resolves --cpu-gemm with cpu::ChooseGemmPath). Default: the fp32 sgemm reference.
  cpu::GemmPath cpu_gemm = cpu::GemmPath::kSgemm;
  // CPU: how prefill multiplies block-quantized weights (cpu::QuantPrefill, chosen with the
  // path by cpu::ChooseGemmPath). Default: widened, as the path multiplies bf16 weights.
  cpu::QuantPrefill cpu_quant_prefill = cpu::QuantPrefill::kWiden;
  // CPU: weight buffers of >= 2 MiB (AllocateWeights) on 2 MiB-aligned mappings madvised
  // for transparent huge pages (worker/host_memory.h; launch turns it off where the
  // kernel's THP policy is "never"). Off: the C heap, 4 KiB pages under THP "madvise".
  // The KV cache and activations (Allocate) are on 4 KiB pages either way: decode reads a
  // few KiB of them per token and layer, so huge pages would buy nothing there, while a
  // short sequence would fault in 2 MiB per layer buffer (resident set above the weights).
  bool cpu_huge_pages = true;
  int device = 0;       // CUDA: device ordinal
  KernelOptions kernels{};
};

// Times spans of a rank's enqueued work (its collectives) in the order the backend runs
// them: on the host by the wall clock (the work runs inside the call); on a GPU by events
// recorded on the stream around it, read once the work has completed, so that timing
// needs no synchronize before or after the span. Spans begun while a CUDA graph is being
// captured are not timed (a replayed graph times nothing). One thread uses it.
class SpanTimer {
 public:
  virtual ~SpanTimer() = default;
  virtual void Begin() = 0;
  virtual void End() = 0;
  // The total of the spans ended since the last call, in microseconds. Call it once the
  // backend has completed the work (after Synchronize or a copy to the host).
  virtual double TakeUs() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // dtype of activations and of the KV cache.
  virtual DType activation_dtype() const = 0;
  // True when device memory is host memory (weights are read straight into it).
  virtual bool device_is_host() const = 0;

  // Whether Linear and Embedding read weights of block-quantized dtype `t` as they are
  // stored (the loader keeps such weights quantized only then; otherwise it widens them to
  // the model's float dtype at load). Default: none.
  virtual bool SupportsQuantizedWeights(DType /*t*/) const { return false; }
  // Whether Linear's prefill products (more than cpu::kMaxStreamingRows rows) widen kept
  // weights of dtype `t` panel by panel, work repeated by every call (the model then runs its
  // MLP in chunks of ModelOptions::quantized_mlp_chunk_tokens), rather than reading them as
  // stored. Default: every block-quantized dtype.
  virtual bool PrefillWidens(DType t) const { return IsQuantized(t); }

  // Working memory: the KV cache, activations, step inputs.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) = 0;
  // Memory for weights, streamed whole by every decode step: a backend may place it
  // differently (the CPU backend's huge pages, BackendOptions::cpu_huge_pages). Default:
  // Allocate.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> AllocateWeights(size_t bytes) { return Allocate(bytes); }
  virtual void CopyFromHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Synchronize() = 0;
  // `rows` rows of `row_bytes` bytes from src (rows `src_pitch` bytes apart) to dst (rows
  // `dst_pitch` apart), ordered like CopyFromHost. Default: one CopyFromHost where both
  // are dense, else one per row.
  virtual void CopyFromHost2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                              size_t rows);
  // Switches between kernels that give the same results (between steps, on the backend's
  // thread; captured CUDA graphs keep the kernels they captured). Default: none to switch.
  virtual void SetKernelOptions(const KernelOptions&) {}
  // Times the backend's interchangeable kernels for these weights' products and attention
  // configurations (deduplicated by shape) and keeps the fastest, for Linear, LinearSplit
  // and PagedAttention while KernelOptions::tuned is set; replaces earlier choices.
  // Synchronizes; graphs captured before it are dropped. Temporary buffers come from
  // device memory, so call it before planning the KV cache. Default: nothing to choose.
  virtual absl::StatusOr<TuneReport> TuneKernels(const KernelUses& /*uses*/) { return TuneReport{}; }

  // out[t, :] = table[ids[t] - vocab_start, :] * scale, zero rows for ids outside the shard.
  // table: [vocab_rows, dim] in the weight dtype; ids on the device.
  virtual void Embedding(const int32_t* ids, int64_t n, const Tensor& table, int64_t vocab_start, float scale,
                         Tensor out) = 0;
  // Row-wise RMSNorm of x [rows, dim] (per-head norms pass [tokens * heads, head_dim]).
  // w: fp32 [dim] on the device, null for kNoScale.
  virtual void RmsNorm(const Tensor& x, const float* w, float eps, cpu::NormKind kind, Tensor out) = 0;
  // y[M, N] = x[M, K] · w[N, K]^T (+ bias[N], fp32, may be null).
  virtual void Linear(const Tensor& x, const Tensor& w, const float* bias, Tensor y) = 0;
  // Called once on a linear layer's weight after it is loaded and before any product reads
  // it: the backend may rewrite it in place into a layout of its own of the same size (the
  // CPU backend on the amx-bf16 path: bf16 into AMX tile order, w.dtype then kBF16Tiles).
  // `row_splits`: every row at which callers will slice it (RowSlice) besides 0. Default: kept.
  virtual void PrepareLinearWeight(Tensor& /*w*/, std::span<const int64_t> /*row_splits*/) {}
  // In-place rotary embedding of x [tokens, heads * head_dim]; inv_freq: fp32 [head_dim / 2].
  virtual void Rope(Tensor x, int64_t head_dim, const int32_t* positions, const float* inv_freq,
                    float attn_factor) = 0;
  // gate_up [rows, 2 * dim] -> out [rows, dim].
  virtual void GatedActivation(const Tensor& gate_up, cpu::Activation act, Tensor out) = 0;
  // Whether GatedActivation takes out on gate_up's own bytes (out.data == gate_up.data): the
  // MLP then needs no second buffer.
  virtual bool GatedActivationInPlace() const { return false; }
  virtual void Softcap(Tensor x, float cap) = 0;
  virtual void Add(const Tensor& a, const Tensor& b, Tensor out) = 0;
  virtual void Scale(Tensor x, float s) = 0;
  virtual void Copy(const Tensor& src, Tensor dst) = 0;
  // out[i, :] = x[rows[i], :].
  virtual void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) = 0;
  // k, v: [tokens, kv_heads * head_dim]; caches: [num_slots, kv_heads * head_dim].
  // kv_dtype: how the caches hold K and V (cpu::KvCacheDType); kF32 means "as the activations"
  // (fp32 on the CPU, bf16 on CUDA), the only one a backend without SupportsKvCacheDType takes.
  virtual void WriteKv(const Tensor& k, const Tensor& v, const int32_t* slot_mapping, int64_t head_dim,
                       cpu::KvCacheDType kv_dtype, void* k_cache, void* v_cache) = 0;
  // Whether WriteKv and PagedAttention (PagedAttentionParams::kv_dtype) take caches held as t.
  virtual bool SupportsKvCacheDType(cpu::KvCacheDType t) const { return t == cpu::KvCacheDType::kF32; }
  // q, out: [tokens, q_heads * head_dim]; see cpu::PagedAttention.
  virtual void PagedAttention(const Tensor& q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                              const int32_t* token_pos, const int32_t* block_tables,
                              const cpu::PagedAttentionParams& p, Tensor out) = 0;
  // Fused sequences of the ops above. Each default runs the sequence op by op (the CPU
  // backend, the test backends); the CUDA backend runs each as one kernel with the same
  // bf16 rounding points, so the two agree bit for bit.
  //
  // y = x · w^T with y split by columns: outs[i] gets w's next outs[i].cols rows (and bias
  // entries), e.g. a fused QKV projection into separate q, k and v.
  virtual void LinearSplit(const Tensor& x, const Tensor& w, const float* bias, std::span<const Tensor> outs);
  // The attention block between the QKV projection and the attention: per-head RMSNorm of
  // q and k (where weights are given) and of v (v_norm), RoPE on q and k (attn_factor 1),
  // then k and v into the paged cache. q [tokens, q_heads * head_dim] is rewritten in
  // place; k, v [tokens, kv_heads * head_dim] may be clobbered.
  virtual void AttentionPrologue(Tensor q, Tensor k, Tensor v, const AttentionPrologueParams& p);
  // The residual joint between blocks: o = RmsNorm(o, post_w) (post_w null: o as is),
  // h += o, h *= scale, then x = RmsNorm(h, next_w) (next_w null: x untouched). o, h, x:
  // [rows, dim]; o may be clobbered; x aliases neither.
  virtual void ResidualNorm(Tensor o, const float* post_w, Tensor h, float scale, const float* next_w, float eps,
                            cpu::NormKind kind, Tensor x);

  // Rank 0's token choice, kernels/row_sampling.h's rule, over full logit rows assembled
  // from the vocab-parallel head's gathered output: `shards` (device memory, activation
  // dtype) holds tp consecutive blocks [rows, shard_cols], block k for token ids
  // [k * shard_cols, ...) stored [rows, min(shard_cols, vocab - k * shard_cols)]. params
  // [rows] and the penalty entries (CSR, offsets [rows + 1]) are host arrays; writes rows
  // token ids to host `out`, complete when the call returns. This default copies the rows
  // to the host and samples there (cpu::SampleRows), or, on a host backend at TP 1 with no
  // penalty entries, samples the fp32 rows where they are (cpu::SampleUnpenalizedRows); the
  // shards are never written. The CUDA backend samples on its device.
  virtual void SampleShards(const void* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab,
                            const RowSampling* params, const int32_t* offsets, const int32_t* token_ids,
                            const int32_t* counts, int32_t* out);
  // The same shards as fp32 rows [rows, vocab] on the host.
  void CopyShardsToHost(const void* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab, float* out);

  // Grows the attention workspaces for steps of up to `tokens` tokens with these shapes
  // now, so that a later graph capture needs no allocation (no-op where nothing is lazy).
  virtual absl::Status ReserveAttentionWorkspace(int64_t /*tokens*/, const cpu::PagedAttentionParams& /*p*/) {
    return absl::OkStatus();
  }
  // Graphs of decode steps on this backend's stream, for these batch sizes; null where the
  // backend cannot capture (the CPU). The graphs notice the backend's own workspaces moving.
  virtual std::unique_ptr<StepGraphs> MakeStepGraphs(const std::vector<int32_t>& /*batch_sizes*/) { return nullptr; }
  // A timer for spans of this backend's work (SpanTimer). Default: the wall clock, for
  // backends whose ops complete inside their calls (the CPU).
  virtual std::unique_ptr<SpanTimer> MakeSpanTimer();

 private:
  std::vector<float> sample_rows_;  // SampleShards' host rows, kept between steps
};

std::unique_ptr<Backend> MakeCpuBackend(const BackendOptions& options);

}  // namespace tpserve
