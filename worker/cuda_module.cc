// The CUDA backend module's one entry point (libtpserve_cuda.so, loaded by the tpserve
// binary through worker/cuda_device_loader.cc).
#include "worker/cuda_device_api.h"

extern "C" __attribute__((visibility("default"))) const tpserve::CudaDeviceApi* tpserve_cuda_device_api() {
  return &tpserve::CudaDeviceFunctions();
}
