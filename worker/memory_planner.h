// KV-cache sizing: from --gpu-memory-utilization and the device's free/total memory,
// minus weights, activation workspace, CUDA-graph pools and a reserve, the number of KV
// blocks every group gets; ranks then agree on the minimum so that no rank allocates more
// than it can hold. Pure arithmetic (the caller measures), so start-up never OOMs after
// planning. Tested by tests/memory_planner_test.cc (CPU only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/communicator.h"

namespace tpserve {

struct KvMemoryInputs {
  // Fraction of the device's total memory this rank may hold in all, in (0, 1].
  double gpu_memory_utilization = 0.9;
  int64_t total_bytes = 0;  // device memory (cudaMemGetInfo total)
  int64_t free_bytes = 0;   // free when measured (cudaMemGetInfo free); everything else counts as used
  // Allocations still to come that free_bytes does not reflect: the weights when planning
  // before loading them (0 when measured after loading).
  int64_t pending_weight_bytes = 0;
  int64_t activation_bytes = 0;  // scratch + attention workspace at the largest step
  int64_t graph_pool_bytes = 0;  // CUDA graphs' private memory, all captured sizes
  int64_t reserve_bytes = int64_t{512} << 20;  // cuBLAS/NCCL internals, allocator slack
  // Bytes of one block in each KV group (Model::KvBytesPerBlock); every group gets the
  // same number of blocks.
  std::vector<int64_t> kv_bytes_per_block;
  int64_t min_blocks = 1;  // fewer is an error (e.g. the blocks of one longest sequence)
};

struct KvBlockPlan {
  int64_t num_blocks = 0;    // per group
  int64_t kv_bytes = 0;      // num_blocks * sum(kv_bytes_per_block)
  int64_t budget_bytes = 0;  // memory that was left for the KV cache
  std::string Describe() const;
};

// budget = min(utilization * total - (total - free), free) - pending weights - activations
//          - graph pools - reserve;  num_blocks = budget / sum(kv_bytes_per_block).
// InvalidArgument for inconsistent inputs; ResourceExhausted (saying what to change) when
// fewer than min_blocks fit.
absl::StatusOr<KvBlockPlan> PlanKvBlocks(const KvMemoryInputs& in);

// Every rank plans locally, all agree on the first failure, then take the minimum block
// count (Communicator::AllReduceMin). Called by every rank at once.
absl::StatusOr<KvBlockPlan> PlanKvBlocksAcrossRanks(Communicator& comm, const KvMemoryInputs& in);

}  // namespace tpserve
