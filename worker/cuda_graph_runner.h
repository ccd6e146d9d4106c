// CUDA graphs for decode steps: a step's device work is captured once per padded batch
// size and replayed after, removing per-kernel launch cost (hundreds of launches per
// step). The caller keeps the step's inputs in fixed device buffers (updated by copies
// before Run, outside the graph) and pads the batch up to a captured size. Design notes
// and the model-side contract: docs/gpu_backend.md. Tested by tests/cuda_graph_test.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "worker/decode_graphs.h"

namespace tpserve {

class CudaGraphRunner : public StepGraphs {
 public:
  // batch_sizes: the decode batch sizes to capture (any order; e.g. 1, 2, 4, 8, 16, 32,
  // 64, 128, 256). stream: the CUDA backend's stream.
  CudaGraphRunner(cudaStream_t stream, std::vector<int32_t> batch_sizes);
  ~CudaGraphRunner() override;
  CudaGraphRunner(const CudaGraphRunner&) = delete;
  CudaGraphRunner& operator=(const CudaGraphRunner&) = delete;

  // The smallest captured size >= n, or 0 when n exceeds them all (run that step eagerly).
  int32_t PaddedBatchSize(int32_t n) const override;

  // Runs `step` for batch size `padded` (one of batch_sizes). `step` must only enqueue
  // device work on the stream, with the same buffers and launch shapes every time: no
  // host copies, allocations or synchronization (CudaBackend enforces this while
  // capturing). The first call for a size runs it eagerly (a warm-up that sizes lazy
  // workspaces and cuBLASLt heuristics), the second captures and launches the graph,
  // later calls only launch it. If the capture fails (e.g. an op synchronized), the step
  // still runs eagerly, the size stays eager from then on, and the error is returned.
  absl::Status Run(int32_t padded, const std::function<void()>& step) override;

  bool captured(int32_t padded) const override;
  // Drops every graph (after the buffers they read were reallocated).
  void Clear() override;

 private:
  struct Entry {
    bool warmed_up = false;
    bool failed = false;
    cudaGraphExec_t exec = nullptr;
  };
  cudaStream_t stream_;
  std::vector<int32_t> sizes_;  // ascending
  std::map<int32_t, Entry> entries_;
};

}  // namespace tpserve
