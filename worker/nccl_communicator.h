// Collectives over NCCL between ranks that each drive their own GPU. Device buffers go
// through NCCL on the CUDA backend's stream (stream-ordered, capturable in CUDA graphs);
// host buffers (step plans, gathered logits, start-up agreement) go through the
// bootstrap communicator, which also carries the ncclUniqueId from rank 0.
// Without NCCL at build time (worker/no_nccl.cc) it returns Unimplemented.
// Tested by tests/cuda_communicator_test.cc (skips unless there are >= 2 GPUs).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "worker/communicator.h"

namespace tpserve {

// False where tpserve was built without NCCL (worker/no_nccl.cc).
bool HaveNccl();

// Every rank of `bootstrap` calls this at once, with its own device (normally
// WorldConfig::local_rank) and the stream its CudaBackend runs on. `bootstrap` must
// outlive the result. Fails on every rank if NCCL fails on any.
absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& bootstrap, int device,
                                                                   cudaStream_t stream);

}  // namespace tpserve
