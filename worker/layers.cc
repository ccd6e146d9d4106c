// Tensor-parallel layers: shard arithmetic, slice loading and the one collective each.
// Tested through tests/model_test.cc.
#include "worker/layers.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve {
namespace {

absl::StatusOr<DeviceTensor> AllocMatrix(Backend& b, DType dtype, int64_t rows, int64_t cols) {
  DeviceTensor t;
  TP_ASSIGN_OR_RETURN(t.buffer, b.AllocateWeights(static_cast<size_t>(rows) * RowBytes(dtype, cols)));
  t.view = Tensor{t.buffer->data(), dtype, rows, cols};
  return t;
}

// Reads through a host staging buffer and copies to the device.
absl::Status ReadInto(const LoadContext& ctx, const SliceRequest& req, DType dtype, void* device_dst) {
  const size_t bytes = static_cast<size_t>(req.rows) * RowBytes(dtype, req.cols);
  if (ctx.backend.device_is_host()) return ctx.source.Read(req, dtype, device_dst);
  // Not zeroed: Read writes every byte (a 31B model would zero 62 GB for nothing).
  std::unique_ptr<uint8_t[]> host(new uint8_t[bytes]);
  TP_RETURN_IF_ERROR(ctx.source.Read(req, dtype, host.get()));
  ctx.backend.CopyFromHost(device_dst, host.get(), bytes);
  return absl::OkStatus();
}

// The dtype this rank stores columns [col0, col0 + cols) of matrix `name` in: the source's
// quantized dtype where it stays quantized, else ctx.weight_dtype; `widened` gets the reason
// a quantized tensor was widened (empty otherwise).
DType StorageDType(const LoadContext& ctx, const std::string& name, int64_t col0, int64_t cols,
                   std::string* widened) {
  widened->clear();
  const std::optional<DType> q = ctx.source.QuantizedDType(name);
  if (!q) {
    *widened = ctx.source.WidenedReason(name);
    return ctx.weight_dtype;
  }
  const int64_t block = BlockElems(*q);
  if (!ctx.keep_quantized) {
    *widened = absl::StrCat(std::string(DTypeName(*q)), ": widened as asked (--dequantize-weights)");
  } else if (!ctx.backend.SupportsQuantizedWeights(*q)) {
    *widened = absl::StrCat(std::string(DTypeName(*q)), ": no kernels for it on the ", ctx.backend.name(), " backend");
  } else if (col0 % block != 0 || cols % block != 0) {
    *widened = absl::StrCat(std::string(DTypeName(*q)), ": a rank's input columns [", col0, ", ", col0 + cols,
                            ") are not whole ", block, "-element blocks (tensor-parallel split)");
  } else {
    return *q;
  }
  return ctx.weight_dtype;
}

void Tally(const LoadContext& ctx, const Tensor& t, int64_t tensors = 1) {
  if (ctx.formats == nullptr) return;
  ctx.formats->bytes[t.dtype] += static_cast<int64_t>(t.bytes());
  ctx.formats->tensors[t.dtype] += tensors;
}

void TallyWidened(const LoadContext& ctx, const std::string& reason) {
  if (ctx.formats != nullptr && !reason.empty()) ++ctx.formats->widened[reason];
}

std::string MiB(int64_t bytes) { return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

int64_t WeightFormats::total_bytes() const {
  int64_t total = 0;
  for (const auto& [dtype, b] : bytes) total += b;
  return total;
}

bool WeightFormats::any_quantized() const {
  return std::any_of(bytes.begin(), bytes.end(), [](const auto& e) { return IsQuantized(e.first); });
}

namespace {

// (bytes, dtype) pairs, most bytes first.
std::vector<std::pair<int64_t, DType>> BySize(const std::map<DType, int64_t>& bytes) {
  std::vector<std::pair<int64_t, DType>> by_size;
  for (const auto& [dtype, b] : bytes) by_size.push_back({b, dtype});
  std::sort(by_size.rbegin(), by_size.rend());
  return by_size;
}

}  // namespace

std::string WeightFormats::Describe(DType widened_to) const {
  std::string out;
  for (const auto& [b, dtype] : BySize(bytes)) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(DTypeName(dtype)), " ", MiB(b), " (", tensors.at(dtype), ")");
  }
  if (!widened.empty()) {
    absl::StrAppend(&out, "; widened to ", std::string(DTypeName(widened_to)), " at load: ");
    bool first = true;
    for (const auto& [reason, n] : widened) {
      absl::StrAppend(&out, first ? "" : "; ", reason, " (", n, ")");
      first = false;
    }
  }
  return out;
}

std::string WeightFormats::Summary() const {
  std::string out;
  for (const auto& [b, dtype] : BySize(bytes)) absl::StrAppend(&out, out.empty() ? "" : "+", std::string(DTypeName(dtype)));
  return out;
}

absl::StatusOr<ColumnParallelLinear> ColumnParallelLinear::Load(const LoadContext& ctx,
                                                                const std::vector<RowRange>& parts,
                                                                int64_t in_features,
                                                                const std::vector<std::string>& bias_names,
                                                                bool split_outputs) {
  std::vector<DType> dtypes(parts.size());
  std::vector<std::string> widened(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    dtypes[i] = StorageDType(ctx, parts[i].name, 0, in_features, &widened[i]);
  }
  const bool mixed = std::any_of(dtypes.begin(), dtypes.end(), [&](DType d) { return d != dtypes[0]; });
  if (mixed && !split_outputs) {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (IsQuantized(dtypes[i])) {
        widened[i] = absl::StrCat(std::string(DTypeName(dtypes[i])), ": fused (", parts[i].name,
                                  ") with a part of another dtype into one output");
        dtypes[i] = ctx.weight_dtype;
      }
    }
  }
  ColumnParallelLinear l;
  // One segment per run of parts with the same storage dtype.
  int64_t row0 = 0;
  for (size_t first = 0; first < parts.size();) {
    size_t end = first;
    int64_t rows = 0;
    while (end < parts.size() && dtypes[end] == dtypes[first]) rows += parts[end++].rows;
    Segment seg;
    seg.row0 = row0;
    TP_ASSIGN_OR_RETURN(seg.weight, AllocMatrix(ctx.backend, dtypes[first], rows, in_features));
    int64_t r = 0;
    for (size_t i = first; i < end; ++i) {
      const RowRange& p = parts[i];
      SliceRequest req{p.name, {p.full_rows, in_features}, p.row0, p.rows, 0, in_features};
      TP_RETURN_IF_ERROR(ReadInto(ctx, req, dtypes[first], seg.weight.view.RowSlice(r, p.rows).data));
      r += p.rows;
      TallyWidened(ctx, widened[i]);
    }
    Tally(ctx, seg.weight.view, static_cast<int64_t>(end - first));
    std::vector<int64_t> splits;  // where ForwardSplit's outputs slice the segment
    int64_t split = 0;
    for (size_t i = first; i + 1 < end; ++i) splits.push_back(split += parts[i].rows);
    ctx.backend.PrepareLinearWeight(seg.weight.view, splits);
    row0 += rows;
    l.segments_.push_back(std::move(seg));
    first = end;
  }
  l.out_features_ = row0;
  if (!bias_names.empty()) {
    TP_CHECK(bias_names.size() == parts.size());
    TP_ASSIGN_OR_RETURN(l.bias_, ctx.backend.AllocateWeights(static_cast<size_t>(row0) * 4));
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
  TP_CHECK(segments_.size() == 1);  // Load widens mixed parts unless split_outputs
  b.Linear(x, weight(), bias_ ? static_cast<const float*>(bias_->data()) : nullptr, y);
}

void ColumnParallelLinear::ForwardSplit(Backend& b, const Tensor& x, std::span<const Tensor> outs) const {
  const float* bias = bias_ ? static_cast<const float*>(bias_->data()) : nullptr;
  if (segments_.size() == 1) return b.LinearSplit(x, weight(), bias, outs);
  // Each segment fills the outputs that cover its rows (parts never straddle segments).
  size_t o = 0;
  for (const Segment& seg : segments_) {
    const size_t first = o;
    int64_t rows = 0;
    while (o < outs.size() && rows < seg.weight.view.rows) rows += outs[o++].cols;
    TP_CHECK(rows == seg.weight.view.rows);
    b.LinearSplit(x, seg.weight.view, bias != nullptr ? bias + seg.row0 : nullptr, outs.subspan(first, o - first));
  }
  TP_CHECK(o == outs.size());
}

absl::StatusOr<RowParallelLinear> RowParallelLinear::Load(const LoadContext& ctx, const std::string& name,
                                                          int64_t out_features, int64_t in_features, int64_t col0,
                                                          int64_t cols, const std::string& bias_name) {
  RowParallelLinear l;
  std::string widened;
  const DType dtype = StorageDType(ctx, name, col0, cols, &widened);
  TP_ASSIGN_OR_RETURN(l.weight_, AllocMatrix(ctx.backend, dtype, out_features, cols));
  SliceRequest req{name, {out_features, in_features}, 0, out_features, col0, cols};
  TP_RETURN_IF_ERROR(ReadInto(ctx, req, dtype, l.weight_.view.data));
  Tally(ctx, l.weight_.view);
  TallyWidened(ctx, widened);
  ctx.backend.PrepareLinearWeight(l.weight_.view, {});
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
  std::string widened;
  const DType dtype = StorageDType(ctx, name, 0, dim, &widened);
  TP_ASSIGN_OR_RETURN(e.table_, AllocMatrix(ctx.backend, dtype, rows, dim));
  SliceRequest req{name, {vocab, dim}, e.vocab_start_, rows, 0, dim};
  TP_RETURN_IF_ERROR(ReadInto(ctx, req, dtype, e.table_.view.data));
  Tally(ctx, e.table_.view);
  TallyWidened(ctx, widened);
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
  Tally(ctx, t.view);
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
