// Host communicator + pinned staging for device buffers. Tested by
// tests/cuda_communicator_test.cc and tests/cuda_model_test.cc.
#include "worker/staged_communicator.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "worker/device_pointer.h"

namespace tpserve {
namespace {

void CheckNotCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TP_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  // Staging synchronizes; captured steps need NCCL (MakeNcclCommunicator).
  TP_CHECK(status == cudaStreamCaptureStatusNone);
}

}  // namespace

StagedCommunicator::StagedCommunicator(Communicator& inner, cudaStream_t stream) : inner_(inner), stream_(stream) {}

StagedCommunicator::~StagedCommunicator() {
  if (send_.p != nullptr) cudaFreeHost(send_.p);
  if (recv_.p != nullptr) cudaFreeHost(recv_.p);
}

void StagedCommunicator::Abort(int code) {
  inner_.Abort(code);
  std::abort();  // not reached: Abort does not return
}

std::string StagedCommunicator::name() const { return absl::StrCat("staged(", inner_.name(), ")"); }

void* StagedCommunicator::Reserve(Pinned& b, size_t bytes) {
  if (bytes > b.bytes) {
    // Copies queued from the old buffer must finish before it is freed.
    TP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (b.p != nullptr) TP_CUDA_CHECK(cudaFreeHost(b.p));
    b.bytes = std::max(bytes, 2 * b.bytes);
    TP_CUDA_CHECK(cudaHostAlloc(&b.p, b.bytes, cudaHostAllocPortable));
  }
  return b.p;
}

void* StagedCommunicator::StageIn(Pinned& b, const void* device, size_t bytes) {
  void* host = Reserve(b, bytes);
  TP_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
  TP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host;
}

// Ordered after this rank's earlier copies on the stream, so the pinned buffer is not
// overwritten (by the next StageIn, which syncs first) before the copy has read it.
void StagedCommunicator::StageOut(void* device, const void* host, size_t bytes) {
  TP_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
}

void StagedCommunicator::AllReduceSum(void* data, size_t count, DType dtype) {
  check_.Expect(data, "AllReduceSum");
  if (size() == 1) return;
  CheckNotCapturing(stream_);
  const size_t bytes = count * DTypeSize(dtype);
  void* host = StageIn(send_, data, bytes);
  inner_.AllReduceSum(host, count, dtype);
  StageOut(data, host, bytes);
}

void StagedCommunicator::Gather(const void* send, size_t bytes, void* recv, int root) {
  check_.Expect(send, "Gather");
  if (rank() == root) check_.Expect(recv, "Gather");
  CheckNotCapturing(stream_);
  const void* host_send = StageIn(send_, send, bytes);
  void* host_recv = rank() == root ? Reserve(recv_, bytes * size()) : nullptr;
  inner_.Gather(host_send, bytes, host_recv, root);
  if (rank() == root) StageOut(recv, host_recv, bytes * size());
}

void StagedCommunicator::AllGather(const void* send, size_t bytes, void* recv) {
  check_.Expect(send, "AllGather");
  check_.Expect(recv, "AllGather");
  CheckNotCapturing(stream_);
  const void* host_send = StageIn(send_, send, bytes);
  void* host_recv = Reserve(recv_, bytes * size());
  inner_.AllGather(host_send, bytes, host_recv);
  StageOut(recv, host_recv, bytes * size());
}

void StagedCommunicator::Broadcast(void* data, size_t bytes, int root) {
  check_.Expect(data, "Broadcast");
  CheckNotCapturing(stream_);
  void* host = StageIn(send_, data, bytes);
  inner_.Broadcast(host, bytes, root);
  StageOut(data, host, bytes);
}

}  // namespace tpserve
