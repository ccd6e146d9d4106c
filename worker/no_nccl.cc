// Built instead of nccl_communicator.cc where NCCL is absent: every rank then shares
// device buffers through StagedCommunicator. Tested by tests/cuda_communicator_test.cc
// (which skips the NCCL case on such builds).
#include "absl/status/status.h"
#include "worker/nccl_communicator.h"

namespace tpserve {

bool HaveNccl() { return false; }

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator&, int, cudaStream_t) {
  return absl::UnimplementedError(
      "tpserve was built without NCCL (set NCCL_ROOT and rebuild); use StagedCommunicator instead");
}

}  // namespace tpserve
