// The MPI communicator: collectives over MPI_COMM_WORLD. Errors in MPI calls abort the
// whole job (MPI_ERRORS_ARE_FATAL), so no rank waits forever on a dead peer.
// Tested by tests/communicator_test.cc under mpirun.
#include <mpi.h>

#include <cstdio>

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
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Op_create(&Bf16Sum, /*commute=*/1, &bf16_sum_);
    MPI_Op_create(&F16Sum, 1, &f16_sum_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      MPI_Op_free(&bf16_sum_);
      MPI_Op_free(&f16_sum_);
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
        case DType::kF32: TP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ptr, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)); break;
        case DType::kBF16: TP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ptr, n, MPI_UINT16_T, bf16_sum_, MPI_COMM_WORLD)); break;
        case DType::kF16: TP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ptr, n, MPI_UINT16_T, f16_sum_, MPI_COMM_WORLD)); break;
      }
    }
  }
  void Gather(const void* send, size_t bytes, void* recv, int root) override {
    TP_MPI_CHECK(MPI_Gather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, root,
                            MPI_COMM_WORLD));
  }
  void AllGather(const void* send, size_t bytes, void* recv) override {
    TP_MPI_CHECK(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE,
                               MPI_COMM_WORLD));
  }
  void Broadcast(void* data, size_t bytes, int root) override {
    TP_MPI_CHECK(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD));
  }
  void Barrier() override { TP_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }
  [[noreturn]] void Abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
    std::_Exit(code == 0 ? 1 : code);
  }

 private:
  int rank_ = 0, size_ = 1;
  MPI_Op bf16_sum_, f16_sum_;
};

}  // namespace

std::unique_ptr<Communicator> MakeMpiCommunicator() { return std::make_unique<MpiCommunicator>(); }
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
