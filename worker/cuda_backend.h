// The CUDA backend: bf16 activations and KV cache on one GPU, every op enqueued on one
// stream (kernels/cuda), Linear through the bf16 GEMV (M <= 4, any weight dtype) or
// cuBLASLt. Tested by tests/cuda_model_test.cc (the whole model vs the CPU backend) and
// tests/cuda_graph_test.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/device.h"  // DeviceMemoryInfo

namespace tpserve {

// Backend plus what the CUDA side of the engine needs: the stream that NCCL, staging
// copies and graph capture use, and memory figures for planning. Use it from the thread
// that made it (or one that has selected the same device).
class CudaBackend : public Backend {
 public:
  virtual int device() const = 0;
  virtual cudaStream_t stream() const = 0;
  virtual int num_sms() const = 0;
  // The device's free and total memory now.
  virtual DeviceMemoryInfo MemoryInfo() const = 0;
  // Bytes this backend holds: live Buffers plus its own workspaces.
  virtual int64_t allocated_bytes() const = 0;
  // True while the stream is being captured into a CUDA graph: nothing may allocate, copy
  // from/to the host or synchronize then (Synchronize() is a no-op).
  virtual bool capturing() const = 0;
  // (ReserveAttentionWorkspace and MakeStepGraphs are Backend's.)
};

// cudaGetDeviceCount; 0 when there is no device or no driver. (worker/device.h's
// CudaDeviceCount reaches it through the CUDA device functions, worker/cuda_device_api.h.)
int CudaVisibleDevices();

// Selects BackendOptions::device and creates the stream, cuBLASLt handle and workspaces.
absl::StatusOr<std::unique_ptr<CudaBackend>> MakeCudaBackend(const BackendOptions& options);

}  // namespace tpserve
