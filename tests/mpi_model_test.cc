// The model under real MPI ranks (run by ctest with mpirun -np 1, 2 and 4): every
// fixture's greedy tokens and logits match transformers through the MPI communicator.
#include <mpi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
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

// Loads fixture `name` with `pp` pipeline stages of size / pp ranks each (a tensor-parallel
// group split from the world where pp > 1) and checks two greedy generations of its prompt
// (chunked prefill across ranks too) against transformers.
void ExpectGreedyMatches(const std::string& name, int pp) {
  const testing::Reference ref = testing::LoadReference(name);
  Communicator& comm = Comm();
  const int tp = comm.size() / pp;
  auto config = LoadModelConfig(testing::FixtureDir(name));
  ASSERT_TRUE(config.ok()) << config.status();
  auto source = OpenCheckpointSource(testing::FixtureDir(name));
  ASSERT_TRUE(source.ok()) << source.status();
  auto backend = MakeCpuBackend(BackendOptions{.threads = 1});
  std::unique_ptr<Communicator> stage_comm;
  ModelOptions mo;
  if (pp > 1) {
    stage_comm = comm.Split(comm.rank() / tp);
    ASSERT_EQ(stage_comm->size(), tp);
    ASSERT_EQ(stage_comm->rank(), comm.rank() % tp);
    auto stage = MakePipelineStage(*config, pp, comm.rank() / tp);
    ASSERT_TRUE(stage.ok()) << stage.status();
    mo.pipeline = *stage;
  }
  auto model = Model::Load(*config, **source, *backend, stage_comm ? *stage_comm : comm, mo, &comm);
  ASSERT_TRUE(comm.AgreeOnStatus(model.status()).ok()) << model.status();
  ASSERT_TRUE((*model)->AllocateKvCache(32).ok());
  if (comm.rank() != 0) {
    ASSERT_TRUE(RunWorkerLoop(**model, comm).ok());
    return;
  }
  StepExecutor exec(**model, comm);
  testing::OfflineOptions oo;
  oo.max_num_batched_tokens = 7;
  auto outs = testing::GreedyGenerate(**model, exec, {ref.prompt_ids, ref.prompt_ids},
                                      static_cast<int32_t>(ref.greedy_ids.size()), oo);
  exec.Shutdown();
  ASSERT_TRUE(outs.ok()) << outs.status();
  // With stages, the two prompts run as two micro-batches in flight at once.
  int32_t most_in_flight = 0;
  for (const StepSummary& s : outs->steps) most_in_flight = std::max(most_in_flight, s.steps_in_flight);
  EXPECT_EQ(most_in_flight, pp);
  for (const auto& out : outs->outputs) {
    EXPECT_EQ(out.output_ids, ref.greedy_ids) << name;
    for (size_t s = 0; s < ref.greedy_logits.size(); ++s) {
      EXPECT_LE(testing::ToleranceRatio(out.logits[s], ref.greedy_logits[s], 2e-3, 2e-3), 1.0) << name << " step " << s;
    }
  }
}

TEST_P(MpiFixtureTest, GreedyMatchesTransformers) { ExpectGreedyMatches(GetParam(), 1); }

INSTANTIATE_TEST_SUITE_P(AllArchitectures, MpiFixtureTest,
                         ::testing::Values("gemma4_text", "gemma4_multimodal", "gemma3_text", "llama3", "qwen2",
                                           "qwen3", "llama3_attn_bias", "gemma3_attn_bias"));

// Pipeline stages of MPI ranks: at 2 ranks two stages of one, at 4 two stages of two.
TEST_P(MpiFixtureTest, PipelineStagesMatchTransformers) {
  if (Comm().size() == 1) GTEST_SKIP() << "one rank: no pipeline";
  ExpectGreedyMatches(GetParam(), 2);
}

TEST(Mpi, SplitAndPointToPoint) {
  Communicator& comm = Comm();
  if (comm.size() == 1) GTEST_SKIP() << "one rank";
  // Odd and even ranks: each group sums its own ranks.
  std::unique_ptr<Communicator> half = comm.Split(comm.rank() % 2);
  EXPECT_EQ(half->rank(), comm.rank() / 2);
  std::vector<float> v = {static_cast<float>(comm.rank())};
  half->AllReduceSum(v.data(), 1, DType::kF32);
  float expect = 0;
  for (int r = comm.rank() % 2; r < comm.size(); r += 2) expect += static_cast<float>(r);
  EXPECT_EQ(v[0], expect);
  // A ring of sends, several messages in order, one of them empty.
  const int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
  std::vector<int32_t> out(1000, comm.rank()), in(1000, -1);
  if (comm.rank() % 2 == 0) {
    comm.Send(out.data(), out.size() * 4, next);
    comm.Send(nullptr, 0, next);
    comm.Recv(in.data(), in.size() * 4, prev);
    comm.Recv(nullptr, 0, prev);
  } else {
    comm.Recv(in.data(), in.size() * 4, prev);
    comm.Recv(nullptr, 0, prev);
    comm.Send(out.data(), out.size() * 4, next);
    comm.Send(nullptr, 0, next);
  }
  EXPECT_EQ(in, std::vector<int32_t>(1000, prev));
}

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

// The waiting thread's voluntary context switches: how often it blocked in the kernel
// (sleep, wait). A spinning or yielding thread has none. -1 if unreadable.
long VoluntarySwitches(pid_t tid) {
  std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(line.find(':') + 1));
  }
  return -1;
}

// Workers wait for the next plan through BroadcastBytes; while the server idles that wait
// must not hold a core (a blocking MPI_Bcast spins: an idle `tpserve serve -np 2` had rank
// 1 at 99% CPU; worker/mpi_communicator.cc's wait sleeps between probes, which took it to
// 2%). No clock: on each waiting rank a watcher thread reads the waiting thread's voluntary
// context switches and, once it has blocked in the kernel, leaves a file; rank 0 sends
// only when every waiting rank has left one. A wait that spins never blocks and the files
// never come: rank 0 sends after 60 s (a hang guard, not a speed limit) and the waiting
// ranks fail.
TEST(Mpi, WaitingForABroadcastSleeps) {
  Communicator& comm = Comm();
  std::vector<uint8_t> dir_bytes;  // a directory every rank sees (ctest runs them on one machine)
  if (comm.rank() == 0) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpi_model_test.XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) {
      dir_bytes.assign(tmpl.begin(), tmpl.end());
    } else {
      ADD_FAILURE() << "mkdtemp " << tmpl << ": " << std::strerror(errno);
    }
  }
  comm.BroadcastBytes(dir_bytes, 0);
  const std::string dir(dir_bytes.begin(), dir_bytes.end());
  if (dir.empty()) return;  // on every rank
  auto slept_file = [&dir](int rank) { return dir + "/slept." + std::to_string(rank); };
  comm.Barrier();
  std::vector<uint8_t> bytes;
  if (comm.rank() == 0) {
    bool all = false;
    for (int ms = 0; ms < 60000 && !all; ++ms) {
      all = true;
      for (int r = 1; r < comm.size(); ++r) all = all && std::filesystem::exists(slept_file(r));
      if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(all) << "60 s and not every waiting rank has blocked in the kernel: the wait spins";
    bytes = {1, 2, 3, 4, 5};
    comm.BroadcastBytes(bytes, 0);
  } else {
    // MPI_THREAD_FUNNELED: the watcher makes no MPI call.
    const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
    const long before = VoluntarySwitches(tid);
    EXPECT_GE(before, 0) << "/proc/self/task/" << tid << "/status has no voluntary_ctxt_switches";
    std::atomic<bool> done{false};
    std::atomic<long> after{before};
    std::thread watcher([&] {
      while (before >= 0 && !done.load()) {
        after = VoluntarySwitches(tid);
        if (after > before) {
          std::ofstream(slept_file(comm.rank())) << after - before << "\n";
          return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    comm.BroadcastBytes(bytes, 0);
    done = true;
    watcher.join();
    EXPECT_GT(after.load(), before) << "rank " << comm.rank() << " waited for the broadcast without blocking once";
  }
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 4, 5}));
  comm.Barrier();
  if (comm.rank() == 0) std::filesystem::remove_all(dir);

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
