// worker/device.h for binaries that link the CUDA side in (the tests and benchmarks): every
// function calls the table of worker/cuda_device.cc. The tpserve binary loads it instead
// (cuda_device_loader.cc).
#include "worker/cuda_device_api.h"
#include "worker/device.h"

namespace tpserve {

bool BuiltWithCuda() { return true; }
bool BuiltWithNccl() { return CudaDeviceFunctions().built_with_nccl(); }
int CudaDeviceCount() { return CudaDeviceFunctions().device_count(); }
absl::StatusOr<std::string> DescribeCudaBuild() {
  return std::string("CUDA backend linked in") + (BuiltWithNccl() ? ", with NCCL" : ", without NCCL");
}
absl::StatusOr<DeviceMemoryInfo> CudaDeviceMemory(int device) { return CudaDeviceFunctions().device_memory(device); }
absl::StatusOr<CudaDeviceFacts> DescribeCudaDevice(int device) { return CudaDeviceFunctions().describe_device(device); }
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaEngineBackend(const BackendOptions& options) {
  return CudaDeviceFunctions().make_engine_backend(options);
}
absl::StatusOr<std::unique_ptr<Communicator>> MakeCudaTpCommunicator(bool nccl, Communicator& host, Backend& backend) {
  return CudaDeviceFunctions().make_tp_communicator(nccl, host, backend);
}

}  // namespace tpserve
