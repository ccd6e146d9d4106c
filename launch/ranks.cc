// RunOnRanks (see ranks.h).
#include "launch/ranks.h"

#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

namespace tpserve {

int RunOnRanks(const WorldConfig& mpi_world, int tensor_parallel_size,
               const std::function<int(const WorldConfig& world, Communicator& comm)>& rank_main) {
  const int tp = tensor_parallel_size > 0 ? tensor_parallel_size : mpi_world.world_size;
  if (mpi_world.world_size > 1) {
    if (tp != mpi_world.world_size) {
      if (mpi_world.rank == 0) {
        std::fprintf(stderr, "tpserve: error: --tensor-parallel-size %d differs from the MPI world size %d\n", tp,
                     mpi_world.world_size);
      }
      return 2;
    }
    std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
    return rank_main(mpi_world, *comm);
  }
  // One process: `tp` ranks as threads of one node; this thread is rank 0.
  LocalGroup group(tp);
  std::vector<int> codes(tp, 0);
  auto run = [&](int r) {
    WorldConfig w = mpi_world;
    w.rank = w.local_rank = r;
    w.world_size = w.tp_size = w.local_size = tp;
    std::unique_ptr<Communicator> comm = group.Rank(r);
    codes[r] = rank_main(w, *comm);
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < tp; ++r) threads.emplace_back(run, r);
  run(0);
  for (std::thread& t : threads) t.join();
  for (int c : codes) {
    if (c != 0) return c;
  }
  return 0;
}

}  // namespace tpserve
