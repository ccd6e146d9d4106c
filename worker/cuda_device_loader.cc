// worker/device.h in the tpserve binary: the CUDA side lives in a module beside the binary
// (libtpserve_cuda.so, or $TPSERVE_CUDA_MODULE), loaded the first time a run needs a GPU.
// Loading it loads cuBLASLt, NCCL and the CUDA runtime, ~140 MB resident on load alone; a
// machine without an NVIDIA driver (no libcuda.so.1) has no GPU to find, so CudaDeviceCount
// answers 0 there without loading anything. The module resolves the engine's symbols
// against this binary (ENABLE_EXPORTS), so there is one copy of the engine in the process.
// Tested by tests/cuda_module_test.sh.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/cuda_device_api.h"
#include "worker/device.h"

namespace tpserve {
namespace {

std::string ModulePath() {
  if (const char* env = std::getenv("TPSERVE_CUDA_MODULE"); env != nullptr && *env != '\0') return env;
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "libtpserve_cuda.so";
  std::string dir(exe, static_cast<size_t>(n));
  dir.resize(dir.rfind('/') + 1);
  return dir + "libtpserve_cuda.so";
}

struct Module {
  std::string path;
  const CudaDeviceApi* api = nullptr;
  absl::Status status;
};

const Module& LoadedModule() {
  static const Module* module = [] {
    auto* m = new Module;
    m->path = ModulePath();
    // RTLD_NOW: a symbol the module needs and this binary lacks fails here, with its name,
    // not as a crash at the first call.
    void* handle = dlopen(m->path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      m->status = absl::FailedPreconditionError(absl::StrCat(
          "the CUDA backend module did not load: ", dlerror(), " (it is built beside the tpserve binary as "
          "libtpserve_cuda.so; TPSERVE_CUDA_MODULE names another path; --device cpu runs without it)"));
      return m;
    }
    using Entry = const CudaDeviceApi* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "tpserve_cuda_device_api"));
    if (entry == nullptr) {
      m->status = absl::FailedPreconditionError(
          absl::StrCat(m->path, " is not a tpserve CUDA backend module (no tpserve_cuda_device_api)"));
      return m;
    }
    const CudaDeviceApi* api = entry();
    if (api->version != kCudaDeviceApiVersion) {
      m->status = absl::FailedPreconditionError(absl::StrCat(
          m->path, " is from another tpserve build (device API version ", api->version, ", this binary's ",
          kCudaDeviceApiVersion, "): rebuild, or point TPSERVE_CUDA_MODULE at the module built with this binary"));
      return m;
    }
    m->api = api;
    return m;
  }();
  return *module;
}

// The NVIDIA driver's library, without which the CUDA runtime finds no device.
bool NvidiaDriverInstalled() {
  static const bool installed = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr;
  return installed;
}

// The module, or why not; a failure is said once on stderr where a run would otherwise just
// see no GPU.
const CudaDeviceApi* ModuleOrWarn() {
  const Module& m = LoadedModule();
  if (m.api == nullptr) {
    static const bool warned = [&] {
      std::fprintf(stderr, "tpserve: %s\n", std::string(m.status.message()).c_str());
      return true;
    }();
    (void)warned;
  }
  return m.api;
}

}  // namespace

bool BuiltWithCuda() { return true; }

bool BuiltWithNccl() {
#if TPSERVE_CUDA_MODULE_HAS_NCCL
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount() {
  if (!NvidiaDriverInstalled()) return 0;
  const CudaDeviceApi* api = ModuleOrWarn();
  return api == nullptr ? 0 : api->device_count();
}

absl::StatusOr<std::string> DescribeCudaBuild() {
  const Module& m = LoadedModule();
  if (m.api == nullptr) return m.status;
  return absl::StrCat("CUDA backend module ", m.path, " (loaded", m.api->built_with_nccl() ? ", with NCCL" : ", without NCCL",
                      NvidiaDriverInstalled() ? "" : "; no NVIDIA driver: libcuda.so.1 not found", ")");
}

absl::StatusOr<DeviceMemoryInfo> CudaDeviceMemory(int device) {
  const Module& m = LoadedModule();
  if (m.api == nullptr) return m.status;
  return m.api->device_memory(device);
}

absl::StatusOr<CudaDeviceFacts> DescribeCudaDevice(int device) {
  const Module& m = LoadedModule();
  if (m.api == nullptr) return m.status;
  return m.api->describe_device(device);
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaEngineBackend(const BackendOptions& options) {
  const Module& m = LoadedModule();
  if (m.api == nullptr) return m.status;
  return m.api->make_engine_backend(options);
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeCudaTpCommunicator(bool nccl, Communicator& host, Backend& backend) {
  const Module& m = LoadedModule();
  if (m.api == nullptr) return m.status;
  return m.api->make_tp_communicator(nccl, host, backend);
}

}  // namespace tpserve
