// Runs a command's per-rank body on every rank this process holds: its MPI rank when
// mpirun started several processes, or tensor x pipeline ranks as threads over an
// in-process LocalGroup otherwise; and chooses the parallel layout (tensor-parallel size
// inside a node, pipeline stages across nodes). Shared by `tpserve generate` and `tpserve
// serve`; exercised by tests/cli_test.sh and tests/serve_test.sh (both modes) and
// tests/parallel_layout_test.cc (the choice).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/communicator.h"

namespace tpserve {

// --tensor-parallel-size and --pipeline-parallel-size; 0 = chosen.
struct ParallelSizes {
  int tensor_parallel = 0;
  int pipeline_parallel = 0;
};

struct ParallelLayout {
  int tp = 1, pp = 1;
  std::string why;  // how it was chosen, for the start-up log
};

// The layout of an MPI world of `local_sizes.size()` ranks, rank r on node nodes[r] with
// local_sizes[r] ranks there. Both sizes given: their product must be the world size. One
// given: the other is the world size divided by it (it must divide). Neither: tensor
// parallel inside a node and one pipeline stage per node (vLLM's layout): T = the ranks
// per node, P = the nodes, which needs the same number of ranks on every node, each
// node's ranks consecutive. Errors name the flags to set.
absl::StatusOr<ParallelLayout> ChooseParallelLayout(const std::vector<int>& local_sizes,
                                                    const std::vector<std::string>& nodes,
                                                    const ParallelSizes& asked);

// Under MPI the layout is chosen from every rank's node (ChooseParallelLayout); a layout
// that cannot work is exit code 2 on every rank (rank 0 says why). Without MPI: T x P
// thread ranks (T, P default 1). world.tp_size/pp_size tell rank_main the layout; `comm`
// is the world's communicator. Returns the first non-zero exit code of the ranks in rank
// order, else 0.
int RunOnRanks(const WorldConfig& mpi_world, const ParallelSizes& sizes,
               const std::function<int(const WorldConfig& world, Communicator& comm)>& rank_main);

}  // namespace tpserve
