// The CPU backend: fp32 activations, weights as loaded, ops from kernels/cpu.
// Tested through tests/model_test.cc.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/quant.h"
#include "worker/backend.h"
#include "worker/host_memory.h"

namespace tpserve {
namespace {

class HostBuffer : public Buffer {
 public:
  HostBuffer(HostAllocation memory, size_t n) : memory_(std::move(memory)), n_(n) {}
  void* data() override { return memory_.data(); }
  size_t bytes() const override { return n_; }

 private:
  HostAllocation memory_;
  size_t n_;
};

float* F32(const Tensor& t) {
  TP_CHECK(t.dtype == DType::kF32);
  return static_cast<float*>(t.data);
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& o) : options_(o) { omp_set_num_threads(std::max(1, o.threads)); }
  std::string name() const override {
    return absl::StrCat("cpu(threads=", options_.threads, ", gemm=", cpu::GemmPathName(options_.cpu_gemm),
                        ", quant_prefill=", cpu::QuantPrefillName(options_.cpu_quant_prefill),
                        ", huge_pages=", options_.cpu_huge_pages ? "on" : "off", ")");
  }
  DType activation_dtype() const override { return DType::kF32; }
  bool SupportsQuantizedWeights(DType t) const override { return cpu::HasQuantDot(t); }
  bool PrefillWidens(DType t) const override {
    return IsQuantized(t) && (options_.cpu_quant_prefill != cpu::QuantPrefill::kInt8 || t == DType::kF8_E4M3);
  }
  bool device_is_host() const override { return true; }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    return Make(bytes, /*huge_pages=*/false);
  }
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateWeights(size_t bytes) override {
    return Make(bytes, options_.cpu_huge_pages);
  }
  void CopyFromHost(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyToHost(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void Synchronize() override {}

  void Embedding(const int32_t* ids, int64_t n, const Tensor& table, int64_t vocab_start, float scale,
                 Tensor out) override {
    cpu::Embedding(ids, n, table.data, table.dtype, vocab_start, table.rows, table.cols, scale, F32(out));
  }
  void RmsNorm(const Tensor& x, const float* w, float eps, cpu::NormKind kind, Tensor out) override {
    cpu::RmsNorm(F32(x), w, x.rows, x.cols, eps, kind, F32(out));
  }
  void Linear(const Tensor& x, const Tensor& w, const float* bias, Tensor y) override {
    TP_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows);
    cpu::Linear(options_.cpu_gemm, options_.cpu_quant_prefill, F32(x), x.rows, x.cols, w.data, w.dtype, w.rows, F32(y));
    if (bias != nullptr) {
      for (int64_t r = 0; r < y.rows; ++r) cpu::Add(F32(y) + r * y.cols, bias, y.cols, F32(y) + r * y.cols);
    }
  }
  // On the amx-bf16 path bf16 weights are held in tile order (kernels/cpu/gemm_amx.h): the
  // prefill reads them as the tiles' B operand without repacking them per product.
  void PrepareLinearWeight(Tensor& w, std::span<const int64_t> row_splits) override {
    if (options_.cpu_gemm != cpu::GemmPath::kAmxBf16 || w.dtype != DType::kBF16 ||
        !cpu::amx::CanHoldAsTiles(w.rows, w.cols)) {
      return;
    }
    for (int64_t r : row_splits) {
      if (r % cpu::amx::kTileGroupRows != 0) return;
    }
    cpu::amx::PackTiles(static_cast<uint16_t*>(w.data), w.rows, w.cols);
    w.dtype = DType::kBF16Tiles;
  }
  void Rope(Tensor x, int64_t head_dim, const int32_t* positions, const float* inv_freq, float attn_factor) override {
    cpu::Rope(F32(x), x.rows, x.cols / head_dim, head_dim, positions, inv_freq, attn_factor);
  }
  void GatedActivation(const Tensor& gate_up, cpu::Activation act, Tensor out) override {
    cpu::GatedActivation(F32(gate_up), gate_up.rows, out.cols, act, F32(out));
  }
  bool GatedActivationInPlace() const override { return true; }
  void Softcap(Tensor x, float cap) override { cpu::Softcap(F32(x), x.numel(), cap); }
  void Add(const Tensor& a, const Tensor& b, Tensor out) override { cpu::Add(F32(a), F32(b), a.numel(), F32(out)); }
  void Scale(Tensor x, float s) override { cpu::Scale(F32(x), x.numel(), s); }
  void Copy(const Tensor& src, Tensor dst) override { std::memcpy(dst.data, src.data, src.bytes()); }
  void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) override {
    for (int64_t i = 0; i < n; ++i) std::memcpy(F32(out) + i * x.cols, F32(x) + rows[i] * x.cols, x.cols * 4);
  }
  void WriteKv(const Tensor& k, const Tensor& v, const int32_t* slot_mapping, int64_t head_dim,
               cpu::KvCacheDType kv_dtype, void* k_cache, void* v_cache) override {
    cpu::WriteKv(F32(k), F32(v), slot_mapping, k.rows, k.cols / head_dim, head_dim, kv_dtype, k_cache, v_cache);
  }
  bool SupportsKvCacheDType(cpu::KvCacheDType) const override { return true; }
  void PagedAttention(const Tensor& q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, const int32_t* block_tables, const cpu::PagedAttentionParams& p,
                      Tensor out) override {
    cpu::PagedAttention(F32(q), k_cache, v_cache, token_seq,
                        token_pos, q.rows, block_tables, p, F32(out));
  }

 private:
  static absl::StatusOr<std::unique_ptr<Buffer>> Make(size_t bytes, bool huge_pages) {
    TP_ASSIGN_OR_RETURN(HostAllocation memory, HostAllocation::Make(bytes, huge_pages));
    return std::unique_ptr<Buffer>(new HostBuffer(std::move(memory), bytes));
  }

  BackendOptions options_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace tpserve
