// Pointer classification through cudaPointerGetAttributes. Tested by
// tests/cuda_communicator_test.cc.
#include "worker/device_pointer.h"

#include <cuda_runtime_api.h>

namespace tpserve {

bool IsDevicePointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on old drivers
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

}  // namespace tpserve
