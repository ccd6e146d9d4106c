// KV-cache memory planning (worker/memory_planner.h): the budget arithmetic, ranks sharing
// a GPU, the errors that say what to change, and the minimum across thread-ranks. CPU only.
#include "worker/memory_planner.h"

#include <thread>

#include "gtest/gtest.h"
#include "tests/tp_harness.h"

namespace tpserve {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

// A 31B-like rank on an H200: 62 GiB of weights already loaded.
KvMemoryInputs H200AfterWeights() {
  KvMemoryInputs in;
  in.gpu_memory_utilization = 0.9;
  in.total_bytes = 140 * kGiB;
  in.free_bytes = 140 * kGiB - 62 * kGiB - 1 * kGiB;  // weights + CUDA context
  in.activation_bytes = 2 * kGiB;
  in.graph_pool_bytes = 256 * kMiB;
  in.reserve_bytes = 512 * kMiB;
  in.kv_bytes_per_block = {50 * 16 * 2 * 16 * 256 * 2, 10 * 16 * 2 * 4 * 512 * 2};  // sliding, global groups
  return in;
}

TEST(MemoryPlannerTest, BudgetIsUtilizationMinusEverythingElse) {
  const KvMemoryInputs in = H200AfterWeights();
  auto plan = PlanKvMemory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int64_t cap = static_cast<int64_t>(0.9 * 140 * kGiB);
  const int64_t budget = cap - 63 * kGiB - 2 * kGiB - 256 * kMiB - 512 * kMiB;
  EXPECT_EQ(plan->budget_bytes, budget);
  EXPECT_EQ(plan->cap_bytes, cap);
  EXPECT_EQ(plan->used_bytes, 63 * kGiB);
  // Everything planned fits in what is free now: start-up cannot OOM after planning.
  EXPECT_LE(plan->budget_bytes + in.activation_bytes + in.graph_pool_bytes, in.free_bytes);
  EXPECT_NE(plan->Describe().find("KV cache budget"), std::string::npos);
}

TEST(MemoryPlannerTest, PendingWeightsCountLikeLoadedOnes) {
  KvMemoryInputs before = H200AfterWeights();
  before.free_bytes += 62 * kGiB;
  before.pending_weight_bytes = 62 * kGiB;
  auto a = PlanKvMemory(before), b = PlanKvMemory(H200AfterWeights());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->budget_bytes, b->budget_bytes);
}

TEST(MemoryPlannerTest, OtherProcessesShrinkTheBudgetNeverPastFree) {
  KvMemoryInputs in = H200AfterWeights();
  in.gpu_memory_utilization = 1.0;
  in.free_bytes -= 30 * kGiB;  // someone else holds 30 GiB
  auto plan = PlanKvMemory(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_LE(plan->budget_bytes + in.activation_bytes + in.graph_pool_bytes + in.reserve_bytes, in.free_bytes);
}

// Two ranks on one GPU, measured after both loaded: each gets half of what is left, so
// both caches together fit.
TEST(MemoryPlannerTest, RanksSharingADeviceSplitWhatIsLeft) {
  KvMemoryInputs in = H200AfterWeights();
  in.activation_bytes = 0;
  in.graph_pool_bytes = 0;
  const int64_t cap = static_cast<int64_t>(0.9 * 140 * kGiB);
  const int64_t headroom = cap - 63 * kGiB;
  in.ranks_sharing_device = 2;
  auto plan = PlanKvMemory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->budget_bytes, headroom / 2 - in.reserve_bytes);
  EXPECT_LE(2 * (plan->budget_bytes + in.reserve_bytes), in.free_bytes);
  in.ranks_sharing_device = 0;
  EXPECT_EQ(PlanKvMemory(in).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MemoryPlannerTest, ErrorsSayWhatToChange) {
  KvMemoryInputs in = H200AfterWeights();
  in.gpu_memory_utilization = 0.45;  // less than the weights already take
  auto plan = PlanKvMemory(in);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("raise --gpu-memory-utilization"), absl::string_view::npos)
      << plan.status();

  in = H200AfterWeights();
  in.min_blocks = int64_t{1} << 40;
  EXPECT_EQ(PlanKvMemory(in).status().code(), absl::StatusCode::kResourceExhausted);

  for (double u : {0.0, -0.1, 1.5}) {
    in = H200AfterWeights();
    in.gpu_memory_utilization = u;
    EXPECT_EQ(PlanKvMemory(in).status().code(), absl::StatusCode::kInvalidArgument) << u;
  }
  in = H200AfterWeights();
  in.free_bytes = in.total_bytes + 1;
  EXPECT_EQ(PlanKvMemory(in).status().code(), absl::StatusCode::kInvalidArgument);
  in = H200AfterWeights();
  in.kv_bytes_per_block = {};
  EXPECT_EQ(PlanKvMemory(in).status().code(), absl::StatusCode::kInvalidArgument);
  in = H200AfterWeights();
  in.kv_bytes_per_block = {0};
  EXPECT_EQ(PlanKvMemory(in).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MemoryPlannerTest, RanksAgreeOnTheMinimum) {
  std::vector<int64_t> budgets(3, -1);
  testing::RunThreads(3, [&](Communicator& comm) {
    KvMemoryInputs in = H200AfterWeights();
    in.free_bytes -= comm.rank() * kGiB;  // rank 2 has the least free memory
    auto plan = PlanKvMemoryAcrossRanks(comm, in);
    ASSERT_TRUE(plan.ok()) << plan.status();
    budgets[comm.rank()] = plan->budget_bytes;
  });
  KvMemoryInputs least = H200AfterWeights();
  least.free_bytes -= 2 * kGiB;
  EXPECT_EQ(budgets[0], PlanKvMemory(least)->budget_bytes);
  EXPECT_EQ(budgets[1], budgets[0]);
  EXPECT_EQ(budgets[2], budgets[0]);
}

TEST(MemoryPlannerTest, OneRanksFailureIsEveryRanksError) {
  std::vector<absl::Status> st(2);
  testing::RunThreads(2, [&](Communicator& comm) {
    KvMemoryInputs in = H200AfterWeights();
    if (comm.rank() == 1) in.gpu_memory_utilization = 0.3;
    st[comm.rank()] = PlanKvMemoryAcrossRanks(comm, in).status();
  });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kResourceExhausted) << st[0];
  EXPECT_NE(st[0].message().find("rank 1"), absl::string_view::npos) << st[0];
  EXPECT_EQ(st[1].code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tpserve
