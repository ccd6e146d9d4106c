// Runs a command's per-rank body on every rank this process holds: its MPI rank when
// mpirun started several processes, or --tensor-parallel-size ranks as threads over an
// in-process LocalGroup otherwise. Shared by `tpserve generate` and `tpserve serve`;
// exercised by tests/cli_test.sh and tests/serve_test.sh (both modes).
#pragma once

#include <functional>

#include "worker/communicator.h"

namespace tpserve {

// `tensor_parallel_size` <= 0 means the MPI world size. Under MPI it must equal the world
// size (else exit code 2, and rank 0 says why). Returns the first non-zero exit code of
// the ranks in rank order, else 0.
int RunOnRanks(const WorldConfig& mpi_world, int tensor_parallel_size,
               const std::function<int(const WorldConfig& world, Communicator& comm)>& rank_main);

}  // namespace tpserve
