// Communicators on device buffers: StagedCommunicator over LocalGroup thread ranks that
// share one GPU, and NcclCommunicator with one GPU per rank (skipped below 2 GPUs; one rank
// on one GPU, graph capture included, runs anywhere NCCL is built); both also pass host
// buffers through. GPU test (ctest -L gpu).
#include <cuda_runtime_api.h>

#include <cmath>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_test_util.h"
#include "worker/communicator.h"
#include "worker/device_pointer.h"
#include "worker/nccl_communicator.h"
#include "worker/staged_communicator.h"

namespace tpserve {
namespace {

using testing::DeviceArray;

// Runs body(rank, comm) on `n` LocalGroup thread ranks.
void RunRanks(int n, const std::function<void(int, Communicator&)>& body) {
  LocalGroup group(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.Rank(r);
      body(r, *comm);
    });
  }
  for (auto& t : threads) t.join();
}

// The collectives every device communicator must get right, on device buffers.
void ExerciseDeviceCollectives(int rank, Communicator& comm, cudaStream_t stream) {
  const int n = comm.size();
  // All-reduce, fp32 and bf16, in place.
  std::vector<float> mine(1000);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i % 7);
  DeviceArray<float> f(mine);
  comm.AllReduceSum(f.get(), mine.size(), DType::kF32);
  DeviceArray<uint16_t> b(testing::ToBf16(mine));
  comm.AllReduceSum(b.get(), mine.size(), DType::kBF16);
  // EXPECT, not ASSERT, until the last collective: a rank that returned early would
  // leave the others waiting.
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<float> fs = f.Download(), bs = testing::FromBf16(b.Download());
  int bad_f32 = 0, bad_bf16 = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += static_cast<float>(r + 1) * 0.5f + static_cast<float>(i % 7);
    bad_f32 += fs[i] != want;
    bad_bf16 += std::abs(bs[i] - want) > 0.02 * std::abs(want);
  }
  EXPECT_EQ(bad_f32, 0);
  EXPECT_EQ(bad_bf16, 0);
  // AllGather, Gather to rank 0, Broadcast from the last rank.
  const std::vector<int32_t> send = {rank, 10 * rank, 100 * rank};
  DeviceArray<int32_t> d_send(send), d_all(3 * n), d_gather(3 * n);
  comm.AllGather(d_send.get(), 12, d_all.get());
  comm.Gather(d_send.get(), 12, rank == 0 ? d_gather.get() : nullptr, 0);
  DeviceArray<int32_t> d_bcast(std::vector<int32_t>{rank, rank});
  comm.Broadcast(d_bcast.get(), 8, n - 1);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<int32_t> all = d_all.Download(), gathered = d_gather.Download(), bcast = d_bcast.Download();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all[3 * r + 1], 10 * r);
    if (rank == 0) {
      EXPECT_EQ(gathered[3 * r + 2], 100 * r);
    }
  }
  EXPECT_EQ(bcast, (std::vector<int32_t>{n - 1, n - 1}));
  // Host buffers go through host(), the bootstrap (the helpers use it themselves).
  int64_t v = 5 + rank;
  EXPECT_EQ(comm.AllReduceMin(v), 5);
  std::vector<float> host(4, static_cast<float>(rank));
  comm.host().AllReduceSum(host.data(), host.size(), DType::kF32);
  EXPECT_EQ(host[3], static_cast<float>(n * (n - 1) / 2));
}

TEST(DevicePointerTest, TellsDeviceFromHost) {
  TP_SKIP_WITHOUT_GPU();
  DeviceArray<float> d(4);
  std::vector<float> h(4);
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault), cudaSuccess);
  EXPECT_TRUE(IsDevicePointer(d.get()));
  EXPECT_FALSE(IsDevicePointer(h.data()));
  EXPECT_FALSE(IsDevicePointer(pinned));
  EXPECT_FALSE(IsDevicePointer(nullptr));
  cudaFreeHost(pinned);
}

// Several ranks on one GPU: what NCCL refuses, staging through pinned memory allows.
TEST(StagedCommunicatorTest, ThreadRanksShareOneGpu) {
  TP_SKIP_WITHOUT_GPU();
  for (int n : {2, 3}) {
    RunRanks(n, [&](int rank, Communicator& host) {
      ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
      cudaStream_t stream;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      {
        StagedCommunicator comm(host, stream);
        EXPECT_EQ(comm.size(), n);
        ExerciseDeviceCollectives(rank, comm, stream);
      }
      cudaStreamDestroy(stream);
    });
  }
}

TEST(NcclCommunicatorTest, OneGpuPerRank) {
  TP_SKIP_WITHOUT_GPU();
  const int gpus = testing::CudaDevices();
  if (gpus < 2) GTEST_SKIP() << "NCCL needs one GPU per rank; this machine has " << gpus;
  const int n = std::min(gpus, 4);
  RunRanks(n, [&](int rank, Communicator& host) {
    ASSERT_EQ(cudaSetDevice(rank), cudaSuccess);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    {
      auto comm = MakeNcclCommunicator(host, rank, stream);
      if (absl::IsUnimplemented(comm.status())) GTEST_SKIP() << comm.status();
      ASSERT_TRUE(comm.ok()) << comm.status();
      ExerciseDeviceCollectives(rank, **comm, stream);
    }
    cudaStreamDestroy(stream);
  });
}

// One rank on one GPU, as a single-GPU machine can run it: NCCL's setup (the unique id over
// the host communicator, init, the communicator on the backend's stream), its collectives,
// and an all-reduce captured in a CUDA graph and replayed, as decode steps capture theirs.
TEST(NcclCommunicatorTest, OneRankOnOneGpu) {
  TP_SKIP_WITHOUT_GPU();
  RunRanks(1, [&](int rank, Communicator& host) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    {
      auto comm = MakeNcclCommunicator(host, 0, stream);
      if (absl::IsUnimplemented(comm.status())) GTEST_SKIP() << comm.status();
      ASSERT_TRUE(comm.ok()) << comm.status();
      ExerciseDeviceCollectives(rank, **comm, stream);
      EXPECT_TRUE((*comm)->capturable());
      DeviceArray<uint16_t> x(testing::ToBf16(std::vector<float>(256, 1.5f)));
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      (*comm)->AllReduceSum(x.get(), 256, DType::kBF16);
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (int i = 0; i < 2; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(testing::FromBf16(x.Download()), std::vector<float>(256, 1.5f));  // a sum over one rank
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    cudaStreamDestroy(stream);
  });
}

}  // namespace
}  // namespace tpserve
