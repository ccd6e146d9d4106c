// Threads of one process as ranks: a barrier plus published pointers. Used by tests and
// by MPI-less machines (two "ranks" sharing one GPU). Tested by tests/communicator_test.cc.
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "worker/communicator.h"

namespace tpserve {

struct LocalGroup::State {
  explicit State(int n) : size(n), ptrs(n, nullptr) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const void*> ptrs;

  void Barrier() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }
};

namespace {

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup::State> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }
  std::string name() const override { return "local-threads"; }

  void AllReduceSum(void* data, size_t count, DType dtype) override {
    if (s_->size == 1) return;
    s_->ptrs[rank_] = data;
    s_->Barrier();
    // Every rank sums in rank order, so all ranks hold bit-identical results.
    std::vector<float> acc(count, 0.0f), tmp(count);
    for (int r = 0; r < s_->size; ++r) {
      ToF32(s_->ptrs[r], dtype, count, tmp.data());
      for (size_t i = 0; i < count; ++i) acc[i] += tmp[i];
    }
    s_->Barrier();
    if (dtype == DType::kF32) {
      std::memcpy(data, acc.data(), count * 4);
    } else {
      uint16_t* out = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) out[i] = dtype == DType::kBF16 ? F32ToBf16(acc[i]) : F32ToF16(acc[i]);
    }
  }

  void Gather(const void* send, size_t bytes, void* recv, int root) override {
    s_->ptrs[rank_] = send;
    s_->Barrier();
    if (rank_ == root) {
      for (int r = 0; r < s_->size; ++r) std::memcpy(static_cast<uint8_t*>(recv) + r * bytes, s_->ptrs[r], bytes);
    }
    s_->Barrier();
  }

  void AllGather(const void* send, size_t bytes, void* recv) override {
    s_->ptrs[rank_] = send;
    s_->Barrier();
    for (int r = 0; r < s_->size; ++r) std::memcpy(static_cast<uint8_t*>(recv) + r * bytes, s_->ptrs[r], bytes);
    s_->Barrier();
  }

  void Broadcast(void* data, size_t bytes, int root) override {
    s_->ptrs[rank_] = data;
    s_->Barrier();
    if (rank_ != root) std::memcpy(data, s_->ptrs[root], bytes);
    s_->Barrier();
  }

  void Barrier() override { s_->Barrier(); }

  [[noreturn]] void Abort(int code) override {
    std::fprintf(stderr, "tpserve: rank %d aborting the job (code %d)\n", rank_, code);
    std::_Exit(code == 0 ? 1 : code);
  }

 private:
  std::shared_ptr<LocalGroup::State> s_;
  int rank_;
};

}  // namespace

LocalGroup::LocalGroup(int world_size) : state_(std::make_shared<State>(world_size)) {}
LocalGroup::~LocalGroup() = default;

std::unique_ptr<Communicator> LocalGroup::Rank(int rank) {
  return std::make_unique<LocalCommunicator>(state_, rank);
}

}  // namespace tpserve
