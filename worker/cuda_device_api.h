// worker/device.h's CUDA side as one table of functions. worker/cuda_device.cc fills it;
// tests and benchmarks link it in directly (cuda_device_direct.cc), while the tpserve binary
// finds it in the CUDA backend module, libtpserve_cuda.so beside the binary, and loads that
// only when a run needs a GPU (cuda_device_loader.cc): cuBLASLt alone makes ~140 MB resident
// as soon as it is loaded, which a CPU run should not pay. Tested by tests/cuda_module_test.sh
// (the module loads into the real binary; a CPU run does not load it) and
// tests/cuda_engine_test.cc (GPU).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/device.h"

namespace tpserve {

// Raised whenever a member or its meaning changes: the loader refuses a module of another
// version instead of calling through a table it misreads.
inline constexpr int kCudaDeviceApiVersion = 1;

struct CudaDeviceApi {
  int version = kCudaDeviceApiVersion;
  bool (*built_with_nccl)() = nullptr;
  int (*device_count)() = nullptr;
  absl::StatusOr<DeviceMemoryInfo> (*device_memory)(int device) = nullptr;
  absl::StatusOr<CudaDeviceFacts> (*describe_device)(int device) = nullptr;
  absl::StatusOr<std::unique_ptr<Backend>> (*make_engine_backend)(const BackendOptions& options) = nullptr;
  absl::StatusOr<std::unique_ptr<Communicator>> (*make_tp_communicator)(bool nccl, Communicator& host,
                                                                        Backend& backend) = nullptr;
};

// The table (worker/cuda_device.cc).
const CudaDeviceApi& CudaDeviceFunctions();

}  // namespace tpserve

// What the module exports (worker/cuda_module.cc): a C name, so the loader needs no mangling.
extern "C" const tpserve::CudaDeviceApi* tpserve_cuda_device_api();
