// How rank 0 learns at once that another rank died, on a TCP channel beside MPI: each
// worker holds one connection to rank 0 for its whole life, and the kernel closes it when
// the process ends, however it ends (crash, kill -9, OOM); a worker that leaves on purpose
// says "bye" first. MPI cannot tell rank 0 this: a collective with a dead peer blocks.
// Tested by tests/rank_liveness_test.cc (sockets, threads, a killed child process) and,
// end to end, by tests/serve_rank_death_test.sh.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/communicator.h"

namespace tpserve {

// Rank 0's side: accepts the workers' connections and calls `on_lost(rank)` on its own
// thread, at most once per rank, when a rank's connection closes without a bye. A
// connection must introduce itself with the job's token first; others are dropped unheard.
class RankWatcher {
 public:
  using LostFn = std::function<void(int rank)>;
  // Listens on `bind_address` (numeric IPv4; "" = every interface) at a free port.
  static absl::StatusOr<std::unique_ptr<RankWatcher>> Start(const std::string& bind_address, std::string token,
                                                            LostFn on_lost);
  ~RankWatcher();  // stops watching: no on_lost once it returns (waits for a running one)
  RankWatcher(const RankWatcher&) = delete;
  RankWatcher& operator=(const RankWatcher&) = delete;

  int port() const { return port_; }
  // The ranks connected now (introduced, neither gone nor said bye), ascending.
  std::vector<int> Connected() const;

 private:
  RankWatcher(int listen_fd, int port, std::string token, LostFn on_lost);
  void Run();

  const int listen_fd_;
  const int port_;
  const std::string token_;
  const LostFn on_lost_;
  int wake_[2] = {-1, -1};  // a pipe: the destructor's write ends Run()
  mutable std::mutex mu_;
  std::vector<int> connected_;  // under mu_
  std::thread thread_;
};

// A worker's side: the connection, introduced; says bye when destroyed (a process that
// dies never gets there, which is the point).
class RankLink {
 public:
  // Connects to `host`:`port` (a name or a numeric address) within `timeout`.
  static absl::StatusOr<std::unique_ptr<RankLink>> Connect(const std::string& host, int port, int rank,
                                                           const std::string& token, absl::Duration timeout);
  ~RankLink();
  RankLink(const RankLink&) = delete;
  RankLink& operator=(const RankLink&) = delete;

 private:
  explicit RankLink(int fd) : fd_(fd) {}
  const int fd_;
};

// Either side of the channel, as StartRankLiveness set it up on this rank (both empty
// when it could not: see there).
struct RankLiveness {
  std::unique_ptr<RankWatcher> watcher;  // rank 0
  std::unique_ptr<RankLink> link;        // every other rank
};

// Collective over `comm`: rank 0 starts a watcher and broadcasts its address and a fresh
// random token; every other rank connects. `hosts[r]` is rank r's host name. When every
// rank runs on rank 0's host the channel stays on the loopback interface; else rank 0
// listens on every interface and the others dial its host name. Never fails the job: a
// rank that cannot set the channel up says why through `log` and serves without it (its
// death then drops connections instead of ending them with an error).
RankLiveness StartRankLiveness(Communicator& comm, const std::vector<std::string>& hosts,
                               RankWatcher::LostFn on_lost, const std::function<void(const std::string&)>& log);

}  // namespace tpserve
