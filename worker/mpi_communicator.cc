// The MPI communicator: collectives over MPI_COMM_WORLD, or over a group split from it
// (a pipeline stage's tensor-parallel ranks). Errors in MPI calls abort the
// whole job (MPI_ERRORS_ARE_FATAL), so no rank waits forever on a dead peer.
// Tested by tests/communicator_test.cc under mpirun.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "worker/communicator.h"

namespace tpserve {
namespace {

#define TP_MPI_CHECK(call)                                                                    \
  do {                                                                                        \
    int _rc = (call);                                                                         \
    if (_rc != MPI_SUCCESS) {                                                                 \
      std::fprintf(stderr, "%s:%d: MPI call failed (%d): %s\n", __FILE__, __LINE__, _rc, #call); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

// bf16 and fp16 sums over MPI: reduce in fp32 through a user-defined op.
void Bf16Sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = F32ToBf16(Bf16ToF32(a[i]) + Bf16ToF32(b[i]));
}
void F16Sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = F32ToF16(F16ToF32(a[i]) + F16ToF32(b[i]));
}

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Op_create(&Bf16Sum, /*commute=*/1, &bf16_sum_);
    MPI_Op_create(&F16Sum, 1, &f16_sum_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      MPI_Op_free(&bf16_sum_);
      MPI_Op_free(&f16_sum_);
      if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  void AllReduceSum(void* data, size_t count, DType dtype) override {
    if (size_ == 1) return;
    // Large buffers go in chunks so counts fit an int.
    constexpr size_t kChunk = size_t{1} << 30;
    uint8_t* p = static_cast<uint8_t*>(data);
    for (size_t off = 0; off < count; off += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, count - off));
      void* ptr = p + off * DTypeSize(dtype);
      switch (dtype) {
        case DType::kF32: TP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ptr, n, MPI_FLOAT, MPI_SUM, comm_)); break;
        case DType::kBF16: TP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ptr, n, MPI_UINT16_T, bf16_sum_, comm_)); break;
        case DType::kF16: TP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ptr, n, MPI_UINT16_T, f16_sum_, comm_)); break;
        default: TP_CHECK(false && "all-reduce of a block-quantized dtype");
      }
    }
  }
  void Gather(const void* send, size_t bytes, void* recv, int root) override {
    TP_MPI_CHECK(MPI_Gather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, root,
                            comm_));
  }
  void AllGather(const void* send, size_t bytes, void* recv) override {
    TP_MPI_CHECK(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE,
                               comm_));
  }
  void Broadcast(void* data, size_t bytes, int root) override {
    TP_MPI_CHECK(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_));
  }
  // A blocking MPI_Bcast spins: an idle server's workers each held a core at 100% waiting
  // for the next plan (measured: `tpserve serve` under mpirun -np 2, rank 1 at 99% CPU with
  // no request), which on a CPU node is a core taken from rank 0. Here the root sends the
  // message to each rank (point to point, eager for small messages) and the receivers probe
  // for it: spinning for the first 2 ms (a busy server's next plan comes sooner), then
  // sleeping between probes, up to 1 ms: the idle worker went from 99% to 2% of a core,
  // and the first step after idling starts at most ~1 ms late. Under load the two are
  // alike (gemma-4-tiny, 2 ranks, tpbench over gRPC, 4 interleaved runs each: 1336-2460 vs
  // 1339-1654 tok/s at concurrency 1, 2202-3607 vs 2025-2441 at 4: the 2-core VM's noise).
  void BroadcastWaiting(void* data, size_t bytes, int root) override {
    constexpr int kTag = 0x7470;  // Send/Recv use kP2pTag
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        if (r != root) TP_MPI_CHECK(MPI_Send(data, static_cast<int>(bytes), MPI_BYTE, r, kTag, comm_));
      }
      return;
    }
    ProbeWaiting(root, kTag, nullptr);
    TP_MPI_CHECK(MPI_Recv(data, static_cast<int>(bytes), MPI_BYTE, root, kTag, comm_, MPI_STATUS_IGNORE));
  }
  // Until a message from `src` with `tag` is there: yielding for the first 2 ms, then
  // sleeping between probes, up to 1 ms.
  void ProbeWaiting(int src, int tag, MPI_Status* status) {
    const auto start = std::chrono::steady_clock::now();
    auto nap = std::chrono::microseconds(20);
    while (true) {
      int arrived = 0;
      TP_MPI_CHECK(MPI_Iprobe(src, tag, comm_, &arrived, status == nullptr ? MPI_STATUS_IGNORE : status));
      if (arrived) return;
      if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2)) {
        std::this_thread::yield();  // as Open MPI's own waits do when cores are oversubscribed
        continue;
      }
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
  void Barrier() override { TP_MPI_CHECK(MPI_Barrier(comm_)); }

  // Stage-to-stage transfers. The receiver probes and yields rather than blocking in
  // MPI_Recv, which spins at full speed: on a node whose cores the ranks share, a waiting
  // stage must leave them to the stage computing.
  void Send(const void* data, size_t bytes, int dst) override {
    size_t off = 0;
    do {
      const int n = static_cast<int>(std::min(kChunk, bytes - off));
      TP_MPI_CHECK(MPI_Send(static_cast<const uint8_t*>(data) + off, n, MPI_BYTE, dst, kP2pTag, comm_));
      off += static_cast<size_t>(n);
    } while (off < bytes);
  }
  void Recv(void* data, size_t bytes, int src) override {
    size_t off = 0;
    do {
      const int n = static_cast<int>(std::min(kChunk, bytes - off));
      int arrived = 0;
      while (true) {
        TP_MPI_CHECK(MPI_Iprobe(src, kP2pTag, comm_, &arrived, MPI_STATUS_IGNORE));
        if (arrived) break;
        std::this_thread::yield();
      }
      MPI_Status status;
      TP_MPI_CHECK(MPI_Recv(static_cast<uint8_t*>(data) + off, n, MPI_BYTE, src, kP2pTag, comm_, &status));
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      if (got != n) {
        std::fprintf(stderr, "tpserve: rank %d expected %d bytes from rank %d, got %d\n", rank_, n, src, got);
        Abort(1);
      }
      off += static_cast<size_t>(n);
    } while (off < bytes);
  }
  void SendAsync(const void* data, size_t bytes, int dst) override {
    size_t off = 0;
    do {
      const int n = static_cast<int>(std::min(kChunk, bytes - off));
      pending_.emplace_back();
      TP_MPI_CHECK(MPI_Isend(static_cast<const uint8_t*>(data) + off, n, MPI_BYTE, dst, kP2pTag, comm_,
                             &pending_.back()));
      off += static_cast<size_t>(n);
    } while (off < bytes);
  }
  // Tests and yields rather than MPI_Waitall's spin, for the stage computing beside it.
  void WaitSends() override {
    while (!pending_.empty()) {
      int done = 0;
      TP_MPI_CHECK(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE));
      if (done) break;
      std::this_thread::yield();
    }
    pending_.clear();
  }
  void RecvMessage(std::vector<uint8_t>& bytes, int src) override {
    MPI_Status status;
    ProbeWaiting(src, kP2pTag, &status);
    int n = 0;
    MPI_Get_count(&status, MPI_BYTE, &n);
    bytes.resize(static_cast<size_t>(n));
    TP_MPI_CHECK(MPI_Recv(bytes.data(), n, MPI_BYTE, src, kP2pTag, comm_, MPI_STATUS_IGNORE));
  }
  std::unique_ptr<Communicator> Split(int color) override {
    MPI_Comm group;
    TP_MPI_CHECK(MPI_Comm_split(comm_, color, rank_, &group));
    return std::make_unique<MpiCommunicator>(group);
  }
  [[noreturn]] void Abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);  // the whole job, whatever the group
    std::_Exit(code == 0 ? 1 : code);
  }

 private:
  static constexpr int kP2pTag = 0x7471;
  static constexpr size_t kChunk = size_t{1} << 30;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;  // SendAsync's, until WaitSends
  MPI_Op bf16_sum_, f16_sum_;
};

}  // namespace

std::unique_ptr<Communicator> MakeMpiCommunicator() { return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD); }
bool HaveMpi() { return true; }

WorldConfig MpiInit(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  WorldConfig w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.world_size);
  w.tp_size = w.world_size;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &w.local_rank);
  MPI_Comm_size(node, &w.local_size);
  MPI_Comm_free(&node);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  w.node.assign(name, len);
  return w;
}

void MpiFinalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace tpserve
