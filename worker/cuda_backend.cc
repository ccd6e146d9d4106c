// The CUDA backend: Backend's ops on one stream of one GPU. Tested by
// tests/cuda_model_test.cc and tests/cuda_graph_test.cc.
#include "worker/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/sampling.h"
#include "worker/cuda_graph_runner.h"
#include "worker/cuda_tuning.h"

namespace tpserve {
namespace {

// Linear with at most this many rows goes through the GEMV kernel (reads W once at
// memory bandwidth); more rows go to cuBLASLt.
constexpr int64_t kGemvMaxRows = 4;
// Attention over at most this many query tokens uses the split-K decode kernel; more
// tokens use the tiled prefill kernel.
constexpr int64_t kDecodeMaxTokens = 64;

using cuda::bf16;

class CudaBuffer : public Buffer {
 public:
  CudaBuffer(void* p, size_t n, int device, std::shared_ptr<std::atomic<int64_t>> live)
      : p_(p), n_(n), device_(device), live_(std::move(live)) {
    *live_ += static_cast<int64_t>(n_);
  }
  ~CudaBuffer() override {
    int current = 0;
    cudaGetDevice(&current);
    if (current != device_) cudaSetDevice(device_);
    TP_CUDA_CHECK(cudaFree(p_));
    if (current != device_) cudaSetDevice(current);
    *live_ -= static_cast<int64_t>(n_);
  }
  void* data() override { return p_; }
  size_t bytes() const override { return n_; }

 private:
  void* p_;
  size_t n_;
  int device_;
  std::shared_ptr<std::atomic<int64_t>> live_;  // the backend's count of live bytes
};

// SpanTimer by a pair of events per span, recorded on the stream: no synchronize around
// the span, the times read once the stream has passed the end events. A span begun while
// the stream is being captured into a graph is not timed.
class EventSpanTimer : public SpanTimer {
 public:
  explicit EventSpanTimer(cudaStream_t stream) : stream_(stream) {}
  ~EventSpanTimer() override {
    for (auto& [start, end] : events_) {
      cudaEventDestroy(start);
      cudaEventDestroy(end);
    }
  }
  void Begin() override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    TP_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
    open_ = status == cudaStreamCaptureStatusNone;
    if (!open_) return;
    if (used_ == kMaxPending) Fold();  // a caller that never takes: bounded, at the cost of a wait
    if (used_ == events_.size()) {
      std::pair<cudaEvent_t, cudaEvent_t> e{};
      TP_CUDA_CHECK(cudaEventCreate(&e.first));
      TP_CUDA_CHECK(cudaEventCreate(&e.second));
      events_.push_back(e);
    }
    TP_CUDA_CHECK(cudaEventRecord(events_[used_].first, stream_));
  }
  void End() override {
    if (!open_) return;
    open_ = false;
    TP_CUDA_CHECK(cudaEventRecord(events_[used_].second, stream_));
    ++used_;
  }
  double TakeUs() override {
    Fold();
    return std::exchange(folded_us_, 0.0);
  }

 private:
  static constexpr size_t kMaxPending = 4096;
  void Fold() {
    for (size_t i = 0; i < used_; ++i) {
      TP_CUDA_CHECK(cudaEventSynchronize(events_[i].second));  // at once after the step's sync
      float ms = 0;
      TP_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i].first, events_[i].second));
      folded_us_ += 1000.0 * ms;
    }
    used_ = 0;
  }
  cudaStream_t stream_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  size_t used_ = 0;
  bool open_ = false;
  double folded_us_ = 0;
};

bf16* Bf16(const Tensor& t) {
  TP_CHECK(t.dtype == DType::kBF16);
  return static_cast<bf16*>(t.data);
}

class CudaBackendImpl : public CudaBackend {
 public:
  CudaBackendImpl(int device, cudaStream_t stream, int num_sms, std::string device_name)
      : device_(device), stream_(stream), num_sms_(num_sms), device_name_(std::move(device_name)) {}
  ~CudaBackendImpl() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    gemm_.reset();
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (sample_.base != nullptr) cudaFree(sample_.base);
    cudaStreamDestroy(stream_);
  }

  // Called once the device is selected.
  void Init(const KernelOptions& kernels) {
    gemm_ = std::make_unique<cuda::Gemm>();
    SetKernelOptions(kernels);
  }
  // Below compute capability 9.0 bulk and pdl fall back inside the kernels' launchers.
  void SetKernelOptions(const KernelOptions& k) override {
    tuned_ = k.tuned;
    gemv_ = cuda::GemvLaunch{.bulk = k.bulk_gemv && !k.tuned, .pdl = k.pdl};
    gemm_->set_use_tuned(k.tuned);
    ++workspace_generation_;  // captured graphs hold the old kernels: BackendStepGraphs drop them
  }
  absl::StatusOr<TuneReport> TuneKernels(const KernelUses& uses) override;

  std::string name() const override { return absl::StrCat("cuda(device=", device_, ", ", device_name_, ")"); }
  DType activation_dtype() const override { return DType::kBF16; }
  bool device_is_host() const override { return false; }

  int device() const override { return device_; }
  cudaStream_t stream() const override { return stream_; }
  int num_sms() const override { return num_sms_; }
  DeviceMemoryInfo MemoryInfo() const override {
    size_t free_bytes = 0, total_bytes = 0;
    TP_CUDA_CHECK(cudaSetDevice(device_));
    TP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return DeviceMemoryInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
  }
  int64_t allocated_bytes() const override {
    return live_bytes_->load() + static_cast<int64_t>(workspace_bytes_ + (gemm_ ? gemm_->workspace_bytes() : 0));
  }
  bool capturing() const override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    TP_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
    return status != cudaStreamCaptureStatusNone;
  }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    TP_CHECK(!capturing());  // allocations belong before capture (warm-up step)
    TP_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear it, or the next launch check would report it
      const DeviceMemoryInfo m = MemoryInfo();
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of GPU memory allocating ", bytes, " bytes on device ", device_, " (", m.free_bytes >> 20, " MiB free of ",
          m.total_bytes >> 20, " MiB): lower --gpu-memory-utilization, the batch or the context length, or use more "
          "tensor-parallel ranks"));
    }
    return std::unique_ptr<Buffer>(new CudaBuffer(p, bytes, device_, live_bytes_));
  }

  // The pageable source is staged by the driver before the call returns, so the caller
  // may reuse it at once; the copy is ordered with the kernels on the stream.
  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    TP_CHECK(!capturing());
    if (bytes == 0) return;
    TP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void CopyFromHost2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                      size_t rows) override {
    TP_CHECK(!capturing());
    if (row_bytes == 0 || rows == 0) return;
    TP_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyHostToDevice, stream_));
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    TP_CHECK(!capturing());
    if (bytes == 0) return;
    TP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    TP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // A no-op while capturing (a captured step's collectives are NCCL on this stream).
  void Synchronize() override {
    if (capturing()) return;
    TP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void Embedding(const int32_t* ids, int64_t n, const Tensor& table, int64_t vocab_start, float scale,
                 Tensor out) override {
    TP_CHECK(out.cols == table.cols && out.rows >= n);
    cuda::Embedding(ids, n, table.data, table.dtype, vocab_start, table.rows, table.cols, scale, Bf16(out), stream_);
  }
  void RmsNorm(const Tensor& x, const float* w, float eps, cpu::NormKind kind, Tensor out) override {
    TP_CHECK(x.rows == out.rows && x.cols == out.cols);
    cuda::RmsNorm(Bf16(x), w, x.rows, x.cols, eps, kind, Bf16(out), stream_);
  }
  void Linear(const Tensor& x, const Tensor& w, const float* bias, Tensor y) override {
    TP_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows);
    const bool gemv = w.dtype != DType::kBF16 || x.rows <= kGemvMaxRows ||
                      (tuned_ && WideGemvChosen(wide_gemv_, x.rows, w.rows, w.cols));
    if (!gemv) {
      gemm_->Run(Bf16(x), x.rows, x.cols, static_cast<const bf16*>(w.data), w.rows, Bf16(y), stream_);
    } else {
      // fp16/fp32 weights also land here at any M: correct, not fast (load bf16 weights).
      // Tuned, bf16 products of up to 16 rows where the GEMV beat cuBLASLt too.
      cuda::Gemv(Bf16(x), x.rows, x.cols, w.data, w.dtype, w.rows, Bf16(y), stream_, GemvFor(x.rows, w));
    }
    if (bias != nullptr) cuda::AddBias(Bf16(y), bias, y.rows, y.cols, stream_);
  }
  void LinearSplit(const Tensor& x, const Tensor& w, const float* bias, std::span<const Tensor> outs) override {
    if ((w.dtype == DType::kBF16 && x.rows > kGemvMaxRows) || outs.size() > cuda::kMaxGemvOutputs) {
      Backend::LinearSplit(x, w, bias, outs);  // a GEMM per part: each is large
      return;
    }
    TP_CHECK(x.cols == w.cols);
    cuda::GemvOutputs y;
    int64_t cols = 0;
    for (const Tensor& o : outs) {
      TP_CHECK(o.rows == x.rows);
      y.y[y.count] = Bf16(o);
      y.cols[y.count++] = o.cols;
      cols += o.cols;
    }
    TP_CHECK(cols == w.rows);
    cuda::GemvSplit(Bf16(x), x.rows, x.cols, w.data, w.dtype, y, stream_, GemvFor(x.rows, w));
    if (bias == nullptr) return;
    int64_t r0 = 0;
    for (const Tensor& o : outs) {
      cuda::AddBias(Bf16(o), bias + r0, o.rows, o.cols, stream_);
      r0 += o.cols;
    }
  }
  void AttentionPrologue(Tensor q, Tensor k, Tensor v, const AttentionPrologueParams& p) override {
    TP_CHECK(q.rows == k.rows && k.rows == v.rows && k.cols == v.cols);
    if (p.head_dim > 1024) {
      Backend::AttentionPrologue(q, k, v, p);
      return;
    }
    cuda::AttentionPrologueArgs a;
    a.q = Bf16(q);
    a.k = Bf16(k);
    a.v = Bf16(v);
    a.tokens = q.rows;
    a.q_heads = q.cols / p.head_dim;
    a.kv_heads = k.cols / p.head_dim;
    a.head_dim = p.head_dim;
    a.q_norm = p.q_norm;
    a.k_norm = p.k_norm;
    a.v_norm = p.v_norm;
    a.eps = p.eps;
    a.norm_kind = p.norm_kind;
    a.positions = p.positions;
    a.inv_freq = p.inv_freq;
    a.slot_mapping = p.slot_mapping;
    a.k_cache = static_cast<bf16*>(p.k_cache);
    a.v_cache = static_cast<bf16*>(p.v_cache);
    cuda::AttentionPrologue(a, stream_);
  }
  void ResidualNorm(Tensor o, const float* post_w, Tensor h, float scale, const float* next_w, float eps,
                    cpu::NormKind kind, Tensor x) override {
    TP_CHECK(o.rows == h.rows && o.cols == h.cols && x.rows == h.rows && x.cols == h.cols);
    cuda::ResidualNorm(Bf16(o), post_w, Bf16(h), scale, next_w, h.rows, h.cols, eps, kind, Bf16(x), stream_);
  }
  void Rope(Tensor x, int64_t head_dim, const int32_t* positions, const float* inv_freq, float attn_factor) override {
    cuda::Rope(Bf16(x), x.rows, x.cols / head_dim, head_dim, positions, inv_freq, attn_factor, stream_);
  }
  void GatedActivation(const Tensor& gate_up, cpu::Activation act, Tensor out) override {
    TP_CHECK(gate_up.cols == 2 * out.cols && gate_up.rows == out.rows);
    cuda::GatedActivation(Bf16(gate_up), gate_up.rows, out.cols, act, Bf16(out), stream_);
  }
  void Softcap(Tensor x, float cap) override { cuda::Softcap(x.data, x.dtype, x.numel(), cap, stream_); }
  void Add(const Tensor& a, const Tensor& b, Tensor out) override {
    TP_CHECK(a.dtype == b.dtype && a.dtype == out.dtype && a.numel() == b.numel() && a.numel() == out.numel());
    cuda::Add(a.data, b.data, a.dtype, a.numel(), out.data, stream_);
  }
  void Scale(Tensor x, float s) override { cuda::Scale(x.data, x.dtype, x.numel(), s, stream_); }
  void Copy(const Tensor& src, Tensor dst) override {
    TP_CHECK(src.bytes() <= dst.bytes());
    if (src.bytes() == 0) return;
    TP_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, stream_));
  }
  void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) override {
    TP_CHECK(x.dtype == out.dtype && x.cols == out.cols);
    cuda::GatherRows(x.data, x.cols * static_cast<int64_t>(DTypeSize(x.dtype)), rows, n, out.data, stream_);
  }
  void WriteKv(const Tensor& k, const Tensor& v, const int32_t* slot_mapping, int64_t head_dim,
               cpu::KvCacheDType kv_dtype, void* k_cache, void* v_cache) override {
    TP_CHECK(kv_dtype == cpu::KvCacheDType::kF32);  // bf16 as the activations; Model::Load refuses others
    cuda::WriteKv(Bf16(k), Bf16(v), slot_mapping, k.rows, k.cols / head_dim, head_dim, static_cast<bf16*>(k_cache),
                  static_cast<bf16*>(v_cache), stream_);
  }
  void PagedAttention(const Tensor& q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, const int32_t* block_tables, const cpu::PagedAttentionParams& p,
                      Tensor out) override {
    TP_CHECK(cuda::AttentionHeadDimSupported(p.head_dim));
    const auto* kc = static_cast<const bf16*>(k_cache);
    const auto* vc = static_cast<const bf16*>(v_cache);
    TP_CHECK(EnsureWorkspace(WorkspaceBytes(q.rows, p)).ok());
    if (q.rows <= kDecodeMaxTokens) {
      cuda::DecodeAttention(Bf16(q), kc, vc, token_seq, token_pos, q.rows, block_tables, p, num_sms_, workspace_,
                            workspace_bytes_, Bf16(out), stream_);
    } else if (const cuda::PrefillTuning* tile = PrefillTileFor(p)) {
      cuda::PrefillAttentionWithTuning(*tile, Bf16(q), kc, vc, token_seq, token_pos, q.rows, block_tables, p,
                                       workspace_, workspace_bytes_, Bf16(out), stream_);
    } else {
      cuda::PrefillAttention(Bf16(q), kc, vc, token_seq, token_pos, q.rows, block_tables, p, workspace_,
                             workspace_bytes_, Bf16(out), stream_);
    }
  }

  void SampleShards(const void* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab,
                    const RowSampling* params, const int32_t* offsets, const int32_t* token_ids,
                    const int32_t* counts, int32_t* out) override {
    if (rows == 0) return;
    TP_CHECK(!capturing());
    const int64_t entries = offsets[rows];
    TP_CHECK(EnsureSampling(rows, vocab, entries).ok());
    cuda::AssembleLogits(static_cast<const bf16*>(shards), tp, rows, shard_cols, vocab, sample_.logits, stream_);
    TP_CUDA_CHECK(cudaMemcpyAsync(sample_.params, params, rows * sizeof(RowSampling), cudaMemcpyHostToDevice, stream_));
    TP_CUDA_CHECK(cudaMemcpyAsync(sample_.offsets, offsets, (rows + 1) * 4, cudaMemcpyHostToDevice, stream_));
    if (entries > 0) {
      TP_CUDA_CHECK(cudaMemcpyAsync(sample_.ids, token_ids, entries * 4, cudaMemcpyHostToDevice, stream_));
      TP_CUDA_CHECK(cudaMemcpyAsync(sample_.counts, counts, entries * 4, cudaMemcpyHostToDevice, stream_));
      cuda::ApplyPenalties(sample_.logits, rows, vocab, sample_.params, sample_.offsets, sample_.ids, sample_.counts,
                           stream_);
    }
    cuda::Sample(sample_.logits, rows, vocab, sample_.params, sample_.out, stream_);
    CopyToHost(out, sample_.out, rows * 4);
  }

  absl::Status ReserveAttentionWorkspace(int64_t tokens, const cpu::PagedAttentionParams& p) override {
    return EnsureWorkspace(WorkspaceBytes(tokens, p));
  }
  std::unique_ptr<StepGraphs> MakeStepGraphs(const std::vector<int32_t>& batch_sizes) override;
  std::unique_ptr<SpanTimer> MakeSpanTimer() override { return std::make_unique<EventSpanTimer>(stream_); }
  // Bumped whenever captured graphs go stale: the attention workspace moved, or the kernel
  // options or tuned choices changed.
  uint64_t workspace_generation() const { return workspace_generation_; }

 private:
  size_t WorkspaceBytes(int64_t tokens, const cpu::PagedAttentionParams& p) const {
    return tokens <= kDecodeMaxTokens ? cuda::DecodeAttentionWorkspaceBytes(tokens, p, num_sms_)
                                      : cuda::PrefillAttentionWorkspaceBytes(tokens);
  }
  // Grows (never shrinks) the attention workspace. Growing inside a capture is a bug: the
  // warm-up run before capture sizes it.
  absl::Status EnsureWorkspace(size_t bytes) {
    if (bytes <= workspace_bytes_) return absl::OkStatus();
    TP_CHECK(!capturing());
    TP_CUDA_CHECK(cudaSetDevice(device_));
    TP_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old workspace may still be in use
    if (workspace_ != nullptr) TP_CUDA_CHECK(cudaFree(workspace_));
    workspace_ = nullptr;
    workspace_bytes_ = 0;
    ++workspace_generation_;
    const size_t rounded = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
    if (cudaMalloc(&workspace_, rounded) != cudaSuccess) {
      cudaGetLastError();
      workspace_ = nullptr;
      return absl::ResourceExhaustedError(absl::StrCat("out of GPU memory for a ", rounded >> 20,
                                                       " MiB attention workspace on device ", device_));
    }
    workspace_bytes_ = rounded;
    return absl::OkStatus();
  }

  // Device buffers of SampleShards, grown on demand (one allocation).
  struct SamplingScratch {
    void* base = nullptr;
    size_t bytes = 0;
    float* logits = nullptr;  // [rows, vocab]
    RowSampling* params = nullptr;
    int32_t *offsets = nullptr, *ids = nullptr, *counts = nullptr, *out = nullptr;
  };
  absl::Status EnsureSampling(int64_t rows, int64_t vocab, int64_t entries) {
    auto up = [](size_t n) { return (n + 255) / 256 * 256; };
    const size_t logits = up(rows * vocab * 4), params = up(rows * sizeof(RowSampling)), offsets = up((rows + 1) * 4),
                 ids = up(std::max<int64_t>(entries, 1) * 4), out = up(rows * 4);
    const size_t need = logits + params + offsets + 2 * ids + out;
    if (need > sample_.bytes) {
      TP_CUDA_CHECK(cudaSetDevice(device_));
      TP_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffers may still be in use
      if (sample_.base != nullptr) TP_CUDA_CHECK(cudaFree(sample_.base));
      sample_ = SamplingScratch{};
      const size_t bytes = need + need / 4;  // room to grow a little without reallocating
      if (cudaMalloc(&sample_.base, bytes) != cudaSuccess) {
        cudaGetLastError();
        sample_.base = nullptr;
        return absl::ResourceExhaustedError(absl::StrCat("out of GPU memory for ", bytes >> 20,
                                                         " MiB of sampling buffers on device ", device_));
      }
      sample_.bytes = bytes;
    }
    uint8_t* p = static_cast<uint8_t*>(sample_.base);
    sample_.logits = reinterpret_cast<float*>(p);
    sample_.params = reinterpret_cast<RowSampling*>(p += logits);
    sample_.offsets = reinterpret_cast<int32_t*>(p += params);
    sample_.ids = reinterpret_cast<int32_t*>(p += offsets);
    sample_.counts = reinterpret_cast<int32_t*>(p += ids);
    sample_.out = reinterpret_cast<int32_t*>(p += ids);
    return absl::OkStatus();
  }

  // The GEMV launch for m rows of x times w: TuneKernels' choice for the shape where
  // KernelOptions::tuned and it measured one, else the options' launch.
  cuda::GemvLaunch GemvFor(int64_t m, const Tensor& w) const {
    if (!tuned_ || w.dtype != DType::kBF16) return gemv_;
    const auto it = gemv_tuned_.find({m, w.rows, w.cols});
    if (it == gemv_tuned_.end()) return gemv_;
    cuda::GemvLaunch l = it->second;
    l.pdl = gemv_.pdl;
    return l;
  }

  const int device_;
  cudaStream_t stream_;
  const int num_sms_;
  const std::string device_name_;
  std::unique_ptr<cuda::Gemm> gemm_;
  cuda::GemvLaunch gemv_;  // KernelOptions
  bool tuned_ = false;     // KernelOptions::tuned
  // The prefill attention tile TuneKernels chose for this configuration where tuned and it
  // is not the production one; else null.
  const cuda::PrefillTuning* PrefillTileFor(const cpu::PagedAttentionParams& p) const {
    if (!tuned_ || prefill_tuned_.empty()) return nullptr;
    const auto it = prefill_tuned_.find(PrefillKeyOf(p));
    return it == prefill_tuned_.end() ? nullptr : &it->second;
  }

  // TuneKernels' choices where a candidate other than the default won: GEMVs (pdl comes
  // from the options) and prefill attention tiles.
  GemvChoices gemv_tuned_;
  WideGemvChoices wide_gemv_;  // row counts 5-16 where the GEMV beat cuBLASLt
  PrefillChoices prefill_tuned_;
  SamplingScratch sample_;
  void* workspace_ = nullptr;  // attention partials / tile plans, shared by all layers
  size_t workspace_bytes_ = 0;
  uint64_t workspace_generation_ = 0;
  std::shared_ptr<std::atomic<int64_t>> live_bytes_ = std::make_shared<std::atomic<int64_t>>(0);
};

// The model's decode graphs: drops them all when an eager step has moved the attention
// workspace they read (a larger prefill grows it).
class BackendStepGraphs final : public CudaGraphRunner {
 public:
  BackendStepGraphs(const CudaBackendImpl& backend, std::vector<int32_t> sizes)
      : CudaGraphRunner(backend.stream(), std::move(sizes)),
        backend_(backend),
        generation_(backend.workspace_generation()) {}
  absl::Status Run(int32_t padded, const std::function<void()>& step) override {
    if (backend_.workspace_generation() != generation_) {
      Clear();
      generation_ = backend_.workspace_generation();
    }
    return CudaGraphRunner::Run(padded, step);
  }

 private:
  const CudaBackendImpl& backend_;
  uint64_t generation_;
};

absl::StatusOr<TuneReport> CudaBackendImpl::TuneKernels(const KernelUses& uses) {
  TP_CHECK(!capturing());
  TP_CUDA_CHECK(cudaSetDevice(device_));
  const TuneTarget target{
      .stream = stream_,
      .gemm = gemm_.get(),
      .gemv = &gemv_tuned_,
      .wide_gemv = &wide_gemv_,
      .prefill = &prefill_tuned_,
      .pdl = gemv_.pdl,
      .gemv_max_rows = kGemvMaxRows,
      .decode_max_tokens = kDecodeMaxTokens,
      .allocate = [this](size_t bytes) { return Allocate(bytes); },
  };
  auto report = TuneKernelsOnDevice(uses, target);
  ++workspace_generation_;  // captured graphs hold the old choices: BackendStepGraphs drop them
  return report;
}

std::unique_ptr<StepGraphs> CudaBackendImpl::MakeStepGraphs(const std::vector<int32_t>& batch_sizes) {
  return std::make_unique<BackendStepGraphs>(*this, batch_sizes);
}

}  // namespace

int CudaVisibleDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> MakeCudaBackend(const BackendOptions& options) {
  const int count = CudaVisibleDevices();
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", options.device, " requested but ", count,
                                                   " device(s) are visible"));
  }
  TP_CUDA_CHECK(cudaSetDevice(options.device));
  cudaDeviceProp prop{};
  TP_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  if (prop.major < 8) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", options.device, " (", prop.name,
                                                      ") has compute capability ", prop.major, ".", prop.minor,
                                                      "; the bf16 kernels need 8.0 or newer"));
  }
  cudaStream_t stream = nullptr;
  TP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto backend = std::make_unique<CudaBackendImpl>(options.device, stream, prop.multiProcessorCount, prop.name);
  backend->Init(options.kernels);
  return std::unique_ptr<CudaBackend>(std::move(backend));
}

}  // namespace tpserve
