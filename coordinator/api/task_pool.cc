// TaskPool. Tested by tests/task_pool_test.cc.
#include "coordinator/api/task_pool.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace tpserve {

TaskPool::TaskPool(int threads, size_t max_queued, const char* name) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this, name] {
      pthread_setname_np(pthread_self(), name);
      Work();
    });
  }
}

TaskPool::~TaskPool() { Stop(); }

bool TaskPool::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || tasks_.size() >= max_queued_) return false;
  tasks_.push_back(std::move(task));
  return true;
}

void TaskPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void TaskPool::Work() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !tasks_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;  // stopping, and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();  // destroyed here too, outside the lock: it may own the last reference to a reactor
  }
}

}  // namespace tpserve
