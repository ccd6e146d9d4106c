// NCCL communicator: device buffers through NCCL on the backend's stream (host buffers go
// through host(), the bootstrap).
// Tested by tests/cuda_communicator_test.cc.
#include "worker/nccl_communicator.h"

#include <nccl.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "worker/device_pointer.h"

#define TP_NCCL_CHECK(expr)                                                                             \
  do {                                                                                                  \
    const ncclResult_t _tp_r = (expr);                                                                  \
    if (_tp_r != ncclSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d: NCCL error %s (%s)\n", __FILE__, __LINE__, ncclGetErrorString(_tp_r), \
                   #expr);                                                                              \
      std::abort();                                                                                     \
    }                                                                                                   \
  } while (0)

namespace tpserve {
namespace {

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    default:
      TP_CHECK(false && "all-reduce of a block-quantized dtype");
  }
  return ncclFloat32;
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, ncclComm_t comm, int device, cudaStream_t stream)
      : bootstrap_(bootstrap), comm_(comm), device_(device), stream_(stream) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  bool capturable() const override { return true; }
  std::string name() const override { return absl::StrCat("nccl(bootstrap=", bootstrap_.name(), ")"); }

  Communicator& host() override { return bootstrap_; }

  void AllReduceSum(void* data, size_t count, DType dtype) override {
    check_.Expect(data, "AllReduceSum");
    TP_NCCL_CHECK(ncclAllReduce(data, data, count, NcclType(dtype), ncclSum, comm_, stream_));
  }

  void Gather(const void* send, size_t bytes, void* recv, int root) override {
    check_.Expect(send, "Gather");
    if (rank() == root) check_.Expect(recv, "Gather");
    // NCCL has no gather: root receives from every rank in one group.
    TP_NCCL_CHECK(ncclGroupStart());
    if (rank() == root) {
      for (int r = 0; r < size(); ++r) {
        uint8_t* dst = static_cast<uint8_t*>(recv) + r * bytes;
        if (r == root) {
          TP_CUDA_CHECK(cudaMemcpyAsync(dst, send, bytes, cudaMemcpyDeviceToDevice, stream_));
        } else {
          TP_NCCL_CHECK(ncclRecv(dst, bytes, ncclUint8, r, comm_, stream_));
        }
      }
    } else {
      TP_NCCL_CHECK(ncclSend(send, bytes, ncclUint8, root, comm_, stream_));
    }
    TP_NCCL_CHECK(ncclGroupEnd());
  }

  void AllGather(const void* send, size_t bytes, void* recv) override {
    check_.Expect(send, "AllGather");
    check_.Expect(recv, "AllGather");
    TP_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_));
  }

  void Broadcast(void* data, size_t bytes, int root) override {
    check_.Expect(data, "Broadcast");
    TP_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
  }

  void Barrier() override {
    TP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    bootstrap_.Barrier();
  }

  [[noreturn]] void Abort(int code) override {
    ncclCommAbort(comm_);
    bootstrap_.Abort(code);
    std::abort();  // not reached: Abort does not return
  }

 private:
  Communicator& bootstrap_;
  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_;
  DeviceBufferCheck check_;
};

}  // namespace

bool HaveNccl() { return true; }

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& bootstrap, int device,
                                                                   cudaStream_t stream) {
  absl::Status local;
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    local = absl::InvalidArgumentError(absl::StrCat("rank ", bootstrap.rank(), ": cannot select CUDA device ", device));
  }
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess && local.ok()) local = absl::InternalError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
  }
  TP_RETURN_IF_ERROR(bootstrap.AgreeOnStatus(local));
  bootstrap.Broadcast(&id, sizeof(id), 0);
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank());
  if (r != ncclSuccess) {
    local = absl::InternalError(absl::StrCat("ncclCommInitRank on device ", device, ": ", ncclGetErrorString(r),
                                             " (NCCL needs one GPU per rank; ranks sharing a GPU use "
                                             "StagedCommunicator)"));
  }
  const absl::Status all = bootstrap.AgreeOnStatus(local);
  if (!all.ok()) {
    if (comm != nullptr) ncclCommDestroy(comm);
    return all;
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(bootstrap, comm, device, stream));
}

}  // namespace tpserve
