// RunOnRanks and ChooseParallelLayout (see ranks.h).
#include "launch/ranks.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {

absl::StatusOr<ParallelLayout> ChooseParallelLayout(const std::vector<int>& local_sizes,
                                                    const std::vector<std::string>& nodes,
                                                    const ParallelSizes& asked) {
  const int world = static_cast<int>(local_sizes.size());
  const int t = asked.tensor_parallel, p = asked.pipeline_parallel;
  if (t < 0 || p < 0) return absl::InvalidArgumentError("parallel sizes must be positive");
  ParallelLayout l;
  if (t > 0 && p > 0) {
    if (t * p != world) {
      return absl::InvalidArgumentError(absl::StrCat("--tensor-parallel-size ", t, " x --pipeline-parallel-size ", p,
                                                     " = ", t * p, " ranks, but the MPI world has ", world));
    }
    l = {t, p, "as given"};
  } else if (t > 0 || p > 0) {
    const int given = t > 0 ? t : p;
    const char* flag = t > 0 ? "--tensor-parallel-size" : "--pipeline-parallel-size";
    if (world % given != 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", given, " does not divide the MPI world size ", world));
    }
    l = t > 0 ? ParallelLayout{t, world / t, ""} : ParallelLayout{world / p, p, ""};
    l.why = absl::StrCat(flag, " ", given, " of ", world, " ranks");
  } else {
    // One stage per node: the nodes in rank order, each one run of consecutive ranks.
    std::vector<std::string> order;
    std::map<std::string, int> count;
    for (int r = 0; r < world; ++r) {
      if (r == 0 || nodes[r] != nodes[r - 1]) {
        if (count.count(nodes[r])) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the ranks of node ", nodes[r], " are not consecutive (rank ", r,
              "), so no pipeline stage can be one node: place them by node (mpirun --map-by node is the opposite) "
              "or give --tensor-parallel-size and --pipeline-parallel-size"));
        }
        order.push_back(nodes[r]);
      }
      ++count[nodes[r]];
    }
    std::vector<std::string> per_node;
    for (const std::string& n : order) per_node.push_back(absl::StrCat(n, ":", count[n]));
    for (const std::string& n : order) {
      if (count[n] != count[order[0]]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the nodes hold different numbers of ranks (", absl::StrJoin(per_node, ", "),
            "): a pipeline stage per node needs the same tensor-parallel size on each; start as many ranks on "
            "every node, or give --tensor-parallel-size and --pipeline-parallel-size"));
      }
    }
    l.tp = count[order[0]];
    l.pp = static_cast<int>(order.size());
    l.why = l.pp == 1 ? "one node"
                      : absl::StrCat(l.pp, " nodes of ", l.tp, " ranks (", absl::StrJoin(per_node, ", "), ")");
  }
  return l;
}

int RunOnRanks(const WorldConfig& mpi_world, const ParallelSizes& sizes,
               const std::function<int(const WorldConfig& world, Communicator& comm)>& rank_main) {
  if (mpi_world.world_size > 1) {
    std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
    // Every rank's node, so that every rank chooses the same layout.
    constexpr size_t kName = 256;
    std::vector<char> mine(kName, 0), all(kName * mpi_world.world_size, 0);
    std::strncpy(mine.data(), mpi_world.node.c_str(), kName - 1);
    comm->AllGather(mine.data(), kName, all.data());
    std::vector<std::string> nodes;
    for (int r = 0; r < mpi_world.world_size; ++r) nodes.emplace_back(all.data() + r * kName);
    std::vector<int> local_sizes(mpi_world.world_size);
    comm->AllGather(&mpi_world.local_size, sizeof(int), local_sizes.data());
    absl::StatusOr<ParallelLayout> layout = ChooseParallelLayout(local_sizes, nodes, sizes);
    if (!layout.ok()) {
      if (mpi_world.rank == 0) {
        std::fprintf(stderr, "tpserve: error: %s\n", std::string(layout.status().message()).c_str());
      }
      return 2;
    }
    WorldConfig w = mpi_world;
    w.tp_size = layout->tp;
    w.pp_size = layout->pp;
    if (mpi_world.rank == 0 && layout->pp > 1) {
      std::fprintf(stderr, "tpserve[rank 0]: parallel layout: tensor parallel %d x pipeline parallel %d (%s)\n",
                   layout->tp, layout->pp, layout->why.c_str());
    }
    return rank_main(w, *comm);
  }
  // One process: T x P ranks as threads of one node; this thread is rank 0.
  const int tp = std::max(1, sizes.tensor_parallel), pp = std::max(1, sizes.pipeline_parallel);
  const int n = tp * pp;
  LocalGroup group(n);
  std::vector<int> codes(n, 0);
  auto run = [&](int r) {
    WorldConfig w = mpi_world;
    w.rank = w.local_rank = r;
    w.world_size = w.local_size = n;
    w.tp_size = tp;
    w.pp_size = pp;
    std::unique_ptr<Communicator> comm = group.Rank(r);
    codes[r] = rank_main(w, *comm);
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (std::thread& t : threads) t.join();
  for (int c : codes) {
    if (c != 0) return c;
  }
  return 0;
}

}  // namespace tpserve
