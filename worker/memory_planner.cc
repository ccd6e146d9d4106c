// KV block planning arithmetic and the cross-rank minimum. Tested by
// tests/memory_planner_test.cc.
#include "worker/memory_planner.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

std::string MiB(int64_t bytes) { return absl::StrCat(bytes / (int64_t{1} << 20), " MiB"); }

}  // namespace

std::string KvBlockPlan::Describe() const {
  return absl::StrCat(num_blocks, " KV blocks per group (", MiB(kv_bytes), " of a ", MiB(budget_bytes),
                      " KV budget)");
}

absl::StatusOr<KvBlockPlan> PlanKvBlocks(const KvMemoryInputs& in) {
  if (!(in.gpu_memory_utilization > 0.0 && in.gpu_memory_utilization <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu-memory-utilization must be in (0, 1], got ",
                                                   in.gpu_memory_utilization));
  }
  if (in.total_bytes <= 0 || in.free_bytes < 0 || in.free_bytes > in.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("inconsistent device memory: free ", in.free_bytes, " of total ",
                                                   in.total_bytes, " bytes"));
  }
  if (in.kv_bytes_per_block.empty()) return absl::InvalidArgumentError("the model has no KV cache groups");
  for (int64_t b : in.kv_bytes_per_block) {
    if (b <= 0) return absl::InvalidArgumentError("a KV cache group has a non-positive block size in bytes");
  }
  for (int64_t b : {in.pending_weight_bytes, in.activation_bytes, in.graph_pool_bytes, in.reserve_bytes}) {
    if (b < 0) return absl::InvalidArgumentError("memory amounts must not be negative");
  }
  const int64_t used = in.total_bytes - in.free_bytes;
  const int64_t cap = static_cast<int64_t>(in.gpu_memory_utilization * static_cast<double>(in.total_bytes));
  const int64_t headroom = std::min(cap - used, in.free_bytes);
  const int64_t others = in.pending_weight_bytes + in.activation_bytes + in.graph_pool_bytes + in.reserve_bytes;
  const int64_t budget = headroom - others;
  const int64_t per_block = std::accumulate(in.kv_bytes_per_block.begin(), in.kv_bytes_per_block.end(), int64_t{0});
  KvBlockPlan plan;
  plan.budget_bytes = std::max<int64_t>(budget, 0);
  plan.num_blocks = plan.budget_bytes / per_block;
  plan.kv_bytes = plan.num_blocks * per_block;
  if (plan.num_blocks < in.min_blocks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the KV cache gets ", plan.num_blocks, " blocks but needs at least ", in.min_blocks, ": of ",
        MiB(in.total_bytes), " at --gpu-memory-utilization ", in.gpu_memory_utilization, " (", MiB(cap), "), ",
        MiB(used), " is already in use, and weights still to load (", MiB(in.pending_weight_bytes),
        "), activations (", MiB(in.activation_bytes), "), CUDA graphs (", MiB(in.graph_pool_bytes),
        ") and the reserve (", MiB(in.reserve_bytes), ") leave ", MiB(budget > 0 ? budget : 0), " for ",
        MiB(per_block), "-per-block KV; raise --gpu-memory-utilization, lower the context length or the batch, "
        "or use more tensor-parallel ranks"));
  }
  return plan;
}

absl::StatusOr<KvBlockPlan> PlanKvBlocksAcrossRanks(Communicator& comm, const KvMemoryInputs& in) {
  absl::StatusOr<KvBlockPlan> local = PlanKvBlocks(in);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(local.status()));
  const int64_t blocks = comm.AllReduceMin(local->num_blocks);
  const int64_t per_block = std::accumulate(in.kv_bytes_per_block.begin(), in.kv_bytes_per_block.end(), int64_t{0});
  KvBlockPlan plan = *local;
  plan.num_blocks = blocks;
  plan.kv_bytes = blocks * per_block;
  return plan;
}

}  // namespace tpserve
