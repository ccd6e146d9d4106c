// Device and communicator choice (launch/device_choice.h), the GPU warm-up step, the
// planner's budget divided by SplitKvBlocks, and StartEngine's device errors on a machine
// without a GPU: every rank gets the same clear error. CPU only.
#include "launch/device_choice.h"

#include <sched.h>

#include <numeric>

#include "coordinator/engine/kv_split.h"
#include "gtest/gtest.h"
#include "launch/engine_setup.h"
#include "tests/tp_harness.h"
#include "worker/device.h"
#include "worker/memory_planner.h"

namespace tpserve {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(DeviceChoiceTest, AutoTakesTheGpuWhenThereIsOne) {
  EXPECT_EQ(*ChooseDevice("auto", true, 8), DeviceKind::kCuda);
  EXPECT_EQ(*ChooseDevice("auto", true, 0), DeviceKind::kCpu);
  EXPECT_EQ(*ChooseDevice("auto", false, 0), DeviceKind::kCpu);
  EXPECT_EQ(*ChooseDevice("cpu", true, 8), DeviceKind::kCpu);
  EXPECT_EQ(*ChooseDevice("cuda", true, 1), DeviceKind::kCuda);
  EXPECT_EQ(DeviceKindName(DeviceKind::kCuda), "cuda");
}

TEST(DeviceChoiceTest, CpuThreadsShareTheNodeWithinTheRanksAffinity) {
  // Unbound: the node's cores shared by its ranks.
  EXPECT_EQ(ChooseCpuThreads(0, 16, 2, 16).threads, 8);
  EXPECT_EQ(ChooseCpuThreads(0, 16, 2, 16).note, "");
  EXPECT_EQ(ChooseCpuThreads(0, 2, 4, 2).threads, 1);  // oversubscribed: one each
  // mpirun's default binding for two ranks (one core each): one thread, and the way out.
  const CpuThreads bound = ChooseCpuThreads(0, 16, 2, 1);
  EXPECT_EQ(bound.threads, 1);
  EXPECT_NE(bound.note.find("1 of the node's 16 cores"), std::string::npos) << bound.note;
  EXPECT_NE(bound.note.find("--bind-to none"), std::string::npos) << bound.note;
  EXPECT_NE(bound.note.find("PE=8"), std::string::npos) << bound.note;
  // Bound to a socket with more cores than the share: the share.
  EXPECT_EQ(ChooseCpuThreads(0, 32, 4, 16).threads, 8);
  EXPECT_EQ(ChooseCpuThreads(0, 32, 4, 16).note, "");
  // --threads is kept, with a note when it exceeds the affinity.
  EXPECT_EQ(ChooseCpuThreads(6, 16, 2, 16).threads, 6);
  EXPECT_EQ(ChooseCpuThreads(6, 16, 2, 16).note, "");
  const CpuThreads asked = ChooseCpuThreads(6, 16, 2, 1);
  EXPECT_EQ(asked.threads, 6);
  EXPECT_NE(asked.note.find("--threads 6 is more than the 1 core(s)"), std::string::npos) << asked.note;
}

TEST(DeviceChoiceTest, AllowedCoresIsThisThreadsAffinity) {
  const int all = AllowedCores(0);
  ASSERT_GE(all, 1);
  cpu_set_t saved, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(AllowedCores(0), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(AllowedCores(0), all);
}

TEST(DeviceChoiceTest, CudaWithoutBuildOrDeviceSaysWhatIsMissing) {
  auto no_build = ChooseDevice("cuda", false, 0);
  EXPECT_EQ(no_build.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_build.status().message().find("built without CUDA"), absl::string_view::npos) << no_build.status();
  EXPECT_NE(no_build.status().message().find("--device cpu"), absl::string_view::npos);
  auto no_gpu = ChooseDevice("cuda", true, 0);
  EXPECT_EQ(no_gpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_gpu.status().message().find("no CUDA device"), absl::string_view::npos) << no_gpu.status();
  auto typo = ChooseDevice("gpu", true, 8);
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(typo.status().message().find("auto, cpu, cuda"), absl::string_view::npos);
}

TEST(DeviceChoiceTest, GpuMemoryUtilizationIsAFraction) {
  EXPECT_TRUE(ValidateGpuMemoryUtilization(0.9).ok());
  EXPECT_TRUE(ValidateGpuMemoryUtilization(1.0).ok());
  for (double u : {0.0, -0.5, 1.01, 90.0}) {
    EXPECT_EQ(ValidateGpuMemoryUtilization(u).code(), absl::StatusCode::kInvalidArgument) << u;
  }
}

TEST(DeviceChoiceTest, RanksGoRoundRobinOverTheNodesGpus) {
  EXPECT_EQ(GpuForLocalRank(0, 8), 0);
  EXPECT_EQ(GpuForLocalRank(7, 8), 7);
  EXPECT_EQ(GpuForLocalRank(1, 1), 0);  // thread ranks on the one GPU
  EXPECT_EQ(GpuForLocalRank(5, 2), 1);
  EXPECT_EQ(RanksSharingGpu(3, 8, 8), 1);
  EXPECT_EQ(RanksSharingGpu(1, 2, 1), 2);
  // 3 ranks on 2 GPUs: ranks 0 and 2 share GPU 0, rank 1 has GPU 1 alone.
  EXPECT_EQ(RanksSharingGpu(0, 3, 2), 2);
  EXPECT_EQ(RanksSharingGpu(2, 3, 2), 2);
  EXPECT_EQ(RanksSharingGpu(1, 3, 2), 1);
  // Turns on a GPU (start-up tuning): GPU 0's ranks 0 and 2 take turns 0 and 1, rank 1 has
  // GPU 1 in turn 0; thread ranks on one GPU go one by one; one rank per GPU all in turn 0.
  EXPECT_EQ(TurnOnGpu(0, 2), 0);
  EXPECT_EQ(TurnOnGpu(1, 2), 0);
  EXPECT_EQ(TurnOnGpu(2, 2), 1);
  EXPECT_EQ(TurnOnGpu(1, 1), 1);
  EXPECT_EQ(TurnOnGpu(7, 8), 0);
  for (int r = 0; r < 5; ++r) EXPECT_LT(TurnOnGpu(r, 2), RanksSharingGpu(0, 5, 2)) << r;  // the most on one GPU
  EXPECT_EQ(GpusInUseOnNode(2, 1), 1);
  EXPECT_EQ(GpusInUseOnNode(4, 8), 4);
  EXPECT_EQ(GpusInUseOnNode(4, 0), 0);
}

TEST(DeviceChoiceTest, NcclOnlyWhenEveryRankOnTheNodeHasItsOwnGpu) {
  EXPECT_EQ(ChooseTpCommunicator(1, 1, 8, true), TpCommKind::kHost);   // nothing to reduce
  EXPECT_EQ(ChooseTpCommunicator(8, 8, 8, true), TpCommKind::kNccl);
  EXPECT_EQ(ChooseTpCommunicator(4, 2, 2, true), TpCommKind::kNccl);   // 2 nodes x 2 ranks x 2 GPUs
  EXPECT_EQ(ChooseTpCommunicator(2, 2, 1, true), TpCommKind::kStaged); // 2 thread ranks, 1 GPU (tests, bare box)
  EXPECT_EQ(ChooseTpCommunicator(4, 4, 2, true), TpCommKind::kStaged);
  EXPECT_EQ(ChooseTpCommunicator(2, 2, 2, false), TpCommKind::kStaged); // built without NCCL
  EXPECT_EQ(TpCommKindName(TpCommKind::kStaged), "staged");
}

TEST(DeviceChoiceTest, CudaVersionsReadLikeNvidiaSmi) {
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(12080), "12.8");
  EXPECT_EQ(CudaVersionString(0), "none");
}

// The warm-up step is a valid plan over the blocks it asks for, cut into sequences no
// longer than the model allows.
TEST(DeviceChoiceTest, WarmupStepIsAValidPlan) {
  const WarmupStep w = MakeWarmupStep(2048, 512, 16, 2, 256);
  EXPECT_EQ(w.plan.num_tokens(), 2048);
  EXPECT_EQ(w.plan.num_seqs, 4);
  EXPECT_EQ(w.blocks, 4 * 32);
  EXPECT_EQ(w.plan.logit_rows.size(), 256u);
  EXPECT_EQ(*std::max_element(w.plan.positions.begin(), w.plan.positions.end()), 511);
  EXPECT_TRUE(w.plan.Validate({w.blocks, w.blocks}, 16).ok()) << w.plan.Validate({w.blocks, w.blocks}, 16);
  const WarmupStep small = MakeWarmupStep(10, 4096, 16, 1, 256);
  EXPECT_EQ(small.blocks, 1);
  EXPECT_EQ(small.plan.logit_rows.size(), 10u);
  EXPECT_TRUE(small.plan.Validate({1}, 16).ok());
}

// The planner's budget for a 31B rank on an H200, divided between the sliding and full
// groups by SplitKvBlocks: the blocks fit the budget, and the budget fits the GPU, also
// for two ranks sharing it.
TEST(DeviceChoiceTest, PlannerBudgetSplitBetweenGroupsFitsTheGpu) {
  for (int sharing : {1, 2}) {
    KvMemoryInputs mem;
    mem.gpu_memory_utilization = 0.9;
    mem.total_bytes = 140 * kGiB;
    mem.free_bytes = 140 * kGiB - 62 * kGiB - 2 * kGiB;  // weights, context, warm-up activations
    mem.ranks_sharing_device = sharing;
    const int64_t sliding = int64_t{50} * 16 * 2 * 16 * 256 * 2, full = int64_t{10} * 16 * 2 * 4 * 512 * 2;
    mem.kv_bytes_per_block = {full, sliding};
    auto plan = PlanKvMemory(mem);
    ASSERT_TRUE(plan.ok()) << plan.status();
    KvSplitInputs split;
    split.budget_bytes = plan->budget_bytes;
    split.bytes_per_block = {full, sliding};
    split.windows = {0, 1024};
    split.block_size = 16;
    split.max_model_len = 32768;
    split.max_num_batched_tokens = 2048;
    const std::vector<int64_t> blocks = SplitKvBlocks(split);
    ASSERT_EQ(blocks.size(), 2u);
    EXPECT_GT(blocks[0], 0);
    EXPECT_GT(blocks[1], 0);
    const int64_t kv_bytes = blocks[0] * full + blocks[1] * sliding;
    EXPECT_LE(kv_bytes, plan->budget_bytes);
    EXPECT_GT(kv_bytes, plan->budget_bytes - full - sliding);  // nothing big left over
    // Every rank on the GPU: its cache plus the reserve, within the utilization cap.
    EXPECT_LE(sharing * (kv_bytes + mem.reserve_bytes), plan->cap_bytes - plan->used_bytes);
    // Sliding blocks are sized by the window, not by the context: far fewer than full ones.
    EXPECT_LT(blocks[1], blocks[0]);
  }
}

// StartEngine's device errors on every rank, never a hang; `auto` falls back to the CPU.
std::vector<absl::StatusOr<Engine>> StartOnThreads(int tp, const EngineOptions& o) {
  std::vector<absl::StatusOr<Engine>> out;
  for (int r = 0; r < tp; ++r) out.emplace_back(absl::UnknownError("not run"));
  testing::RunThreads(tp, [&](Communicator& comm) {
    WorldConfig w{comm.rank(), tp, tp, comm.rank(), tp, "local"};
    out[comm.rank()] = StartEngine(o, w, comm);
  });
  return out;
}

EngineOptions Llama3(const std::string& device) {
  EngineOptions o;
  o.model = testing::FixtureDir("llama3");
  o.device = device;
  o.threads = 1;
  o.kv_cache_bytes = 4 << 20;
  return o;
}

TEST(DeviceChoiceTest, CudaWithoutGpuIsEveryRanksError) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU: tests/cuda_engine_test.cc covers --device cuda";
  for (const absl::StatusOr<Engine>& e : StartOnThreads(2, Llama3("cuda"))) {
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
    EXPECT_NE(e.status().message().find("--device cuda"), absl::string_view::npos) << e.status();
    EXPECT_NE(e.status().message().find(BuiltWithCuda() ? "no CUDA device" : "built without CUDA"),
              absl::string_view::npos)
        << e.status();
  }
}

TEST(DeviceChoiceTest, BadDeviceOptionsAreEveryRanksError) {
  for (const absl::StatusOr<Engine>& e : StartOnThreads(2, Llama3("gpu"))) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
  }
  EngineOptions o = Llama3("cpu");
  o.gpu_memory_utilization = 1.5;
  for (const absl::StatusOr<Engine>& e : StartOnThreads(2, o)) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
    EXPECT_NE(e.status().message().find("--gpu-memory-utilization"), absl::string_view::npos) << e.status();
  }
}

TEST(DeviceChoiceTest, AutoWithoutGpuRunsOnTheCpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU: auto picks it";
  std::vector<absl::StatusOr<Engine>> engines = StartOnThreads(2, Llama3("auto"));
  for (const absl::StatusOr<Engine>& e : engines) {
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->device, DeviceKind::kCpu);
    EXPECT_EQ(e->tp_comm, TpCommKind::kHost);
    EXPECT_EQ(e->device_comm, nullptr);
    EXPECT_EQ(e->gpus_in_use, 0);
    EXPECT_EQ(e->kv_budget_bytes, 4 << 20);
    EXPECT_GT(e->model->num_kv_blocks()[0], 0);
  }
}

}  // namespace
}  // namespace tpserve
