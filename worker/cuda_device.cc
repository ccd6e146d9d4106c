// worker/device.h where CUDA is built: device facts, memory, the engine's backend and its
// tensor-parallel communicator, as the table of worker/cuda_device_api.h. Tested by
// tests/cuda_engine_test.cc (GPU) and tests/cuda_module_test.sh.
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "worker/cuda_backend.h"
#include "worker/cuda_device_api.h"
#include "worker/nccl_communicator.h"
#include "worker/staged_communicator.h"

namespace tpserve {
namespace {

absl::Status CudaError(const char* what, cudaError_t err) {
  cudaGetLastError();  // clear it, or the next launch check would report it
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

absl::StatusOr<DeviceMemoryInfo> DeviceMemory(int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError("cudaSetDevice", err);
  size_t free_bytes = 0, total_bytes = 0;
  err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) return CudaError("cudaMemGetInfo", err);
  return DeviceMemoryInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

absl::StatusOr<CudaDeviceFacts> DescribeDevice(int device) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return CudaError("cudaGetDeviceProperties", err);
  int driver = 0, runtime = 0;
  if ((err = cudaDriverGetVersion(&driver)) != cudaSuccess) return CudaError("cudaDriverGetVersion", err);
  if ((err = cudaRuntimeGetVersion(&runtime)) != cudaSuccess) return CudaError("cudaRuntimeGetVersion", err);
  CudaDeviceFacts f;
  f.name = prop.name;
  f.driver_version = driver;
  f.runtime_version = runtime;
  f.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return f;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeEngineBackend(const BackendOptions& options) {
  TP_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, MakeCudaBackend(options));
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeTpCommunicator(bool nccl, Communicator& host, Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  TP_CHECK(cuda != nullptr);  // only the engine calls this, with its CUDA backend
  if (nccl) return MakeNcclCommunicator(host, cuda->device(), cuda->stream());
  return std::unique_ptr<Communicator>(new StagedCommunicator(host, cuda->stream()));
}

}  // namespace

const CudaDeviceApi& CudaDeviceFunctions() {
  static const CudaDeviceApi api = [] {
    CudaDeviceApi a;
    a.built_with_nccl = HaveNccl;
    a.device_count = CudaVisibleDevices;
    a.device_memory = DeviceMemory;
    a.describe_device = DescribeDevice;
    a.make_engine_backend = MakeEngineBackend;
    a.make_tp_communicator = MakeTpCommunicator;
    return a;
  }();
  return api;
}

}  // namespace tpserve
