// KV budget arithmetic and the cross-rank minimum. Tested by tests/memory_planner_test.cc.
#include "worker/memory_planner.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

std::string MiB(int64_t bytes) { return absl::StrCat(bytes / (int64_t{1} << 20), " MiB"); }

}  // namespace

std::string KvMemoryPlan::Describe() const {
  return absl::StrCat("KV cache budget ", MiB(budget_bytes), " per rank (device cap ", MiB(cap_bytes), ", ",
                      MiB(used_bytes), " in use when measured)");
}

absl::StatusOr<KvMemoryPlan> PlanKvMemory(const KvMemoryInputs& in) {
  if (!(in.gpu_memory_utilization > 0.0 && in.gpu_memory_utilization <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu-memory-utilization must be in (0, 1], got ",
                                                   in.gpu_memory_utilization));
  }
  if (in.total_bytes <= 0 || in.free_bytes < 0 || in.free_bytes > in.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("inconsistent device memory: free ", in.free_bytes, " of total ",
                                                   in.total_bytes, " bytes"));
  }
  if (in.ranks_sharing_device < 1) return absl::InvalidArgumentError("ranks_sharing_device must be at least 1");
  if (in.kv_bytes_per_block.empty()) return absl::InvalidArgumentError("the model has no KV cache groups");
  for (int64_t b : in.kv_bytes_per_block) {
    if (b <= 0) return absl::InvalidArgumentError("a KV cache group has a non-positive block size in bytes");
  }
  for (int64_t b : {in.pending_weight_bytes, in.activation_bytes, in.graph_pool_bytes, in.reserve_bytes}) {
    if (b < 0) return absl::InvalidArgumentError("memory amounts must not be negative");
  }
  KvMemoryPlan plan;
  plan.used_bytes = in.total_bytes - in.free_bytes;
  plan.cap_bytes = static_cast<int64_t>(in.gpu_memory_utilization * static_cast<double>(in.total_bytes));
  const int64_t headroom = std::min(plan.cap_bytes - plan.used_bytes, in.free_bytes);
  const int64_t share = headroom / in.ranks_sharing_device;
  const int64_t others = in.pending_weight_bytes + in.activation_bytes + in.graph_pool_bytes + in.reserve_bytes;
  const int64_t budget = share - others;
  plan.budget_bytes = std::max<int64_t>(budget, 0);
  const int64_t per_block = std::accumulate(in.kv_bytes_per_block.begin(), in.kv_bytes_per_block.end(), int64_t{0});
  const int64_t blocks = plan.budget_bytes / per_block;
  if (blocks < in.min_blocks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the KV cache gets ", blocks, " blocks of every group but needs at least ", in.min_blocks, ": of ",
        MiB(in.total_bytes), " at --gpu-memory-utilization ", in.gpu_memory_utilization, " (", MiB(plan.cap_bytes),
        "), ", MiB(plan.used_bytes), " is already in use",
        in.ranks_sharing_device > 1 ? absl::StrCat(", ", in.ranks_sharing_device, " ranks share the device") : "",
        ", and weights still to load (", MiB(in.pending_weight_bytes), "), activations (", MiB(in.activation_bytes),
        "), CUDA graphs (", MiB(in.graph_pool_bytes), ") and the reserve (", MiB(in.reserve_bytes), ") leave ",
        MiB(plan.budget_bytes), " for ", MiB(per_block), "-per-block KV; raise --gpu-memory-utilization, lower "
        "--max-num-batched-tokens, or use more GPUs (tensor-parallel ranks on GPUs of their own)"));
  }
  return plan;
}

absl::StatusOr<KvMemoryPlan> PlanKvMemoryAcrossRanks(Communicator& comm, const KvMemoryInputs& in) {
  absl::StatusOr<KvMemoryPlan> local = PlanKvMemory(in);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(local.status()));
  KvMemoryPlan plan = *local;
  plan.budget_bytes = comm.AllReduceMin(local->budget_bytes);
  return plan;
}

}  // namespace tpserve
