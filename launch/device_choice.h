// Which device a rank runs on and which tensor-parallel communicator the ranks use, as pure
// functions of the options and of what the machine has, so that the rules are tested on a
// machine without a GPU (tests/device_choice_test.cc). StartEngine (engine_setup.cc)
// measures the machine and applies them.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tpserve {

enum class DeviceKind { kCpu, kCuda };
std::string_view DeviceKindName(DeviceKind d);  // "cpu" | "cuda"

// --device: "auto" is CUDA where this build has it and a device is visible, else the CPU;
// "cuda" without either is FailedPrecondition saying which is missing; "cpu" is the CPU;
// anything else is InvalidArgument naming the choices.
absl::StatusOr<DeviceKind> ChooseDevice(std::string_view requested, bool built_with_cuda, int device_count);

// --gpu-memory-utilization must be in (0, 1].
absl::Status ValidateGpuMemoryUtilization(double utilization);

// The GPU of the rank with node-local index `local_rank`: ranks go round-robin over the
// node's devices (local_rank % device_count).
int GpuForLocalRank(int local_rank, int device_count);
// How many of the node's `local_size` ranks run on the same GPU as `local_rank`.
int RanksSharingGpu(int local_rank, int local_size, int device_count);
// This rank's place among the ranks on its GPU (0 for the first), so that work that must
// not overlap on one GPU (start-up kernel tuning) can take turns: turn t is every GPU's
// t-th rank.
int TurnOnGpu(int local_rank, int device_count);
// Distinct GPUs this node's ranks use.
int GpusInUseOnNode(int local_size, int device_count);

enum class TpCommKind {
  kHost,    // one rank (or the CPU backend): the caller's communicator as it is
  kNccl,    // every rank on the node has a GPU of its own, and NCCL is built
  kStaged,  // ranks share a GPU (NCCL refuses that) or NCCL is absent: MPI/threads through pinned memory
};
std::string_view TpCommKindName(TpCommKind k);
// This rank's view; ranks on different nodes may see different machines, so the caller
// agrees (NCCL only if every rank says NCCL).
TpCommKind ChooseTpCommunicator(int tp_size, int local_size, int device_count, bool have_nccl);

// CPU threads for one rank. `requested` is --threads (0: the default); `node_cores` the
// node's cores, `local_ranks` the ranks that share them, `allowed_cores` the cores this
// process may run on (its affinity: mpirun binds each rank to one core by default when it
// starts two or fewer, Open MPI 4.1). The default is the node's cores shared by its ranks,
// but never more than the allowed cores: 8 threads bound to one core run at a fraction of
// one thread's speed. `note` says why when the binding capped the default, or when
// --threads asks for more than the allowed cores ("" otherwise).
struct CpuThreads {
  int threads = 1;
  std::string note;
};
CpuThreads ChooseCpuThreads(int requested, int node_cores, int local_ranks, int allowed_cores);
// The cores this process may run on (sched_getaffinity), or `fallback` if unknown.
int AllowedCores(int fallback);

// cudaDriverGetVersion / cudaRuntimeGetVersion's 13000 -> "13.0", 12080 -> "12.8".
std::string CudaVersionString(int version);

}  // namespace tpserve
