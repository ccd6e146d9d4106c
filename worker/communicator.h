// Collectives between ranks, behind one interface: MPI across processes
// (mpi_communicator.cc), threads in one process (local_communicator.cc, for tests and
// MPI-less GPU machines), NCCL and staged copies on GPUs (tensor-parallel groups only).
// The world communicator also carries the step plans and, with pipeline parallelism, the
// point-to-point transfers between stages; Split gives each stage its tensor-parallel group.
// Tested by tests/communicator_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/base.h"

namespace tpserve {

// The world layout, built once at start-up and passed down.
// world_size = tp_size x pp_size: pipeline stage s is world ranks [s * tp_size, (s + 1) *
// tp_size), its tensor-parallel group (rank 0 of the world is stage 0's first rank).
struct WorldConfig {
  int rank = 0;
  int world_size = 1;
  int tp_size = 1;     // ranks per pipeline stage (one tensor-parallel group each)
  int local_rank = 0;  // rank within this node (picks the GPU)
  int local_size = 1;  // ranks on this node (they share its cores)
  std::string node;    // host name
  int pp_size = 1;     // pipeline stages

  int stage() const { return rank / tp_size; }
  int tp_rank() const { return rank % tp_size; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // In-place sum over ranks of `count` elements (host memory).
  virtual void AllReduceSum(void* data, size_t count, DType dtype) = 0;
  // recv[r * bytes_per_rank ...] = rank r's send, on `root` only (recv may be null elsewhere).
  virtual void Gather(const void* send, size_t bytes_per_rank, void* recv, int root) = 0;
  // recv[r * bytes_per_rank ...] = rank r's send, on every rank.
  virtual void AllGather(const void* send, size_t bytes_per_rank, void* recv) = 0;
  // Copies root's `bytes` bytes to every rank.
  virtual void Broadcast(void* data, size_t bytes, int root) = 0;
  // Broadcast for a message the other ranks may wait long for (the next step's plan while
  // the server idles): they wait without holding a core (MPI: point-to-point messages the
  // receivers probe for, sleeping between probes after the first 2 ms). Every rank calls it
  // for the same message; it does not match a Broadcast. Default: Broadcast (threads wait
  // on a condition variable already).
  virtual void BroadcastWaiting(void* data, size_t bytes, int root) { Broadcast(data, bytes, root); }
  virtual void Barrier() = 0;
  // Point to point: `bytes` bytes to rank `dst` / from rank `src` of this communicator.
  // Messages from one rank to another arrive in the order sent; a Recv must ask for the
  // size that was sent. Send may return before the receiver has the bytes. The world
  // communicators (MPI, threads) have them; device communicators abort (they never carry
  // stage-to-stage transfers).
  virtual void Send(const void* data, size_t bytes, int dst);
  virtual void Recv(void* data, size_t bytes, int src);
  // Send without waiting for the receiver (pipeline stages pass a micro-batch on and start
  // the next): `data` must stay untouched until WaitSends() returns. In order with Send's
  // messages to the same rank. Default: Send (the threads' mailboxes copy at once).
  virtual void SendAsync(const void* data, size_t bytes, int dst) { Send(data, bytes, dst); }
  // Waits for every SendAsync of this communicator to complete.
  virtual void WaitSends() {}
  // One message of any size (a single Send or SendAsync) from `src`, into `bytes`; waits
  // without holding a core, as BroadcastWaiting (a stage's next step may be long coming).
  virtual void RecvMessage(std::vector<uint8_t>& bytes, int src);
  // Collective: every rank calls it; the ranks that pass the same `color` form a new
  // communicator, ranked in the order of their ranks here (MPI_Comm_split). World
  // communicators only (others abort).
  virtual std::unique_ptr<Communicator> Split(int color);
  // Stops every rank of the job now (a broken invariant or an unrecoverable mid-step
  // failure): no rank may be left waiting in a collective.
  [[noreturn]] virtual void Abort(int code) = 0;
  // Whether collectives on device buffers may be captured into a CUDA graph (NCCL on the
  // backend's stream); host and staged collectives synchronize, so they may not.
  virtual bool capturable() const { return false; }
  // The same ranks' collectives on host memory. A device communicator (NCCL, staged) takes
  // device buffers only, so that no call asks the driver what kind of memory it was given;
  // host buffers go through host(), its bootstrap. Host and thread communicators: *this.
  virtual Communicator& host() { return *this; }

  // Helpers built on the collectives above, on host memory (through host()).
  // Every rank gets the first failing rank's status (OK when all are OK); used after
  // start-up phases so that a failure on one rank is an error on all, never a hang.
  absl::Status AgreeOnStatus(const absl::Status& local);
  int64_t AllReduceMin(int64_t v);
  int64_t AllReduceMax(int64_t v);
  // root's bytes to every rank (any size); the receivers wait as in BroadcastWaiting.
  void BroadcastBytes(std::vector<uint8_t>& bytes, int root);

 private:
  std::vector<int64_t> AllGatherInt64(int64_t v);  // every rank's v, in rank order
};

// Threads of one process acting as `world_size` ranks. Create the group once, then hand
// Rank(r) to the thread that plays rank r.
class LocalGroup {
 public:
  explicit LocalGroup(int world_size);
  ~LocalGroup();
  std::unique_ptr<Communicator> Rank(int rank);
  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Where MPI is built in: MpiInit initializes MPI and reads the world layout (rank, size,
// ranks on this node, host name); MakeMpiCommunicator gives collectives over
// MPI_COMM_WORLD; MpiFinalize ends MPI. Without MPI, HaveMpi() is false, MpiInit returns a
// one-rank world and MakeMpiCommunicator returns null.
bool HaveMpi();
WorldConfig MpiInit(int* argc, char*** argv);
void MpiFinalize();
std::unique_ptr<Communicator> MakeMpiCommunicator();

}  // namespace tpserve
