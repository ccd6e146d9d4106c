// Backend's default ops: the fused sequences op by op, and sampling on the host. Tested
// through tests/model_test.cc (the CPU backend uses every default) and, for the CUDA
// backend's fused versions, tests/cuda_elementwise_test.cc and tests/cuda_linear_test.cc.
#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "worker/backend.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve {

absl::StatusOr<KernelOptions> ParseKernelOptions(std::string_view spec) {
  KernelOptions k;
  std::string_view base = spec;
  if (base.ends_with("+pdl")) {
    k.pdl = true;
    base.remove_suffix(4);
  }
  if (base == "split" || base == "bulk" || base == "tuned") {
    k.bulk_gemv = base == "bulk";
    k.tuned = base == "tuned";
    return k;
  }
  return absl::InvalidArgumentError(absl::StrCat("kernels \"", std::string(spec),
                                                 "\" is not one of split, bulk, tuned, split+pdl, bulk+pdl, tuned+pdl"));
}

std::string KernelOptionsName(const KernelOptions& k) {
  return absl::StrCat(k.tuned ? "tuned" : k.bulk_gemv ? "bulk" : "split", k.pdl ? "+pdl" : "");
}

namespace {

class WallClockSpanTimer : public SpanTimer {
 public:
  void Begin() override { start_ = std::chrono::steady_clock::now(); }
  void End() override {
    total_us_ += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
  }
  double TakeUs() override { return std::exchange(total_us_, 0.0); }

 private:
  std::chrono::steady_clock::time_point start_;
  double total_us_ = 0;
};

}  // namespace

std::unique_ptr<SpanTimer> Backend::MakeSpanTimer() { return std::make_unique<WallClockSpanTimer>(); }

void Backend::CopyFromHost2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                             size_t rows) {
  if (dst_pitch == row_bytes && src_pitch == row_bytes) return CopyFromHost(dst, src, rows * row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    CopyFromHost(static_cast<uint8_t*>(dst) + r * dst_pitch, static_cast<const uint8_t*>(src) + r * src_pitch,
                 row_bytes);
  }
}

void Backend::LinearSplit(const Tensor& x, const Tensor& w, const float* bias, std::span<const Tensor> outs) {
  int64_t cols = 0;
  for (const Tensor& y : outs) cols += y.cols;
  TP_CHECK(cols == w.rows);
  int64_t r0 = 0;
  for (const Tensor& y : outs) {
    Linear(x, w.RowSlice(r0, y.cols), bias != nullptr ? bias + r0 : nullptr, y);
    r0 += y.cols;
  }
}

void Backend::AttentionPrologue(Tensor q, Tensor k, Tensor v, const AttentionPrologueParams& p) {
  const int64_t D = p.head_dim;
  if (p.q_norm != nullptr) RmsNorm(q.Reshape(D), p.q_norm, p.eps, p.norm_kind, q.Reshape(D));
  if (p.k_norm != nullptr) RmsNorm(k.Reshape(D), p.k_norm, p.eps, p.norm_kind, k.Reshape(D));
  if (p.v_norm) RmsNorm(v.Reshape(D), nullptr, p.eps, cpu::NormKind::kNoScale, v.Reshape(D));
  Rope(q, D, p.positions, p.inv_freq, 1.0f);
  Rope(k, D, p.positions, p.inv_freq, 1.0f);
  WriteKv(k, v, p.slot_mapping, D, p.kv_dtype, p.k_cache, p.v_cache);
}

void Backend::ResidualNorm(Tensor o, const float* post_w, Tensor h, float scale, const float* next_w, float eps,
                           cpu::NormKind kind, Tensor x) {
  if (post_w != nullptr) RmsNorm(o, post_w, eps, kind, o);
  Add(h, o, h);
  if (scale != 1.0f) Scale(h, scale);
  if (next_w != nullptr) RmsNorm(h, next_w, eps, kind, x);
}

void Backend::CopyShardsToHost(const void* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab,
                               float* out) {
  if (rows == 0) return;
  const DType dt = activation_dtype();
  const size_t es = DTypeSize(dt);
  // A host backend's shards are read where they are.
  const uint8_t* raw = static_cast<const uint8_t*>(shards);
  std::vector<uint8_t> copy;
  if (!device_is_host()) {
    copy.resize(static_cast<size_t>(tp) * rows * shard_cols * es);
    CopyToHost(copy.data(), shards, copy.size());
    raw = copy.data();
  }
  // On a host backend the rows are split among its threads (a 262,144-token row is 1 MiB; a
  // device's rows come after one copy, converted by this thread alone).
  const bool host = device_is_host();
  for (int k = 0; k < tp; ++k) {
    const int64_t cols = std::min(shard_cols, vocab - k * shard_cols);
    if (cols <= 0) continue;
#pragma omp parallel for schedule(static) if (host && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      ToF32(raw + ((k * rows * shard_cols) + r * cols) * es, dt, cols, &out[r * vocab + k * shard_cols]);
    }
  }
}

void Backend::SampleShards(const void* shards, int tp, int64_t rows, int64_t shard_cols, int64_t vocab,
                           const RowSampling* params, const int32_t* offsets, const int32_t* token_ids,
                           const int32_t* counts, int32_t* out) {
  if (rows == 0) return;
  if (device_is_host() && tp == 1 && activation_dtype() == DType::kF32 && offsets[rows] == 0) {
    // Nothing to penalize: the rows are read where the head wrote them, not copied first (a
    // 262,144-token row is 1 MiB; copying a 16-row step's took as long as sampling it).
    cpu::SampleUnpenalizedRows(static_cast<const float*>(shards), rows, vocab, params, out);
    return;
  }
  // Kept between steps: a buffer allocated per step (5 MB for a 5-row verification step over
  // a 262,144-token vocabulary) came from fresh pages each time, and faulting them in cost
  // more than the sampling. It stays at the largest step's size, which was that step's peak
  // before too.
  const size_t n = static_cast<size_t>(rows * vocab);
  if (sample_rows_.size() < n) sample_rows_.resize(n);
  CopyShardsToHost(shards, tp, rows, shard_cols, vocab, sample_rows_.data());
  cpu::SampleRows(sample_rows_.data(), rows, vocab, params, offsets, token_ids, counts, out);
}

}  // namespace tpserve
