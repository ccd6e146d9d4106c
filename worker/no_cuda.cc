// worker/device.h where tpserve is built without CUDA (TPSERVE_HAVE_CUDA off): no device,
// and whatever needs one is UNAVAILABLE with a message that says what to do. Tested by
// tests/device_choice_test.cc.
#include "absl/strings/str_cat.h"
#include "worker/device.h"

namespace tpserve {
namespace {

absl::Status NoCuda(const char* what) {
  return absl::UnavailableError(absl::StrCat(
      what, ": this tpserve was built without CUDA (no CUDA toolkit found at configure time); use --device cpu, or "
            "rebuild with -DTPSERVE_CUDA=ON on a machine with the CUDA toolkit"));
}

}  // namespace

bool BuiltWithCuda() { return false; }
bool BuiltWithNccl() { return false; }
int CudaDeviceCount() { return 0; }
absl::StatusOr<std::string> DescribeCudaBuild() { return std::string("built without CUDA"); }

absl::StatusOr<DeviceMemoryInfo> CudaDeviceMemory(int) { return NoCuda("GPU memory"); }
absl::StatusOr<CudaDeviceFacts> DescribeCudaDevice(int) { return NoCuda("GPU properties"); }
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaEngineBackend(const BackendOptions&) { return NoCuda("the CUDA backend"); }
absl::StatusOr<std::unique_ptr<Communicator>> MakeCudaTpCommunicator(bool, Communicator&, Backend&) {
  return NoCuda("GPU collectives");
}

}  // namespace tpserve
