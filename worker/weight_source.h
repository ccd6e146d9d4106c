// Where a rank's weight slices come from: a safetensors checkpoint (real weights) or a
// deterministic generator (--load-format dummy). Each layer asks only for the slice it
// owns. Tested by tests/safetensors_test.cc and tests/model_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/base.h"
#include "worker/model_config.h"
#include "worker/safetensors.h"

namespace tpserve {

// A 2-D slice request: rows [row0, row0 + rows) and columns [col0, col0 + cols) of a
// tensor whose full shape must be `shape` (1-D tensors are read as [1, n]).
struct SliceRequest {
  std::string name;  // without the checkpoint's prefix, e.g. "layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Copies the slice into dst (rows x cols, dense) converted to `dtype`.
  virtual absl::Status Read(const SliceRequest& req, DType dtype, void* dst) const = 0;
  // Whether the (unprefixed) tensor exists.
  virtual bool Has(const std::string& name) const = 0;
  virtual std::string Describe() const = 0;  // for logs and run records
};

// Opens DIR's safetensors and finds the language model's weight prefix ("model.",
// "model.language_model.", "language_model.model."); other towers are ignored.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenCheckpointSource(const std::string& dir);

// Deterministic random weights with the real shapes: a tensor element's value depends only
// on (seed, tensor name, row, column), so every tensor-parallel split sees the same model.
std::unique_ptr<WeightSource> MakeDummySource(const ModelConfig& config, uint64_t seed);

}  // namespace tpserve
