// Tensor-parallel building blocks in the Megatron layout. Each layer knows its own shard,
// loads only that slice from the WeightSource, and issues its own collective.
// Tested through tests/model_test.cc at TP = 1, 2, 4.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/weight_source.h"

namespace tpserve {

struct LoadContext {
  const WeightSource& source;
  Backend& backend;
  DType weight_dtype;  // dtype matrices are stored in on the device
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
  static absl::StatusOr<ColumnParallelLinear> Load(const LoadContext& ctx, const std::vector<RowRange>& parts,
                                                   int64_t in_features, const std::vector<std::string>& bias_names);
  void Forward(Backend& b, const Tensor& x, Tensor y) const;
  // The same product with y split by columns across `outs` (Backend::LinearSplit).
  void ForwardSplit(Backend& b, const Tensor& x, std::span<const Tensor> outs) const;
  int64_t out_features() const { return weight_.view.rows; }
  const Tensor& weight() const { return weight_.view; }

 private:
  DeviceTensor weight_;
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
