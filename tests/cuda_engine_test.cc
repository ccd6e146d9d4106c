// The engine started through StartEngine with --device cuda, as `tpserve generate` and
// `serve` start it: greedy tokens on a tiny transformers checkpoint equal the CPU backend's
// at TP 1 and with 2 thread-ranks on the GPU(s) (staged through pinned memory when they
// share one, NCCL when each has its own); the KV cache stays within
// --gpu-memory-utilization; too small a fraction is every rank's error; the MTP drafter's
// draft passes keep the greedy tokens. GPU test (ctest -L gpu).
#include <algorithm>
#include <cstdio>
#include <memory>

#include "tests/offline_harness.h"
#include "coordinator/engine/mtp_proposer.h"
#include "gtest/gtest.h"
#include "launch/engine_setup.h"
#include "tests/cuda_test_util.h"
#include "tests/tp_harness.h"
#include "worker/device.h"
#include "worker/step_executor.h"
#include "worker/worker_loop.h"

namespace tpserve {
namespace {

// Qwen3: the CPU backend rounding every op to bf16 (tests/bf16_reference_backend.h) gives
// the fp32 greedy tokens at TP 1 and 2, with top-2 logit gaps >= 0.19 and >= 0.25 over the
// 8 tokens (measured on CPU); the GPU's summation order moves logits by < 0.1 from that
// reference (tests/cuda_model_test.cc). Other fixtures have near ties (llama3: 0.01).
constexpr char kFixture[] = "qwen3";
constexpr int kTokens = 8;
// ctest runs GPU tests side by side: take a small part of the GPU.
constexpr double kUtilization = 0.25;
// What other tests running beside this one may hold when the memory is checked.
constexpr int64_t kOthersSlack = int64_t{1} << 30;

struct RunOutput {
  std::vector<int32_t> ids;
  std::vector<absl::Status> status;  // per rank
  DeviceKind device = DeviceKind::kCpu;
  TpCommKind tp_comm = TpCommKind::kHost;
  int gpus_in_use = 0;
  int64_t kv_budget_bytes = 0;
  std::vector<int64_t> kv_blocks;
  int64_t used_after_start = 0, total = 0;
};

// Starts the engine on `tp` thread-ranks and generates greedily from the fixture's prompt.
// `drafts`: speculative decoding with the reference's own tokens as drafts (some wrong), so
// that steps verify several tokens of a sequence at once.
RunOutput Generate(const std::string& device, int tp, double utilization = kUtilization, bool drafts = false) {
  RunOutput out;
  out.status.assign(tp, absl::OkStatus());
  const testing::Reference ref = testing::LoadReference(kFixture);
  EngineOptions o;
  o.model = testing::FixtureDir(kFixture);
  o.device = device;
  o.gpu_memory_utilization = utilization;
  o.threads = 1;
  o.kv_cache_bytes = 16 << 20;
  o.max_num_seqs = 1;
  testing::RunThreads(tp, [&](Communicator& comm) {
    WorldConfig w{comm.rank(), tp, tp, comm.rank(), tp, "local"};
    auto engine = StartEngine(o, w, comm);
    out.status[comm.rank()] = engine.status();
    if (!engine.ok()) return;
    if (comm.rank() != 0) {
      EXPECT_TRUE(RunWorkerLoop(*engine->model, comm).ok());
      return;
    }
    out.device = engine->device;
    out.tp_comm = engine->tp_comm;
    out.gpus_in_use = engine->gpus_in_use;
    out.kv_budget_bytes = engine->kv_budget_bytes;
    out.kv_blocks = engine->model->num_kv_blocks();
    if (engine->device == DeviceKind::kCuda) {
      auto mem = CudaDeviceMemory(engine->gpu);
      EXPECT_TRUE(mem.ok()) << mem.status();
      if (mem.ok()) {
        out.used_after_start = mem->total_bytes - mem->free_bytes;
        out.total = mem->total_bytes;
      }
    }
    StepExecutor executor(*engine->model, comm);
    testing::OfflineOptions oo;
    if (drafts) {
      oo.num_speculative_tokens = 3;
      oo.proposer = [&] { return std::make_unique<testing::OracleProposer>(ref.prompt_ids, ref.greedy_ids); };
    }
    auto outs = testing::GreedyGenerate(*engine->model, executor, {ref.prompt_ids}, kTokens, oo);
    executor.Shutdown();
    EXPECT_TRUE(outs.ok()) << outs.status();
    if (outs.ok()) out.ids = outs->outputs[0].output_ids;
  });
  return out;
}

TEST(CudaEngineTest, DescribesTheDevice) {
  TP_SKIP_WITHOUT_GPU();
  auto facts = DescribeCudaDevice(0);
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_FALSE(facts->name.empty());
  EXPECT_GT(facts->driver_version, 0);
  EXPECT_GT(facts->runtime_version, 0);
  EXPECT_GT(facts->total_bytes, 0);
  EXPECT_EQ(CudaDeviceCount(), testing::CudaDevices());
  EXPECT_TRUE(BuiltWithCuda());
}

TEST(CudaEngineTest, GreedyTokensMatchTheCpuBackend) {
  TP_SKIP_WITHOUT_GPU();
  const RunOutput cpu = Generate("cpu", 1);
  ASSERT_TRUE(cpu.status[0].ok()) << cpu.status[0];
  ASSERT_EQ(cpu.ids.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ(cpu.ids, testing::LoadReference(kFixture).greedy_ids);  // the CPU path is transformers'

  const RunOutput gpu = Generate("cuda", 1);
  ASSERT_TRUE(gpu.status[0].ok()) << gpu.status[0];
  EXPECT_EQ(gpu.device, DeviceKind::kCuda);
  EXPECT_EQ(gpu.tp_comm, TpCommKind::kHost);
  EXPECT_EQ(gpu.gpus_in_use, 1);
  EXPECT_EQ(gpu.ids, cpu.ids);
  // The KV cache took what the utilization left, and no more.
  EXPECT_GT(gpu.kv_budget_bytes, 0);
  EXPECT_GT(gpu.kv_blocks.at(0), 0);
  EXPECT_LE(gpu.used_after_start, static_cast<int64_t>(kUtilization * static_cast<double>(gpu.total)) + kOthersSlack);

  const RunOutput auto_gpu = Generate("auto", 1);
  EXPECT_EQ(auto_gpu.device, DeviceKind::kCuda);
  EXPECT_EQ(auto_gpu.ids, cpu.ids);
}

TEST(CudaEngineTest, TwoThreadRanksMatchTheCpuBackend) {
  TP_SKIP_WITHOUT_GPU();
  const RunOutput cpu = Generate("cpu", 1);
  const RunOutput gpu = Generate("cuda", 2);
  for (const absl::Status& st : gpu.status) ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(gpu.tp_comm, testing::CudaDevices() >= 2 ? TpCommKind::kNccl : TpCommKind::kStaged);
  EXPECT_EQ(gpu.gpus_in_use, std::min(2, testing::CudaDevices()));
  EXPECT_EQ(gpu.ids, cpu.ids);
  EXPECT_LE(gpu.used_after_start, static_cast<int64_t>(kUtilization * static_cast<double>(gpu.total)) + kOthersSlack);
}

// Verification steps (1 + K tokens of a sequence, K + 1 rows sampled on the device) give
// the CPU backend's greedy tokens, at 1 and 2 ranks.
TEST(CudaEngineTest, VerifyingDraftsMatchesTheCpuBackend) {
  TP_SKIP_WITHOUT_GPU();
  const RunOutput cpu = Generate("cpu", 1);
  for (int tp : {1, 2}) {
    const RunOutput gpu = Generate("cuda", tp, kUtilization, /*drafts=*/true);
    for (const absl::Status& st : gpu.status) ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(gpu.ids, cpu.ids) << "tp " << tp;
  }
}

// Greedy on gemma4_mtp's target, with or without its dense MTP assistant drafting (loaded by
// StartEngine from --speculative-config, run by every rank's draft passes on the GPU).
struct MtpRun {
  std::vector<int32_t> ids;
  std::vector<absl::Status> status;
  SpecDecodeStats spec;
};

MtpRun GenerateGemma4(const std::string& device, int tp, bool mtp) {
  MtpRun out;
  out.status.assign(tp, absl::OkStatus());
  const testing::Reference ref = testing::LoadReference("gemma4_text");  // gemma4_mtp/target's checkpoint
  EngineOptions o;
  o.model = testing::FixtureDir("gemma4_mtp/target");
  o.device = device;
  o.gpu_memory_utilization = kUtilization;
  o.threads = 1;
  o.kv_cache_bytes = 16 << 20;
  o.max_num_seqs = 1;
  if (mtp) {
    o.speculative.method = SpeculativeConfig::Method::kMtp;
    o.speculative.model = testing::FixtureDir("gemma4_mtp/assistant");
    o.speculative.num_speculative_tokens = 4;
  }
  testing::RunThreads(tp, [&](Communicator& comm) {
    WorldConfig w{comm.rank(), tp, tp, comm.rank(), tp, "local"};
    auto engine = StartEngine(o, w, comm);
    out.status[comm.rank()] = engine.status();
    if (!engine.ok()) return;
    EXPECT_EQ(engine->drafter != nullptr, mtp);
    if (comm.rank() != 0) {
      EXPECT_TRUE(RunWorkerLoop(*engine->model, comm, engine->drafter.get()).ok());
      return;
    }
    StepExecutor executor(*engine->model, comm, engine->drafter.get());
    testing::OfflineOptions oo;
    if (mtp) {
      oo.num_speculative_tokens = o.speculative.num_speculative_tokens;
      oo.sliding_lookback = kMtpDrafterLookback;
      oo.proposer = [&] { return std::make_unique<MtpProposer>(executor); };
    }
    auto outs = testing::GreedyGenerate(*engine->model, executor, {ref.prompt_ids},
                                        static_cast<int32_t>(ref.greedy_ids.size()), oo);
    executor.Shutdown();
    EXPECT_TRUE(outs.ok()) << outs.status();
    if (outs.ok()) {
      out.ids = outs->outputs[0].output_ids;
      out.spec = outs->spec;
    }
  });
  return out;
}

// The MTP drafter on the GPU: its steps (the Backend ops the target uses, GatherRows for its
// input rows) read the target's paged K/V there; greedy with its drafts gives the GPU's own
// greedy tokens without drafts, at 1 and 2 ranks. (GPU-vs-CPU equality is not asserted on
// this fixture: bf16 may flip its near ties.)
TEST(CudaEngineTest, MtpDraftsKeepTheGreedyTokens) {
  TP_SKIP_WITHOUT_GPU();
  const MtpRun cpu = GenerateGemma4("cpu", 1, /*mtp=*/true);
  ASSERT_TRUE(cpu.status[0].ok()) << cpu.status[0];
  EXPECT_EQ(cpu.ids, testing::LoadReference("gemma4_text").greedy_ids);
  for (int tp : {1, 2}) {
    const MtpRun plain = GenerateGemma4("cuda", tp, /*mtp=*/false);
    const MtpRun drafted = GenerateGemma4("cuda", tp, /*mtp=*/true);
    for (const absl::Status& st : plain.status) ASSERT_TRUE(st.ok()) << st;
    for (const absl::Status& st : drafted.status) ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(plain.ids.size(), cpu.ids.size());
    EXPECT_EQ(drafted.ids, plain.ids) << "tp " << tp;
    EXPECT_GT(drafted.spec.num_draft_tokens, 0) << "tp " << tp;
    std::printf("[ numbers  ] tp %d on cuda: %lld/%lld MTP draft tokens accepted (cpu: %lld/%lld); tokens %s the cpu's\n",
                tp, static_cast<long long>(drafted.spec.num_accepted_tokens),
                static_cast<long long>(drafted.spec.num_draft_tokens),
                static_cast<long long>(cpu.spec.num_accepted_tokens), static_cast<long long>(cpu.spec.num_draft_tokens),
                drafted.ids == cpu.ids ? "equal" : "differ from");
  }
}

TEST(CudaEngineTest, TooLittleMemoryIsEveryRanksError) {
  TP_SKIP_WITHOUT_GPU();
  const RunOutput gpu = Generate("cuda", 2, 1e-4);
  for (const absl::Status& st : gpu.status) {
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
    EXPECT_NE(st.message().find("--gpu-memory-utilization"), absl::string_view::npos) << st;
  }
}

}  // namespace
}  // namespace tpserve
