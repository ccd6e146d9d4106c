// A decorator that lets a host communicator (MPI, LocalGroup) take device buffers by
// staging them through pinned host memory around each collective; host buffers go
// through host(), the inner communicator. It lets several ranks share one GPU (NCCL refuses that) and is the
// path where NCCL is absent. It synchronizes the stream, so it cannot be captured in a
// CUDA graph. Tested by tests/cuda_communicator_test.cc and tests/cuda_model_test.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "worker/communicator.h"
#include "worker/device_pointer.h"

namespace tpserve {

class StagedCommunicator : public Communicator {
 public:
  // `inner` must outlive this; `stream` is the CUDA backend's (device data is read after
  // the work queued on it).
  StagedCommunicator(Communicator& inner, cudaStream_t stream);
  ~StagedCommunicator() override;

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override;

  void AllReduceSum(void* data, size_t count, DType dtype) override;
  void Gather(const void* send, size_t bytes_per_rank, void* recv, int root) override;
  void AllGather(const void* send, size_t bytes_per_rank, void* recv) override;
  void Broadcast(void* data, size_t bytes, int root) override;
  void Barrier() override { inner_.Barrier(); }
  Communicator& host() override { return inner_; }
  [[noreturn]] void Abort(int code) override;

 private:
  // Pinned host buffers, grown on demand.
  struct Pinned {
    void* p = nullptr;
    size_t bytes = 0;
  };
  void* Reserve(Pinned& b, size_t bytes);
  // Device -> pinned (waits for the copy); returns the host copy.
  void* StageIn(Pinned& b, const void* device, size_t bytes);
  // Pinned -> device, ordered on the stream.
  void StageOut(void* device, const void* host, size_t bytes);

  Communicator& inner_;
  cudaStream_t stream_;
  Pinned send_, recv_;
  DeviceBufferCheck check_;
};

}  // namespace tpserve
