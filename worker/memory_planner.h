// KV-cache sizing on a GPU: from --gpu-memory-utilization and the device's free/total
// memory, minus weights, activation workspace, CUDA-graph pools and a reserve, the bytes
// this rank's KV cache may take; coordinator/engine/kv_split.h then divides them between the KV
// groups, and ranks agree on the minimum so that no rank allocates more than it can hold.
// Pure arithmetic (the caller measures), so start-up never OOMs after planning. Tested by
// tests/memory_planner_test.cc and tests/device_choice_test.cc (CPU only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/communicator.h"

namespace tpserve {

struct KvMemoryInputs {
  // Fraction of the device's total memory the ranks on it may hold in all, in (0, 1].
  double gpu_memory_utilization = 0.9;
  int64_t total_bytes = 0;  // device memory (cudaMemGetInfo total)
  int64_t free_bytes = 0;   // free when measured (cudaMemGetInfo free); everything else counts as used
  // Ranks that share this device, measured after all of them loaded (thread ranks or
  // processes on one GPU): each gets an equal part of what is left.
  int32_t ranks_sharing_device = 1;
  // Allocations of this rank still to come that free_bytes does not reflect: the weights
  // when planning before loading them (0 when measured after loading).
  int64_t pending_weight_bytes = 0;
  // Scratch + attention workspace at the largest step, if not yet allocated (0 when a
  // warm-up step at that size ran before measuring).
  int64_t activation_bytes = 0;
  int64_t graph_pool_bytes = 0;  // CUDA graphs' private memory, all captured sizes
  int64_t reserve_bytes = int64_t{512} << 20;  // cuBLAS/NCCL internals, allocator slack
  // Bytes of one block in each KV group (Model::KvBytesPerBlock): a budget below
  // min_blocks blocks of every group is an error.
  std::vector<int64_t> kv_bytes_per_block;
  int64_t min_blocks = 1;
};

struct KvMemoryPlan {
  int64_t budget_bytes = 0;  // this rank's KV cache (SplitKvBlocks divides it between groups)
  int64_t cap_bytes = 0;     // utilization * total
  int64_t used_bytes = 0;    // in use on the device when measured (all ranks, all processes)
  std::string Describe() const;
};

// budget = min(utilization * total - (total - free), free) / ranks_sharing_device
//          - pending weights - activations - graph pools - reserve.
// InvalidArgument for inconsistent inputs; ResourceExhausted (saying what to change) when
// the budget holds fewer than min_blocks blocks of every group.
absl::StatusOr<KvMemoryPlan> PlanKvMemory(const KvMemoryInputs& in);

// Every rank plans locally, all agree on the first failure, then take the smallest budget
// (Communicator::AllReduceMin). Called by every rank at once.
absl::StatusOr<KvMemoryPlan> PlanKvMemoryAcrossRanks(Communicator& comm, const KvMemoryInputs& in);

}  // namespace tpserve
