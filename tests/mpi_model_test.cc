// The model under real MPI ranks (run by ctest with mpirun -np 1, 2 and 4): every
// fixture's greedy tokens and logits match transformers through the MPI communicator.
#include <mpi.h>
#include <time.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/offline_harness.h"
#include "tests/tp_harness.h"
#include "worker/backend.h"
#include "worker/weight_source.h"

namespace tpserve {

Communicator& Comm() {
  static std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
  return *comm;
}

namespace {

class MpiFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiFixtureTest, GreedyMatchesTransformers) {
  const std::string name = GetParam();
  const testing::Reference ref = testing::LoadReference(name);
  Communicator& comm = Comm();
  auto config = LoadModelConfig(testing::FixtureDir(name));
  ASSERT_TRUE(config.ok()) << config.status();
  auto source = OpenCheckpointSource(testing::FixtureDir(name));
  ASSERT_TRUE(source.ok()) << source.status();
  auto backend = MakeCpuBackend(BackendOptions{.threads = 1});
  auto model = Model::Load(*config, **source, *backend, comm, ModelOptions{});
  ASSERT_TRUE(comm.AgreeOnStatus(model.status()).ok()) << model.status();
  ASSERT_TRUE((*model)->AllocateKvCache(32).ok());
  if (comm.rank() != 0) {
    ASSERT_TRUE(RunWorkerLoop(**model, comm).ok());
    return;
  }
  StepExecutor exec(**model, comm);
  testing::OfflineOptions oo;
  oo.max_num_batched_tokens = 7;  // chunked prefill across ranks too
  auto outs = testing::GreedyGenerate(**model, exec, {ref.prompt_ids, ref.prompt_ids},
                                      static_cast<int32_t>(ref.greedy_ids.size()), oo);
  exec.Shutdown();
  ASSERT_TRUE(outs.ok()) << outs.status();
  for (const auto& out : outs->outputs) {
    EXPECT_EQ(out.output_ids, ref.greedy_ids) << name;
    for (size_t s = 0; s < ref.greedy_logits.size(); ++s) {
      EXPECT_LE(testing::ToleranceRatio(out.logits[s], ref.greedy_logits[s], 2e-3, 2e-3), 1.0) << name << " step " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, MpiFixtureTest,
                         ::testing::Values("gemma4_text", "gemma4_multimodal", "gemma3_text", "llama3", "qwen2",
                                           "qwen3"));

TEST(Mpi, AgreeOnStatusReachesEveryRank) {
  Communicator& comm = Comm();
  absl::Status local = comm.rank() == comm.size() - 1 ? absl::NotFoundError("boom on the last rank") : absl::OkStatus();
  absl::Status agreed = comm.AgreeOnStatus(local);
  ASSERT_FALSE(agreed.ok());
  EXPECT_NE(std::string(agreed.message()).find("boom on the last rank"), std::string::npos);
  EXPECT_EQ(agreed.code(), absl::StatusCode::kNotFound);
  std::vector<float> v(5, static_cast<float>(comm.rank() + 1));
  comm.AllReduceSum(v.data(), v.size(), DType::kF32);
  EXPECT_EQ(v[4], comm.size() * (comm.size() + 1) / 2.0f);
  uint16_t b = F32ToBf16(1.0f);
  comm.AllReduceSum(&b, 1, DType::kBF16);
  EXPECT_EQ(Bf16ToF32(b), static_cast<float>(comm.size()));
  EXPECT_EQ(comm.AllReduceMin(100 - comm.rank()), 100 - (comm.size() - 1));
}

// Workers wait for the next plan through BroadcastBytes; while the server idles that wait
// must not hold a core (a blocking MPI_Bcast spins: an idle `tpserve serve -np 2` had rank
// 1 at 99% CPU). Rank 0 sends after 400 ms; the others' CPU time over the wait stays a
// small part of it (spinning, each waiting rank used 66-100% of it: 2 cores, up to 4 ranks).
TEST(Mpi, WaitingForABroadcastDoesNotHoldACore) {
  Communicator& comm = Comm();
  auto thread_cpu_s = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  comm.Barrier();
  std::vector<uint8_t> bytes;
  if (comm.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    bytes = {1, 2, 3, 4, 5};
  }
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu_s();
  comm.BroadcastBytes(bytes, 0);
  const double cpu = thread_cpu_s() - cpu0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 4, 5}));
  if (comm.rank() != 0) {
    EXPECT_GT(wall, 0.1);  // it did wait (less than 400 ms if this rank was descheduled after the barrier)
    EXPECT_LT(cpu, 0.25 * wall) << "rank " << comm.rank() << " used " << cpu << " s of CPU waiting " << wall << " s";
  }
  // Back to back, as steps of a busy server: every message arrives, in order.
  for (uint8_t i = 0; i < 50; ++i) {
    std::vector<uint8_t> msg;
    if (comm.rank() == 0) msg.assign(i, i);
    comm.BroadcastBytes(msg, 0);
    EXPECT_EQ(msg, std::vector<uint8_t>(i, i));
  }
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::MpiInit(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints gtest's report; every rank still fails the run on a failure.
  int rank = tpserve::Comm().rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  tpserve::MpiFinalize();
  return rc;
}
