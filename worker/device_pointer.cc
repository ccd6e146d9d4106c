// Pointer classification through cudaPointerGetAttributes. Tested by
// tests/cuda_communicator_test.cc.
#include "worker/device_pointer.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

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

void DeviceBufferCheck::Expect(const void* p, const char* call) {
  if (device_.contains(p)) return;
  if (!IsDevicePointer(p)) {
    std::fprintf(stderr,
                 "tpserve: %s on a device communicator was given host memory (%p): host buffers go "
                 "through Communicator::host()\n",
                 call, p);
    std::abort();
  }
  if (device_.size() >= 4096) device_.clear();  // buffers come and go (growth): ask again
  device_.insert(p);
}

}  // namespace tpserve
