// The GPU as engine start-up and the benchmarks see it, through a header without CUDA
// types, so launch/ and bench/ build with or without the CUDA toolkit: worker/cuda_device.cc
// implements it where CUDA is built (TPSERVE_HAVE_CUDA), worker/no_cuda.cc elsewhere (no
// device; making a backend or a communicator is UNAVAILABLE with a message that says why).
// Tested by tests/cuda_engine_test.cc (GPU) and tests/device_choice_test.cc (CPU).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/communicator.h"

namespace tpserve {

// Whether this binary has the CUDA backend, and NCCL in it. (The tpserve binary has it as a
// module beside it, loaded on first need: worker/cuda_device_api.h.)
bool BuiltWithCuda();
bool BuiltWithNccl();

// How this binary reaches CUDA, for `tpserve devices`: linked in, built without it, or the
// module's path (this loads it where it is a module); an error where the module does not load.
absl::StatusOr<std::string> DescribeCudaBuild();

// Number of CUDA devices; 0 when there is no device or no driver, and without CUDA. Where
// the CUDA side is a module and no NVIDIA driver is installed, 0 without loading it.
int CudaDeviceCount();

struct DeviceMemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
// cudaMemGetInfo on `device` (it becomes the calling thread's current device).
absl::StatusOr<DeviceMemoryInfo> CudaDeviceMemory(int device);

// What the server reports about the GPU.
struct CudaDeviceFacts {
  std::string name;        // cudaDeviceProp::name, e.g. "NVIDIA H200"
  int driver_version = 0;  // newest CUDA the driver supports (cudaDriverGetVersion), e.g. 13000
  int runtime_version = 0; // the CUDA runtime this binary uses (cudaRuntimeGetVersion)
  int64_t total_bytes = 0;
};
absl::StatusOr<CudaDeviceFacts> DescribeCudaDevice(int device);

// A CUDA backend (worker/cuda_backend.h) on `device`, which becomes the calling thread's
// current device: the engine's rank thread makes it and runs every step on it.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaEngineBackend(const BackendOptions& options);

// The tensor-parallel communicator for ranks running `backend` (from MakeCudaEngineBackend):
// NCCL on the backend's stream (`nccl`; every rank on a node needs its own GPU; collective,
// fails on every rank if it fails on one) or device buffers staged through pinned memory
// over `host` (ranks may share a GPU). `host` and `backend` must outlive the result.
absl::StatusOr<std::unique_ptr<Communicator>> MakeCudaTpCommunicator(bool nccl, Communicator& host, Backend& backend);

}  // namespace tpserve
