// Device and communicator choice. Tested by tests/device_choice_test.cc.
#include "launch/device_choice.h"

#include <sched.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tpserve {

std::string_view DeviceKindName(DeviceKind d) { return d == DeviceKind::kCuda ? "cuda" : "cpu"; }

absl::StatusOr<DeviceKind> ChooseDevice(std::string_view requested, bool built_with_cuda, int device_count) {
  if (requested == "cpu") return DeviceKind::kCpu;
  if (requested == "auto") return built_with_cuda && device_count > 0 ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (requested == "cuda") {
    if (!built_with_cuda) {
      return absl::FailedPreconditionError(
          "--device cuda: this tpserve was built without CUDA (no CUDA toolkit at configure time); use --device cpu, "
          "or rebuild with -DTPSERVE_CUDA=ON where the CUDA toolkit is installed");
    }
    if (device_count <= 0) {
      return absl::FailedPreconditionError(
          "--device cuda: no CUDA device is visible (cudaGetDeviceCount reports none: no GPU, no driver, or "
          "CUDA_VISIBLE_DEVICES hides them); use --device cpu");
    }
    return DeviceKind::kCuda;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device \"", std::string(requested), "\" is not one of auto, cpu, cuda"));
}

absl::Status ValidateGpuMemoryUtilization(double utilization) {
  if (utilization > 0.0 && utilization <= 1.0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--gpu-memory-utilization must be in (0, 1] (the fraction of each GPU's memory tpserve may use), "
                   "got ", utilization));
}

int GpuForLocalRank(int local_rank, int device_count) {
  return device_count > 0 ? local_rank % device_count : 0;
}

int RanksSharingGpu(int local_rank, int local_size, int device_count) {
  if (device_count <= 0) return local_size;
  const int gpu = GpuForLocalRank(local_rank, device_count);
  int n = 0;
  for (int r = 0; r < local_size; ++r) n += GpuForLocalRank(r, device_count) == gpu;
  return n;
}

int TurnOnGpu(int local_rank, int device_count) {
  return device_count > 0 ? local_rank / device_count : local_rank;
}

int GpusInUseOnNode(int local_size, int device_count) { return std::max(0, std::min(local_size, device_count)); }

std::string_view TpCommKindName(TpCommKind k) {
  switch (k) {
    case TpCommKind::kHost: return "host";
    case TpCommKind::kNccl: return "nccl";
    case TpCommKind::kStaged: return "staged";
  }
  return "?";
}

TpCommKind ChooseTpCommunicator(int tp_size, int local_size, int device_count, bool have_nccl) {
  if (tp_size <= 1) return TpCommKind::kHost;
  if (have_nccl && device_count > 0 && local_size <= device_count) return TpCommKind::kNccl;
  return TpCommKind::kStaged;
}

std::string CudaVersionString(int version) {
  if (version <= 0) return "none";
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

CpuThreads ChooseCpuThreads(int requested, int node_cores, int local_ranks, int allowed_cores) {
  if (requested > 0) {
    CpuThreads t{requested, ""};
    if (requested > allowed_cores) {
      t.note = absl::StrCat("--threads ", requested, " is more than the ", allowed_cores,
                            " core(s) this rank may run on (its CPU affinity, e.g. mpirun's --bind-to): the threads "
                            "share them");
    }
    return t;
  }
  const int share = std::max(1, node_cores / std::max(1, local_ranks));
  if (allowed_cores >= share) return {share, ""};
  return {std::max(1, allowed_cores),
          absl::StrCat(std::max(1, allowed_cores), " thread(s), not ", share,
                       " (the node's cores / its ranks): this rank may run on ", allowed_cores, " of the node's ",
                       node_cores, " cores (mpirun binds each rank to one core when it starts two or fewer); launch "
                       "with mpirun --bind-to none, or --map-by slot:PE=",
                       share, ", for ", share, " each")};
}

int AllowedCores(int fallback) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return fallback;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : fallback;
}

}  // namespace tpserve
