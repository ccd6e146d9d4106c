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
  if (!IsDevicePointer(data)) return inner_.AllReduceSum(data, count, dtype);
  if (size() == 1) return;
  CheckNotCapturing(stream_);
  const size_t bytes = count * DTypeSize(dtype);
  void* host = StageIn(send_, data, bytes);
  inner_.AllReduceSum(host, count, dtype);
  StageOut(data, host, bytes);
}

void StagedCommunicator::Gather(const void* send, size_t bytes, void* recv, int root) {
  const bool send_dev = IsDevicePointer(send), recv_dev = IsDevicePointer(recv);
  if (!send_dev && !recv_dev) return inner_.Gather(send, bytes, recv, root);
  CheckNotCapturing(stream_);
  const void* host_send = send_dev ? StageIn(send_, send, bytes) : send;
  void* host_recv = recv_dev ? Reserve(recv_, bytes * size()) : recv;
  inner_.Gather(host_send, bytes, host_recv, root);
  if (recv_dev && rank() == root) StageOut(recv, host_recv, bytes * size());
}

void StagedCommunicator::AllGather(const void* send, size_t bytes, void* recv) {
  const bool send_dev = IsDevicePointer(send), recv_dev = IsDevicePointer(recv);
  if (!send_dev && !recv_dev) return inner_.AllGather(send, bytes, recv);
  CheckNotCapturing(stream_);
  const void* host_send = send_dev ? StageIn(send_, send, bytes) : send;
  void* host_recv = recv_dev ? Reserve(recv_, bytes * size()) : recv;
  inner_.AllGather(host_send, bytes, host_recv);
  if (recv_dev) StageOut(recv, host_recv, bytes * size());
}

void StagedCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (!IsDevicePointer(data)) return inner_.Broadcast(data, bytes, root);
  CheckNotCapturing(stream_);
  void* host = StageIn(send_, data, bytes);
  inner_.Broadcast(host, bytes, root);
  StageOut(data, host, bytes);
}

}  // namespace tpserve
