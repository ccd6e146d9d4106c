// Code of the CUDA build that runs on the host only: built where CUDA is built, run
// everywhere, never skipped (no device needed), so a failure here shows on a machine
// without a GPU too. GPU cases live in the cuda_*_test binaries (ctest -L gpu).
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda_graph_runner.h"

namespace tpserve {
namespace {

// Moved from cuda_graph_test: the runner's size rounding touches no device.
TEST(CudaGraphRunnerTest, PaddedBatchSizes) {
  CudaGraphRunner runner(nullptr, {8, 1, 2, 4, 4});
  EXPECT_EQ(runner.PaddedBatchSize(1), 1);
  EXPECT_EQ(runner.PaddedBatchSize(3), 4);
  EXPECT_EQ(runner.PaddedBatchSize(8), 8);
  EXPECT_EQ(runner.PaddedBatchSize(9), 0);
}

}  // namespace
}  // namespace tpserve
