// Tensor-parallel building blocks in the Megatron layout. Each layer knows its own shard,
// loads only that slice from the WeightSource, and issues its own collective.
// Tested through tests/model_test.cc at TP = 1, 2, 4.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/weight_source.h"

namespace tpserve {

// What a rank's loaded matrices take, per dtype, and which of the source's quantized tensors
// were widened at load and why: for the start-up log, ModelInfo and the run record.
struct WeightFormats {
  std::map<DType, int64_t> bytes;    // this rank's matrix bytes per storage dtype
  std::map<DType, int64_t> tensors;  // matrices (or fused parts) per storage dtype
  // reason -> tensors, e.g. "q4_k: no kernels for it on the cuda(...) backend"
  std::map<std::string, int64_t> widened;

  int64_t total_bytes() const;
  // Whether any matrix stayed block-quantized.
  bool any_quantized() const;
  // e.g. "q4_k 98.2 MiB (109), q6_k 21.1 MiB (19), bfloat16 1.3 MiB (1); widened to bfloat16
  // at load: q2_k: a rank's input columns [0, 128) are not whole 256-element blocks
  // (tensor-parallel split) (2)".
  std::string Describe(DType widened_to) const;
  // The storage dtypes, most bytes first, e.g. "q4_k+q6_k+q8_0"; the float dtype alone when
  // nothing stayed quantized.
  std::string Summary() const;
};

struct LoadContext {
  const WeightSource& source;
  Backend& backend;
  DType weight_dtype;  // dtype matrices are stored in on the device, unless kept quantized
  // Keep the source's block-quantized matrices as they are stored where the backend reads
  // that dtype (Backend::SupportsQuantizedWeights) and the rank's slice is whole blocks;
  // false: widen every matrix to weight_dtype.
  bool keep_quantized = true;
  WeightFormats* formats = nullptr;  // tallied where not null
};

// Rows [row0, row0 + rows) of tensor `name` with full shape [full_rows, cols].
struct RowRange {
  std::string name;
  int64_t full_rows = 0;
  int64_t row0 = 0;
  int64_t rows = 0;
};

// A device-resident weight and the view the ops use.
struct DeviceTensor {
  std::unique_ptr<Buffer> buffer;
  Tensor view;
};

// y = x · W^T where W stacks the given row ranges (column parallel: this rank's output
// features; several ranges fuse e.g. gate and up into one GEMM). No collective.
class ColumnParallelLinear {
 public:
  // split_outputs: the layer is only used through ForwardSplit with one output per part, so
  // parts stored in different quantized dtypes (a Q4_K_M file's Q4_K q/k with a Q6_K v) may
  // stay quantized as separate segments; otherwise such parts are widened to
  // ctx.weight_dtype, so that Forward writes one dense y.
  static absl::StatusOr<ColumnParallelLinear> Load(const LoadContext& ctx, const std::vector<RowRange>& parts,
                                                   int64_t in_features, const std::vector<std::string>& bias_names,
                                                   bool split_outputs = false);
  void Forward(Backend& b, const Tensor& x, Tensor y) const;
  // The same product with y split by columns across `outs` (Backend::LinearSplit).
  void ForwardSplit(Backend& b, const Tensor& x, std::span<const Tensor> outs) const;
  int64_t out_features() const { return out_features_; }
  // The weight where it is one segment (always, on backends that keep nothing quantized);
  // else the first segment.
  const Tensor& weight() const { return segments_.front().weight.view; }

 private:
  // Output rows [row0, row0 + weight rows) in one storage dtype.
  struct Segment {
    DeviceTensor weight;
    int64_t row0 = 0;
  };
  std::vector<Segment> segments_;
  int64_t out_features_ = 0;
  std::unique_ptr<Buffer> bias_;  // fp32 [out_features] or null
};

// y = all_reduce(x_shard · W[:, col0:col0+cols]^T) (+ bias): input features split across
// ranks. The bias (out_features, whole on every rank) is added by rank 0 only, before the
// all-reduce, so the sum holds it once.
class RowParallelLinear {
 public:
  // bias_name: empty for none.
  static absl::StatusOr<RowParallelLinear> Load(const LoadContext& ctx, const std::string& name, int64_t out_features,
                                                int64_t in_features, int64_t col0, int64_t cols,
                                                const std::string& bias_name = "");
  // The all-reduce is enqueued behind the product (no synchronize) and timed by `allreduce`.
  void Forward(Backend& b, Communicator& comm, const Tensor& x, Tensor y, SpanTimer& allreduce) const;
  // Forward in its two halves, for a caller that computes y in row chunks and reduces it
  // once: this rank's partial product (rank 0 adds the bias), then the all-reduce of y.
  void PartialProduct(Backend& b, const Communicator& comm, const Tensor& x, Tensor y) const;
  static void AllReduce(Communicator& comm, Tensor y, SpanTimer& allreduce);
  const Tensor& weight() const { return weight_.view; }

 private:
  DeviceTensor weight_;
  std::unique_ptr<Buffer> bias_;  // fp32 [out_features] or null
};

// Vocab-parallel embedding table, also the tied LM head: this rank holds token ids
// [vocab_start, vocab_start + rows). Shards are ceil(vocab / tp) rows; the last is shorter.
class VocabParallelEmbedding {
 public:
  static absl::StatusOr<VocabParallelEmbedding> Load(const LoadContext& ctx, const std::string& name,
                                                     int64_t vocab, int64_t dim, int rank, int tp);
  // out = all_reduce(lookup(ids) * scale).
  void Lookup(Backend& b, Communicator& comm, const int32_t* ids, int64_t n, float scale, Tensor out,
              SpanTimer& allreduce) const;
  // This rank's logits [x.rows, rows()] = x · table^T.
  void Logits(Backend& b, const Tensor& x, Tensor out) const;
  int64_t vocab_start() const { return vocab_start_; }
  int64_t rows() const { return table_.view.rows; }
  int64_t shard_rows() const { return shard_rows_; }  // ceil(vocab / tp)
  const Tensor& table() const { return table_.view; }

 private:
  DeviceTensor table_;
  int64_t vocab_start_ = 0;
  int64_t shard_rows_ = 0;
};

// Columns [col0, col0 + cols) of matrix `name` (full shape [rows, full_cols]) in the weight
// dtype, the same on every rank: a replicated weight, or one block of its input features.
absl::StatusOr<DeviceTensor> LoadMatrix(const LoadContext& ctx, const std::string& name, int64_t rows,
                                        int64_t full_cols, int64_t col0, int64_t cols);
// An fp32 vector on the device (norm weights, RoPE frequencies), read whole.
absl::StatusOr<DeviceTensor> LoadVector(const LoadContext& ctx, const std::string& name, int64_t n);
absl::StatusOr<DeviceTensor> UploadF32(Backend& b, const std::vector<float>& v);

}  // namespace tpserve
