// Threads of one process as ranks: a barrier plus published pointers; point-to-point
// messages through a mailbox per (sender, receiver) pair. Used by tests and
// by MPI-less machines (two "ranks" sharing one GPU). Tested by tests/communicator_test.cc.
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "worker/communicator.h"

namespace tpserve {

struct LocalGroup::State {
  explicit State(int n) : size(n), ptrs(n, nullptr), colors(n, 0), mail(static_cast<size_t>(n) * n) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const void*> ptrs;
  // Split: each rank's color, and the groups made by the split numbered `epoch` (every
  // rank counts its splits alike), under mu.
  std::vector<int> colors;
  std::map<std::pair<int64_t, int>, std::shared_ptr<State>> splits;
  // mail[src * size + dst]: messages sent and not yet received, oldest first, under mail_mu.
  std::mutex mail_mu;
  std::condition_variable mail_cv;
  std::vector<std::deque<std::vector<uint8_t>>> mail;

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

  void Send(const void* data, size_t bytes, int dst) override {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    {
      std::lock_guard<std::mutex> lock(s_->mail_mu);
      s_->mail[static_cast<size_t>(rank_) * s_->size + dst].emplace_back(p, p + bytes);
    }
    s_->mail_cv.notify_all();
  }

  void Recv(void* data, size_t bytes, int src) override {
    std::unique_lock<std::mutex> lock(s_->mail_mu);
    auto& box = s_->mail[static_cast<size_t>(src) * s_->size + rank_];
    s_->mail_cv.wait(lock, [&] { return !box.empty(); });
    if (box.front().size() != bytes) {
      std::fprintf(stderr, "tpserve: rank %d expected %zu bytes from rank %d, got %zu\n", rank_, bytes, src,
                   box.front().size());
      Abort(1);
    }
    std::memcpy(data, box.front().data(), bytes);
    box.pop_front();
  }

  void RecvMessage(std::vector<uint8_t>& bytes, int src) override {
    std::unique_lock<std::mutex> lock(s_->mail_mu);
    auto& box = s_->mail[static_cast<size_t>(src) * s_->size + rank_];
    s_->mail_cv.wait(lock, [&] { return !box.empty(); });
    bytes = std::move(box.front());
    box.pop_front();
  }

  std::unique_ptr<Communicator> Split(int color) override {
    const int64_t epoch = splits_++;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      s_->colors[rank_] = color;
    }
    s_->Barrier();
    int new_rank = 0, new_size = 0, first = -1;
    for (int r = 0; r < s_->size; ++r) {
      if (s_->colors[r] != color) continue;
      if (first < 0) first = r;
      if (r < rank_) ++new_rank;
      ++new_size;
    }
    if (rank_ == first) {
      std::lock_guard<std::mutex> lock(s_->mu);
      s_->splits[{epoch, color}] = std::make_shared<LocalGroup::State>(new_size);
    }
    s_->Barrier();  // every group's state exists; colors may be overwritten after this
    std::shared_ptr<LocalGroup::State> group;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      group = s_->splits.at({epoch, color});
    }
    s_->Barrier();
    if (rank_ == 0) {
      std::lock_guard<std::mutex> lock(s_->mu);
      for (auto it = s_->splits.begin(); it != s_->splits.end();) {
        it = it->first.first == epoch ? s_->splits.erase(it) : std::next(it);
      }
    }
    return std::make_unique<LocalCommunicator>(std::move(group), new_rank);
  }

  [[noreturn]] void Abort(int code) override {
    std::fprintf(stderr, "tpserve: rank %d aborting the job (code %d)\n", rank_, code);
    std::_Exit(code == 0 ? 1 : code);
  }

 private:
  std::shared_ptr<LocalGroup::State> s_;
  int rank_;
  int64_t splits_ = 0;  // Split calls so far
};

}  // namespace

LocalGroup::LocalGroup(int world_size) : state_(std::make_shared<State>(world_size)) {}
LocalGroup::~LocalGroup() = default;

std::unique_ptr<Communicator> LocalGroup::Rank(int rank) {
  return std::make_unique<LocalCommunicator>(state_, rank);
}

}  // namespace tpserve
