// Capture-once, replay-after CUDA graphs per padded decode batch size. Tested by
// tests/cuda_graph_test.cc.
#include "worker/cuda_graph_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/base.h"
#include "kernels/cuda/cuda_check.h"

namespace tpserve {

CudaGraphRunner::CudaGraphRunner(cudaStream_t stream, std::vector<int32_t> batch_sizes)
    : stream_(stream), sizes_(std::move(batch_sizes)) {
  std::sort(sizes_.begin(), sizes_.end());
  sizes_.erase(std::unique(sizes_.begin(), sizes_.end()), sizes_.end());
}

CudaGraphRunner::~CudaGraphRunner() { Clear(); }

int32_t CudaGraphRunner::PaddedBatchSize(int32_t n) const {
  auto it = std::lower_bound(sizes_.begin(), sizes_.end(), n);
  return it == sizes_.end() ? 0 : *it;
}

bool CudaGraphRunner::captured(int32_t padded) const {
  auto it = entries_.find(padded);
  return it != entries_.end() && it->second.exec != nullptr;
}

void CudaGraphRunner::Clear() {
  for (auto& [size, e] : entries_) {
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  }
  entries_.clear();
}

absl::Status CudaGraphRunner::Run(int32_t padded, const std::function<void()>& step) {
  TP_CHECK(std::binary_search(sizes_.begin(), sizes_.end(), padded));
  Entry& e = entries_[padded];
  if (e.exec != nullptr) {
    TP_CUDA_CHECK(cudaGraphLaunch(e.exec, stream_));
    return absl::OkStatus();
  }
  if (!e.warmed_up || e.failed) {
    step();
    e.warmed_up = true;
    return absl::OkStatus();
  }
  // Thread-local mode: thread ranks sharing the process capture concurrently, and API
  // calls of other threads must not be refused as unsafe.
  TP_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  step();
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  if (err == cudaSuccess) {
    err = cudaGraphInstantiate(&e.exec, graph, 0);
    cudaGraphDestroy(graph);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    e.exec = nullptr;
    e.failed = true;
    step();  // nothing ran during the failed capture
    // What gets here was refused at end of capture or instantiation; a launch that the
    // capture refused aborts at its own TP_CUDA_CHECK_LAUNCH with file and line.
    return absl::InternalError(absl::StrCat("capturing the decode step for batch size ", padded,
                                            " failed at end of capture or instantiation: ",
                                            cudaGetErrorString(err)));
  }
  TP_CUDA_CHECK(cudaGraphLaunch(e.exec, stream_));
  return absl::OkStatus();
}

}  // namespace tpserve
