// TaskPool. Tested by tests/task_pool_test.cc.
#include "coordinator/api/task_pool.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace tpserve {

TaskPool::TaskPool(int threads, size_t max_queued, const char* name)
    : max_queued_(max_queued), max_heavy_running_(std::max(1, threads - 1)) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this, name] {
      pthread_setname_np(pthread_self(), name);
      Work();
    });
  }
}

TaskPool::~TaskPool() { Stop(); }

bool TaskPool::Post(std::function<void()> task, bool heavy) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || tasks_.size() + heavy_tasks_.size() >= max_queued_) return false;
  (heavy ? heavy_tasks_ : tasks_).push_back(std::move(task));
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
    bool heavy = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !tasks_.empty() || (!heavy_tasks_.empty() && heavy_running_ < max_heavy_running_) ||
               (stopping_ && heavy_tasks_.empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (!tasks_.empty()) {
        task = std::move(tasks_.front());
        tasks_.pop_front();
      } else if (!heavy_tasks_.empty()) {
        task = std::move(heavy_tasks_.front());
        heavy_tasks_.pop_front();
        heavy = true;
        ++heavy_running_;
      } else {
        return;  // stopping, and drained
      }
    }
    task();  // destroyed here too, outside the lock: it may own the last reference to a reactor
    task = nullptr;
    if (heavy) {
      absl::MutexLock lock(&mu_);
      --heavy_running_;
    }
  }
}

}  // namespace tpserve
