// Tensor-parallel layers: shard arithmetic, slice loading and the one collective each.
// Tested through tests/model_test.cc.
#include "worker/layers.h"


#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

absl::StatusOr<DeviceTensor> AllocMatrix(Backend& b, DType dtype, int64_t rows, int64_t cols) {
  DeviceTensor t;
  TP_ASSIGN_OR_RETURN(t.buffer, b.AllocateWeights(static_cast<size_t>(rows * cols) * DTypeSize(dtype)));
  t.view = Tensor{t.buffer->data(), dtype, rows, cols};
  return t;
}

// Reads through a host staging buffer and copies to the device.
absl::Status ReadInto(const LoadContext& ctx, const SliceRequest& req, DType dtype, void* device_dst) {
  const size_t bytes = static_cast<size_t>(req.rows * req.cols) * DTypeSize(dtype);
  if (ctx.backend.device_is_host()) return ctx.source.Read(req, dtype, device_dst);
  // Not zeroed: Read writes every byte (a 31B model would zero 62 GB for nothing).
  std::unique_ptr<uint8_t[]> host(new uint8_t[bytes]);
  TP_RETURN_IF_ERROR(ctx.source.Read(req, dtype, host.get()));
  ctx.backend.CopyFromHost(device_dst, host.get(), bytes);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ColumnParallelLinear> ColumnParallelLinear::Load(const LoadContext& ctx,
                                                                const std::vector<RowRange>& parts,
                                                                int64_t in_features,
                                                                const std::vector<std::string>& bias_names) {
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.rows;
  ColumnParallelLinear l;
  TP_ASSIGN_OR_RETURN(l.weight_, AllocMatrix(ctx.backend, ctx.weight_dtype, rows, in_features));
  int64_t r = 0;
  for (const auto& p : parts) {
    SliceRequest req{p.name, {p.full_rows, in_features}, p.row0, p.rows, 0, in_features};
    uint8_t* dst = static_cast<uint8_t*>(l.weight_.view.data) + r * in_features * DTypeSize(ctx.weight_dtype);
    TP_RETURN_IF_ERROR(ReadInto(ctx, req, ctx.weight_dtype, dst));
    r += p.rows;
  }
  if (!bias_names.empty()) {
    TP_CHECK(bias_names.size() == parts.size());
    TP_ASSIGN_OR_RETURN(l.bias_, ctx.backend.AllocateWeights(static_cast<size_t>(rows) * 4));
    int64_t off = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      SliceRequest req{bias_names[i], {parts[i].full_rows}, 0, 1, parts[i].row0, parts[i].rows};
      TP_RETURN_IF_ERROR(ReadInto(ctx, req, DType::kF32, static_cast<float*>(l.bias_->data()) + off));
      off += parts[i].rows;
    }
  }
  return l;
}

void ColumnParallelLinear::Forward(Backend& b, const Tensor& x, Tensor y) const {
  b.Linear(x, weight_.view, bias_ ? static_cast<const float*>(bias_->data()) : nullptr, y);
}

void ColumnParallelLinear::ForwardSplit(Backend& b, const Tensor& x, std::span<const Tensor> outs) const {
  b.LinearSplit(x, weight_.view, bias_ ? static_cast<const float*>(bias_->data()) : nullptr, outs);
}

absl::StatusOr<RowParallelLinear> RowParallelLinear::Load(const LoadContext& ctx, const std::string& name,
                                                          int64_t out_features, int64_t in_features, int64_t col0,
                                                          int64_t cols, const std::string& bias_name) {
  RowParallelLinear l;
  TP_ASSIGN_OR_RETURN(l.weight_, AllocMatrix(ctx.backend, ctx.weight_dtype, out_features, cols));
  SliceRequest req{name, {out_features, in_features}, 0, out_features, col0, cols};
  TP_RETURN_IF_ERROR(ReadInto(ctx, req, ctx.weight_dtype, l.weight_.view.data));
  if (!bias_name.empty()) {
    // Every rank reads it, though only rank 0 adds it: WeightSource::CheckAllUsed counts on
    // every rank reading every tensor, and a few KB per layer cost nothing.
    TP_ASSIGN_OR_RETURN(l.bias_, ctx.backend.AllocateWeights(static_cast<size_t>(out_features) * 4));
    SliceRequest breq{bias_name, {out_features}, 0, 1, 0, out_features};
    TP_RETURN_IF_ERROR(ReadInto(ctx, breq, DType::kF32, l.bias_->data()));
  }
  return l;
}

void RowParallelLinear::Forward(Backend& b, Communicator& comm, const Tensor& x, Tensor y,
                                SpanTimer& allreduce) const {
  PartialProduct(b, comm, x, y);
  AllReduce(comm, y, allreduce);
}

void RowParallelLinear::PartialProduct(Backend& b, const Communicator& comm, const Tensor& x, Tensor y) const {
  // Rank 0 adds the bias inside its GEMM (Linear's bias epilogue, as q/k/v use), before the
  // all-reduce: the sum then holds it once, with no extra op or pass over y; at TP 1 this
  // is transformers' own x·W^T + b. Adding it after the all-reduce would need every rank
  // to run a separate bias add.
  const float* bias = bias_ != nullptr && comm.rank() == 0 ? static_cast<const float*>(bias_->data()) : nullptr;
  b.Linear(x, weight_.view, bias, y);
}

void RowParallelLinear::AllReduce(Communicator& comm, Tensor y, SpanTimer& allreduce) {
  if (comm.size() > 1) {
    allreduce.Begin();
    comm.AllReduceSum(y.data, static_cast<size_t>(y.numel()), y.dtype);
    allreduce.End();
  }
}

absl::StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::Load(const LoadContext& ctx, const std::string& name,
                                                                    int64_t vocab, int64_t dim, int rank, int tp) {
  VocabParallelEmbedding e;
  e.shard_rows_ = (vocab + tp - 1) / tp;
  e.vocab_start_ = std::min<int64_t>(vocab, e.shard_rows_ * rank);
  const int64_t rows = std::min<int64_t>(e.shard_rows_, vocab - e.vocab_start_);
  if (rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", vocab, " is too small to split across ", tp,
                                                   " tensor-parallel ranks"));
  }
  TP_ASSIGN_OR_RETURN(e.table_, AllocMatrix(ctx.backend, ctx.weight_dtype, rows, dim));
  SliceRequest req{name, {vocab, dim}, e.vocab_start_, rows, 0, dim};
  TP_RETURN_IF_ERROR(ReadInto(ctx, req, ctx.weight_dtype, e.table_.view.data));
  return e;
}

void VocabParallelEmbedding::Lookup(Backend& b, Communicator& comm, const int32_t* ids, int64_t n, float scale,
                                    Tensor out, SpanTimer& allreduce) const {
  b.Embedding(ids, n, table_.view, vocab_start_, scale, out);
  if (comm.size() > 1) {
    allreduce.Begin();
    comm.AllReduceSum(out.data, static_cast<size_t>(out.numel()), out.dtype);
    allreduce.End();
  }
}

void VocabParallelEmbedding::Logits(Backend& b, const Tensor& x, Tensor out) const {
  b.Linear(x, table_.view, nullptr, out);
}

absl::StatusOr<DeviceTensor> LoadMatrix(const LoadContext& ctx, const std::string& name, int64_t rows,
                                        int64_t full_cols, int64_t col0, int64_t cols) {
  TP_ASSIGN_OR_RETURN(DeviceTensor t, AllocMatrix(ctx.backend, ctx.weight_dtype, rows, cols));
  SliceRequest req{name, {rows, full_cols}, 0, rows, col0, cols};
  TP_RETURN_IF_ERROR(ReadInto(ctx, req, ctx.weight_dtype, t.view.data));
  return t;
}

absl::StatusOr<DeviceTensor> UploadF32(Backend& b, const std::vector<float>& v) {
  TP_ASSIGN_OR_RETURN(DeviceTensor t, AllocMatrix(b, DType::kF32, 1, static_cast<int64_t>(v.size())));
  b.CopyFromHost(t.view.data, v.data(), v.size() * 4);
  return t;
}

absl::StatusOr<DeviceTensor> LoadVector(const LoadContext& ctx, const std::string& name, int64_t n) {
  std::vector<float> host(n);
  TP_RETURN_IF_ERROR(ctx.source.Read(SliceRequest{name, {n}, 0, 1, 0, n}, DType::kF32, host.data()));
  return UploadF32(ctx.backend, host);
}

}  // namespace tpserve
